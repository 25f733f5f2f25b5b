"""``amplifier-anyio mcp serve --http``: a real subprocess on 127.0.0.1, called by tool-mcp
over streamable HTTP, checked against DNS rebinding, stopped by its pid.

The served session uses the offline demo plan. The server runs on asyncio (its HTTP server
is uvicorn); the client runs on the test's backend.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import httpx
import pytest

from amplifier_anyio import AmplifierSession
from tiers import needs

pytestmark = [pytest.mark.anyio, *needs("mcp")]

ENTRY = "from amplifier_anyio.cli import main; main()"
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"},
    },
}
HEADERS = {"content-type": "application/json", "accept": "application/json, text/event-stream"}


async def wait_for_line(log: Path, marker: str, process: anyio.abc.Process) -> str:
    with anyio.fail_after(60):
        while True:
            text = await anyio.Path(log).read_text()
            for line in text.splitlines():
                if line.startswith(marker):
                    return line
            if process.returncode is not None:
                pytest.fail(f"mcp serve --http exited early:\n{text}")
            await anyio.sleep(0.05)


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[str, anyio.abc.Process]]:
    """``mcp serve --http --port 0`` in a subprocess; its URL; stopped by pid (SIGTERM)."""
    log = tmp_path / "serve.log"
    with log.open("w") as stderr:
        process = await anyio.open_process(
            [sys.executable, "-c", ENTRY, "mcp", "serve", "--http", "--port", "0"],
            stdout=None,
            stderr=stderr,
            env=dict(os.environ),
        )
    try:
        line = await wait_for_line(log, "serving ", process)
        yield line.split()[1], process
    finally:
        with anyio.CancelScope(shield=True), anyio.move_on_after(10):
            if process.returncode is None:
                os.kill(process.pid, signal.SIGTERM)
            await process.wait()
        if process.returncode is None:
            os.kill(process.pid, signal.SIGKILL)
            await process.wait()


async def test_tool_mcp_calls_run_over_http(served: tuple[str, anyio.abc.Process]) -> None:
    url, process = served
    assert url.startswith("http://127.0.0.1:")
    assert url.endswith("/mcp")
    plan = {
        "session": {"orchestrator": "loop-basic", "context": "context-simple"},
        "providers": [{"module": "provider-scripted", "config": {"responses": []}}],
        "tools": [{"module": "tool-mcp", "config": {"servers": [{"name": "agent", "url": url}]}}],
    }
    async with AmplifierSession(plan) as session:
        run = session.coordinator.get("tools")["agent__run"]
        result = await run.execute({"prompt": "count the words of hello big world"})
        assert result.success
        answer = result.output["structured_content"]
        assert "7 words" in answer["text"]
        assert answer["status"] == "success"
        again = await run.execute({"prompt": "one two"})
        assert "2 words" in again.output["structured_content"]["text"]
    # Stopped by its pid: the server closes its session and exits cleanly.
    os.kill(process.pid, signal.SIGTERM)
    with anyio.fail_after(20):
        await process.wait()
    assert process.returncode == 0


async def test_dns_rebinding_is_refused(served: tuple[str, anyio.abc.Process]) -> None:
    url, _process = served
    port = url.split(":")[2].split("/")[0]
    async with httpx.AsyncClient(timeout=10) as client:

        async def post(**headers: str) -> int:
            response = await client.post(url, json=INITIALIZE, headers={**HEADERS, **headers})
            return response.status_code

        assert await post() == 200
        assert await post(origin=f"http://localhost:{port}") == 200
        assert await post(host="evil.example") == 421
        assert await post(host=f"evil.example:{port}") == 421
        assert await post(origin="http://evil.example") == 403
        assert await post(origin=f"http://evil.example:{port}") == 403


def test_the_check_names_loopback_the_listening_host_and_the_allowed_ones() -> None:
    from amplifier_anyio.mcp.serve import http_security  # noqa: PLC0415 - the [mcp] extra

    default = http_security()
    assert default.enable_dns_rebinding_protection
    assert {"127.0.0.1:*", "localhost:*", "[::1]:*"} <= set(default.allowed_hosts)
    assert "http://localhost:*" in default.allowed_origins
    assert not any("0.0.0.0" in h for h in http_security("0.0.0.0").allowed_hosts)
    named = http_security("10.1.2.3", allowed_hosts=["agent.internal"])
    assert {"10.1.2.3:*", "agent.internal", "agent.internal:*"} <= set(named.allowed_hosts)
    assert "https://agent.internal" in named.allowed_origins
    assert "[fe80::1]:*" in http_security("fe80::1").allowed_hosts


def test_http_is_refused_on_trio_and_the_http_options_need_http(tmp_path: Path) -> None:
    import subprocess  # noqa: PLC0415

    def serve(*args: str) -> Any:
        return subprocess.run(
            [sys.executable, "-c", ENTRY, "mcp", "serve", *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    trio = serve("--http", "--backend", "trio")
    assert trio.returncode != 0
    assert "asyncio only" in trio.stderr
    lonely = serve("--port", "9")
    assert lonely.returncode != 0
    assert "need --http" in lonely.stderr
