"""The five invariants of loop-basic (DESIGN §6) as Hypothesis properties.

Each example draws a provider script (0..3 tool rounds of 1..20 calls, then an answer or a
provider error), per-call behaviour (delay, success, exception, error result, hanging past
``tool_timeout``, unknown tool, denied by a ``tool:pre`` hook), the batch settings and one
cancel point of one kind — graceful (awaited or ``nowait``), immediate (awaited or
``nowait``), graceful then immediate, the host's own cancel scope or deadline, or
``turn_timeout`` — and runs the turn. It then runs the same script twice without a cancel,
under two different delay assignments. Every run is checked against invariants 1-4, the
pair against invariant 5.

Each example runs in its own event loop through ``anyio.run``: trio with a fresh
``MockClock(autojump_threshold=0)`` (virtual time, one unit = 1/64 s) and asyncio on the
real clock (one unit = 1/1024 s, fewer examples).
"""

from __future__ import annotations

import heapq
import json
from typing import Any

import anyio
import attrs
import pytest
from hypothesis import Phase, event, given, settings
from hypothesis import strategies as st

from amplifier_anyio.errors import ProviderUnavailableError
from amplifier_anyio.events import (
    CANCEL_REQUESTED,
    EXECUTION_END,
    EXECUTION_START,
    ORCHESTRATOR_COMPLETE,
    TOOL_PRE,
)
from amplifier_anyio.kernel.tracing import current_tool_call
from amplifier_anyio.models import ChatResponse, HookResult, TextBlock, ToolCall, ToolResult
from amplifier_anyio.orchestrators import LoopBasicOrchestrator
from amplifier_anyio.providers.scripted import ScriptedProvider
from amplifier_anyio.testing import EventRecorder, MockContextManager, MockCoordinator

UNIT = {"trio": 2**-6, "asyncio": 2**-10}
"""Seconds per drawn time unit: virtual on trio, real (kept short) on asyncio.

Powers of two, so that sums of instants are exact and a cancel can land on the very
instant a tool finishes."""

TIMEOUT_FLOOR = {UNIT["trio"]: 0.0, UNIT["asyncio"]: 0.06}
"""On the real clock a fast call (at most 10 ms) must never come near its timeout."""

MODES = ("ok", "ok", "ok", "raise", "error", "hang")
CANCEL_KINDS = (  # each kind is a test of its own, so every run covers all of them
    "immediate",
    "host_scope",
    "immediate_nowait",
    "escalate",
    "graceful",
    "graceful_nowait",
    "host_deadline",
    "turn_timeout",
    "none",
)
INTERRUPTING = frozenset(
    {"immediate", "immediate_nowait", "escalate", "host_scope", "host_deadline", "turn_timeout"}
)
CANCELLED_OUTPUT_KEYS = ("error", "cancelled", "tool")


# -- scenarios -------------------------------------------------------------------------------


@attrs.frozen
class Call:
    """One scripted tool call and how the test tool behaves for it."""

    id: str
    name: str  # "probe", or "missing" for a tool that is not mounted
    mode: str
    delay: int  # units; a second assignment is drawn for invariant 5
    other_delay: int
    denied: bool

    @property
    def arguments(self) -> dict[str, Any]:
        return {"id": self.id, "mode": self.mode}


@attrs.frozen
class Scenario:
    """One drawn turn: script, settings, cancel point."""

    rounds: tuple[tuple[Call, ...], ...]
    provider_error: bool
    latencies: tuple[int, ...]
    max_iterations: int
    parallel: bool
    max_parallel: int | None
    tool_timeout: int | None  # units; a timeout is never equal to a delay
    cancel: str
    cancel_at: float  # units
    escalate_after: int

    def timeout_s(self, unit: float) -> float | None:
        """The tool timeout in seconds: on the real clock, far above every delay."""
        if self.tool_timeout is None:
            return None
        return max((self.tool_timeout + 0.5) * unit, TIMEOUT_FLOOR[unit])

    @property
    def calls(self) -> dict[str, Call]:
        return {c.id: c for batch in self.rounds for c in batch}


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    """A turn to run; the cancel point may fall anywhere, also after the turn ended."""
    tool_timeout = draw(st.none() | st.integers(min_value=12, max_value=30))
    modes = MODES if tool_timeout is not None else MODES[:-1]  # a hang needs a timeout
    n_rounds = draw(st.integers(min_value=0, max_value=3))
    rounds = []
    for r in range(n_rounds):
        size = draw(st.integers(min_value=1, max_value=20))
        calls = []
        for i in range(size):
            delay = draw(st.integers(min_value=0, max_value=10))
            calls.append(
                Call(
                    id=f"call_{r}_{i}",
                    name=draw(st.sampled_from(("probe",) * 12 + ("missing",))),
                    mode=draw(st.sampled_from(modes)),
                    delay=delay,
                    other_delay=draw(st.integers(min_value=0, max_value=10)),
                    denied=draw(st.integers(min_value=0, max_value=9)) == 0,
                )
            )
        rounds.append(tuple(calls))
    latencies = tuple(draw(st.lists(st.integers(0, 5), min_size=1, max_size=6)))
    parallel = draw(st.booleans() | st.just(True))
    max_parallel = draw(st.none() | st.integers(min_value=1, max_value=5))
    # A cancel landing on the very instant a call of the first round finishes probes the
    # gap between a tool returning and its result being recorded.
    ends = first_round_ends(
        rounds[0] if rounds else (),
        start=latencies[0],
        slots=max_parallel or 20 if parallel else 1,
        timeout=tool_timeout,
    )
    finish_instants = st.sampled_from(ends or [0])
    on_instant = draw(st.integers(min_value=0, max_value=3)) > 0
    return Scenario(
        rounds=tuple(rounds),
        provider_error=draw(st.integers(min_value=0, max_value=7)) == 0,
        latencies=latencies,
        max_iterations=draw(st.sampled_from((-1, -1, -1, 1, 2))),
        parallel=parallel,
        max_parallel=max_parallel,
        tool_timeout=tool_timeout,
        cancel="none",  # set by each test
        cancel_at=draw(finish_instants if on_instant else st.integers(min_value=0, max_value=80)),
        escalate_after=draw(st.integers(min_value=0, max_value=20)),
    )


def first_round_ends(
    calls: tuple[Call, ...], *, start: int, slots: int, timeout: int | None
) -> list[float]:
    """When each call of a round ends (in units), calls taking limiter slots in call order."""
    free = [float(start)] * slots  # a heap of the instants each slot is free again
    ends = set()
    for call in calls:
        took: float = call.delay
        if call.denied or call.name == "missing":
            took = 0
        elif call.mode == "hang":
            took = (timeout or 0) + 0.5
        end = heapq.heappop(free) + took
        heapq.heappush(free, end)
        ends.add(end)
    return sorted(ends)


def script_of(scenario: Scenario) -> list[ChatResponse | BaseException]:
    """The provider script: the rounds, then the answer (or an error), then a wrap-up."""
    script: list[ChatResponse | BaseException] = [
        ChatResponse(
            content=[TextBlock(text=f"round {r}")],
            tool_calls=[ToolCall(id=c.id, name=c.name, arguments=c.arguments) for c in batch],
        )
        for r, batch in enumerate(scenario.rounds)
    ]
    if scenario.provider_error:
        script.append(ProviderUnavailableError("overloaded", status_code=503, retryable=True))
    else:
        script.append(ChatResponse(content=[TextBlock(text="the answer")]))
    script.append(ChatResponse(content=[TextBlock(text="wrapped up")]))
    return script


# -- the test tool ---------------------------------------------------------------------------


class ProbeTool:
    """Behaves as each call's plan says and records what happened to every call."""

    name = "probe"
    description = "A tool that records its life."

    def __init__(self, delays: dict[str, int], unit: float) -> None:
        self.input_schema: dict[str, Any] = {"type": "object"}
        self.delays = delays
        self.unit = unit
        self.entered: list[str] = []
        self.exited: set[str] = set()
        self.finished: set[str] = set()
        self.interrupted: set[str] = set()
        self.inputs: dict[str, dict[str, Any]] = {}
        self.in_flight = 0
        self.max_in_flight = 0

    @property
    def running(self) -> set[str]:
        return set(self.entered) - self.exited

    async def execute(self, tool_input: dict[str, Any]) -> ToolResult:
        call = current_tool_call()
        assert call is not None
        cid = call.tool_call_id
        self.entered.append(cid)
        self.inputs[cid] = tool_input
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if tool_input["mode"] == "hang":
                await anyio.sleep_forever()
            await anyio.sleep(self.delays[cid] * self.unit)
        except anyio.get_cancelled_exc_class():
            self.interrupted.add(cid)
            raise
        finally:
            self.in_flight -= 1
            self.exited.add(cid)
        # From here on no checkpoint: the call has finished.
        self.finished.add(cid)
        if tool_input["mode"] == "raise":
            raise RuntimeError(f"{cid} failed")
        if tool_input["mode"] == "error":
            return ToolResult(success=False, error={"message": f"{cid} refused"})
        return ToolResult(output={"call": cid, "echo": tool_input})


# -- one run ---------------------------------------------------------------------------------


@attrs.define
class Run:
    """What one run produced, for the checks."""

    scenario: Scenario
    cancel: str
    unit: float
    status: str | None  # None: run_turn raised (the host's cancellation)
    result_trace_id: str | None
    messages: list[dict[str, Any]]
    events: list[tuple[str, dict[str, Any]]]
    probe: ProbeTool
    running_after: set[str]
    token_running_after: set[str]
    requests: int


async def run_once(scenario: Scenario, cancel: str, delays: dict[str, int], unit: float) -> Run:
    """Run the scenario's turn with the given cancel kind and delay assignment."""
    coordinator = MockCoordinator()
    recorder = EventRecorder()
    recorder.attach(coordinator.hooks)
    denied = {c.id for c in scenario.calls.values() if c.denied}

    async def deny(event: str, data: dict[str, Any]) -> HookResult | None:
        await anyio.lowlevel.checkpoint()  # a hook that awaits widens every window
        if data["tool_call_id"] in denied:
            return HookResult(action="deny", reason=f"no {data['tool_call_id']}")
        return None

    coordinator.hooks.register(TOOL_PRE, deny, name="deny-some")
    probe = ProbeTool(delays, unit)
    context = MockContextManager()
    provider = ScriptedProvider(script_of(scenario), latency=[t * unit for t in scenario.latencies])
    config: dict[str, Any] = {
        "max_iterations": scenario.max_iterations,
        "parallel_tools": scenario.parallel,
        "max_parallel_tools": scenario.max_parallel,
        "tool_timeout": scenario.timeout_s(unit),
    }
    at = scenario.cancel_at * unit
    if cancel == "turn_timeout":
        config["turn_timeout"] = at + 0.5 * unit  # never 0, never on a drawn instant
    orchestrator = LoopBasicOrchestrator(config)
    host = anyio.CancelScope()
    if cancel == "host_deadline":
        host = anyio.move_on_after(at)

    async def canceller() -> None:
        await anyio.sleep(at)
        if cancel == "graceful":
            await coordinator.request_cancel()
        elif cancel == "graceful_nowait":
            coordinator.request_cancel_nowait()
        elif cancel == "immediate":
            await coordinator.request_cancel(immediate=True)
        elif cancel == "immediate_nowait":
            coordinator.request_cancel_nowait(immediate=True)
        elif cancel == "escalate":
            await coordinator.request_cancel()
            await anyio.sleep(scenario.escalate_after * unit)
            await coordinator.request_cancel(immediate=True)
        elif cancel == "host_scope":
            host.cancel()

    status = trace_id = None
    async with anyio.create_task_group() as tg:
        if cancel not in ("none", "turn_timeout", "host_deadline"):
            tg.start_soon(canceller)
        try:
            with host:
                result = await orchestrator.run_turn(
                    "go",
                    context,
                    {"scripted": provider},
                    {"probe": probe},
                    coordinator.hooks,
                    coordinator=coordinator,
                )
                status, trace_id = str(result.status), result.trace_id
        finally:
            # Invariant 4 is about the moment run_turn returns or raises.
            running_after = probe.running
            token_running_after = coordinator.cancellation.running_tools
            tg.cancel_scope.cancel()
    return Run(
        scenario=scenario,
        cancel=cancel,
        unit=unit,
        status=status,
        result_trace_id=trace_id,
        messages=context.messages,
        events=recorder.events,
        probe=probe,
        running_after=running_after,
        token_running_after=token_running_after,
        requests=len(provider.requests),
    )


# -- the invariants --------------------------------------------------------------------------


def is_cancelled_content(content: Any) -> bool:
    try:
        value = json.loads(content)
    except (TypeError, ValueError):
        return False
    return isinstance(value, dict) and value.get("cancelled") is True


def real_content(call: Call, run: Run) -> str:
    """The content a call that finished must have in the context."""
    if call.denied:
        return f"Denied by hook: no {call.id}"
    if call.name == "missing":
        return "Error: Tool 'missing' not found"
    if call.mode == "raise":
        return f"Error: {call.id} failed"
    if call.mode == "error":
        return f"Error: {call.id} refused"
    return json.dumps({"call": call.id, "echo": call.arguments})


def check_terminal_events(run: Run) -> None:
    """1. one orchestrator:complete and one execution:end, last; one trace id."""
    names = [name for name, _ in run.events]
    assert names.count(ORCHESTRATOR_COMPLETE) == 1, names
    assert names.count(EXECUTION_END) == 1, names
    assert names.count(EXECUTION_START) == 1, names
    assert names[-2:] == [ORCHESTRATOR_COMPLETE, EXECUTION_END], names
    complete = run.events[-2][1]
    expected = run.status if run.status is not None else "cancelled"
    assert complete["status"] == expected
    assert complete["turn_count"] == run.requests
    start = names.index(EXECUTION_START)
    trace_ids = {
        data.get("trace_id") for name, data in run.events[start:] if name != CANCEL_REQUESTED
    }
    assert len(trace_ids) == 1
    assert None not in trace_ids
    if run.result_trace_id is not None:
        assert trace_ids == {run.result_trace_id}


def check_pairing(run: Run) -> list[tuple[ToolCall | dict[str, Any], dict[str, Any]]]:
    """2. every assistant tool call answered once, right after it, in call order."""
    messages = run.messages
    pairs = []
    answered = [m["tool_call_id"] for m in messages if m["role"] == "tool"]
    assert len(answered) == len(set(answered))
    for index, message in enumerate(messages):
        calls = message.get("tool_calls") or []
        if message["role"] != "assistant" or not calls:
            continue
        results = messages[index + 1 : index + 1 + len(calls)]
        assert [m["role"] for m in results] == ["tool"] * len(calls)
        assert [m["tool_call_id"] for m in results] == [c["id"] for c in calls]
        pairs.extend(zip(calls, results, strict=True))
    assert len(pairs) == len(answered)
    return pairs


def check_results(run: Run, pairs: list[Any]) -> None:
    """3. finished calls keep their real result; only unfinished ones are cancelled."""
    scenario, probe = run.scenario, run.probe
    timeout = scenario.timeout_s(run.unit)
    timed_out = f"Error: timed out after {timeout} s"
    cancelled_any = False
    for call_dict, message in pairs:
        call = scenario.calls[call_dict["id"]]
        content = message["content"]
        if is_cancelled_content(content):
            cancelled_any = True
            assert json.loads(content) == {
                "error": "Tool execution was cancelled",
                "cancelled": True,
                "tool": call.name,
            }
        if call.id in probe.finished:
            assert content == real_content(call, run), (call, content)
            assert probe.inputs[call.id] == call.arguments
        elif call.id in probe.interrupted and call.mode == "hang":
            assert content == timed_out or is_cancelled_content(content), (call, content)
            if run.cancel not in INTERRUPTING:
                assert content == timed_out, (call, content)
        elif call.id in probe.interrupted or (call.name == "probe" and not call.denied):
            assert is_cancelled_content(content), (call, content)
        else:  # denied or unknown: no tool ran; answered at once unless cancelled first
            assert content == real_content(call, run) or is_cancelled_content(content)
    if cancelled_any:
        assert run.cancel in INTERRUPTING
        assert run.status in (None, "cancelled")


def check_nothing_running(run: Run) -> None:
    """4. when run_turn returns or raises, no tool of the turn is still running."""
    assert run.running_after == set()
    assert set(run.probe.entered) == run.probe.exited
    assert run.probe.finished.isdisjoint(run.probe.interrupted)
    assert run.token_running_after == set()


def check_status(run: Run) -> None:
    """How the run ended agrees with how it was cancelled."""
    scenario = run.scenario
    if not scenario.parallel:
        assert run.probe.max_in_flight <= 1
    elif scenario.max_parallel is not None:
        assert run.probe.max_in_flight <= scenario.max_parallel
    if run.cancel == "none":
        assert run.status in ("success", "incomplete", "error")
        assert CANCEL_REQUESTED not in [name for name, _ in run.events]
    if run.status is None:
        assert run.cancel in ("host_scope", "host_deadline")
    elif run.status == "error":
        assert scenario.provider_error
    elif run.status == "cancelled":
        assert run.cancel != "none"
    if run.cancel.startswith("host") and run.status is not None:
        assert run.status != "cancelled"  # a host cancel is never turned into a return


def check_run(run: Run) -> None:
    check_terminal_events(run)
    check_results(run, check_pairing(run))
    check_nothing_running(run)
    check_status(run)


async def check_scenario(scenario: Scenario, backend: str) -> None:
    unit = UNIT[backend]
    delays = {c.id: c.delay for c in scenario.calls.values()}
    other = {c.id: c.other_delay for c in scenario.calls.values()}
    run = await run_once(scenario, scenario.cancel, delays, unit)
    check_run(run)
    first = run if scenario.cancel == "none" else await run_once(scenario, "none", delays, unit)
    second = await run_once(scenario, "none", other, unit)
    check_run(first)
    check_run(second)
    # 5. the context does not depend on tool timing.
    assert first.messages == second.messages
    assert first.status == second.status


def on_finish_instant(cancel: str) -> Scenario:
    """Eight calls that all finish at unit 1, cancelled at that very instant."""
    calls = tuple(
        Call(id=f"call_0_{i}", name="probe", mode="ok", delay=1, other_delay=i, denied=False)
        for i in range(8)
    )
    return Scenario(
        rounds=(calls,),
        provider_error=False,
        latencies=(0,),
        max_iterations=-1,
        parallel=True,
        max_parallel=None,
        tool_timeout=None,
        cancel=cancel,
        cancel_at=1,
        escalate_after=0,
    )


def run_example(scenario: Scenario, backend: str) -> None:
    """One example in a fresh event loop (trio: a fresh virtual clock)."""
    options: dict[str, Any] = {}
    if backend == "trio":
        from trio.testing import MockClock  # noqa: PLC0415 - test extra, trio leg only

        options["clock"] = MockClock(autojump_threshold=0)
    anyio.run(check_scenario, scenario, backend, backend=backend, backend_options=options)


@pytest.mark.parametrize("cancel", CANCEL_KINDS)
@settings(max_examples=10, deadline=None)
@given(scenario=scenarios())
def test_five_invariants_on_virtual_time(cancel: str, scenario: Scenario) -> None:
    event(f"tool calls: {sum(len(batch) for batch in scenario.rounds)}")
    run_example(attrs.evolve(scenario, cancel=cancel), "trio")


@pytest.mark.parametrize("cancel", CANCEL_KINDS)
# Real time makes a failure flaky: report it as found rather than shrink it for minutes.
@settings(max_examples=3, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate])
@given(scenario=scenarios())
def test_five_invariants_on_the_real_clock(cancel: str, scenario: Scenario) -> None:
    event(f"tool calls: {sum(len(batch) for batch in scenario.rounds)}")
    run_example(attrs.evolve(scenario, cancel=cancel), "asyncio")


@pytest.mark.parametrize("backend", ["trio", "asyncio"])
@pytest.mark.parametrize("cancel", ["immediate", "immediate_nowait", "host_scope"])
def test_a_cancel_on_the_instant_tools_finish_keeps_their_results(
    backend: str, cancel: str
) -> None:
    # Ties are broken differently from run to run: a few runs cover both orders.
    for _ in range(5):
        run_example(on_finish_instant(cancel), backend)
