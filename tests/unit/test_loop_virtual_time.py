"""loop-basic against the clock: fan-out, tool and turn timeouts, cancels mid-call.

trio runs on a fresh ``MockClock(autojump_threshold=0)``, so the durations asserted there
are virtual and exact; asyncio runs the same tests on the real clock, with every scenario
duration scaled down by the ``s`` fixture so the real-clock leg stays short, and never
asserts how fast the real clock went: the fan-out tests count the calls in flight at once
instead.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest

from amplifier_anyio.events import EXECUTION_END, ORCHESTRATOR_COMPLETE, TOOL_ERROR, TOOL_POST
from amplifier_anyio.kernel import TurnResult
from amplifier_anyio.models import ChatResponse, HookResult, TextBlock, ToolCall, ToolResult
from amplifier_anyio.orchestrators import LoopBasicOrchestrator
from amplifier_anyio.providers.scripted import ScriptedProvider
from amplifier_anyio.testing import EventRecorder, MockContextManager, MockCoordinator, MockTool

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend(virtual_backend: tuple[str, dict[str, object]]) -> tuple[str, dict[str, object]]:
    return virtual_backend


@pytest.fixture
def virtual(anyio_backend: tuple[str, dict[str, object]]) -> bool:
    """True when the clock is virtual (trio with the autojump clock)."""
    return anyio_backend[0] == "trio"


@pytest.fixture
def s(virtual: bool) -> float:
    """Seconds per scenario second: 1 on virtual time, 1/10 on the real clock (its windows,
    100 ms and more, hold on a loaded machine; at 1/50 a 20 ms call once missed its
    100 ms window while two suites ran at once)."""
    return 1.0 if virtual else 0.1


def calls_to(name: str, count: int) -> ChatResponse:
    return ChatResponse(tool_calls=[ToolCall(id=f"c{i}", name=name) for i in range(count)])


def answer(text: str = "done") -> ChatResponse:
    return ChatResponse(content=[TextBlock(text=text)])


class Turn:
    """One loop-basic turn with a recorder, timed on the current clock."""

    def __init__(self, **config: Any) -> None:
        self.coordinator = MockCoordinator()
        self.recorder = EventRecorder()
        self.recorder.attach(self.coordinator.hooks)
        self.context = MockContextManager()
        self.orchestrator = LoopBasicOrchestrator(config)
        self.elapsed = 0.0

    async def run(self, provider: ScriptedProvider, tools: dict[str, Any]) -> TurnResult:
        start = anyio.current_time()
        try:
            return await self.orchestrator.run_turn(
                "go",
                self.context,
                {"p": provider},
                tools,
                self.coordinator.hooks,
                coordinator=self.coordinator,
            )
        finally:
            self.elapsed = anyio.current_time() - start

    def tool_contents(self) -> list[str]:
        return [m["content"] for m in self.context.messages if m["role"] == "tool"]

    def assert_terminal(self, status: str) -> None:
        names = self.recorder.names()
        assert names[-2:] == [ORCHESTRATOR_COMPLETE, EXECUTION_END]
        assert names.count(ORCHESTRATOR_COMPLETE) == names.count(EXECUTION_END) == 1
        assert self.recorder.get_events(ORCHESTRATOR_COMPLETE)[0][1]["status"] == status


def is_cancelled(content: str) -> bool:
    return json.loads(content).get("cancelled") is True


# -- fan-out ---------------------------------------------------------------------------------


class Crowd:
    """A tool that records how many of its calls run at once.

    Each call waits until ``size`` calls are in flight together (then all go on), so the
    peak says what the loop runs concurrently, whatever the machine's speed. A loop that
    ran fewer than ``size`` at once would never release them: the test would hang until
    pytest's timeout fails it.
    """

    name = "crowd"
    description = "waits for company"

    def __init__(self, size: int) -> None:
        self.input_schema: dict[str, Any] = {"type": "object"}
        self.size = size
        self.in_flight = 0
        self.peak = 0
        self.calls = 0
        self.gathered = anyio.Event()

    async def execute(self, tool_input: dict[str, Any]) -> ToolResult:
        self.calls += 1
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        if self.in_flight == self.size:
            self.gathered.set()
        try:
            await self.gathered.wait()
        finally:
            self.in_flight -= 1
        return ToolResult(output="ok")


async def test_a_thousand_ten_ms_calls_take_ten_ms_not_ten_seconds(virtual: bool) -> None:
    if not virtual:
        # The real clock says nothing machine-independent about speed: check instead
        # that the thousand calls are all in flight at once.
        crowd, turn = Crowd(1000), Turn()
        result = await turn.run(
            ScriptedProvider([calls_to("crowd", 1000), answer()]), {"crowd": crowd}
        )
        assert result.status == "success"
        assert turn.tool_contents() == ["ok"] * 1000
        assert (crowd.calls, crowd.peak) == (1000, 1000)
        return
    tool = MockTool("sleep", "ok", delay=0.01)
    turn = Turn()

    result = await turn.run(ScriptedProvider([calls_to("sleep", 1000), answer()]), {"sleep": tool})

    assert result.status == "success"
    assert tool.call_count == 1000
    assert turn.tool_contents() == ["ok"] * 1000
    assert 0.01 <= turn.elapsed < 0.5


async def test_max_parallel_tools_ten_makes_a_hundred_waves(virtual: bool) -> None:
    if not virtual:
        # Ten at a time, never more: the first ten wait for each other, then every
        # later call finds the crowd gathered and goes straight on.
        crowd = Crowd(10)
        await Turn(max_parallel_tools=10).run(
            ScriptedProvider([calls_to("crowd", 1000), answer()]), {"crowd": crowd}
        )
        assert (crowd.calls, crowd.peak) == (1000, 10)
        return
    tool = MockTool("sleep", "ok", delay=0.01)
    turn = Turn(max_parallel_tools=10)

    await turn.run(ScriptedProvider([calls_to("sleep", 1000), answer()]), {"sleep": tool})

    assert tool.call_count == 1000
    assert 1.0 <= turn.elapsed < 1.5


async def test_sequential_tools_add_up(virtual: bool) -> None:
    tool = MockTool("sleep", "ok", delay=0.01)
    turn = Turn(parallel_tools=False)

    await turn.run(ScriptedProvider([calls_to("sleep", 20), answer()]), {"sleep": tool})

    if virtual:
        assert turn.elapsed == pytest.approx(0.2)
    else:
        assert turn.elapsed >= 0.19  # 20 calls one after the other


# -- tool timeout ----------------------------------------------------------------------------


async def test_a_tool_past_its_timeout_gets_an_error_and_tool_error(
    virtual: bool, s: float
) -> None:
    timeout = 2.5 * s
    turn = Turn(tool_timeout=timeout)
    tools = {
        "hang": MockTool("hang", delay=3600),
        "quick": MockTool("quick", "fine", delay=1 * s),
    }
    script = ChatResponse(
        tool_calls=[ToolCall(id="h", name="hang"), ToolCall(id="q", name="quick")]
    )

    result = await turn.run(ScriptedProvider([script, answer()]), tools)

    assert result.status == "success"
    assert turn.tool_contents() == [f"Error: timed out after {timeout} s", "fine"]
    [(_, error)] = turn.recorder.get_events(TOOL_ERROR)
    assert error["tool_call_id"] == "h"
    assert error["error"] == {"type": "TimeoutError", "msg": f"timed out after {timeout} s"}
    if virtual:
        assert turn.elapsed == pytest.approx(2.5)


async def test_each_sequential_call_gets_its_own_timeout(s: float) -> None:
    turn = Turn(tool_timeout=2 * s, parallel_tools=False)
    tool = MockTool("t", "ok", delay=1 * s)

    await turn.run(ScriptedProvider([calls_to("t", 3), answer()]), {"t": tool})

    assert turn.tool_contents() == ["ok"] * 3
    assert turn.elapsed >= 0.99 * 3 * s


# -- turn timeout ----------------------------------------------------------------------------


async def test_turn_timeout_mid_batch_cancels_the_turn(virtual: bool, s: float) -> None:
    turn = Turn(turn_timeout=5 * s)
    tools = {
        "quick": MockTool("quick", "fine", delay=1 * s),
        "hang": MockTool("hang", delay=3600),
    }
    script = ChatResponse(
        tool_calls=[ToolCall(id="q", name="quick"), ToolCall(id="h", name="hang")]
    )
    provider = ScriptedProvider([script, answer("never")])

    result = await turn.run(provider, tools)

    assert result.status == "cancelled"
    quick, hang = turn.tool_contents()
    assert quick == "fine"
    assert json.loads(hang) == {
        "error": "Tool execution was cancelled",
        "cancelled": True,
        "tool": "hang",
    }
    assert len(provider.requests) == 1
    turn.assert_terminal("cancelled")
    assert turn.coordinator.cancellation.running_tools == set()
    if virtual:
        assert turn.elapsed == pytest.approx(5)


async def test_turn_timeout_interrupts_a_slow_provider(virtual: bool, s: float) -> None:
    turn = Turn(turn_timeout=5 * s)
    provider = ScriptedProvider([answer("too late")], latency=3600)

    result = await turn.run(provider, {})

    assert (result.status, result.text, result.turn_count) == ("cancelled", "", 1)
    assert [m["role"] for m in turn.context.messages] == ["user"]
    turn.assert_terminal("cancelled")
    if virtual:
        assert turn.elapsed == pytest.approx(5)


async def test_a_turn_within_its_timeout_is_untouched(s: float) -> None:
    turn = Turn(turn_timeout=10 * s)

    result = await turn.run(
        ScriptedProvider([calls_to("t", 2), answer()], latency=1 * s),
        {"t": MockTool("t", delay=1 * s)},
    )

    assert result.status == "success"


# -- cancels from another task ---------------------------------------------------------------


async def test_immediate_cancel_interrupts_a_slow_provider(virtual: bool, s: float) -> None:
    turn = Turn()
    provider = ScriptedProvider([answer("too late")], latency=3600)

    async with anyio.create_task_group() as tg:

        async def cancel_soon() -> None:
            await anyio.sleep(1 * s)
            await turn.coordinator.request_cancel(immediate=True)

        tg.start_soon(cancel_soon)
        result = await turn.run(provider, {})

    assert result.status == "cancelled"
    turn.assert_terminal("cancelled")
    if virtual:
        assert turn.elapsed == pytest.approx(1)


async def test_graceful_cancel_during_the_provider_call_runs_that_batch_then_stops(
    s: float,
) -> None:
    turn = Turn()
    provider = ScriptedProvider([calls_to("t", 2), answer("never")], latency=2 * s)
    tool = MockTool("t", "real", delay=1 * s)

    async with anyio.create_task_group() as tg:

        async def cancel_soon() -> None:
            await anyio.sleep(1 * s)
            await turn.coordinator.request_cancel()

        tg.start_soon(cancel_soon)
        result = await turn.run(provider, {"t": tool})

    assert result.status == "cancelled"
    assert turn.tool_contents() == ["real", "real"]
    assert len(provider.requests) == 1
    turn.assert_terminal("cancelled")


async def test_a_finished_tool_keeps_its_result_when_the_cancel_lands_in_tool_post(
    s: float,
) -> None:
    turn = Turn()

    async def slow_audit(event: str, data: dict[str, Any]) -> HookResult:
        await anyio.sleep(2 * s)  # e.g. a hook writing an audit record somewhere slow
        return HookResult()

    turn.coordinator.hooks.register(TOOL_POST, slow_audit)
    provider = ScriptedProvider([calls_to("t", 1), answer("never")])

    async with anyio.create_task_group() as tg:

        async def cancel_in_the_hook() -> None:
            await anyio.sleep(2 * s)  # the tool finished at 1; the hook runs until 3
            await turn.coordinator.request_cancel(immediate=True)

        tg.start_soon(cancel_in_the_hook)
        result = await turn.run(provider, {"t": MockTool("t", "real", delay=1 * s)})

    assert result.status == "cancelled"
    assert turn.tool_contents() == ["real"]


async def test_a_call_held_in_a_slow_tool_pre_hook_is_answered_as_cancelled(s: float) -> None:
    turn = Turn()

    async def slow_policy(event: str, data: dict[str, Any]) -> HookResult:
        await anyio.sleep(3600)
        return HookResult()

    turn.coordinator.hooks.register("tool:pre", slow_policy)
    tool = MockTool("t", "real")

    with anyio.move_on_after(1 * s):
        await turn.run(ScriptedProvider([calls_to("t", 1), answer("never")]), {"t": tool})

    assert tool.call_count == 0
    [content] = turn.tool_contents()
    assert is_cancelled(content)
    turn.assert_terminal("cancelled")


async def test_the_host_deadline_propagates_out_of_run_turn(virtual: bool, s: float) -> None:
    turn = Turn()
    returned = False

    with anyio.move_on_after(1.5 * s) as host:
        await turn.run(
            ScriptedProvider([calls_to("t", 3), answer("never")]),
            {"t": MockTool("t", delay=3600)},
        )
        returned = True

    assert host.cancelled_caught
    assert not returned
    assert len(turn.tool_contents()) == 3
    assert all(is_cancelled(c) for c in turn.tool_contents())
    turn.assert_terminal("cancelled")
    assert turn.coordinator.cancellation.running_tools == set()
    if virtual:
        assert turn.elapsed == pytest.approx(1.5)
