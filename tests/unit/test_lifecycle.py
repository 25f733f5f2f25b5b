"""The lifecycle orchestrator protocol: the seed's four test families and what CUGA(r)
gets wrong (docs/lifecycle.md has the table), on asyncio and trio.

1. lifecycle compliance — stage order, exactly one terminal stage, nothing after it;
2. trace propagation — every event's context carries the caller's trace id and profile;
3. deterministic routing — the same inputs give an equal decision, whatever came before;
4. error recovery — FAIL_FAST, CONTINUE, RETRY and FALLBACK do what they say.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from typing import Any
from unittest import mock

import anyio
import anyio.lowlevel
import pytest

from amplifier_anyio.errors import AmplifierError, ConfigError, ValidationError
from amplifier_anyio.lifecycle import (
    AgentLifecycle,
    BasicLifecycle,
    ErrorPropagation,
    ExecutionContext,
    FrozenDict,
    LifecycleStage,
    OrchestrationError,
    OrchestratorProtocol,
    ReferenceOrchestrator,
    RetryPolicy,
    RoutingDecision,
    Step,
    route,
)

pytestmark = pytest.mark.anyio

S = LifecycleStage


def ctx(trace_id: str = "trace-1", **fields: Any) -> ExecutionContext:
    return ExecutionContext(trace_id=trace_id, profile="demo", **fields)


class Workers:
    """Workers that record who ran which step; ``fail`` names workers that raise."""

    def __init__(self, *names: str, fail: tuple[str, ...] = ()) -> None:
        self.names = names
        self.fail = set(fail)
        self.ran: list[tuple[str, str]] = []

    def mapping(self) -> dict[str, Any]:
        return {name: self._worker(name) for name in self.names}

    def _worker(self, name: str) -> Any:
        async def work(step: Step, context: ExecutionContext) -> str:
            await anyio.lowlevel.checkpoint()
            self.ran.append((name, step.id))
            if name in self.fail:
                msg = f"{name} is down"
                raise RuntimeError(msg)
            return f"{name}:{step.id}"

        return work


def planner(*steps: Step) -> Any:
    async def plan(goal: str, context: ExecutionContext) -> list[Step]:
        await anyio.lowlevel.checkpoint()
        return list(steps)

    return plan


async def stages_of(orchestrator: ReferenceOrchestrator, **kwargs: Any) -> list[S]:
    async with contextlib.aclosing(orchestrator.orchestrate("goal", ctx(), **kwargs)) as events:
        return [event["stage"] async for event in events]


# -- 1. lifecycle compliance ------------------------------------------------------------------


async def test_the_seed_stage_order_for_one_step() -> None:
    orchestrator = ReferenceOrchestrator(Workers("w").mapping())

    stages = await stages_of(orchestrator)

    assert stages == [S.INITIALIZE, S.PLAN, S.ROUTE, S.EXECUTE, S.AGGREGATE, S.COMPLETE]


async def test_a_wave_routes_every_step_then_reports_each_in_plan_order() -> None:
    steps = (Step("a", "x"), Step("b", "y"), Step("c", "z", depends_on=["a", "b"]))
    orchestrator = ReferenceOrchestrator(Workers("w").mapping(), planner=planner(*steps))

    result = await orchestrator.run("goal", ctx())

    assert result.stages == [
        S.INITIALIZE, S.PLAN, S.ROUTE, S.ROUTE, S.EXECUTE, S.EXECUTE,
        S.ROUTE, S.EXECUTE, S.AGGREGATE, S.COMPLETE,
    ]  # fmt: skip
    executed = [e["data"]["step"].id for e in result.events if e["stage"] is S.EXECUTE]
    assert executed == ["a", "b", "c"]
    assert result.output == {"a": "w:a", "b": "w:b", "c": "w:c"}
    assert result.success
    assert result.metrics.total_steps == result.metrics.successful_steps == 3
    assert result.metrics.routing_decisions == 3


@pytest.mark.parametrize("strategy", list(ErrorPropagation))
async def test_the_terminal_stage_is_last_and_single_and_teardown_runs_once(
    strategy: ErrorPropagation,
) -> None:
    lifecycle = BasicLifecycle()
    orchestrator = ReferenceOrchestrator(
        Workers("w", fail=("w",)).mapping(), lifecycle=lifecycle, retry=RetryPolicy(base_delay=0)
    )

    result = await orchestrator.run("goal", ctx(), error_strategy=strategy)

    terminal = [s for s in result.stages if s.is_terminal]
    assert terminal == [result.stages[-1]]
    assert lifecycle.initialized == lifecycle.torn_down == 1
    assert lifecycle.get_stage() is result.stage


async def test_a_consumer_leaving_early_still_gets_the_teardown() -> None:
    lifecycle = BasicLifecycle()
    orchestrator = ReferenceOrchestrator(Workers("w").mapping(), lifecycle=lifecycle)

    async with contextlib.aclosing(orchestrator.orchestrate("goal", ctx())) as events:
        async for event in events:
            if event["stage"] is S.PLAN:
                break
        assert lifecycle.torn_down == 0

    assert lifecycle.torn_down == 1


async def test_aclose_before_the_end_tears_down_once_and_raises_nothing() -> None:
    lifecycle = BasicLifecycle()
    orchestrator = ReferenceOrchestrator(Workers("w").mapping(), lifecycle=lifecycle)
    events = orchestrator.orchestrate("goal", ctx())

    assert (await events.__anext__())["stage"] is S.INITIALIZE
    await events.aclose()
    await events.aclose()

    assert lifecycle.torn_down == 1


async def test_a_consumer_may_await_and_be_cancelled_between_events() -> None:
    """Nothing is held open across a yield: the consumer's own scopes nest freely."""
    lifecycle = BasicLifecycle()
    orchestrator = ReferenceOrchestrator(Workers("w").mapping(), lifecycle=lifecycle)
    seen = []
    with anyio.CancelScope() as outer:
        async with contextlib.aclosing(orchestrator.orchestrate("goal", ctx())) as events:
            async for event in events:
                seen.append(event["stage"])
                with anyio.move_on_after(0):
                    await anyio.sleep(1)
                if event["stage"] is S.ROUTE:
                    outer.cancel()
                    await anyio.lowlevel.checkpoint()  # the cancel lands here, between two events

    assert outer.cancelled_caught
    assert seen == [S.INITIALIZE, S.PLAN, S.ROUTE]
    assert lifecycle.torn_down == 1


async def test_cancel_ends_with_cancelled_and_reports_the_unfinished_step() -> None:
    started = anyio.Event()

    async def slow(step: Step, context: ExecutionContext) -> str:
        started.set()
        await anyio.sleep_forever()
        raise AssertionError

    lifecycle = BasicLifecycle()
    orchestrator = ReferenceOrchestrator({"slow": slow}, lifecycle=lifecycle)
    result = None

    async def consume() -> None:
        nonlocal result
        result = await orchestrator.run("goal", ctx())

    async with anyio.create_task_group() as tg:
        tg.start_soon(consume)
        await started.wait()
        assert orchestrator.cancel()

    assert result is not None
    assert result.stages == [S.INITIALIZE, S.PLAN, S.ROUTE, S.EXECUTE, S.CANCELLED]
    assert result.events[3]["data"]["status"] == "cancelled"
    assert result.events[-1]["data"]["reason"] == "cancel() was called"
    assert lifecycle.torn_down == 1
    assert not orchestrator.cancel()  # nothing left running


async def test_the_timeout_ends_with_cancelled() -> None:
    async def slow(step: Step, context: ExecutionContext) -> str:
        await anyio.sleep_forever()
        raise AssertionError

    result = await ReferenceOrchestrator({"slow": slow}).run("goal", ctx(), timeout=0.05)

    assert result.stage is S.CANCELLED
    assert "timeout" in result.events[-1]["data"]["reason"]


async def test_a_failing_initialize_fails_and_still_tears_down() -> None:
    class Broken(BasicLifecycle):
        async def initialize(self, context: ExecutionContext) -> None:
            raise OSError("no disk")

    lifecycle = Broken()
    orchestrator = ReferenceOrchestrator(Workers("w").mapping(), lifecycle=lifecycle)

    result = await orchestrator.run("goal", ctx())

    assert result.stages == [S.FAILED]
    assert isinstance(result.error, OrchestrationError)
    assert result.error.stage is S.INITIALIZE
    assert lifecycle.torn_down == 1


@pytest.mark.parametrize(
    ("steps", "problem"),
    [
        ([Step("a", "x"), Step("a", "y")], "duplicate id 'a'"),
        ([Step("a", "x", depends_on=["zz"])], "unknown steps: 'zz'"),
        ([Step("a", "x", depends_on=["b"]), Step("b", "y", depends_on=["a"])], "cycle"),
    ],
)
async def test_an_invalid_plan_fails_at_plan(steps: list[Step], problem: str) -> None:
    orchestrator = ReferenceOrchestrator(Workers("w").mapping(), planner=planner(*steps))

    result = await orchestrator.run("goal", ctx(), error_strategy=ErrorPropagation.CONTINUE)

    assert result.stages == [S.INITIALIZE, S.FAILED]
    assert problem in str(result.error)


def test_the_reference_satisfies_the_protocols() -> None:
    orchestrator = ReferenceOrchestrator(Workers("w").mapping())
    assert isinstance(orchestrator, OrchestratorProtocol)
    assert isinstance(orchestrator.get_lifecycle(), AgentLifecycle)


@pytest.mark.parametrize(
    ("setting", "value"),
    [("max_parallel", 0), ("step_timeout", -1.0), ("teardown_timeout", float("nan"))],
)
def test_bad_settings_are_a_config_error_naming_them(setting: str, value: Any) -> None:
    with pytest.raises(ConfigError, match=f"^{setting}: "):
        ReferenceOrchestrator({}, **{setting: value})


# -- 2. trace propagation --------------------------------------------------------------------


async def test_every_event_carries_the_callers_trace_id_and_profile() -> None:
    steps = (Step("a", "x"), Step("b", "y", depends_on=["a"]))
    seen_by_workers: list[ExecutionContext] = []

    async def worker(step: Step, context: ExecutionContext) -> str:
        await anyio.lowlevel.checkpoint()
        seen_by_workers.append(context)
        return step.id

    orchestrator = ReferenceOrchestrator({"w": worker}, planner=planner(*steps))
    caller = ctx("unique-trace-123")

    async with contextlib.aclosing(orchestrator.orchestrate("goal", caller)) as events:
        async for event in events:
            assert event["context"].trace_id == "unique-trace-123"
            assert event["context"].profile == "demo"

    # Each worker sees a nested context of the caller's, naming its step and attempt.
    assert [c.parent_context for c in seen_by_workers] == [caller, caller]
    assert [c.metadata["step_id"] for c in seen_by_workers] == ["a", "b"]
    assert all(c.metadata["attempt"] == 1 for c in seen_by_workers)
    assert caller.metadata == {}  # the caller's context is never changed


def test_the_context_is_deeply_read_only_and_hashable() -> None:
    context = ctx(metadata={"a": [1, {"b": 2}], "s": {3}})

    with pytest.raises(TypeError):
        context.metadata["a"] = 1
    with pytest.raises(TypeError):
        context.metadata["a"][1]["b"] = 3
    with pytest.raises(TypeError):
        context.metadata.update(x=1)
    with pytest.raises(AttributeError):
        context.metadata["a"].append(3)
    with pytest.raises(AttributeError):
        context.trace_id = "other"  # type: ignore[misc]
    assert hash(context) == hash(ExecutionContext.from_dict(context.to_dict()))
    assert context.metadata == {"a": (1, {"b": 2}), "s": frozenset({3})}
    assert isinstance(context.metadata["a"][1], FrozenDict)


def test_with_methods_keep_the_level_and_child_nests() -> None:
    parent = ctx()
    context = parent.child(request_id="r1")

    assert context.parent_context is parent
    assert context.trace_id == parent.trace_id
    for derived in (
        context.with_metadata(k=1),
        context.with_request_id("r2"),
        context.with_profile("other"),
    ):
        assert derived is not context
        assert derived.parent_context is parent
        assert derived.created_at == context.created_at
    assert context.with_metadata(k=1).metadata == {"k": 1}
    assert context.child().depth == 2


def test_to_dict_and_from_dict_round_trip_with_the_parents() -> None:
    context = ctx(metadata={"n": [1, 2]}).child(user_id="u").child(memory_scope="m")

    data = context.to_dict()

    assert data["parent_context"]["parent_context"]["parent_context"] is None
    assert data["metadata"] == {"n": [1, 2]}
    assert ExecutionContext.from_dict(data) == context
    assert ExecutionContext.from_dict(data).parent_context == context.parent_context


def test_from_dict_errors_name_the_path() -> None:
    data = ctx().child().to_dict()
    del data["parent_context"]["trace_id"]
    with pytest.raises(ValidationError, match=r"parent_context\.trace_id: required"):
        ExecutionContext.from_dict(data)
    with pytest.raises(ValidationError, match="colour: unknown field"):
        ExecutionContext.from_dict({"trace_id": "t", "colour": "red"})


def test_created_at_is_aware_utc_and_naive_times_are_refused() -> None:
    assert ctx().created_at.tzinfo is dt.UTC
    with pytest.raises(ValueError, match="naive"):
        ctx(created_at=dt.datetime(2025, 1, 1))
    with pytest.raises(ValueError, match="trace_id: required"):
        ExecutionContext(trace_id="")


def test_validate_names_inconsistencies() -> None:
    assert ctx().validate() == []
    problems = ctx(memory_scope="m", conversation_id="c").validate()
    assert problems == [
        "memory_scope is set but user_id is empty",
        "conversation_id is set but session_id is empty",
    ]
    stray = ExecutionContext(trace_id="other", parent_context=ctx())
    assert "differs from the parent's" in stray.validate()[0]


def test_orchestration_error_names_the_stage_and_the_trace() -> None:
    cause = RuntimeError("boom")
    error = OrchestrationError(S.EXECUTE, "step failed", context=ctx("t-9"), cause=cause)

    assert isinstance(error, AmplifierError)
    assert str(error) == "execute failed: step failed (trace_id=t-9), caused by RuntimeError: boom"


# -- 3. deterministic routing ----------------------------------------------------------------


def test_the_same_inputs_give_the_same_decision_across_calls_and_instances() -> None:
    agents = ["agent1", "agent2"]
    first = ReferenceOrchestrator(Workers(*agents).mapping())
    second = ReferenceOrchestrator(Workers(*agents).mapping())

    decisions = [
        first.make_routing_decision("task", ctx("abc"), agents),
        first.make_routing_decision("task", ctx("abc"), agents),
        second.make_routing_decision("task", ctx("abc"), list(reversed(agents))),
    ]

    assert decisions[0] == decisions[1] == decisions[2]
    assert decisions[0].fallback is not None
    assert decisions[0].fallback != decisions[0].target
    assert len(decisions[0].reason) > 10


def test_routing_picks_the_best_match_and_explains_it() -> None:
    decision = route("search web for Python docs", ["rag_query", "web_search", "llm_generate"])

    assert decision.target == "web_search"
    assert decision.fallback == "llm_generate"  # tie at 0 with rag_query: name order
    assert "web_search" in decision.reason
    assert "search, web" in decision.reason


def test_an_explicit_target_wins_when_it_exists() -> None:
    assert route("search web", ["web_search", "calc"], target="calc").target == "calc"
    fallback_only = route("search web", ["web_search", "calc"], target="gone")
    assert fallback_only.target == "web_search"
    assert "'gone' is not available" in fallback_only.reason


def test_routing_needs_an_agent_and_a_decision_a_distinct_fallback() -> None:
    with pytest.raises(ValueError, match="no agent"):
        route("task", [])
    with pytest.raises(ValueError, match="fallback"):
        RoutingDecision("a", "because", fallback="a")
    assert route("task", ["only"]).fallback is None


# -- 4. error recovery -----------------------------------------------------------------------


async def test_fail_fast_yields_failed_then_tears_down_then_raises() -> None:
    lifecycle = BasicLifecycle()
    workers = Workers("w", fail=("w",))
    orchestrator = ReferenceOrchestrator(workers.mapping(), lifecycle=lifecycle)
    stages = []

    async def consume() -> None:
        async with contextlib.aclosing(orchestrator.orchestrate("goal", ctx("ff"))) as events:
            async for event in events:
                stages.append(event["stage"])
                if event["stage"] is S.FAILED:
                    assert lifecycle.torn_down == 0  # FAILED comes before the teardown

    with pytest.raises(OrchestrationError) as raised:
        await consume()

    assert stages == [S.INITIALIZE, S.PLAN, S.ROUTE, S.EXECUTE, S.FAILED]
    assert lifecycle.torn_down == 1
    error = raised.value
    assert error.stage is S.EXECUTE
    assert error.context.trace_id == "ff"
    assert isinstance(error.cause, RuntimeError)
    assert error.__cause__ is error.cause
    assert workers.ran == [("w", "step-1")]  # no retry, no fallback


async def test_fail_fast_cancels_the_rest_of_the_wave() -> None:
    async def hang(step: Step, context: ExecutionContext) -> str:
        await anyio.sleep_forever()
        raise AssertionError

    async def boom(step: Step, context: ExecutionContext) -> str:
        await anyio.lowlevel.checkpoint()
        raise RuntimeError("boom")

    steps = (Step("a", "x", target="hang"), Step("b", "y", target="boom"))
    orchestrator = ReferenceOrchestrator({"hang": hang, "boom": boom}, planner=planner(*steps))

    result = await orchestrator.run("goal", ctx())

    assert result.stage is S.FAILED
    statuses = [e["data"]["status"] for e in result.events if e["stage"] is S.EXECUTE]
    assert statuses == ["cancelled", "failed"]
    assert result.failed_steps == ("b",)


async def test_continue_records_the_failure_and_never_calls_it_a_success() -> None:
    steps = (
        Step("a", "x", target="bad"),
        Step("b", "y", target="good"),
        Step("c", "z", target="good", depends_on=["a"]),
    )
    orchestrator = ReferenceOrchestrator(
        Workers("good", "bad", fail=("bad",)).mapping(), planner=planner(*steps)
    )

    result = await orchestrator.run("goal", ctx(), error_strategy=ErrorPropagation.CONTINUE)

    assert result.stage is S.COMPLETE
    complete = result.events[-1]["data"]
    assert complete["success"] is False
    assert result.failed_steps == ("a",)
    assert result.skipped_steps == ("c",)
    assert result.output == {"b": "good:b"}
    assert not result.success
    assert result.metrics.failed_steps == 1
    assert result.metrics.successful_steps == 1


async def test_retry_makes_exactly_max_attempts_attempts() -> None:
    attempts = 0

    async def flaky(step: Step, context: ExecutionContext) -> str:
        nonlocal attempts
        await anyio.lowlevel.checkpoint()
        attempts += 1
        assert context.metadata["attempt"] == attempts
        raise ConnectionError("flaky")

    orchestrator = ReferenceOrchestrator(
        {"flaky": flaky}, retry=RetryPolicy(max_attempts=4, base_delay=0.001)
    )

    result = await orchestrator.run("goal", ctx(), error_strategy=ErrorPropagation.RETRY)

    assert attempts == 4
    assert result.stage is S.FAILED
    assert result.metrics.retries == 3
    assert result.events[-1]["data"]["attempts"] == 4


async def test_retry_recovers_and_a_non_recoverable_error_is_not_retried() -> None:
    calls: list[str] = []

    async def worker(step: Step, context: ExecutionContext) -> str:
        await anyio.lowlevel.checkpoint()
        calls.append(step.id)
        if step.id == "a" and calls.count("a") == 1:
            raise ConnectionError("once")
        if step.id == "b":
            raise OrchestrationError(S.EXECUTE, "bad input", context=context)
        return "ok"

    steps = (Step("a", "x"), Step("b", "y", depends_on=["a"]))
    orchestrator = ReferenceOrchestrator(
        {"w": worker}, planner=planner(*steps), retry=RetryPolicy(base_delay=0.001)
    )

    result = await orchestrator.run("goal", ctx(), error_strategy=ErrorPropagation.RETRY)

    assert calls.count("a") == 2
    assert calls.count("b") == 1
    assert result.stage is S.FAILED
    assert result.failed_steps == ("b",)


async def test_fallback_really_runs_the_fallback_worker() -> None:
    workers = Workers("web_search", "rag_query", fail=("web_search",))
    orchestrator = ReferenceOrchestrator(
        workers.mapping(), planner=planner(Step("s", "search web"))
    )

    result = await orchestrator.run("goal", ctx(), error_strategy=ErrorPropagation.FALLBACK)

    assert workers.ran == [("web_search", "s"), ("rag_query", "s")]  # seen by the worker
    assert result.stage is S.COMPLETE
    assert result.success
    assert result.output == {"s": "rag_query:s"}
    execute = next(e["data"] for e in result.events if e["stage"] is S.EXECUTE)
    assert execute["target"] == "rag_query"
    assert execute["fallback"] == {
        "from": "web_search",
        "error": "web_search is down",
        "target": "rag_query",
    }


async def test_fallback_failing_too_is_failed_with_both_errors() -> None:
    workers = Workers("web_search", "rag_query", fail=("web_search", "rag_query"))
    orchestrator = ReferenceOrchestrator(
        workers.mapping(), planner=planner(Step("s", "search web"))
    )

    result = await orchestrator.run("goal", ctx(), error_strategy=ErrorPropagation.FALLBACK)

    assert result.stage is S.FAILED
    failed = result.events[-1]["data"]
    assert failed["fallback"]["error"] == "web_search is down"
    assert "rag_query" in failed["error"]


async def test_the_seeds_error_recovery_test_with_a_patched_execute_step() -> None:
    orchestrator = ReferenceOrchestrator(Workers("w1", "w2").mapping())
    seen = []
    with mock.patch.object(orchestrator, "_execute_step", side_effect=RuntimeError("fail")):
        async for event in orchestrator.orchestrate(
            "test", ctx("err"), error_strategy=ErrorPropagation.FALLBACK
        ):
            seen.append(event["stage"])
            if event["stage"] is S.FAILED:
                assert "fallback" in event["data"]
    assert seen[-1] is S.FAILED


async def test_handle_error_follows_the_strategy() -> None:
    orchestrator = ReferenceOrchestrator({}, retry=RetryPolicy(max_attempts=2))
    error = OrchestrationError(
        S.EXECUTE,
        "x",
        context=ctx(),
        recoverable=True,
        metadata={"attempt": 1, "fallback": "b"},
    )

    with pytest.raises(OrchestrationError):
        await orchestrator.handle_error(error, ErrorPropagation.FAIL_FAST)
    assert (await orchestrator.handle_error(error, ErrorPropagation.CONTINUE) or {})[
        "action"
    ] == "continue"
    retry = await orchestrator.handle_error(error, ErrorPropagation.RETRY) or {}
    assert retry["action"] == "retry"
    low, high = RetryPolicy().bounds(1)
    assert low <= retry["delay"] <= high
    fallback = await orchestrator.handle_error(error, ErrorPropagation.FALLBACK) or {}
    assert fallback == {"action": "fallback", "target": "b"}
    error.metadata["attempt"] = 2
    with pytest.raises(OrchestrationError):
        await orchestrator.handle_error(error, ErrorPropagation.RETRY)


def test_retry_policy_bounds_and_validation() -> None:
    policy = RetryPolicy(base_delay=1.0, multiplier=2.0, max_delay=5.0, jitter=0.5)

    assert policy.bounds(1) == (0.5, 1.5)
    assert policy.bounds(2) == (1.0, 3.0)
    assert policy.bounds(4) == (2.5, 5.0)  # nominal capped at max_delay, never above it
    assert policy.bounds(10_000)[1] == 5.0
    with pytest.raises(ConfigError, match=r"^jitter: "):
        RetryPolicy(jitter=1.5)
    with pytest.raises(ConfigError, match=r"^max_attempts: "):
        RetryPolicy(max_attempts=0)
