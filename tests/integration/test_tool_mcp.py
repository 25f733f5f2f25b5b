"""tool-mcp over stdio against real MCP servers from PyPI (mcp-server-time, mcp-server-git)
and the test server: tools, results, approval, failure, cancellation, process life.

Each session starts its server as a real subprocess; the process checks read /proc for
the children of this test process.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from amplifier_anyio import AmplifierSession, ConfigError, ModuleLoadError, TurnStatus
from amplifier_anyio.providers.scripted import ScriptedProvider
from tiers import needs

pytestmark = [pytest.mark.anyio, *needs("mcp", "mcp_server_time", "mcp_server_git")]

if importlib.util.find_spec("mcp") is not None:  # else every test is skipped (needs)
    from mcp_types import (
        CallToolResult,
        EmbeddedResource,
        ImageContent,
        TextContent,
        TextResourceContents,
    )

    from amplifier_anyio.mcp.client import (
        MCPConfig,
        MCPConnection,
        MCPConnectionState,
        result_of,
    )

TEST_SERVER = str(Path(__file__).with_name("_mcp_test_server.py"))


def time_server(name: str = "time", **extra: Any) -> dict[str, Any]:
    args = ["-m", "mcp_server_time", "--local-timezone", "UTC"]
    return {"name": name, "command": sys.executable, "args": args, **extra}


def stdio_test_server(name: str = "t", **extra: Any) -> dict[str, Any]:
    return {"name": name, "command": sys.executable, "args": [TEST_SERVER, "stdio"], **extra}


def call(name: str, arguments: dict[str, Any], call_id: str = "call-0") -> dict[str, Any]:
    return {
        "content": [{"type": "text", "text": "calling"}],
        "tool_calls": [{"id": call_id, "name": name, "arguments": arguments}],
    }


def text(value: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": value}]}


def make_plan(
    servers: list[dict[str, Any]],
    replies: list[dict[str, Any]] | None = None,
    *,
    hooks: list[dict[str, Any]] | None = None,
    tool_timeout: float = 30,
) -> dict[str, Any]:
    return {
        "session": {"orchestrator": "loop-basic", "context": "context-simple"},
        "orchestrator": {"config": {"tool_timeout": tool_timeout}},
        "providers": [{"module": "provider-scripted", "config": {"responses": replies or []}}],
        "tools": [{"module": "tool-mcp", "config": {"servers": servers}}],
        "hooks": hooks or [],
    }


async def tool_messages(session: AmplifierSession) -> list[dict[str, Any]]:
    messages = await session.coordinator.get("context").get_messages()
    return [m for m in messages if m["role"] == "tool"]


def children(marker: str) -> list[int]:
    """Live (not zombie) child processes of this test process whose command line has marker."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_bytes().rsplit(b")", 1)[1].split()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if (
            int(stat[1]) == os.getpid()
            and stat[0] not in (b"Z", b"X")
            and marker.encode() in cmdline
        ):
            found.append(int(entry))
    return found


async def eventually(check: Any, seconds: float = 10.0) -> None:
    """Wait, bounded, until ``await check()`` (or ``check()``) is true."""
    with anyio.fail_after(seconds):
        for _ in range(100_000):
            outcome = check()
            if not isinstance(outcome, bool):
                outcome = await outcome
            if outcome:
                return
            await anyio.sleep(0.02)


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in (b"Z", b"X")


# -- configuration ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "key"),
    [
        ({}, "servers"),
        ({"servers": []}, "servers"),
        ({"servers": [{"command": "x"}]}, "servers[0].name"),
        ({"servers": [{"name": "a.b", "command": "x"}]}, "servers[0].name"),
        ({"servers": [{"name": "a"}]}, "servers[0]: give exactly one"),
        ({"servers": [{"name": "a", "command": "x", "url": "http://h"}]}, "servers[0]: give"),
        ({"servers": [{"name": "a", "url": "ftp://h"}]}, "servers[0].url"),
        ({"servers": [{"name": "a", "command": "x", "timeout": 0}]}, "servers[0].timeout"),
        ({"servers": [{"name": "a", "command": "x", "timeout": "5"}]}, "servers[0].timeout"),
        ({"servers": [{"name": "a", "command": "x", "args": "-v"}]}, "servers[0].args"),
        ({"servers": [{"name": "a", "command": "x", "headers": {}}]}, "servers[0].headers"),
        ({"servers": [{"name": "a", "url": "http://h", "env": {}}]}, "servers[0].env"),
        ({"servers": [{"name": "a", "command": "x", "reconnect": -1}]}, "servers[0].reconnect"),
        ({"servers": [{"name": "a", "command": "x", "colour": 1}]}, "servers[0].colour"),
        (
            {"servers": [{"name": "a", "command": "x"}, {"name": "a", "url": "http://h"}]},
            "servers[1].name",
        ),
        ({"servers": [{"name": "a", "command": "x"}], "prefix": "{tool}_"}, "prefix"),
        ({"servers": [{"name": "a", "command": "x"}], "verbose": True}, "verbose"),
    ],
)
def test_a_bad_config_is_one_line_naming_the_key(config: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        MCPConfig.from_dict(config)
    message = str(caught.value)
    assert message.startswith(key)
    assert "\n" not in message


def test_tool_names_are_safe_for_providers() -> None:
    config = MCPConfig.from_dict({"servers": [{"name": "docs-1", "url": "http://h/mcp"}]})
    connection = MCPConnection(config.servers[0], prefix=config.prefix)
    assert connection.tool_name("search") == "docs-1__search"
    assert connection.tool_name("files/read.v2") == "docs-1__files_read_v2"
    custom = MCPConnection(config.servers[0], prefix="mcp.{server}.")
    assert custom.tool_name("search") == "mcp_docs-1_search"


def test_include_and_exclude_choose_tools_by_glob() -> None:
    config = MCPConfig.from_dict(
        {"servers": [{"name": "g", "command": "x", "include": ["git_*"], "exclude": ["git_reset"]}]}
    )
    server = config.servers[0]
    assert server.wants("git_status")
    assert not server.wants("git_reset")
    assert not server.wants("status")


def test_results_keep_text_images_resources_and_structured_content() -> None:
    plain = result_of(CallToolResult(content=[TextContent(type="text", text="hi")]), "s")
    assert plain.success
    assert plain.output == "hi"
    mixed = CallToolResult(
        content=[
            TextContent(type="text", text="see"),
            ImageContent(type="image", data="aGk=", mime_type="image/png"),
            EmbeddedResource(
                type="resource",
                resource=TextResourceContents(
                    uri="file:///a.txt", text="A", mime_type="text/plain"
                ),
            ),
        ],
        structured_content={"n": 1},
    )
    output = result_of(mixed, "s").output
    assert output["structured_content"] == {"n": 1}
    assert output["content"] == [
        {"type": "text", "text": "see"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "aGk="}},
        {"type": "resource", "uri": "file:///a.txt", "mime_type": "text/plain", "text": "A"},
    ]
    failed = result_of(
        CallToolResult(content=[TextContent(type="text", text="bad zone")], is_error=True), "s"
    )
    assert not failed.success
    assert failed.error == {"message": "bad zone", "type": "MCPToolError"}


# -- mcp-server-time -------------------------------------------------------------------------


async def test_time_server_tools_mount_and_a_turn_gets_the_servers_answer() -> None:
    def reply(request: Any) -> dict[str, Any]:
        tools = [m for m in request.messages if m.role == "tool"]
        if not tools:
            return call("time__get_current_time", {"timezone": "Asia/Tokyo"})
        return text(f"The server says: {tools[-1].content}")

    # An optional server that cannot start is left out; the others mount.
    servers = [{"name": "ghost", "command": "/nonexistent/mcp-server", "optional": True}]
    servers.append(time_server())
    async with AmplifierSession(make_plan(servers)) as session:
        tools = session.coordinator.get("tools")
        assert sorted(tools) == ["time__convert_time", "time__get_current_time"]
        schema = tools["time__get_current_time"].input_schema
        assert schema["required"] == ["timezone"]
        assert (
            tools["time__get_current_time"].description == "Get current time in a specific timezone"
        )
        provider = ScriptedProvider(reply)
        await session.coordinator.mount("providers", provider, name="scripted")
        result = await session.run("What time is it in Tokyo?")
        assert result.status is TurnStatus.SUCCESS
        answer = json.loads(result.text.removeprefix("The server says: "))
        assert answer["timezone"] == "Asia/Tokyo"
        assert answer["datetime"].endswith("+09:00")
        sent = {spec.name for spec in provider.requests[0].tools or []}
        assert "time__get_current_time" in sent
        # The server's own error (an unknown zone) is that call's error result, no more.
        bad = await tools["time__get_current_time"].execute({"timezone": "Mars/Olympus"})
        assert not bad.success
        assert "Mars/Olympus" in bad.error["message"]


async def test_a_server_that_cannot_start_fails_the_session_in_one_line() -> None:
    # The servers start at once; the one that did start is stopped with the failed start.
    plan = make_plan([{"name": "ghost", "command": "/nonexistent/mcp-server"}, time_server()])
    with pytest.raises(ModuleLoadError) as caught:
        async with AmplifierSession(plan):
            pass
    assert children("mcp_server_time") == []
    message = str(caught.value)
    assert "\n" not in message
    assert "MCP server 'ghost' failed to start" in message
    assert "/nonexistent/mcp-server" in message


# -- mcp-server-git behind hooks-approval ----------------------------------------------------


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True
    ).stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    git(repo, "config", "user.email", "test@example.invalid")
    git(repo, "config", "user.name", "Test")
    (repo / "notes.txt").write_text("remember the milk\n")
    return repo


def git_plan(repo: Path) -> dict[str, Any]:
    server = {
        "name": "git",
        "command": sys.executable,
        "args": ["-m", "mcp_server_git", "--repository", str(repo)],
        "exclude": ["git_reset", "git_checkout"],
    }
    replies = [
        call("git__git_add", {"repo_path": str(repo), "files": ["notes.txt"]}, "add"),
        call("git__git_commit", {"repo_path": str(repo), "message": "WIP: notes"}, "wip"),
        call("git__git_commit", {"repo_path": str(repo), "message": "Add notes"}, "commit"),
        text("done"),
    ]
    approval = {
        "argument_keys": ["message"],
        "deny": ["git__git_commit:WIP*"],
        "allow": ["git__*"],
    }
    return make_plan([server], replies, hooks=[{"module": "hooks-approval", "config": approval}])


async def test_a_deny_rule_stops_a_git_commit_and_an_allow_rule_lets_it_run(repo: Path) -> None:
    async with AmplifierSession(git_plan(repo)) as session:
        assert "git__git_reset" not in session.coordinator.get("tools")
        with anyio.fail_after(60):
            await session.run("commit the notes")
        add, wip, commit = await tool_messages(session)
    assert not add["content"].startswith("Denied")
    assert wip["content"].startswith("Denied by hook")
    assert "Denied" not in commit["content"]
    # Only the allowed commit was made, with the file the first call staged.
    assert git(repo, "log", "--format=%s") == "Add notes\n"
    assert git(repo, "show", "--name-only", "--format=", "HEAD") == "notes.txt\n"


# -- cancellation and the server process -----------------------------------------------------


async def test_cancelled_calls_are_abandoned_and_no_server_process_outlives_the_session() -> None:
    # Each turn is cancelled during its first reply's call: the next turn gets the next one.
    replies = [
        call("t__slow", {"seconds": 60, "tag": "abandoned"}),
        call("t__slow", {"seconds": 60, "tag": "host"}),
    ]
    started = anyio.Event()

    def on_pre(_event: str, _data: Any) -> None:
        started.set()

    async def after_start(cancel: Any) -> None:
        """Once the server runs the call (asked on the same connection), cancel."""
        nonlocal started
        await started.wait()
        started = anyio.Event()
        stats = session.coordinator.get("tools")["t__stats"]

        async def running() -> bool:
            return bool((await stats.execute({})).output["active"])

        await eventually(running)
        cancel()

    with anyio.CancelScope() as host:
        async with AmplifierSession(make_plan([stdio_test_server()], replies)) as session:
            [pid] = children(TEST_SERVER)
            session.coordinator.hooks.register("tool:pre", on_pre)
            # An immediate cancel mid-call: the turn ends cancelled, the call is abandoned.
            async with anyio.create_task_group() as tg:
                tg.start_soon(after_start, lambda: session.cancel(immediate=True))
                with anyio.fail_after(30):
                    result = await session.run("wait a minute")
            assert result.status is TurnStatus.CANCELLED
            [message] = await tool_messages(session)
            assert "cancelled" in message["content"]
            # run() returned: the server was told, and the connection (and its process)
            # lives on and is reused.
            assert alive(pid)
            stats = session.coordinator.get("tools")["t__stats"]

            async def told() -> bool:
                return "abandoned" in (await stats.execute({})).output["cancelled"]

            await eventually(told)
            # The host cancels its own scope mid-call: the session closes, the process ends.
            with anyio.fail_after(30):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(after_start, host.cancel)
                    await session.run("wait again")
    assert host.cancelled_caught
    assert not alive(pid)


async def test_a_server_that_dies_gives_clear_errors_then_reconnects() -> None:
    server = stdio_test_server(reconnect=1, reconnect_delay=0.2)
    async with AmplifierSession(make_plan([server])) as session:
        [pid] = children(TEST_SERVER)
        echo = session.coordinator.get("tools")["t__echo"]
        connection = echo.connection
        assert (await echo.execute({"text": "one"})).output == "one"
        os.kill(pid, signal.SIGKILL)
        await eventually(lambda: connection.state is not MCPConnectionState.READY)
        lost = await echo.execute({"text": "two"})
        assert not lost.success
        assert "MCP server 't'" in lost.error["message"]
        await eventually(lambda: connection.state is MCPConnectionState.READY, 30)
        assert connection.connects == 2
        assert (await echo.execute({"text": "three"})).output == "three"
        [new_pid] = children(TEST_SERVER)
        assert new_pid != pid
    assert not alive(new_pid)
