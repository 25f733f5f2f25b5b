"""tool-mcp never leaves a call pending on a stdio server that misbehaves: a server killed
while its child holds its stdout, a reply that is not valid UTF-8, a line that is not JSON.

Each case: the call is answered with an error within a second (no ``timeout`` configured:
before, the first and the second waited for ever), its siblings are answered as usual,
the session goes on, and no process is left. The servers are real subprocesses
(``_mcp_raw_server.py``, JSON-RPC written by hand so it can misbehave).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from amplifier_anyio import AmplifierSession, ToolResult, TurnStatus
from tiers import needs

pytestmark = [pytest.mark.anyio, *needs("mcp")]

RAW_SERVER = str(Path(__file__).with_name("_mcp_raw_server.py"))
BOUND = 1.0
"""Seconds within which a faulty call is answered (a bound, not a measurement)."""


def raw_server(name: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "command": sys.executable,
        "args": [RAW_SERVER],
        "mode": "legacy",
        **extra,
    }


def make_plan(servers: list[dict[str, Any]], replies: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "session": {"orchestrator": "loop-basic", "context": "context-simple"},
        "providers": [{"module": "provider-scripted", "config": {"responses": replies}}],
        "tools": [{"module": "tool-mcp", "config": {"servers": servers}}],
    }


def turn_calling(*calls: tuple[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The scripted replies of one turn: the calls at once, then a closing text."""
    tool_calls = [
        {"id": f"call-{i}", "name": name, "arguments": arguments}
        for i, (name, arguments) in enumerate(calls)
    ]
    return [
        {"content": [], "tool_calls": tool_calls},
        {"content": [{"type": "text", "text": "ok"}]},
    ]


def gone(pid: int) -> bool:
    """No such process, or only its exit status is left (a zombie)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        import psutil  # noqa: PLC0415 - optional: /proc is read otherwise

        return bool(psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
    except ImportError:
        state = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
        return state in (b"Z", b"X")
    except psutil.NoSuchProcess:
        return True


async def eventually(check: Any, seconds: float = 10.0) -> None:
    with anyio.fail_after(seconds):
        while not check():  # noqa: ASYNC110 - a process's end sends no event
            await anyio.sleep(0.02)


async def call_both(
    tools: dict[str, Any], faulty: tuple[str, dict[str, Any]], sibling: tuple[str, dict[str, Any]]
) -> tuple[ToolResult, ToolResult]:
    """Run the faulty call and a sibling at once; the faulty one bounded by BOUND."""
    results: dict[str, ToolResult] = {}

    async def run(key: str, name: str, arguments: dict[str, Any]) -> None:
        results[key] = await tools[name].execute(arguments)

    async with anyio.create_task_group() as tg:
        tg.start_soon(run, "sibling", *sibling)
        with anyio.fail_after(BOUND):
            await run("faulty", *faulty)
    return results["faulty"], results["sibling"]


async def server_pid(tools: dict[str, Any], name: str) -> int:
    return int((await tools[f"{name}__pids"].execute({})).output)


async def test_a_server_killed_while_its_child_holds_stdout_fails_its_calls_at_once(
    tmp_path: Path,
) -> None:
    pidfile = tmp_path / "pids"
    replies = turn_calling(("a__echo", {"text": "again"}), ("b__echo", {"text": "on"}))
    plan = make_plan([raw_server("a"), raw_server("b")], replies)
    async with AmplifierSession(plan) as session:
        tools = session.coordinator.get("tools")
        b_pid = await server_pid(tools, "b")
        faulty, sibling = await call_both(
            tools, ("a__orphan", {"pidfile": str(pidfile)}), ("b__slow", {"seconds": 0.3})
        )
        assert not faulty.success
        assert "MCP server 'a'" in faulty.error["message"]
        assert sibling.success
        assert sibling.output == "slept"
        server, child = map(int, pidfile.read_text().split())
        # The session goes on: a turn calls both servers; a's tools say it is gone.
        with anyio.fail_after(10):
            result = await session.run("go on")
        assert result.status is TurnStatus.SUCCESS
        messages = [
            m
            for m in await session.coordinator.get("context").get_messages()
            if m["role"] == "tool"
        ]
        assert "MCP server 'a'" in str(messages[0]["content"])
        assert "on" in str(messages[1]["content"])
        await eventually(lambda: gone(server) and gone(child))
    assert gone(b_pid)


async def test_a_reply_that_is_not_utf8_fails_its_own_call_only() -> None:
    replies = turn_calling(("a__echo", {"text": "still here"}))
    async with AmplifierSession(make_plan([raw_server("a")], replies)) as session:
        tools = session.coordinator.get("tools")
        pid = await server_pid(tools, "a")
        faulty, sibling = await call_both(tools, ("a__garbled", {}), ("a__slow", {"seconds": 0.3}))
        assert not faulty.success
        assert "not valid UTF-8" in faulty.error["message"]
        assert sibling.output == "slept"  # the same connection, unharmed
        assert (await tools["a__echo"].execute({"text": "next"})).output == "next"
        with anyio.fail_after(10):
            result = await session.run("go on")
        assert result.status is TurnStatus.SUCCESS
        assert await server_pid(tools, "a") == pid
    assert gone(pid)


async def test_a_line_that_is_not_json_loses_the_connection_at_once_and_it_reconnects() -> None:
    servers = [raw_server("a", reconnect=1, reconnect_delay=0), raw_server("b")]
    async with AmplifierSession(make_plan(servers, [])) as session:
        tools = session.coordinator.get("tools")
        first, b_pid = await server_pid(tools, "a"), await server_pid(tools, "b")
        connection = tools["a__echo"].connection
        faulty, sibling = await call_both(tools, ("a__broken", {}), ("b__slow", {"seconds": 0.3}))
        assert not faulty.success
        assert "MCP server 'a'" in faulty.error["message"]
        assert sibling.output == "slept"
        await eventually(lambda: connection.connects == 2)
        assert (await tools["a__echo"].execute({"text": "back"})).output == "back"
        second = await server_pid(tools, "a")
        assert second != first
        await eventually(lambda: gone(first))
    assert gone(second)
    assert gone(b_pid)
