"""A tool's ToolCallContext on the batch's inline path: built when asked, the same
wherever the tool's code asks from (its own task, a task it starts, a worker thread)."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from amplifier_anyio.kernel import ToolCallContext, current_tool_call, trace_scope
from amplifier_anyio.models import ToolCall
from amplifier_anyio.runtime import ToolBatch
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
