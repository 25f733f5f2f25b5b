"""Property: a cancel asked during turn N never reaches turn N+1, however slow the
``cancel:requested`` hooks are, wherever in turn N it is asked, graceful or immediate.

trio runs on an autojump ``MockClock`` (virtual time: long hook delays cost nothing);
asyncio on the real clock with the same scenario scaled down to milliseconds.
"""

from __future__ import annotations

from typing import Any, ClassVar

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st
from trio.testing import MockClock

from amplifier_anyio import (
    AmplifierSession,
    ChatRequest,
    ChatResponse,
    TextBlock,
    ToolCall,
    ToolResult,
    TurnStatus,
)
from amplifier_anyio.events import (
    CANCEL_REQUESTED,
    EXECUTION_START,
    PROVIDER_REQUEST,
    PROVIDER_RESPONSE,
    TOOL_POST,
    TOOL_PRE,
)
from amplifier_anyio.providers.scripted import ScriptedProvider

PLAN = {
    "session": {"orchestrator": "loop-basic", "context": "context-simple"},
    "providers": [{"module": "provider-scripted", "config": {}}],
}
CANCEL_POINTS = (EXECUTION_START, PROVIDER_REQUEST, PROVIDER_RESPONSE, TOOL_PRE, TOOL_POST)


def reply(request: ChatRequest) -> ChatResponse:
    """Tools first, then an answer naming the turn's prompt (so a skipped reply shows)."""
    messages = request.messages
    prompt = next(m.content for m in reversed(messages) if m.role == "user")
    if messages[-1].role == "tool":
        return ChatResponse(content=[TextBlock(text=f"answer to {prompt}")])
    calls = [ToolCall(id=f"{prompt}-{i}", name="work") for i in range(2)]
    return ChatResponse(content=[TextBlock(text="working")], tool_calls=calls)


class Work:
    name = "work"
    description = "sleeps a little"
    input_schema: ClassVar[dict[str, Any]] = {"type": "object", "properties": {}}

    def __init__(self, delay: float) -> None:
        self.delay = delay

    async def execute(self, input: dict[str, Any]) -> ToolResult:
        await anyio.sleep(self.delay)
        return ToolResult(output="done")


async def scenario(
    tick: float, hook_ticks: int, tool_ticks: int, point: str, immediate: bool
) -> tuple[Any, Any]:
    async with AmplifierSession(PLAN) as session:
        coordinator = session.coordinator
        await coordinator.mount("providers", ScriptedProvider(reply), name="scripted")
        await coordinator.mount("tools", Work(tool_ticks * tick), name="work")

        async def slow_observer(event: str, data: dict[str, Any]) -> None:
            await anyio.sleep(hook_ticks * tick)

        coordinator.hooks.register(CANCEL_REQUESTED, slow_observer)
        async with anyio.create_task_group() as outside:
            asked = False

            async def ask_once(event: str, data: dict[str, Any]) -> None:
                nonlocal asked
                if not asked:  # during turn 1 only, from a task outside the turn
                    asked = True
                    outside.start_soon(coordinator.request_cancel, immediate)

            unregister = coordinator.hooks.register(point, ask_once)
            first = await session.run("first")
            unregister()
            second = await session.run("second")
    return first, second


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@given(
    hook_ticks=st.integers(0, 20),
    tool_ticks=st.integers(0, 5),
    point=st.sampled_from(CANCEL_POINTS),
    immediate=st.booleans(),
)
def test_a_cancel_of_turn_n_never_reaches_turn_n_plus_1(
    backend: str, hook_ticks: int, tool_ticks: int, point: str, immediate: bool
) -> None:
    if backend == "trio":
        options: dict[str, Any] = {"clock": MockClock(autojump_threshold=0)}
        tick = 0.5
    else:
        options, tick = {}, 0.001
    first, second = anyio.run(
        scenario, tick, hook_ticks, tool_ticks, point, immediate, backend=backend,
        backend_options=options,
    )  # fmt: skip
    assert first.status in (TurnStatus.SUCCESS, TurnStatus.CANCELLED), first
    assert second.status is TurnStatus.SUCCESS, (second, first)
    assert second.text == "answer to second"
