"""ReferenceOrchestrator: the protocol carried out with structured concurrency.

``orchestrate()`` is an async generator that never yields inside a task group or a
cancel scope. Every piece of work — the lifecycle's ``initialize``, the planner, a wave of
steps, the aggregation — runs to its end inside its own cancel scope (the run's deadline;
``cancel()`` cancels it) *between* two yields, and only then are its events yielded. So a
consumer that stops iterating, calls ``aclose()`` or is cancelled never leaves a task or
a scope behind, and teardown (in the generator's ``finally``, shielded and bounded) runs
exactly once on every path.
"""

from __future__ import annotations

import contextlib
import logging
import math
import random
from collections.abc import AsyncGenerator, Callable, Iterator, Mapping, Sequence
from typing import Any, cast

import anyio
import attrs

from ..errors import ConfigError, OrchestrationError
from ..models._validators import number
from ._context import ExecutionContext
from ._protocol import (
    AgentLifecycle,
    BasicLifecycle,
    OrchestrationResult,
    OrchestratorEvent,
    OrchestratorMetrics,
    Planner,
    Step,
    Worker,
)
from ._retry import RetryPolicy
from ._routing import RoutingDecision, route
from ._stages import ErrorPropagation, LifecycleStage

__all__ = ("ReferenceOrchestrator", "OrchestrationRun", "StepOutcome", "validate_plan")

logger = logging.getLogger(__name__)

_S = LifecycleStage


class StepStatus:
    """The values of `StepOutcome.status`."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


@attrs.define(eq=False)
class StepOutcome:
    """What became of one routed step in its wave (the data of its EXECUTE event).

    ``status`` is ``succeeded``, ``failed`` or ``cancelled`` (the step had not finished
    when its wave was cancelled, or never started); ``target`` is who produced the
    result (the fallback when it took over); ``fallback`` records a fallback that ran.
    """

    step: Step
    decision: RoutingDecision
    context: ExecutionContext
    status: str = StepStatus.CANCELLED
    target: str = ""
    result: Any = None
    error: OrchestrationError | None = None
    attempts: int = 0
    duration: float = 0.0
    fallback: dict[str, Any] | None = None

    def __attrs_post_init__(self) -> None:
        self.target = self.target or self.decision.target

    @property
    def failed(self) -> bool:
        """Whether the step ran to a failure."""
        return self.status == StepStatus.FAILED

    def data(self) -> dict[str, Any]:
        """The EXECUTE event's data."""
        data: dict[str, Any] = {
            "step": self.step,
            "status": self.status,
            "target": self.target,
            "worker": self.target,
            "result": self.result,
            "attempts": self.attempts,
            "duration": self.duration,
        }
        if self.error is not None:
            data["error"] = str(self.error)
        if self.fallback is not None:
            data["fallback"] = dict(self.fallback)
        return data


@attrs.define(eq=False)
class OrchestrationRun:
    """The live state of one orchestration (one call of ``orchestrate``)."""

    goal: str
    context: ExecutionContext
    strategy: ErrorPropagation
    deadline: float = math.inf
    timeout: float | None = None
    steps: list[Step] = attrs.field(factory=list)
    status: dict[str, str] = attrs.field(factory=dict)
    """Step id → pending, succeeded, failed, skipped or cancelled."""
    results: dict[str, Any] = attrs.field(factory=dict)
    scope: anyio.CancelScope | None = None
    cancel_requested: bool = False
    cancel_reason: str | None = None
    """Why the run was cancelled (`cancel`'s ``reason``)."""
    cancelled: bool = False
    failure: OrchestrationError | None = None
    retries: int = 0
    routing_decisions: int = 0
    durations: list[float] = attrs.field(factory=list)

    def cancel(self, reason: str | None = None) -> None:
        """Stop the run: the work in progress is cancelled (its scope told ``reason``:
        who cancels and why), the run ends CANCELLED."""
        if not self.cancel_requested:
            self.cancel_reason = reason or "orchestration run cancelled"
        self.cancel_requested = True
        if self.scope is not None:
            self.scope.cancel(self.cancel_reason)

    def ids(self, status: str) -> tuple[str, ...]:
        """The ids of the steps with ``status``, in plan order."""
        return tuple(step.id for step in self.steps if self.status.get(step.id) == status)

    def next_wave(self) -> list[Step]:
        """The pending steps whose dependencies all succeeded (marking the ones that can
        never run, because a dependency failed or was skipped, as skipped)."""
        changed = True
        while changed:
            changed = False
            for step in self.steps:
                if self.status[step.id] != "pending":
                    continue
                if any(self.status[d] in ("failed", "skipped") for d in step.depends_on):
                    self.status[step.id] = "skipped"
                    changed = True
        return [
            step
            for step in self.steps
            if self.status[step.id] == "pending"
            and all(self.status[d] == "succeeded" for d in step.depends_on)
        ]

    def metrics(self) -> OrchestratorMetrics:
        """A snapshot of the run's counts."""
        succeeded = len(self.ids("succeeded"))
        failed = len(self.ids("failed"))
        mean = sum(self.durations) / len(self.durations) if self.durations else 0.0
        return OrchestratorMetrics(
            total_steps=succeeded + failed,
            successful_steps=succeeded,
            failed_steps=failed,
            retries=self.retries,
            routing_decisions=self.routing_decisions,
            average_step_duration_ms=mean * 1000.0,
        )

    def summary(self) -> dict[str, Any]:
        """What every terminal event's data carries."""
        return {
            "output": dict(self.results),
            "failed_steps": list(self.ids("failed")),
            "skipped_steps": list(self.ids("skipped")),
            "metrics": self.metrics(),
        }


class _Cancelled:
    """The marker `ReferenceOrchestrator._guard` returns for cancelled work."""


_CANCELLED = _Cancelled()

_ENDINGS = frozenset({LifecycleStage.FAILED, LifecycleStage.CANCELLED})


def _ends_run(event: OrchestratorEvent) -> bool:
    """Whether ``event`` is the run's last (FAILED or CANCELLED)."""
    return event["stage"] in _ENDINGS


def validate_plan(steps: Sequence[Any]) -> list[Step]:
    """The plan as steps; `ValueError` naming the problem when it is not a DAG of
    uniquely named steps whose dependencies exist."""
    plan = [item if isinstance(item, Step) else Step(**item) for item in steps]
    ids: set[str] = set()
    for n, step in enumerate(plan):
        if not isinstance(step.id, str) or not step.id:
            msg = f"step {n}: id must be a non-empty string"
            raise ValueError(msg)
        if step.id in ids:
            msg = f"step {n}: duplicate id {step.id!r}"
            raise ValueError(msg)
        ids.add(step.id)
    for step in plan:
        missing = [d for d in step.depends_on if d not in ids]
        if missing:
            msg = f"step {step.id!r} depends on unknown steps: {', '.join(map(repr, missing))}"
            raise ValueError(msg)
    _check_acyclic(plan)
    return plan


def _check_acyclic(plan: list[Step]) -> None:
    remaining = {step.id: set(step.depends_on) for step in plan}
    while remaining:
        ready = [sid for sid, deps in remaining.items() if not deps]
        if not ready:
            msg = f"the steps' dependencies form a cycle among: {', '.join(sorted(remaining))}"
            raise ValueError(msg)
        for sid in ready:
            del remaining[sid]
        for deps in remaining.values():
            deps.difference_update(ready)


class ReferenceOrchestrator:
    """The reference implementation of
    [`OrchestratorProtocol`][amplifier_anyio.lifecycle.OrchestratorProtocol].

    ``workers`` maps a name to an async callable ``(step, context) -> result``;
    ``planner`` is an async callable ``(goal, context) -> steps`` (none: one step whose
    task is the goal). Each wave of ready steps runs concurrently, at most
    ``max_parallel`` at once, each attempt under ``step_timeout`` seconds; ``retry`` is
    the RETRY strategy's policy; ``teardown_timeout`` bounds the shielded teardown;
    ``rng`` draws the retry jitter.

    Run it with ``async for event in orchestrator.orchestrate(goal, context)`` — wrapped
    in `contextlib.aclosing` when the loop may stop early, so that the teardown
    runs at once rather than when the generator is collected — or with
    [`run`][amplifier_anyio.lifecycle.ReferenceOrchestrator.run].
    """

    def __init__(
        self,
        workers: Mapping[str, Worker] | Mapping[str, Any],
        *,
        planner: Planner | None = None,
        lifecycle: AgentLifecycle | None = None,
        max_parallel: int | None = None,
        step_timeout: float | None = None,
        retry: RetryPolicy | None = None,
        teardown_timeout: float = 5.0,
        rng: random.Random | None = None,
    ) -> None:
        self.workers = dict(workers)
        self.planner = planner
        self.lifecycle: AgentLifecycle = lifecycle if lifecycle is not None else BasicLifecycle()
        self.max_parallel = max_parallel
        self.step_timeout = step_timeout
        self.retry = retry if retry is not None else RetryPolicy()
        self.teardown_timeout = teardown_timeout
        self.rng = rng or random.Random()
        self._runs: set[OrchestrationRun] = set()
        self._check_settings()

    def _check_settings(self) -> None:
        _check("max_parallel", self.max_parallel, minimum=1, exclusive=False, integer=True)
        _check("step_timeout", self.step_timeout)
        _check("teardown_timeout", self.teardown_timeout, optional=False)
        for name, worker in self.workers.items():
            if not callable(worker):
                msg = f"workers[{name!r}]: expected an async callable, got {type(worker).__name__}"
                raise ConfigError(msg)

    # -- the protocol ----------------------------------------------------------------------

    def get_lifecycle(self) -> AgentLifecycle:
        """The lifecycle that initialises and tears down each orchestration."""
        return self.lifecycle

    def make_routing_decision(
        self,
        task: str,
        context: ExecutionContext,
        available_agents: list[str],
        *,
        target: str | None = None,
    ) -> RoutingDecision:
        """A pure function of its arguments: the explicit ``target`` when available, else
        the best name match, ties to the name that sorts first; the runner-up is the
        fallback. See [`route`][amplifier_anyio.lifecycle.route]. Raises `ValueError` with no
        agents."""
        return route(task, available_agents, target=target)

    async def handle_error(
        self, error: OrchestrationError, strategy: ErrorPropagation
    ) -> dict[str, Any] | None:
        """Decide what a failed step does next; raises ``error`` when the failure is final.

        FAIL_FAST: raise. CONTINUE: ``{"action": "continue"}`` (the failure is recorded).
        RETRY: ``{"action": "retry", "delay": s}`` while the error is recoverable and
        ``error.metadata["attempt"]`` < ``max_attempts``, else raise. FALLBACK:
        ``{"action": "fallback", "target": t}`` when the error is recoverable and
        ``error.metadata["fallback"]`` names a target not tried yet, else raise. Every
        failure is logged with its trace id.
        """
        await anyio.lowlevel.checkpoint()
        strategy = ErrorPropagation(strategy)
        logger.warning("%s (strategy %s)", error, strategy)
        if strategy is ErrorPropagation.CONTINUE:
            return {"action": "continue", "error": str(error)}
        if strategy is ErrorPropagation.RETRY and error.recoverable:
            attempt = int(error.metadata.get("attempt", 1))
            if attempt < self.retry.max_attempts:
                return {
                    "action": "retry",
                    "attempt": attempt + 1,
                    "delay": self.retry.delay(attempt, self.rng),
                }
        if strategy is ErrorPropagation.FALLBACK and error.recoverable:
            fallback = error.metadata.get("fallback")
            if fallback:
                return {"action": "fallback", "target": fallback}
        raise error

    def cancel(self, reason: str | None = None) -> bool:
        """Cancel every orchestration of this orchestrator in progress (each ends with
        CANCELLED; ``reason``: who cancels and why); False when none is."""
        runs = list(self._runs)
        for run in runs:
            run.cancel(reason or "orchestrator.cancel()")
        return bool(runs)

    async def run(
        self,
        goal: str,
        context: ExecutionContext,
        *,
        error_strategy: ErrorPropagation = ErrorPropagation.FAIL_FAST,
        timeout: float | None = None,
    ) -> OrchestrationResult:
        """Consume [`orchestrate`][amplifier_anyio.lifecycle.ReferenceOrchestrator.orchestrate] and
        describe how it ended.

        An orchestration that fails is a result (stage FAILED, ``error`` the
        [`OrchestrationError`][amplifier_anyio.errors.OrchestrationError]), under FAIL_FAST too; the
        host's own cancellation propagates.
        """
        events: list[OrchestratorEvent] = []
        error: BaseException | None = None
        try:
            async with contextlib.aclosing(
                self.orchestrate(goal, context, error_strategy=error_strategy, timeout=timeout)
            ) as stream:
                # A loop, not a comprehension: the events before a raise are kept.
                async for event in stream:
                    events.append(event)  # noqa: PERF401
        except OrchestrationError as exc:
            error = exc
        data = events[-1]["data"]
        return OrchestrationResult(
            stage=events[-1]["stage"],
            output=data.get("output"),
            events=tuple(events),
            failed_steps=tuple(data.get("failed_steps", ())),
            skipped_steps=tuple(data.get("skipped_steps", ())),
            metrics=data.get("metrics", OrchestratorMetrics()),
            error=error if error is not None else data.get("exception"),
        )

    async def orchestrate(
        self,
        goal: str,
        context: ExecutionContext,
        *,
        error_strategy: ErrorPropagation = ErrorPropagation.FAIL_FAST,
        timeout: float | None = None,
    ) -> AsyncGenerator[OrchestratorEvent, None]:
        """Yield ``{"stage", "data", "context"}`` events: initialize → plan → for each
        wave, one route per step, then one execute per step (plan order) → aggregate →
        exactly one of complete / failed / cancelled, then nothing.

        ``timeout`` (seconds, from the first iteration) ends the orchestration CANCELLED,
        as [`cancel`][amplifier_anyio.lifecycle.ReferenceOrchestrator.cancel] does. Under FAIL_FAST
        the first failure yields FAILED, tears down, then raises
        [`OrchestrationError`][amplifier_anyio.errors.OrchestrationError]; under the other
        strategies FAILED (or COMPLETE with ``success: False`` for CONTINUE) is the last event and
        nothing is raised. Teardown runs exactly once on every path, ``aclose()`` included.
        """
        _check("timeout", timeout, exclusive=False)
        strategy = ErrorPropagation(error_strategy)
        deadline = anyio.current_time() + (math.inf if timeout is None else timeout)
        run = OrchestrationRun(goal, context, strategy, deadline=deadline, timeout=timeout)
        self._runs.add(run)
        try:
            async with contextlib.aclosing(self._events(run)) as events:
                async for event in events:
                    yield event
        finally:
            self._runs.discard(run)
            await self._teardown(run)
        if run.failure is not None and strategy is ErrorPropagation.FAIL_FAST:
            raise run.failure

    # -- the stages ------------------------------------------------------------------------

    async def _events(self, run: OrchestrationRun) -> AsyncGenerator[OrchestratorEvent, None]:
        """The events of one run, stage by stage: initialize, plan, the waves of steps,
        aggregate and complete. The first FAILED or CANCELLED event is the last; a failure
        is recorded in ``run.failure``, never raised."""
        for stage in (self._initialize, self._planning, self._waves, self._aggregation):
            async with contextlib.aclosing(stage(run)) as events:
                async for event in events:
                    yield event
                    if _ends_run(event):
                        return

    async def _initialize(self, run: OrchestrationRun) -> AsyncGenerator[OrchestratorEvent, None]:
        """The lifecycle's ``initialize``: INITIALIZE with the workers, or the ending."""
        done = await self._guard(run, self.lifecycle.initialize, run.context)
        ending = self._ending(run, done, _S.INITIALIZE, "initialize failed")
        if ending is not None:
            yield ending
            return
        yield self._event(run, _S.INITIALIZE, {"workers": sorted(self._targets(run))})

    async def _planning(self, run: OrchestrationRun) -> AsyncGenerator[OrchestratorEvent, None]:
        """The plan (`_plan`): PLAN with its steps, all pending, or the ending."""
        planned: Any = (
            await self._guard(run, self._plan, run) if not self._stopping(run) else _CANCELLED
        )
        ending = self._ending(run, planned, _S.PLAN, "planning failed")
        if ending is not None:
            yield ending
            return
        run.steps = planned
        run.status = dict.fromkeys((step.id for step in planned), "pending")
        yield self._event(run, _S.PLAN, {"plan": list(planned), "num_steps": len(planned)})

    async def _waves(self, run: OrchestrationRun) -> AsyncGenerator[OrchestratorEvent, None]:
        """Wave after wave of the steps whose dependencies are done (`_wave`), until none
        is left; CANCELLED when the run stops between two waves."""
        while True:
            if self._stopping(run):
                yield self._cancelled(run)
                return
            wave = run.next_wave()
            if not wave:
                return
            async with contextlib.aclosing(self._wave(run, wave)) as events:
                async for event in events:
                    yield event
                    if _ends_run(event):
                        return

    async def _wave(
        self, run: OrchestrationRun, wave: list[Step]
    ) -> AsyncGenerator[OrchestratorEvent, None]:
        """One wave: each step routed (ROUTE), the steps run together, each outcome
        recorded (EXECUTE). A step without a target, the wave's failure or cancel, or a
        failed step (unless the strategy is CONTINUE) ends the run."""
        outcomes: list[StepOutcome] = []
        for step in wave:
            step_context = run.context.child().with_metadata(step_id=step.id)
            try:
                decision = self.make_routing_decision(
                    step.task, step_context, self._targets(run), target=step.target
                )
            except ValueError as exc:
                yield self._failed(run, _S.ROUTE, f"step {step.id!r} has no target", exc)
                return
            run.routing_decisions += 1
            outcomes.append(StepOutcome(step, decision, step_context))
            yield self._event(run, _S.ROUTE, {"decision": decision, "step": step}, step_context)
        ran = (
            await self._guard(run, self._run_wave, run, outcomes)
            if not self._stopping(run)
            else _CANCELLED
        )
        for outcome in outcomes:
            self._record(run, outcome)
            yield self._event(run, _S.EXECUTE, outcome.data(), outcome.context)
        if run.cancelled:  # the run's cancel stopped the wave
            ran = _CANCELLED
        ending = self._ending(run, ran, _S.EXECUTE, "the wave failed")
        if ending is not None:
            yield ending
            return
        failed = [o for o in outcomes if o.failed]
        if failed and run.strategy is not ErrorPropagation.CONTINUE:
            yield self._step_failed(run, failed)

    async def _aggregation(self, run: OrchestrationRun) -> AsyncGenerator[OrchestratorEvent, None]:
        """The aggregate of the results (AGGREGATE), then COMPLETE with the run's summary;
        or the ending."""
        output = (
            await self._guard(run, self._aggregate, run) if not self._stopping(run) else _CANCELLED
        )
        ending = self._ending(run, output, _S.AGGREGATE, "aggregation failed")
        if ending is not None:
            yield ending
            return
        yield self._event(
            run,
            _S.AGGREGATE,
            {"results": dict(run.results), "output": output, "count": len(run.results)},
        )
        if self._stopping(run):
            yield self._cancelled(run)
            return
        summary = run.summary()
        summary["output"] = output
        summary["success"] = not (summary["failed_steps"] or summary["skipped_steps"])
        yield self._event(run, _S.COMPLETE, summary)

    def _ending(
        self, run: OrchestrationRun, outcome: Any, stage: LifecycleStage, message: str
    ) -> OrchestratorEvent | None:
        """The event that ends the run after a guarded piece of work (`_guard`):
        CANCELLED, or FAILED at ``stage`` saying ``message``; None when it succeeded."""
        if isinstance(outcome, _Cancelled):
            return self._cancelled(run)
        if isinstance(outcome, BaseException):
            return self._failed(run, stage, message, outcome)
        return None

    def _targets(self, run: OrchestrationRun) -> list[str]:
        """The names routing chooses from."""
        return list(self.workers)

    async def _plan(self, run: OrchestrationRun) -> list[Step]:
        """The planner's steps, validated (one step with the goal when there is no planner)."""
        if self.planner is None:
            await anyio.lowlevel.checkpoint()
            return [Step("step-1", run.goal)]
        steps = await self.planner(run.goal, run.context)
        return validate_plan(list(steps))

    async def _aggregate(self, run: OrchestrationRun) -> Any:
        """The output: each succeeded step's result by id, in plan order."""
        await anyio.lowlevel.checkpoint()
        return dict(run.results)

    # -- one wave --------------------------------------------------------------------------

    async def _run_wave(self, run: OrchestrationRun, outcomes: list[StepOutcome]) -> None:
        """Run the wave's steps concurrently; a final failure (any strategy but CONTINUE)
        cancels the steps still running."""
        limiter = anyio.CapacityLimiter(self.max_parallel) if self.max_parallel else None
        async with anyio.create_task_group() as tg:
            for outcome in outcomes:
                tg.start_soon(self._run_step, run, outcome, limiter, tg.cancel_scope)

    async def _run_step(
        self,
        run: OrchestrationRun,
        outcome: StepOutcome,
        limiter: anyio.CapacityLimiter | None,
        wave: anyio.CancelScope,
    ) -> None:
        async with limiter if limiter is not None else contextlib.nullcontext():
            start = anyio.current_time()
            try:
                await self._attempts(run, outcome)
            finally:
                outcome.duration = anyio.current_time() - start
        if outcome.failed and run.strategy is not ErrorPropagation.CONTINUE:
            wave.cancel(
                f"step {outcome.step.id!r} failed ({run.strategy} strategy): its wave stops"
            )

    async def _attempts(self, run: OrchestrationRun, outcome: StepOutcome) -> None:
        """Attempt the step until it succeeds or
        [`handle_error`][amplifier_anyio.lifecycle.ReferenceOrchestrator.handle_error] says the
        failure is final."""
        step, target = outcome.step, outcome.decision.target
        fallback = outcome.decision.fallback
        while True:
            outcome.attempts += 1
            attempt_context = outcome.context.with_metadata(attempt=outcome.attempts, target=target)
            try:
                result = await self._attempt(step, target, attempt_context)
            except Exception as exc:  # noqa: BLE001 - a failed attempt goes to the strategy
                error = self._step_error(run, outcome, target, exc, fallback)
                try:
                    action = await self.handle_error(error, run.strategy)
                except OrchestrationError as final:
                    outcome.status, outcome.error = StepStatus.FAILED, final
                    return
                action = action or {}
                if action.get("action") == "retry":
                    run.retries += 1
                    await anyio.sleep(float(action["delay"]))
                    continue
                if action.get("action") == "fallback":
                    new_target = str(action["target"])
                    outcome.fallback = {"from": target, "error": str(exc), "target": new_target}
                    target, fallback = new_target, None
                    continue
                outcome.status, outcome.error = StepStatus.FAILED, error
                return
            outcome.status, outcome.target, outcome.result = StepStatus.SUCCEEDED, target, result
            return

    def _step_error(
        self,
        run: OrchestrationRun,
        outcome: StepOutcome,
        target: str,
        exc: Exception,
        fallback: str | None,
    ) -> OrchestrationError:
        step = outcome.step
        what = "timed out" if isinstance(exc, TimeoutError) else "failed"
        error = OrchestrationError(
            _S.EXECUTE,
            f"step {step.id!r} {what} on {target!r} (attempt {outcome.attempts})",
            context=outcome.context,
            cause=exc,
            recoverable=self.retry.is_recoverable(exc),
            metadata={
                "step": step.id,
                "target": target,
                "attempt": outcome.attempts,
                "fallback": fallback,
                "previous": outcome.fallback,
            },
        )
        error.__cause__ = exc
        return error

    async def _attempt(self, step: Step, target: str, context: ExecutionContext) -> Any:
        """One attempt, under ``step_timeout`` (a `TimeoutError` when it passes)."""
        if self.step_timeout is None:
            return await self._execute_step(step, target, context)
        with anyio.fail_after(self.step_timeout):
            return await self._execute_step(step, target, context)

    async def _execute_step(self, step: Step, target: str, context: ExecutionContext) -> Any:
        """Call the worker ``target`` (a `KeyError` when there is none)."""
        worker = self.workers.get(target)
        if worker is None:
            msg = f"no worker named {target!r}"
            raise KeyError(msg)
        return await worker(step, context)

    # -- events ----------------------------------------------------------------------------

    def _record(self, run: OrchestrationRun, outcome: StepOutcome) -> None:
        sid = outcome.step.id
        if outcome.status == StepStatus.SUCCEEDED:
            run.status[sid] = "succeeded"
            run.results[sid] = outcome.result
        elif outcome.status == StepStatus.FAILED:
            run.status[sid] = "failed"
        else:
            run.status[sid] = "cancelled"
            return
        run.durations.append(outcome.duration)

    def _event(
        self,
        run: OrchestrationRun,
        stage: LifecycleStage,
        data: Any,
        context: ExecutionContext | None = None,
    ) -> OrchestratorEvent:
        record = getattr(self.lifecycle, "record_stage", None)
        if record is not None:
            record(stage)
        return {"stage": stage, "data": data, "context": context or run.context}

    def _cancelled(self, run: OrchestrationRun) -> OrchestratorEvent:
        if run.cancel_requested:
            reason = "cancel() was called"
        elif anyio.current_time() >= run.deadline:
            reason = f"the timeout of {run.timeout} s passed"
        else:
            reason = "cancelled"
        return self._event(run, _S.CANCELLED, {"reason": reason, **run.summary()})

    def _failed(
        self, run: OrchestrationRun, stage: LifecycleStage, message: str, cause: BaseException
    ) -> OrchestratorEvent:
        if isinstance(cause, OrchestrationError):
            error = cause
        else:
            error = OrchestrationError(stage, message, context=run.context, cause=cause)
            error.__cause__ = cause
        logger.error("%s", error)
        run.failure = error
        data = {"stage": stage, "error": str(error), "exception": error, **run.summary()}
        return self._event(run, _S.FAILED, data)

    def _step_failed(self, run: OrchestrationRun, failed: list[StepOutcome]) -> OrchestratorEvent:
        first = failed[0]
        error = first.error
        assert error is not None
        run.failure = error
        data: dict[str, Any] = {
            "stage": _S.EXECUTE,
            "step": first.step.id,
            "target": first.target,
            "attempts": first.attempts,
            "error": str(error),
            "exception": error,
            **run.summary(),
        }
        if run.strategy is ErrorPropagation.FALLBACK:
            data["fallback"] = first.fallback
        logger.error("%s", error)
        return self._event(run, _S.FAILED, data, first.context)

    # -- cancellation and teardown ---------------------------------------------------------

    def _stopping(self, run: OrchestrationRun) -> bool:
        """Whether the run must end CANCELLED at this point between two pieces of work."""
        return run.cancel_requested or run.cancelled or anyio.current_time() >= run.deadline

    @contextlib.contextmanager
    def _scope(self, run: OrchestrationRun) -> Iterator[anyio.CancelScope]:
        """The cancel scope one piece of work runs in: the run's deadline, and
        [`OrchestrationRun.cancel`][amplifier_anyio.lifecycle.OrchestrationRun.cancel] cancels
        it."""
        with anyio.CancelScope(deadline=run.deadline) as scope:
            run.scope = scope
            if run.cancel_requested:
                scope.cancel(run.cancel_reason)
            try:
                yield scope
            finally:
                run.scope = None

    async def _guard(self, run: OrchestrationRun, work: Callable[..., Any], *args: Any) -> Any:
        """Run ``work(*args)`` in the run's scope: its value, the ``Exception`` it raised,
        or ``_CANCELLED`` when the run was cancelled meanwhile."""
        outcome: Any = _CANCELLED
        with self._scope(run) as scope:
            try:
                outcome = await work(*args)
            except Exception as exc:  # noqa: BLE001 - reported as the stage's failure
                outcome = exc
        if scope.cancelled_caught or (scope.cancel_called and isinstance(outcome, Exception)):
            run.cancelled = True
            return _CANCELLED
        return outcome

    async def _teardown(self, run: OrchestrationRun) -> None:
        """``lifecycle.teardown`` once, shielded and bounded; it must not raise, and if it
        does the error is logged, never raised over the orchestration's own ending."""
        with anyio.move_on_after(self.teardown_timeout, shield=True) as bound:
            try:
                await self.lifecycle.teardown(run.context)
            except Exception:
                logger.exception("teardown raised (trace_id=%s)", run.context.trace_id)
        if bound.cancelled_caught:
            logger.error(
                "teardown did not finish within %s s (trace_id=%s)",
                self.teardown_timeout,
                run.context.trace_id,
            )


def _check(name: str, value: Any, *, optional: bool = True, **bounds: Any) -> None:
    """A numeric setting checked as the config classes check theirs (ConfigError naming it)."""
    number(optional=optional, **bounds)(None, cast("attrs.Attribute[Any]", _Named(name)), value)


@attrs.frozen
class _Named:
    name: str
