"""Seeded fault plans over the four orchestrators (DESIGN §16): the same seed gives the
same run, and the five invariants of DESIGN §6 hold under every plan.

Each example draws a :class:`FaultPlan` (provider 429 / 5xx / timeout / cut stream, tool
failures and hangs, a graceful or immediate cancel at the k-th ``execution:start``,
``provider:request``, ``provider:response`` or ``content_block:delta``) and two
assignments of tool delays, and runs the same turn under each: two rounds of parallel
``probe`` calls then an answer (loop-lifecycle: a plan of two parallel steps and one that
depends on both). Every run is checked against invariants 1-4; the pair must agree on the
status, the events (the order of the events of tools that run at the same time aside)
and the transcript (invariant 5), and on the faults that struck.

Each example runs in its own event loop: trio on a virtual clock (``MockClock``,
autojump), asyncio on the real clock with delays of a few milliseconds. A hang is ended by
the orchestrator's ``tool_timeout`` (1 s virtual, 0.25 s real: far above every drawn
delay). Examples are few (this runs in the default tier); ``FAULT_PLAN_EXAMPLES`` raises
them for a longer hunt.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.lowlevel
import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amplifier_anyio import AmplifierSession
from amplifier_anyio.errors import ConfigError
from amplifier_anyio.events import EXECUTION_END, ORCHESTRATOR_COMPLETE
from amplifier_anyio.models import (
    ChatRequest,
    ChatResponse,
    TextBlock,
    ToolCall,
    ToolCallBlock,
    ToolResult,
    unstructure,
)
from amplifier_anyio.providers.scripted import ScriptedProvider
from amplifier_anyio.testing import EventRecorder, normalise_request
from amplifier_anyio.testing.faults import FaultPlan, fault_plans

ORCHESTRATORS = ("loop-basic", "loop-streaming", "loop-events", "loop-lifecycle")
EXAMPLES = int(os.environ.get("FAULT_PLAN_EXAMPLES", "6"))
UNIT = {"trio": 2**-6, "asyncio": 2**-10}
"""Seconds per drawn delay unit: virtual on trio, real (a millisecond) on asyncio."""
TOOL_TIMEOUT = {"trio": 1.0, "asyncio": 0.25}
CANCELLED = {"error": "Tool execution was cancelled", "cancelled": True, "tool": "probe"}


class Probe:
    """``probe``: waits its drawn delay, answers ``probe(n)``; records what finished."""

    name = "probe"
    description = "Answers probe(n) after a while."
    input_schema: dict[str, Any] = {"type": "object", "properties": {"n": {"type": "integer"}}}  # noqa: RUF012

    def __init__(self, delays: dict[int, float]) -> None:
        self.delays = delays
        self.finished: set[int] = set()
        self.running = 0

    async def execute(self, input: dict[str, Any]) -> ToolResult:
        self.running += 1
        try:
            n = int(input["n"])
            await anyio.sleep(self.delays.get(n, 0.0))
            self.finished.add(n)
            return ToolResult(output=f"probe({n})")
        finally:
            self.running -= 1


def calls(*numbers: int) -> ChatResponse:
    tool_calls = [ToolCall(id=f"call_{n}", name="probe", arguments={"n": n}) for n in numbers]
    return ChatResponse(
        content=[ToolCallBlock(id=c.id, name=c.name, input=c.arguments) for c in tool_calls],
        tool_calls=tool_calls,
        finish_reason="tool_calls",
    )


def reply(request: ChatRequest) -> ChatResponse:
    """Two rounds of parallel calls (three, then two), then the answer; loop-lifecycle gets
    a plan of two parallel steps and one that depends on them."""
    last = str(unstructure(request.messages[-1].content))
    if "lifecycle-plan" in last:
        steps = [
            {"id": "s1", "tool": "probe", "input": {"n": 1}},
            {"id": "s2", "tool": "probe", "input": {"n": 2}},
            {"id": "s3", "tool": "probe", "input": {"n": 3}, "depends_on": ["s1", "s2"]},
        ]
        return ChatResponse(content=[TextBlock(text=json.dumps(steps))])
    results = sum(1 for m in request.messages if m.role == "tool")
    if request.tools and results == 0:
        return calls(1, 2, 3)
    if request.tools and results == 3:
        return calls(4, 5)
    return ChatResponse(content=[TextBlock(text="all probed, here is the answer")])


class Streaming(ScriptedProvider):
    """The same model, streamed: each word of a text block is one delta."""

    @asynccontextmanager
    async def stream(
        self, request: ChatRequest, **kwargs: Any
    ) -> AsyncIterator[AsyncIterator[dict[str, Any]]]:
        response = await self.complete(request, **kwargs)

        async def events() -> AsyncIterator[dict[str, Any]]:
            for index, block in enumerate(response.content):
                yield {"type": "content_block:start", "index": index, "block_type": block.type}
                for word in block.text.split(" ") if isinstance(block, TextBlock) else ():
                    await anyio.lowlevel.checkpoint()
                    yield {
                        "type": "content_block:delta",
                        "index": index,
                        "block_type": "text",
                        "delta": word + " ",
                    }
                yield {"type": "content_block:end", "index": index, "block": block}
            yield {"type": "response", "response": response}

        yield events()


@attrs.frozen
class Outcome:
    status: str
    events: list[str]
    messages: list[dict[str, Any]]
    injected: list[str]
    finished: frozenset[int]
    running: int
    tail: list[str]


def canonical_events(events: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """Event names; the events of tool calls that ran at the same time (a run of
    ``tool:*`` events) sorted, since their interleaving is the scheduler's."""
    found: list[str] = []
    run: list[str] = []
    for name, data in events:
        if name.startswith("tool:"):
            run.append(f"{name}/{data.get('tool_name')}/{data.get('index')}")
            continue
        found.extend(sorted(run))
        run = []
        found.append(name)
    return found + sorted(run)


async def one_run(
    plan: FaultPlan, orchestrator: str, delays: dict[int, float], backend: str
) -> Outcome:
    config = {"tool_timeout": TOOL_TIMEOUT[backend]}
    session_plan = {
        "session": {
            "orchestrator": {"module": orchestrator, "config": config},
            "context": "context-simple",
        }
    }
    probe = Probe(delays)
    provider = Streaming(reply) if orchestrator == "loop-streaming" else ScriptedProvider(reply)
    recorder = EventRecorder()
    async with AmplifierSession(session_plan) as session:
        recorder.attach(session.coordinator.hooks)
        await session.coordinator.mount("providers", provider, name="scripted")
        await session.coordinator.mount("tools", probe, name="probe")
        run = plan.apply(session.coordinator)
        result = await session.run("probe everything")
        running = probe.running
        messages = await session.coordinator.get("context").get_messages()
    names = recorder.names()
    end = names.index(EXECUTION_END) if EXECUTION_END in names else len(names)
    canonical = normalise_request({"messages": messages})["messages"]
    return Outcome(
        status=str(result.status),
        events=canonical_events(recorder.events[: end + 1]),
        messages=canonical,
        injected=run.injected,  # in plan order
        finished=frozenset(probe.finished),
        running=running,
        tail=[n for n in names[end + 1 :] if n != "session:end"],
    )


def check_invariants(outcome: Outcome, raw: list[dict[str, Any]] | None = None) -> None:
    names = outcome.events
    # 1. one orchestrator:complete and one execution:end, nothing of the turn after them
    assert names.count(ORCHESTRATOR_COMPLETE) == 1, names
    assert names.count(EXECUTION_END) == 1, names
    assert names[-1] == EXECUTION_END, names
    assert outcome.tail == [], outcome.tail
    # 2. every call answered right after its assistant message, in call order
    messages = outcome.messages
    for index, message in enumerate(messages):
        ids = [c["id"] for c in message.get("tool_calls") or ()]
        if message["role"] != "assistant" or not ids:
            continue
        answers = [m.get("tool_call_id") for m in messages[index + 1 : index + 1 + len(ids)]]
        assert answers == ids, (ids, answers)
    # 3. a finished call keeps its result; only unfinished ones are answered as cancelled
    argument_of = {
        c["id"]: c["arguments"]["n"] for m in messages for c in m.get("tool_calls") or ()
    }
    for message in messages:
        if message["role"] != "tool":
            continue
        n = argument_of[message["tool_call_id"]]
        content = message["content"]
        if n in outcome.finished:
            assert content == f"probe({n})", (n, content)
        elif content.startswith("{"):
            assert json.loads(content) == CANCELLED, content
        else:
            assert content.startswith("Error:"), content  # an injected failure or a timeout
    # 4. nothing of the turn still running when run() returned
    assert outcome.running == 0


def run_example(
    plan: FaultPlan, orchestrator: str, units: list[dict[int, int]], backend: str
) -> None:
    outcomes = []
    for assignment in units:
        delays = {n: u * UNIT[backend] for n, u in assignment.items()}
        options: dict[str, Any] = {}
        if backend == "trio":
            from trio.testing import MockClock  # noqa: PLC0415 - test extra, trio leg only

            options["clock"] = MockClock(autojump_threshold=0)
        outcome = anyio.run(
            one_run, plan, orchestrator, delays, backend, backend=backend, backend_options=options
        )
        check_invariants(outcome)
        outcomes.append(outcome)
    first, second = outcomes
    # 5. and the same seed gives the same run, whatever the tools' timing
    assert second.status == first.status
    assert second.events == first.events
    assert second.messages == first.messages
    assert second.injected == first.injected
    return first


def delay_units() -> st.SearchStrategy[dict[int, int]]:
    return st.fixed_dictionaries({n: st.integers(min_value=0, max_value=8) for n in range(1, 6)})


@pytest.mark.parametrize("backend", ["trio", "asyncio"])
@pytest.mark.parametrize("orchestrator", ORCHESTRATORS)
@settings(max_examples=EXAMPLES, deadline=None)
@given(plan=fault_plans(), first=delay_units(), second=delay_units())
def test_the_same_seed_gives_the_same_run_and_the_invariants_hold(
    orchestrator: str, backend: str, plan: FaultPlan, first: dict[int, int], second: dict[int, int]
) -> None:
    run_example(plan, orchestrator, [first, second], backend)


@pytest.mark.parametrize("backend", ["trio", "asyncio"])
@pytest.mark.parametrize("orchestrator", ORCHESTRATORS)
def test_every_kind_of_fault_strikes_and_the_invariants_hold(
    orchestrator: str, backend: str
) -> None:
    """Plans that make faults likely: each kind strikes in some run (a turn ends with an
    error among them), and the invariants hold throughout."""
    wanted = {"fail", "hang", "cancel (graceful)", "cancel (immediate)", "provider", "error"}
    seen: set[str] = set()
    for seed in range(40):  # until every kind has struck (a dozen seeds, usually)
        plan = FaultPlan(seed=seed, provider_rate=0.5, tool_rate=0.5, cancel_rate=1.0)
        outcome = run_example(plan, orchestrator, [dict.fromkeys(range(1, 6), 1)] * 2, backend)
        for line in outcome.injected:
            if line.startswith("cancel"):
                seen.add(line.split(" at ")[0])
            elif line.startswith("provider"):
                seen.add("provider")
            else:
                seen.add(line.rsplit(": ", 1)[-1])
        seen.add(outcome.status)
        if wanted <= seen:
            break
    assert wanted <= seen, seen


def test_a_plan_is_a_pure_function_of_its_seed() -> None:
    plan = FaultPlan(seed=7, provider_rate=0.5, tool_rate=0.5, cancel_rate=1.0)
    again = FaultPlan(seed=7, provider_rate=0.5, tool_rate=0.5, cancel_rate=1.0)
    assert [plan.provider_fault(i) for i in range(20)] == [
        again.provider_fault(i) for i in range(20)
    ]
    assert [plan.tool_fault(1, i) for i in range(20)] == [again.tool_fault(1, i) for i in range(20)]
    assert plan.cancel == again.cancel
    other = FaultPlan(seed=8, provider_rate=0.5, tool_rate=0.5, cancel_rate=1.0)
    assert [plan.provider_fault(i) for i in range(20)] != [
        other.provider_fault(i) for i in range(20)
    ]


def test_a_failing_property_shows_the_plan_with_its_seed() -> None:
    @settings(max_examples=5, database=None, derandomize=True)
    @given(plan=fault_plans())
    def prop(plan: FaultPlan) -> None:
        assert plan.seed < 0, "a property that always fails"

    with pytest.raises(AssertionError) as caught:
        prop()
    shown = "\n".join(getattr(caught.value, "__notes__", ()))
    assert "plan=FaultPlan(seed=0," in shown
    # the line rebuilds the plan (and the run: every fault is a function of it)
    text = shown.split("plan=", 1)[1].split("\n", 1)[0].split(",  #", 1)[0].rstrip(",")
    assert eval(text) == FaultPlan(seed=0, provider_rate=0.0, tool_rate=0.0, cancel_rate=0.0)


def test_a_cut_stream_delivers_its_first_events_then_fails_the_turn() -> None:
    plan = FaultPlan(seed=3, provider_rate=1.0, provider_kinds=("stream_cut",), tool_rate=0.0)
    fault = plan.provider_fault(0)
    assert fault is not None
    assert fault.kind == "stream_cut"

    async def main() -> tuple[Any, list[str], list[str]]:
        session_plan = {"session": {"orchestrator": "loop-streaming", "context": "context-simple"}}
        recorder = EventRecorder()
        text = ChatResponse(content=[TextBlock(text="one two three four five six")])
        async with AmplifierSession(session_plan) as session:
            recorder.attach(session.coordinator.hooks)
            await session.coordinator.mount("providers", Streaming([text]), name="scripted")
            run = plan.apply(session.coordinator)
            result = await session.run("count")
            run.remove()
            assert type(session.coordinator.get("providers")["scripted"]) is Streaming
        deltas = [d["delta"] for _, d in recorder.get_events("content_block:delta")]
        return result, deltas, run.injected

    result, deltas, injected = anyio.run(main)
    assert str(result.status) == "error"
    assert type(result.error).__name__ == "StreamError"
    # start, then deltas: the cut comes after ``after_events`` events, never the response
    assert len(deltas) == max(0, fault.after_events - 1)
    assert injected == ["provider call 0 (scripted): stream_cut"]


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("provider_rate", 1.5, "provider_rate: expected a number from 0 to 1, got 1.5"),
        ("tool_kinds", ("explode",), "tool_kinds: unknown 'explode' (known: fail, hang)"),
        ("cancel_events", ("tool:pre",), "cancel_events: unknown 'tool:pre'"),
    ],
)
def test_a_bad_fault_plan_setting_is_a_config_error_naming_it(
    field: str, value: Any, message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        FaultPlan(seed=1, **{field: value})
    assert str(caught.value).startswith(message)
