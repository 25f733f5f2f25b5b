"""tool-mcp as the client under test of the official MCP conformance suite.

The suite runs ``python mcp_client.py <server-url>`` with the scenario's name in
``MCP_CONFORMANCE_SCENARIO``. The client is a session whose tool-mcp mounts the
scenario's server (streamable HTTP, the initialize handshake); the scenario decides which
tool it then calls. Exit status 0 when every call succeeded.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

# The checkout beside this file, whatever environment the suite starts us in.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

import anyio

from amplifier_anyio import AmplifierSession

CALLS: dict[str, list[tuple[str, dict[str, Any]]]] = {
    "initialize": [],
    "tools_call": [("s__add_numbers", {"a": 2, "b": 3})],
    "sse-retry": [("s__test_reconnection", {})],
}
"""The tool calls each scenario expects of the client (after connecting and listing)."""


async def main(url: str, scenario: str) -> int:
    plan = {
        "session": {"orchestrator": "loop-basic", "context": "context-simple"},
        "providers": [{"module": "provider-scripted", "config": {"responses": []}}],
        "tools": [
            {
                "module": "tool-mcp",
                "config": {"servers": [{"name": "s", "url": url, "mode": "legacy", "timeout": 20}]},
            }
        ],
    }
    failed = 0
    async with AmplifierSession(plan) as session:
        tools = session.coordinator.get("tools")
        for name, arguments in CALLS[scenario]:
            result = await tools[name].execute(arguments)
            sys.stdout.write(f"{name}: {result.output if result.success else result.error}\n")
            failed += not result.success
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(anyio.run(main, sys.argv[1], os.environ.get("MCP_CONFORMANCE_SCENARIO", "")))
