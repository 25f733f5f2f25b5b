"""The lifecycle orchestrator protocol as Hypothesis properties.

(a) For random plans (DAGs of up to 30 steps), random worker behaviour (success after a
    delay, a recoverable failure k times then success, a permanent failure, a hang cut by
    the step timeout), every error strategy and a random cancel point — none,
    ``cancel()`` at the k-th event or at a drawn time, the ``timeout=`` of
    ``orchestrate``, a consumer that leaves after the k-th event, the host's own cancel
    scope at a drawn time — the run keeps the protocol:

    * the stages match ``initialize plan (route+ execute+)* aggregate? terminal``
      (cut short after initialize or plan only by a terminal stage), with exactly one
      terminal stage and nothing after it; a consumer that leaves early or a host cancel
      sees a prefix of that without a terminal;
    * the lifecycle's teardown ran exactly once, whatever the ending;
    * every event carries the caller's trace id and profile;
    * no step started before each of its dependencies had succeeded;
    * a step made at most ``max_attempts`` attempts under RETRY, at most two (its target
      and the fallback) under FALLBACK, one otherwise;
    * no failed step is ever reported as a success: each step in the output returned from
      its worker, COMPLETE's ``success`` is true exactly when nothing failed or was
      skipped, and CONTINUE completes with the failed steps listed;
    * an OrchestrationError is raised exactly when FAIL_FAST ended FAILED.

    Each example runs in its own event loop: trio on a fresh ``MockClock`` (virtual
    time, one unit = 1 s) and asyncio on the real clock (one unit = 0.5 ms). In the ci
    profile each (backend, strategy) pair runs 125 examples: 500 per backend.
(b) ``make_routing_decision`` is a pure function: the same inputs give equal decisions
    across instances, in any order of the agents, after any other calls.
(c) ``ExecutionContext``: ``from_dict(to_dict(c)) == c`` for generated nested contexts,
    with equal hashes; every mutation attempt on ``metadata``, nested too, raises.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import re
from collections.abc import Mapping
from typing import Any

import anyio
import attrs
import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from amplifier_anyio.lifecycle import (
    BasicLifecycle,
    ErrorPropagation,
    ExecutionContext,
    LifecycleStage,
    OrchestrationError,
    ReferenceOrchestrator,
    RetryPolicy,
    Step,
)
from tiers import examples

PER_STRATEGY = examples(125)
UNIT = {"trio": 1.0, "asyncio": 0.0005}
STEP_TIMEOUT = 40  # units: a hang ends as a TimeoutError of its step
WORKERS = ("alpha", "beta")
CANCEL_KINDS = ("none", "cancel_event", "cancel_time", "timeout", "aclose_event", "host_time")

# -- (a) the orchestration property ----------------------------------------------------------


@attrs.frozen
class Behaviour:
    kind: str  # ok, flaky, fail, hang
    delay: int = 0  # units
    failures: int = 0  # flaky: how many attempts fail first


@attrs.frozen
class Scenario:
    steps: tuple[Step, ...]
    behaviour: Mapping[str, Behaviour]
    strategy: ErrorPropagation
    max_attempts: int
    jitter: float
    max_parallel: int | None
    cancel: str
    at: int  # the event index or the time (units) of the cancel point


behaviours = st.one_of(
    st.builds(Behaviour, st.just("ok"), st.integers(0, 3)),
    st.builds(Behaviour, st.just("flaky"), st.integers(0, 3), st.integers(1, 3)),
    st.builds(Behaviour, st.just("fail"), st.integers(0, 3)),
    st.builds(Behaviour, st.just("hang")),
)


@st.composite
def scenarios(draw: st.DrawFn, strategy: ErrorPropagation) -> Scenario:
    count = draw(st.integers(1, 30), label="steps")
    steps = []
    for n in range(count):
        earlier = [f"s{m}" for m in range(max(0, n - 6), n)]
        deps = draw(st.lists(st.sampled_from(earlier), max_size=3, unique=True)) if earlier else []
        target = draw(st.sampled_from((*WORKERS, None)))
        steps.append(Step(f"s{n}", f"task {n}", {"n": n}, deps, target=target))
    weights = st.sampled_from(["ok", "ok", "ok", "mixed"])
    mostly_ok = draw(weights) == "ok"
    behaviour = {
        step.id: (Behaviour("ok", draw(st.integers(0, 3))) if mostly_ok else draw(behaviours))
        for step in steps
    }
    cancel = draw(st.sampled_from(CANCEL_KINDS), label="cancel")
    at = draw(st.integers(1, 4 * count + 6) if cancel.endswith("event") else st.integers(0, 60))
    return Scenario(
        steps=tuple(steps),
        behaviour=behaviour,
        strategy=strategy,
        max_attempts=draw(st.integers(1, 4)),
        jitter=draw(st.sampled_from([0.0, 0.25, 0.5])),
        max_parallel=draw(st.one_of(st.none(), st.integers(1, 4))),
        cancel=cancel,
        at=at,
    )


@attrs.define
class Observed:
    events: list[dict[str, Any]] = attrs.field(factory=list)
    log: list[tuple[str, str, str]] = attrs.field(factory=list)  # (what, step, worker)
    raised: BaseException | None = None
    lifecycle: BasicLifecycle = attrs.field(factory=BasicLifecycle)
    attempts: dict[str, int] = attrs.field(factory=dict)


def worker(name: str, scenario: Scenario, seen: Observed, unit: float) -> Any:
    async def work(step: Step, context: ExecutionContext) -> str:
        b = scenario.behaviour[step.id]
        seen.attempts[step.id] = attempt = seen.attempts.get(step.id, 0) + 1
        seen.log.append(("start", step.id, name))
        if b.kind == "hang":
            await anyio.sleep_forever()
        await anyio.sleep(b.delay * unit)
        if b.kind == "fail" or (b.kind == "flaky" and attempt <= b.failures):
            seen.log.append(("error", step.id, name))
            msg = f"{step.id} failed on attempt {attempt}"
            raise ConnectionError(msg)
        seen.log.append(("ok", step.id, name))
        return f"{step.id}@{name}"

    return work


async def play(scenario: Scenario, unit: float) -> Observed:
    seen = Observed()
    steps = list(scenario.steps)

    async def planner(goal: str, context: ExecutionContext) -> list[Step]:
        await anyio.lowlevel.checkpoint()
        return steps

    orchestrator = ReferenceOrchestrator(
        {name: worker(name, scenario, seen, unit) for name in WORKERS},
        planner=planner,
        lifecycle=seen.lifecycle,
        max_parallel=scenario.max_parallel,
        step_timeout=STEP_TIMEOUT * unit,
        retry=RetryPolicy(
            max_attempts=scenario.max_attempts,
            base_delay=0.5 * unit,
            max_delay=4 * unit,
            jitter=scenario.jitter,
        ),
    )
    context = ExecutionContext(trace_id="trace-p", profile="prop")
    timeout = scenario.at * unit if scenario.cancel == "timeout" else None

    async def consume() -> None:
        stream = orchestrator.orchestrate(
            "goal", context, error_strategy=scenario.strategy, timeout=timeout
        )
        async with contextlib.aclosing(stream) as events:
            async for event in events:
                seen.events.append(event)
                if len(seen.events) == scenario.at and scenario.cancel == "cancel_event":
                    orchestrator.cancel()
                if len(seen.events) == scenario.at and scenario.cancel == "aclose_event":
                    break

    async def cancel_later() -> None:
        await anyio.sleep(scenario.at * unit)
        orchestrator.cancel()

    async with anyio.create_task_group() as tg:
        if scenario.cancel == "cancel_time":
            tg.start_soon(cancel_later)
        try:
            if scenario.cancel == "host_time":
                with anyio.move_on_after(scenario.at * unit):
                    await consume()
            else:
                await consume()
        except OrchestrationError as exc:
            seen.raised = exc
        tg.cancel_scope.cancel()
    return seen


# Over the stages, each followed by one space.
FULL = re.compile(
    r"initialize plan ((route )+(execute )+)*(aggregate )?(complete|failed|cancelled) "
    r"|(initialize (plan )?)?(failed|cancelled) "
)
PREFIX = re.compile(
    r"(initialize (plan ((route )+(execute )+)*((route )+(execute )*)?(aggregate )?)?)?"
)


def check(scenario: Scenario, seen: Observed, backend: str) -> None:
    stages = [e["stage"] for e in seen.events]
    text = "".join(f"{s} " for s in stages)
    terminal = [s for s in stages if s.is_terminal]
    cut_short = scenario.cancel in ("aclose_event", "host_time") and not terminal
    if cut_short:
        assert PREFIX.fullmatch(text), text
    else:
        assert FULL.fullmatch(text), text
        assert terminal == [stages[-1]]
    # Teardown once, on every path.
    assert seen.lifecycle.initialized <= 1
    assert seen.lifecycle.torn_down == 1
    # The caller's trace id and profile on every event.
    for event in seen.events:
        assert event["context"].trace_id == "trace-p"
        assert event["context"].profile == "prop"
    # Dependencies first.
    deps = {step.id: step.depends_on for step in scenario.steps}
    succeeded: set[str] = set()
    for what, sid, _ in seen.log:
        if what == "start":
            assert set(deps[sid]) <= succeeded, (sid, deps[sid], succeeded)
        elif what == "ok":
            succeeded.add(sid)
    # Attempts.
    limit = {
        ErrorPropagation.RETRY: scenario.max_attempts,
        ErrorPropagation.FALLBACK: 2,
    }.get(scenario.strategy, 1)
    assert all(n <= limit for n in seen.attempts.values()), seen.attempts
    # Honest outcomes.
    ok = {(sid, name) for what, sid, name in seen.log if what == "ok"}
    for event in seen.events:
        if event["stage"] is LifecycleStage.EXECUTE and event["data"]["status"] == "succeeded":
            data = event["data"]
            assert (data["step"].id, data["target"]) in ok
            assert data["result"] == f"{data['step'].id}@{data['target']}"
    if terminal:
        data = seen.events[-1]["data"]
        for sid, result in data["output"].items() if isinstance(data["output"], dict) else ():
            assert result.split("@")[0] == sid
            assert (sid, result.split("@")[1]) in ok
        assert not set(data["failed_steps"]) & set(data["output"])
        if terminal[0] is LifecycleStage.COMPLETE:
            assert data["success"] == (not data["failed_steps"] and not data["skipped_steps"])
            if scenario.strategy is not ErrorPropagation.CONTINUE:
                assert not data["failed_steps"]
    # FAIL_FAST raises exactly when it ended FAILED.
    fail_fast_failed = (
        scenario.strategy is ErrorPropagation.FAIL_FAST
        and bool(terminal)
        and terminal[0] is LifecycleStage.FAILED
        and scenario.cancel != "aclose_event"
    )
    if scenario.cancel != "aclose_event":
        assert (seen.raised is not None) == fail_fast_failed
    # With nothing to go wrong, everything succeeds.
    quiet = all(b.kind == "ok" for b in scenario.behaviour.values()) and scenario.cancel == "none"
    if quiet and backend == "trio":  # on the real clock a loaded machine may time a step out
        assert stages[-1] is LifecycleStage.COMPLETE
        assert seen.events[-1]["data"]["success"] is True
        assert len(seen.events[-1]["data"]["output"]) == len(scenario.steps)


def run_example(scenario: Scenario, backend: str) -> None:
    options: dict[str, Any] = {}
    if backend == "trio":
        from trio.testing import MockClock  # noqa: PLC0415 - test extra, trio leg only

        options["clock"] = MockClock(autojump_threshold=0)
    seen = anyio.run(play, scenario, UNIT[backend], backend=backend, backend_options=options)
    check(scenario, seen, backend)


@pytest.mark.parametrize("strategy", list(ErrorPropagation))
@settings(max_examples=PER_STRATEGY, deadline=None)
@given(data=st.data())
def test_the_protocol_holds_on_virtual_time(
    strategy: ErrorPropagation, data: st.DataObject
) -> None:
    run_example(data.draw(scenarios(strategy), label="scenario"), "trio")


@pytest.mark.parametrize("strategy", list(ErrorPropagation))
# Real time makes a failure flaky: report it as found rather than shrink it for minutes.
@settings(
    max_examples=PER_STRATEGY,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
)
@given(data=st.data())
def test_the_protocol_holds_on_the_real_clock(
    strategy: ErrorPropagation, data: st.DataObject
) -> None:
    run_example(data.draw(scenarios(strategy), label="scenario"), "asyncio")


# -- (b) routing is a pure function ----------------------------------------------------------

names = st.from_regex(r"[a-z]{1,6}(_[a-z]{1,6})?", fullmatch=True)
tasks = st.lists(st.sampled_from(["search", "web", "rag", "query", "sum", "the", "x"]) | names).map(
    " ".join
)
contexts_flat = st.builds(ExecutionContext, trace_id=names, profile=names)


@given(
    task=tasks,
    agents=st.lists(names, min_size=1, max_size=6, unique=True),
    context=contexts_flat,
    noise=st.lists(st.tuples(tasks, st.lists(names, min_size=1, max_size=4))),
    seed=st.randoms(),
    target=st.none() | names,
)
def test_routing_is_a_pure_function(
    task: str,
    agents: list[str],
    context: ExecutionContext,
    noise: list[tuple[str, list[str]]],
    seed: Any,
    target: str | None,
) -> None:
    first = ReferenceOrchestrator({})
    second = ReferenceOrchestrator({})
    before = first.make_routing_decision(task, context, agents, target=target)
    for other_task, other_agents in noise:
        first.make_routing_decision(other_task, context, other_agents)
    shuffled = list(agents)
    seed.shuffle(shuffled)

    after = first.make_routing_decision(task, context, agents, target=target)
    elsewhere = second.make_routing_decision(task, context, shuffled, target=target)

    assert before == after == elsewhere
    assert before.target in agents
    assert before.fallback is None or (
        before.fallback in agents and before.fallback != before.target
    )
    if target in agents:
        assert before.target == target


# -- (c) ExecutionContext round trip, hashing, read-only metadata ----------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=12,
)
times = st.datetimes(
    min_value=dt.datetime(2000, 1, 1),
    timezones=st.sampled_from([dt.UTC, dt.timezone(dt.timedelta(hours=5, minutes=30))]),
)


@st.composite
def contexts(draw: st.DrawFn, depth: int = 3) -> ExecutionContext:
    parent = draw(st.none() | contexts(depth - 1)) if depth > 0 else None
    text = st.text(max_size=6)
    return ExecutionContext(
        trace_id=parent.trace_id if parent is not None else draw(st.text(min_size=1, max_size=8)),
        request_id=draw(text),
        profile=draw(text),
        user_intent=draw(text),
        user_id=draw(text),
        memory_scope=draw(text),
        conversation_id=draw(text),
        session_id=draw(text),
        metadata=draw(st.dictionaries(st.text(max_size=4), json_values, max_size=4)),
        parent_context=parent,
        created_at=draw(times),
    )


def mutations(value: Any) -> int:
    """Try every way of changing ``value`` and what it holds; each must raise."""
    tried = 0
    if isinstance(value, Mapping):
        attempts = [
            lambda: value.__setitem__("k", 1),
            lambda: value.__delitem__(next(iter(value), "k")),
            lambda: value.update(k=1),
            lambda: value.pop("k"),
            value.clear,
            lambda: value.setdefault("k", 1),
        ]
        children = list(value.values())
    elif isinstance(value, tuple):
        attempts = [lambda: value.__setitem__(0, 1), lambda: value.append(1)]  # type: ignore[attr-defined]
        children = list(value)
    else:
        return 0
    for attempt in attempts:
        with pytest.raises((TypeError, AttributeError)):
            attempt()
        tried += 1
    return tried + sum(mutations(child) for child in children)


@given(context=contexts())
def test_contexts_round_trip_hash_stably_and_refuse_every_mutation(
    context: ExecutionContext,
) -> None:
    data = context.to_dict()
    json.dumps(data)  # plain data all the way down

    again = ExecutionContext.from_dict(data)

    assert again == context
    assert hash(again) == hash(context)
    assert again.depth == context.depth
    layer: ExecutionContext | None = context
    while layer is not None:
        assert mutations(layer.metadata) >= 6
        layer = layer.parent_context
