"""MCP 2026-07-28 and the tasks extension, client and server side, on both backends.

- The SDK's own ``MCPServer`` (in process) with a task-based tool: the SDK client with
  `TasksClient` gets its result through ``tasks/get``; a cancel or a timeout mid-task sends
  ``tasks/cancel``, which the server sees and honours; protocol errors are the spec's.
- tool-mcp against the SDK's server over streamable HTTP on 127.0.0.1 (a subprocess): a
  tool call that the server turns into a task, and one cancelled mid-task by the tool
  batch's ``tool_timeout``.
- ``mcp serve``: ``run`` is a task for a client that takes tasks (over stdio, a real
  subprocess), and ``tasks/cancel`` cancels the turn (in process).
"""

from __future__ import annotations

import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types
import pytest
import test_tool_mcp_http as mcp_http
from mcp import Client, MCPError, StdioServerParameters
from mcp.server.mcpserver import MCPServer

from amplifier_anyio import AmplifierSession, TurnStatus
from amplifier_anyio.mcp.serve import build_server
from amplifier_anyio.mcp.tasks import (
    CancelTaskRequest,
    GetTaskRequest,
    TaskIdParams,
    TaskRunner,
    TasksClient,
    TasksExtension,
)
from amplifier_anyio.models import ChatResponse, TextBlock
from amplifier_anyio.providers.scripted import ScriptedProvider
from tiers import needs

pytestmark = [pytest.mark.anyio, *needs("mcp", "mcp_types")]

SERVER = str(Path(__file__).with_name("_mcp_test_server.py"))
ENTRY = "from amplifier_anyio.cli import main; main()"


class Work:
    """A tool whose calls wait for ``release`` (or fail); records starts and cancels."""

    def __init__(self) -> None:
        self.release = anyio.Event()
        self.started = anyio.Event()
        self.cancelled: list[str] = []

    async def work(self, tag: str) -> str:
        self.started.set()
        try:
            await self.release.wait()
        except anyio.get_cancelled_exc_class():
            self.cancelled.append(tag)
            raise
        if tag == "boom":
            raise MCPError(mcp_types.INTERNAL_ERROR, "the work broke")
        return f"done {tag}"


@asynccontextmanager
async def task_server() -> AsyncIterator[tuple[MCPServer, TaskRunner, Work, list[str]]]:
    cancels: list[str] = []
    runner = TaskRunner(poll_ms=20, on_cancel=cancels.append)
    work = Work()
    server = MCPServer("tasks", extensions=[TasksExtension(runner, {"work"})])
    server.add_tool(work.work, name="work", description="waits for the test")
    async with runner.running():
        yield server, runner, work, cancels


async def test_a_task_result_arrives_through_polling() -> None:
    seen: list[str] = []
    async with (
        task_server() as (server, runner, work, _),
        Client(server, extensions=[TasksClient(on_task=seen.append)]) as client,
    ):
        assert client.protocol_version == "2026-07-28"
        async with anyio.create_task_group() as tg:

            async def release() -> None:
                await work.started.wait()
                work.release.set()

            tg.start_soon(release)
            result = await client.call_tool("work", {"tag": "a"})
    assert result.content[0].text == "done a"
    [task_id] = seen
    assert runner.tasks[task_id].status == "completed"


async def test_an_older_revision_gets_a_plain_result() -> None:
    async with task_server() as (server, runner, work, _):
        work.release.set()
        async with Client(server, mode="legacy", extensions=[TasksClient()]) as client:
            assert client.protocol_version != "2026-07-28"
            result = await client.call_tool("work", {"tag": "b"})
    assert result.content[0].text == "done b"
    assert runner.tasks == {}


async def test_a_local_cancel_mid_task_sends_tasks_cancel_which_the_server_honours() -> None:
    asked: list[str] = []
    async with (
        task_server() as (server, runner, work, cancels),
        Client(server, extensions=[TasksClient(on_cancel=asked.append)]) as client,
    ):
        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as tg:

                async def cancel_once_running() -> None:
                    await work.started.wait()
                    scope.cancel()

                tg.start_soon(cancel_once_running)
                await client.call_tool("work", {"tag": "c"})
        assert scope.cancelled_caught
        [task_id] = runner.tasks
        assert asked == [task_id]
        assert cancels == [task_id]  # the server received tasks/cancel
        with anyio.fail_after(5):
            await runner.tasks[task_id].done.wait()
        assert runner.tasks[task_id].status == "cancelled"
        assert work.cancelled == ["c"]
        # the connection goes on
        work.release.set()
        assert (await client.call_tool("work", {"tag": "d"})).content[0].text == "done d"


async def test_the_calls_timeout_bounds_the_wait_and_cancels_the_task() -> None:
    async with (
        task_server() as (server, runner, _, cancels),
        Client(server, extensions=[TasksClient()]) as client,
    ):
        with pytest.raises(MCPError) as caught:
            await client.call_tool("work", {"tag": "e"}, read_timeout_seconds=0.3)
        assert caught.value.code == mcp_types.REQUEST_TIMEOUT
        [task_id] = runner.tasks
        assert cancels == [task_id]


async def test_a_failed_task_raises_its_error_and_protocol_errors_are_the_specs() -> None:
    async with task_server() as (server, runner, work, _):
        work.release.set()
        async with Client(server, extensions=[TasksClient()]) as client:
            with pytest.raises(MCPError, match="the work broke"):
                await client.call_tool("work", {"tag": "boom"})
            [task] = runner.tasks.values()
            assert (task.status, task.error and task.error["code"]) == (
                "failed",
                mcp_types.INTERNAL_ERROR,
            )
            get = GetTaskRequest(params=TaskIdParams(task_id="nope"))
            with pytest.raises(MCPError) as unknown:
                await client.session.send_request(get, mcp_types.Result)
            assert unknown.value.code == mcp_types.INVALID_PARAMS
        # a client that does not declare the extension may not use its methods
        async with Client(server) as plain:
            cancel = CancelTaskRequest(params=TaskIdParams(task_id=task.task_id))
            with pytest.raises(MCPError) as missing:
                await plain.session.send_request(cancel, mcp_types.Result)
            assert missing.value.code == mcp_types.MISSING_REQUIRED_CLIENT_CAPABILITY


# -- tool-mcp over streamable HTTP ------------------------------------------------------


url = mcp_http.url  # its server, one per module


def plan(url: str, replies: list[dict[str, Any]], tool_timeout: float = 10) -> dict[str, Any]:
    return {
        "session": {"orchestrator": "loop-basic", "context": "context-simple"},
        "orchestrator": {"config": {"tool_timeout": tool_timeout}},
        "providers": [{"module": "provider-scripted", "config": {"responses": replies}}],
        "tools": [{"module": "tool-mcp", "config": {"servers": [{"name": "h", "url": url}]}}],
    }


def call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    tool_call = {"id": "call-1", "name": name, "arguments": arguments}
    return {"content": [{"type": "text", "text": "calling"}], "tool_calls": [tool_call]}


def text(value: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": value}]}


async def stats(session: AmplifierSession) -> dict[str, Any]:
    output: dict[str, Any] = (await session.coordinator.get("tools")["h__stats"].execute({})).output
    return output


async def test_tool_mcp_runs_a_task_and_cancels_one_mid_task(url: str, anyio_backend: Any) -> None:
    tag = f"{anyio_backend[0]}-{time.monotonic_ns()}"
    replies = [
        call("h__job", {"seconds": 0.2, "tag": f"{tag}-quick"}),
        call("h__job", {"seconds": 120, "tag": f"{tag}-stuck"}),
        text("done"),
    ]
    async with AmplifierSession(plan(url, replies, tool_timeout=1.5)) as session:
        result = await session.run("go")
        assert result.status is TurnStatus.SUCCESS
        messages = await session.coordinator.get("context").get_messages()
        outputs = [m["content"] for m in messages if m["role"] == "tool"]
        assert outputs[0] == f"{tag}-quick"
        assert "timed out" in outputs[1]
        # the server ran both as tasks and saw the cancel of the stuck one
        with anyio.fail_after(10):
            while (await stats(session))["jobs"].get(f"{tag}-stuck") != "cancelled":  # noqa: ASYNC110
                await anyio.sleep(0.05)
        counters = await stats(session)
        assert counters["jobs"][f"{tag}-quick"] == "done"
        assert len(counters["task_cancels"]) >= 1


# -- mcp serve ------------------------------------------------------------------------------


async def test_mcp_serve_answers_run_as_a_task(anyio_backend: Any) -> None:
    served = "trio" if anyio_backend[0] == "asyncio" else "asyncio"
    params = StdioServerParameters(
        command=sys.executable, args=["-c", ENTRY, "mcp", "serve", "--backend", served]
    )
    tasks: list[str] = []
    async with Client(params, extensions=[TasksClient(on_task=tasks.append)]) as client:
        assert client.protocol_version == "2026-07-28"
        result = await client.call_tool("run", {"prompt": "count the words of hello big world"})
    assert len(tasks) == 1
    assert not result.is_error
    assert "7 words" in result.content[0].text
    assert result.structured_content["status"] == "success"


async def test_tasks_cancel_cancels_the_served_turn() -> None:
    asked = anyio.Event()

    async def slow_answer(_request: Any) -> ChatResponse:
        asked.set()
        await anyio.sleep_forever()
        raise AssertionError

    cancels: list[str] = []
    runner = TaskRunner(poll_ms=20, on_cancel=cancels.append)
    plan = {"session": {"orchestrator": "loop-basic", "context": "context-simple"}}
    async with AmplifierSession(plan) as session, runner.running():
        provider = ScriptedProvider(slow_answer)
        await session.coordinator.mount("providers", provider, name="scripted")
        server = build_server(session, tasks=runner)
        async with Client(server, extensions=[TasksClient()]) as client:
            with anyio.CancelScope() as scope:
                async with anyio.create_task_group() as tg:

                    async def cancel_once_asked() -> None:
                        await asked.wait()
                        scope.cancel()

                    tg.start_soon(cancel_once_asked)
                    await client.call_tool("run", {"prompt": "take your time"})
            [task_id] = runner.tasks
            assert cancels == [task_id]
            with anyio.fail_after(5):
                await runner.tasks[task_id].done.wait()
            assert runner.tasks[task_id].status == "cancelled"
            assert session.status.status == "cancelled"
            # the session goes on: the next run is a turn of its own
            provider._reply = lambda _r: ChatResponse(content=[TextBlock(text="back")])
            result = await client.call_tool("run", {"prompt": "again"})
            assert result.content[0].text == "back"
