"""The tool batch's hot path: a tool's ToolCallContext is built when asked and is the same
wherever the tool's code asks from (its own task, a task it starts, a worker thread); the
results write (one shielded scope with a deadline) gives up at its timeout and is not cut
by a host cancel."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from amplifier_anyio.errors import ContextWriteError
from amplifier_anyio.kernel import ToolCallContext, current_tool_call, trace_scope
from amplifier_anyio.models import ToolCall
from amplifier_anyio.runtime import ToolBatch, ToolBatchConfig
from amplifier_anyio.testing import MockContextManager, MockCoordinator

pytestmark = pytest.mark.anyio


async def run(calls: list[ToolCall], tools: dict[str, Any]) -> ToolBatch:
    coordinator = MockCoordinator()
    batch = ToolBatch(calls=calls, tools=tools, hooks=coordinator.hooks, coordinator=coordinator)
    message = {"role": "assistant", "content": "", "tool_calls": []}
    await batch.run(MockContextManager(), message)
    return batch


def expected(batch: ToolBatch, call_id: str, name: str, index: int) -> ToolCallContext:
    return ToolCallContext(
        tool_call_id=call_id,
        tool_name=name,
        parallel_group_id=batch.parallel_group_id,
        index=index,
        trace_id="trace-7",
    )


async def test_a_task_started_by_the_tool_sees_the_tool_call() -> None:
    seen: dict[str, list[ToolCallContext | None]] = {}

    class Spawner:
        async def execute(self, tool_input: dict[str, Any]) -> str:
            mine = current_tool_call()
            assert mine is not None
            found = seen.setdefault(mine.tool_call_id, [mine])

            async def child() -> None:
                await anyio.lowlevel.checkpoint()
                found.append(current_tool_call())

            async with anyio.create_task_group() as tg:
                tg.start_soon(child)
            found.append(current_tool_call())
            return "ok"

    calls = [ToolCall(id=f"s{i}", name="spawn") for i in range(2)]
    with trace_scope("trace-7"):
        batch = await run(calls, {"spawn": Spawner()})

    assert batch.contents() == ["ok", "ok"]
    for index in range(2):
        want = expected(batch, f"s{index}", "spawn", index)
        assert seen[f"s{index}"] == [want, want, want]
    assert current_tool_call() is None


async def test_a_sync_tool_sees_its_call_in_its_worker_thread() -> None:
    seen: list[ToolCallContext | None] = []

    class Blocking:
        def execute(self, tool_input: dict[str, Any]) -> str:
            seen.append(current_tool_call())
            return "done"

    with trace_scope("trace-7"):
        batch = await run([ToolCall(id="t0", name="block")], {"block": Blocking()})

    assert batch.contents() == ["done"]
    assert seen == [expected(batch, "t0", "block", 0)]


class SlowWrites(MockContextManager):
    """A context whose batch write of the results takes ``delay`` seconds."""

    def __init__(self, delay: float) -> None:
        super().__init__()
        self.delay = delay

    async def add_messages(self, messages: list[dict[str, Any]]) -> None:
        await anyio.sleep(self.delay)
        await super().add_messages(messages)


class TestShieldedWrites:
    @pytest.fixture
    def anyio_backend(self, virtual_backend: tuple[str, dict[str, object]]) -> Any:
        return virtual_backend

    async def test_a_write_that_outlives_its_timeout_is_reported(self) -> None:
        class Quick:
            async def execute(self, tool_input: dict[str, Any]) -> str:
                return "ok"

        coordinator = MockCoordinator()
        batch = ToolBatch(
            calls=[ToolCall(id="q", name="quick")],
            tools={"quick": Quick()},
            hooks=coordinator.hooks,
            coordinator=coordinator,
            config=ToolBatchConfig(write_timeout=0.05),
        )
        with pytest.raises(ContextWriteError, match=r"gave up after 0\.05 s"):
            await batch.run(SlowWrites(3600), {"role": "assistant", "content": ""})
        assert batch.problems == ["writing the results of 1 tool calls gave up after 0.05 s"]

    async def test_a_host_cancel_does_not_cut_the_results_write(self) -> None:
        class Sleepy:
            async def execute(self, tool_input: dict[str, Any]) -> str:
                await anyio.sleep(3600)
                return "never"

        context = SlowWrites(0.05)
        coordinator = MockCoordinator()
        batch = ToolBatch(
            calls=[ToolCall(id="z", name="sleepy")],
            tools={"sleepy": Sleepy()},
            hooks=coordinator.hooks,
            coordinator=coordinator,
        )
        with anyio.move_on_after(0.01) as host:
            await batch.run(context, {"role": "assistant", "content": ""})

        assert host.cancelled_caught
        # the write went on under its shield after the host's deadline: the result landed
        messages = await context.get_messages()
        assert [m["role"] for m in messages] == ["assistant", "tool"]
        assert batch.problems == []
