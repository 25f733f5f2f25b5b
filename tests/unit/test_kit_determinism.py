"""The test kit is deterministic by construction (DESIGN §16), on asyncio and trio: a fault
plan's record is in plan order, every spawn has its own cassette lane, one recorder per
cassette file, a cassette is validated whole when it is opened."""

from __future__ import annotations

from typing import Any, ClassVar

import anyio
import anyio.lowlevel
import pytest

from amplifier_anyio import AmplifierSession
from amplifier_anyio.models import ChatResponse, TextBlock, ToolCall, ToolResult
from amplifier_anyio.providers.scripted import ScriptedProvider
from amplifier_anyio.testing.faults import FaultPlan

pytestmark = pytest.mark.anyio

DEMO_PLAN: dict[str, Any] = {
    "session": {"orchestrator": "loop-basic", "context": "context-simple"},
    "providers": [{"module": "provider-scripted", "config": {"demo": True}}],
    "tools": [{"module": "tool-demo", "config": {"delay": 0}}],
}


# -- fault plans: the record of what struck is in plan order ---------------------------------


async def docs_run(plan: FaultPlan) -> tuple[str, list[str], list[dict[str, Any]]]:
    """docs/testing.md's fault plan example, one run."""
    async with AmplifierSession(DEMO_PLAN) as session:
        faults = plan.apply(session.coordinator)
        result = await session.run("Count my words, please")
        messages = await session.coordinator.get("context").get_messages()
    return str(result.status), faults.injected, messages


async def test_the_docs_fault_plan_example_gives_the_same_run_every_time() -> None:
    """30 runs of the example's plans (5 per seed): one record per seed, whatever order
    trio's scheduler starts the tool calls of a batch in."""
    for seed in range(6):
        plan = FaultPlan(seed=seed, provider_rate=0.3, tool_rate=0.5, tool_kinds=("fail",))
        first = await docs_run(plan)
        for _ in range(4):
            assert await docs_run(plan) == first, seed


class Echo:
    """A tool that answers with its input's ``n``."""

    name = "echo"
    description = "Echo n."
    input_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"n": {"type": "integer"}},
    }

    async def execute(self, input: dict[str, Any]) -> ToolResult:
        await anyio.lowlevel.checkpoint()
        return ToolResult(output=str(input.get("n")))


def batch_reply(request: Any) -> ChatResponse:
    if any(getattr(m, "role", None) == "tool" for m in request.messages):
        return ChatResponse(content=[TextBlock(text="done")])
    calls = [ToolCall(id=f"c{n}", name="echo", arguments={"n": n}) for n in range(5)]
    return ChatResponse(content=[], tool_calls=calls)


async def test_a_batch_of_failed_tool_calls_is_recorded_by_index() -> None:
    plan = FaultPlan(seed=7, provider_rate=0.0, tool_rate=1.0, tool_kinds=("fail",), cancel_rate=0)
    expected = [f"tool call {n} after provider call 0 (echo): fail" for n in range(5)]
    for _ in range(10):
        async with AmplifierSession(
            {"session": {"orchestrator": "loop-basic", "context": "context-simple"}}
        ) as session:
            await session.coordinator.mount("providers", ScriptedProvider(batch_reply), name="s")
            await session.coordinator.mount("tools", Echo(), name="echo")
            run = plan.apply(session.coordinator)
            result = await session.run("echo five")
        assert str(result.status) == "success"
        assert run.injected == expected
