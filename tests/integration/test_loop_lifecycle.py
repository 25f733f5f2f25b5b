"""loop-lifecycle inside an AmplifierSession, offline, on both backends.

The provider is ``provider-scripted`` from the plan; the tools are mounted on the
session's coordinator by the test. Each test checks what a user of the session sees:
the status, the answer, the ``lifecycle:<stage>`` events, the requests the model got and
the conversation left in the context (every tool call answered, right after its call).
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest

from amplifier_anyio.errors import ConfigError
from amplifier_anyio.events import (
    EXECUTION_END,
    LIFECYCLE_EVENTS,
    ORCHESTRATOR_COMPLETE,
)
from amplifier_anyio.kernel import TurnResult, TurnStatus
from amplifier_anyio.models import ToolResult
from amplifier_anyio.orchestrators import LoopLifecycleOrchestrator
from amplifier_anyio.orchestrators.loop_lifecycle import AGGREGATE_INSTRUCTIONS
from amplifier_anyio.providers.scripted import ScriptedProvider
from amplifier_anyio.session import AmplifierSession
from amplifier_anyio.testing import EventRecorder

pytestmark = pytest.mark.anyio


def text(reply: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": reply}], "finish_reason": "stop"}


PLAN = [
    {"id": "a", "tool": "fetch_a", "input": {"q": "x"}},
    {"id": "b", "tool": "fetch_b", "input": {"q": "y"}},
    {"id": "c", "tool": "combine", "depends_on": ["a", "b"]},
]


class Probe:
    """A tool that records its calls, waits ``delay`` and answers ``name(input)``."""

    def __init__(self, name: str, delay: float = 0.0, *, fail: bool = False) -> None:
        self.name = name
        self.description = f"the {name} tool"
        self.input_schema: dict[str, Any] = {"type": "object"}
        self.delay = delay
        self.fail = fail
        self.calls: list[dict[str, Any]] = []
        self.started = anyio.Event()
        self.returned = anyio.Event()
        self.finished = False

    async def execute(self, tool_input: dict[str, Any]) -> ToolResult:
        self.calls.append(tool_input)
        self.started.set()
        await anyio.sleep(self.delay)
        self.finished = True
        self.returned.set()
        if self.fail:
            return ToolResult(success=False, error={"message": f"{self.name} broke"})
        return ToolResult(output=f"{self.name}({json.dumps(tool_input, sort_keys=True)})")


async def finished(probe: Probe) -> None:
    """Wait until ``probe`` has returned its result (by order, not by a guess of time)."""
    with anyio.fail_after(30):
        await probe.returned.wait()


class Harness:
    def __init__(self, replies: list[dict[str, Any]], **config: Any) -> None:
        self.plan = {
            "session": {"orchestrator": "loop-lifecycle", "context": "context-simple"},
            "orchestrator": {"config": config},
            "providers": [{"module": "provider-scripted", "config": {"responses": replies}}],
        }
        self.recorder = EventRecorder()
        # The fetches take a moment (both are in flight together); no check depends on how
        # long: a test that needs a call still running sets a delay of its own.
        self.tools = {
            "fetch_a": Probe("fetch_a", 0.05),
            "fetch_b": Probe("fetch_b", 0.05),
            "combine": Probe("combine"),
        }
        self.messages: list[dict[str, Any]] = []
        self.provider: ScriptedProvider | None = None

    async def open(self, session: AmplifierSession) -> None:
        self.recorder.attach(session.coordinator.hooks)
        for name, tool in self.tools.items():
            await session.coordinator.mount("tools", tool, name=name)
        self.provider = session.coordinator.get("providers")["scripted"]

    async def run(self, prompt: str = "find and combine") -> TurnResult:
        async with AmplifierSession(self.plan) as session:
            await self.open(session)
            result = await session.run(prompt)
            self.messages = await session.coordinator.get("context").get_messages()
        return result

    def stages(self) -> list[str]:
        return [data["stage"] for name, data in self.recorder.events if name in LIFECYCLE_EVENTS]


def assert_every_call_answered(messages: list[dict[str, Any]]) -> None:
    """Invariant 2: each assistant tool call has one tool message, right after, in order."""
    for index, message in enumerate(messages):
        calls = message.get("tool_calls") or []
        if message["role"] != "assistant" or not calls:
            continue
        answers = messages[index + 1 : index + 1 + len(calls)]
        assert [a["role"] for a in answers] == ["tool"] * len(calls)
        assert [a["tool_call_id"] for a in answers] == [c["id"] for c in calls]
    ids = [c["id"] for m in messages for c in (m.get("tool_calls") or [])]
    answered = [m["tool_call_id"] for m in messages if m["role"] == "tool"]
    assert sorted(ids) == sorted(answered)


def assert_one_terminal(recorder: EventRecorder, status: str) -> None:
    names = [n for n in recorder.names() if n != "session:end"]
    terminal = [n for n in names if n in LIFECYCLE_EVENTS[-3:]]
    assert len(terminal) == 1
    assert names[-2:] == [ORCHESTRATOR_COMPLETE, EXECUTION_END]
    assert recorder.get_events(ORCHESTRATOR_COMPLETE)[0][1]["status"] == status


async def test_a_planned_turn_runs_two_steps_in_parallel_then_the_dependent_one() -> None:
    harness = Harness([text(json.dumps(PLAN)), text("a, b and c are done")])

    result = await harness.run()

    assert result.status is TurnStatus.SUCCESS
    assert result.text == "a, b and c are done"
    assert harness.stages() == [
        "initialize", "plan", "route", "route", "execute", "execute",
        "route", "execute", "aggregate", "complete",
    ]  # fmt: skip
    # Two provider calls: the plan, then the aggregation (which saw all three results).
    assert harness.provider is not None
    plan_request, aggregate_request = harness.provider.requests
    assert "orchestrator-lifecycle-plan" in str(plan_request.messages[-1].content)
    assert plan_request.tools is None
    assert str(aggregate_request.messages[-1].content) == AGGREGATE_INSTRUCTIONS
    tool_texts = [str(m.content) for m in aggregate_request.messages if m.role == "tool"]
    assert tool_texts == ['fetch_a({"q": "x"})', 'fetch_b({"q": "y"})', "combine({})"]
    # The conversation: the prompt, one wave of two calls, one of one, the answer.
    roles = [m["role"] for m in harness.messages]
    assert roles == ["user", "assistant", "tool", "tool", "assistant", "tool", "assistant"]
    assert [c["name"] for c in harness.messages[1]["tool_calls"]] == ["fetch_a", "fetch_b"]
    assert [c["name"] for c in harness.messages[4]["tool_calls"]] == ["combine"]
    assert_every_call_answered(harness.messages)
    assert_one_terminal(harness.recorder, "success")
    # Every lifecycle event carries the turn's trace id, and its data is plain JSON.
    for name, data in harness.recorder.events:
        if name in LIFECYCLE_EVENTS:
            assert data["trace_id"] == result.trace_id
            json.dumps(data["data"])
    complete = harness.recorder.get_events("lifecycle:complete")[0][1]["data"]
    assert complete["success"] is True
    assert complete["metrics"]["successful_steps"] == 3


async def test_an_invalid_plan_gets_one_repair_request() -> None:
    bad = text("First I will fetch a, then b.")
    harness = Harness([bad, text(json.dumps(PLAN[:1])), text("a is done")])

    result = await harness.run()

    assert result.status is TurnStatus.SUCCESS
    assert harness.provider is not None
    assert len(harness.provider.requests) == 3
    repair = harness.provider.requests[1].messages
    assert repair[-2].role == "assistant"
    assert str(repair[-2].content) == "First I will fetch a, then b."
    assert "That plan is invalid: the reply is not JSON" in str(repair[-1].content)
    assert harness.tools["fetch_a"].calls == [{"q": "x"}]
    # The planning exchange is ephemeral: the context has no trace of it.
    assert [m["role"] for m in harness.messages] == ["user", "assistant", "tool", "assistant"]


async def test_a_plan_still_invalid_after_the_repair_fails_the_turn() -> None:
    unknown_tool = text(json.dumps([{"id": "a", "tool": "nope"}]))
    cycle = text(json.dumps([
        {"id": "a", "tool": "fetch_a", "depends_on": ["b"]},
        {"id": "b", "tool": "fetch_b", "depends_on": ["a"]},
    ]))  # fmt: skip
    harness = Harness([unknown_tool, cycle])

    result = await harness.run()

    assert result.status is TurnStatus.ERROR
    assert "still invalid after one repair request" in str(result.error)
    assert "cycle" in str(result.error)
    assert harness.stages() == ["initialize", "failed"]
    assert all(not tool.calls for tool in harness.tools.values())
    assert [m["role"] for m in harness.messages] == ["user"]
    assert_one_terminal(harness.recorder, "error")


async def test_an_immediate_cancel_mid_wave_ends_cancelled_with_every_call_answered() -> None:
    harness = Harness([text(json.dumps(PLAN)), text("never asked")])
    harness.tools["fetch_a"].delay = 0.0
    harness.tools["fetch_b"].delay = 3600.0
    result: TurnResult | None = None

    async with AmplifierSession(harness.plan) as session:
        await harness.open(session)

        async def turn() -> None:
            nonlocal result
            result = await session.run("go")

        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(turn)
                await harness.tools["fetch_b"].started.wait()
                await finished(harness.tools["fetch_a"])
                assert session.cancel(immediate=True)
        harness.messages = await session.coordinator.get("context").get_messages()

    assert result is not None
    assert result.status is TurnStatus.CANCELLED
    assert harness.stages() == [
        "initialize", "plan", "route", "route", "execute", "execute", "cancelled",
    ]  # fmt: skip
    executed = [d["data"] for n, d in harness.recorder.events if n == "lifecycle:execute"]
    assert [e["status"] for e in executed] == ["succeeded", "cancelled"]
    assert_every_call_answered(harness.messages)
    contents = [m["content"] for m in harness.messages if m["role"] == "tool"]
    assert contents[0] == 'fetch_a({"q": "x"})'  # the finished call keeps its real result
    assert json.loads(contents[1])["cancelled"] is True
    assert not harness.tools["fetch_b"].finished
    assert not harness.tools["combine"].calls
    assert harness.provider is not None
    assert len(harness.provider.requests) == 1  # no aggregation after the cancel
    assert_one_terminal(harness.recorder, "cancelled")


async def test_a_graceful_cancel_mid_wave_lets_the_wave_finish_then_ends_cancelled() -> None:
    harness = Harness([text(json.dumps(PLAN)), text("never asked")])
    harness.tools["fetch_a"].delay = 0.0
    harness.tools["fetch_b"].delay = 0.3
    result: TurnResult | None = None

    async with AmplifierSession(harness.plan) as session:
        await harness.open(session)

        async def turn() -> None:
            nonlocal result
            result = await session.run("go")

        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(turn)
                await harness.tools["fetch_b"].started.wait()
                assert session.cancel()  # graceful: the running wave finishes
        harness.messages = await session.coordinator.get("context").get_messages()

    assert result is not None
    assert result.status is TurnStatus.CANCELLED
    assert harness.tools["fetch_b"].finished  # not interrupted
    assert not harness.tools["combine"].calls  # no wave after the cancel
    executed = [d["data"]["status"] for n, d in harness.recorder.events if n == "lifecycle:execute"]
    assert executed == ["succeeded", "succeeded"]
    assert harness.stages()[-1] == "cancelled"
    assert "aggregate" not in harness.stages()
    contents = [m["content"] for m in harness.messages if m["role"] == "tool"]
    assert contents == ['fetch_a({"q": "x"})', 'fetch_b({"q": "y"})']  # both real results
    assert_every_call_answered(harness.messages)
    assert harness.provider is not None
    assert len(harness.provider.requests) == 1  # no aggregation after the cancel
    assert_one_terminal(harness.recorder, "cancelled")


async def test_fallback_runs_the_routing_runner_up_when_the_chosen_tool_fails() -> None:
    plan = [{"id": "b", "tool": "fetch_b", "input": {"q": "y"}}]
    harness = Harness(
        [text(json.dumps(plan)), text("b came from elsewhere")], error_strategy="fallback"
    )
    harness.tools["fetch_b"].fail = True

    result = await harness.run()

    assert result.status is TurnStatus.SUCCESS, result
    assert result.text == "b came from elsewhere"
    assert len(harness.tools["fetch_b"].calls) == 1
    fallbacks = [t for name, t in harness.tools.items() if name != "fetch_b" and t.calls]
    assert len(fallbacks) == 1  # exactly one other tool stood in for it, with the step's input
    assert fallbacks[0].calls == [{"q": "y"}]
    executed = [d["data"] for n, d in harness.recorder.events if n == "lifecycle:execute"]
    assert executed[-1]["status"] == "succeeded"
    roles = [m["role"] for m in harness.messages]
    assert roles == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    assert_every_call_answered(harness.messages)
    assert_one_terminal(harness.recorder, "success")


async def test_continue_reports_the_failed_step_and_skips_its_dependent() -> None:
    harness = Harness([text(json.dumps(PLAN)), text("b failed")], error_strategy="continue")
    harness.tools["fetch_b"].fail = True

    result = await harness.run()

    assert result.status is TurnStatus.SUCCESS
    complete = harness.recorder.get_events("lifecycle:complete")[0][1]["data"]
    assert complete["success"] is False
    assert complete["failed_steps"] == ["b"]
    assert complete["skipped_steps"] == ["c"]
    assert not harness.tools["combine"].calls
    assert_every_call_answered(harness.messages)


async def test_fail_fast_ends_the_turn_with_the_orchestration_error() -> None:
    harness = Harness([text(json.dumps(PLAN)), text("unused")])
    harness.tools["fetch_b"].fail = True

    result = await harness.run()

    assert result.status is TurnStatus.ERROR
    assert "step 'b' failed on 'fetch_b'" in str(result.error)
    assert harness.stages()[-1] == "failed"
    assert_every_call_answered(harness.messages)
    assert_one_terminal(harness.recorder, "error")


async def test_retry_runs_another_call_pair_for_the_failed_step() -> None:
    harness = Harness(
        [text(json.dumps(PLAN[1:2])), text("b failed twice")],
        error_strategy="retry",
        max_attempts=2,
        base_delay=0.01,
    )
    harness.tools["fetch_b"].fail = True

    result = await harness.run()

    assert result.status is TurnStatus.ERROR
    assert len(harness.tools["fetch_b"].calls) == 2
    roles = [m["role"] for m in harness.messages]
    assert roles == ["user", "assistant", "tool", "assistant", "tool"]
    assert_every_call_answered(harness.messages)


async def test_turn_timeout_mid_wave_ends_cancelled_through_the_orchestration() -> None:
    harness = Harness([text(json.dumps(PLAN)), text("never asked")], turn_timeout=0.5)
    harness.tools["fetch_a"].delay = 0.0
    harness.tools["fetch_b"].delay = 3600.0

    with anyio.fail_after(30):
        result = await harness.run()

    assert result.status is TurnStatus.CANCELLED
    assert harness.stages()[-3:] == ["execute", "execute", "cancelled"]
    cancelled = harness.recorder.get_events("lifecycle:cancelled")[0][1]["data"]
    assert "timeout" in cancelled["reason"]
    assert_every_call_answered(harness.messages)
    assert_one_terminal(harness.recorder, "cancelled")


async def test_a_host_cancel_mid_wave_still_reports_the_wave_and_cancelled() -> None:
    harness = Harness([text(json.dumps(PLAN)), text("never asked")])
    harness.tools["fetch_a"].delay = 0.0
    harness.tools["fetch_b"].delay = 3600.0

    async with AmplifierSession(harness.plan) as session:
        await harness.open(session)
        with anyio.CancelScope() as host:
            async with anyio.create_task_group() as tg:
                tg.start_soon(session.run, "go")
                await harness.tools["fetch_b"].started.wait()
                await finished(harness.tools["fetch_a"])
                host.cancel()
        harness.messages = await session.coordinator.get("context").get_messages()

    assert host.cancelled_caught
    assert harness.stages() == [
        "initialize", "plan", "route", "route", "execute", "execute", "cancelled",
    ]  # fmt: skip
    executed = [d["data"]["status"] for n, d in harness.recorder.events if n == "lifecycle:execute"]
    assert executed == ["succeeded", "cancelled"]
    assert_every_call_answered(harness.messages)


@pytest.mark.parametrize(
    ("config", "key"),
    [
        ({"error_strategy": "sometimes"}, "error_strategy"),
        ({"jitter": 2}, "jitter"),
        ({"max_steps": 0}, "max_steps"),
        ({"tool_timeout": -1}, "tool_timeout"),
    ],
)
def test_a_bad_setting_is_a_config_error_naming_it(config: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError, match=key):
        LoopLifecycleOrchestrator(config)
