"""A hand-written MCP server on stdin / stdout (legacy JSON-RPC, no SDK) that misbehaves on
request, for tool-mcp's fault tests: ``python _mcp_raw_server.py``.

Tools:

- ``echo(text)`` answers the text;
- ``slow(seconds)`` sleeps (its own thread), then answers ``"slept"``;
- ``pids()`` answers ``"<server pid>"``;
- ``orphan(pidfile)`` starts a child (``sleep``) that inherits the server's stdout, writes
  ``"<server pid> <child pid>"`` to ``pidfile``, and exits without answering;
- ``garbled()`` answers a reply whose bytes are not valid UTF-8;
- ``broken()`` answers a line that is not JSON.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from typing import Any

LOCK = threading.Lock()
OUT = sys.stdout.buffer

TOOLS = [
    {"name": name, "inputSchema": {"type": "object", "properties": properties}}
    for name, properties in (
        ("echo", {"text": {"type": "string"}}),
        ("slow", {"seconds": {"type": "number"}}),
        ("pids", {}),
        ("orphan", {"pidfile": {"type": "string"}}),
        ("garbled", {}),
        ("broken", {}),
    )
]


def write(data: bytes) -> None:
    with LOCK:
        OUT.write(data + b"\n")
        OUT.flush()


def answer(ident: Any, result: dict[str, Any]) -> None:
    write(json.dumps({"jsonrpc": "2.0", "id": ident, "result": result}).encode())


def text(ident: Any, value: str) -> None:
    answer(ident, {"content": [{"type": "text", "text": value}], "isError": False})


def call(ident: Any, name: str, arguments: dict[str, Any]) -> None:
    if name == "echo":
        text(ident, arguments["text"])
    elif name == "slow":
        time.sleep(arguments["seconds"])
        text(ident, "slept")
    elif name == "pids":
        text(ident, str(os.getpid()))
    elif name == "orphan":
        child = subprocess.Popen(["sleep", "300"], stdin=subprocess.DEVNULL)
        with open(arguments["pidfile"], "w") as file:
            file.write(f"{os.getpid()} {child.pid}")
        os._exit(0)
    elif name == "garbled":
        reply = {"jsonrpc": "2.0", "id": ident, "result": {"content": [], "isError": False}}
        data = (
            json.dumps(reply).encode().replace(b'"content": []', b'"content": [], "x": "\xff\xfe"')
        )
        write(data)
    elif name == "broken":
        write(b'{"jsonrpc": "2.0", "id": ' + json.dumps(ident).encode() + b', "result": {')


def main() -> None:
    for line in sys.stdin.buffer:
        if not line.strip():
            continue
        message = json.loads(line)
        ident, method = message.get("id"), message.get("method")
        params = message.get("params") or {}
        if ident is None:
            continue  # a notification
        if method == "initialize":
            answer(
                ident,
                {
                    "protocolVersion": params.get("protocolVersion", "2025-06-18"),
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": "raw", "version": "1"},
                },
            )
        elif method == "ping":
            answer(ident, {})
        elif method == "tools/list":
            answer(ident, {"tools": TOOLS})
        elif method == "tools/call":
            args = (ident, params["name"], params.get("arguments") or {})
            threading.Thread(target=call, args=args, daemon=True).start()
        else:
            error = {"code": -32601, "message": f"unknown method {method}"}
            write(json.dumps({"jsonrpc": "2.0", "id": ident, "error": error}).encode())


if __name__ == "__main__":
    main()
