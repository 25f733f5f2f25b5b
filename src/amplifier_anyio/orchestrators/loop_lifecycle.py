"""loop-lifecycle: the lifecycle orchestrator protocol inside a session turn.

The turn goes through the protocol's stages
([`amplifier_anyio.lifecycle`][amplifier_anyio.lifecycle]):

* **initialize** — the mounted tools are the workers;
* **plan** — the provider is asked for a JSON list of steps, each naming a mounted tool,
  its input and the steps it depends on. A reply that is not a valid plan gets one
  repair request (the reply and the problem are shown to the model); a second invalid
  one ends the turn FAILED;
* **route** / **execute** — each wave of ready steps is routed (a step names its tool;
  routing's runner-up is the fallback) and runs through the shared tool batch
  (`amplifier_anyio.runtime._tool_batch`) as one assistant message with its tool
  calls, answered by one ``role: tool`` message per call — so the conversation is valid
  for any provider and the five invariants of DESIGN §6 hold. A retry or a fallback is
  another such pair;
* **aggregate** — a last provider call, without tools, answers from the results;
* **complete** / **failed** / **cancelled** — the turn's status follows: ``success``,
  ``error``, ``cancelled``.

Each stage is emitted as the hook event ``lifecycle:<stage>`` with ``{stage, data,
trace_id}`` (``data`` as plain JSON-like values). The planning and aggregation
instructions are ephemeral: they reach one request and are never stored in the context.
The engine (`amplifier_anyio.runtime._turn`) owns the turn's scope, its terminal
events and the [`TurnResult`][amplifier_anyio.TurnResult], as for loop-basic.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import re
from collections.abc import AsyncGenerator, Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Literal

import anyio
import attrs

from ..config_schema import ConfigSchema
from ..errors import ConfigError, OrchestrationError, ValidationError
from ..events import (
    LIFECYCLE_AGGREGATE,
    LIFECYCLE_CANCELLED,
    LIFECYCLE_COMPLETE,
    LIFECYCLE_EXECUTE,
    LIFECYCLE_FAILED,
    LIFECYCLE_INITIALIZE,
    LIFECYCLE_PLAN,
    LIFECYCLE_ROUTE,
    PROMPT_SUBMIT,
)
from ..kernel._coordinator import ModuleCoordinator
from ..kernel._turns import TurnStatus
from ..lifecycle import (
    ErrorPropagation,
    ExecutionContext,
    LifecycleStage,
    OrchestrationRun,
    ReferenceOrchestrator,
    RetryPolicy,
    Step,
    StepOutcome,
    validate_plan,
)
from ..lifecycle._frozen import thaw
from ..lifecycle._reference import StepStatus
from ..models import ChatResponse, TextBlock, ToolCall, structure
from ..models._validators import number, one_of
from ..runtime._progress import no_progress_repeats
from ..runtime._requests import assistant_message, select_provider
from ..runtime._tool_batch import ToolBatchConfig
from ..runtime._turn import Turn, TurnConfig
from .loop_basic import LoopBasicOrchestrator

if TYPE_CHECKING:
    from ..interfaces import Provider

__all__ = (
    "LoopLifecycleConfig",
    "LoopLifecycleOrchestrator",
    "PLAN_INSTRUCTIONS",
    "AGGREGATE_INSTRUCTIONS",
    "parse_plan",
    "mount",
)

logger = logging.getLogger(__name__)

STAGE_EVENTS: Mapping[LifecycleStage, str] = {
    LifecycleStage.INITIALIZE: LIFECYCLE_INITIALIZE,
    LifecycleStage.PLAN: LIFECYCLE_PLAN,
    LifecycleStage.ROUTE: LIFECYCLE_ROUTE,
    LifecycleStage.EXECUTE: LIFECYCLE_EXECUTE,
    LifecycleStage.AGGREGATE: LIFECYCLE_AGGREGATE,
    LifecycleStage.COMPLETE: LIFECYCLE_COMPLETE,
    LifecycleStage.FAILED: LIFECYCLE_FAILED,
    LifecycleStage.CANCELLED: LIFECYCLE_CANCELLED,
}

PLAN_INSTRUCTIONS = """\
<system-reminder source="orchestrator-lifecycle-plan">
Plan how to answer the user's last message with the tools listed below. Reply with a JSON
list of steps and nothing else:
[{"id": "s1", "tool": "<tool name>", "input": {...}, "depends_on": []}, ...]
Each step calls one tool with its input. A step runs after every step it depends_on has
finished; steps that do not depend on each other run in parallel. Reply [] if no tool is
needed. The results are given to you afterwards, to write the answer.
Tools:
{tools}
</system-reminder>"""
"""The ephemeral user message of the planning request (``{tools}``: one line per tool)."""

AGGREGATE_INSTRUCTIONS = """\
<system-reminder source="orchestrator-lifecycle-aggregate">
The plan has run; the tool results are above. Answer the user's last message from them
now, without calling tools. Say so if a step failed.
</system-reminder>"""
"""The ephemeral user message of the aggregation request."""

_FENCE = re.compile(r"^```[a-zA-Z]*\s*\n?(.*?)\n?```$", re.DOTALL)
_STRATEGIES = tuple(str(s) for s in ErrorPropagation)


@attrs.frozen(kw_only=True)
class LoopLifecycleConfig:
    """loop-lifecycle's settings (times in seconds).

    ``error_strategy`` is one of fail_fast, continue, retry, fallback; ``max_attempts``,
    ``base_delay``, ``max_delay`` and ``jitter`` shape RETRY's backoff; ``max_steps``
    caps a plan; ``max_parallel_tools`` and ``tool_timeout`` bound each wave's batch
    (``tool_timeout`` is the protocol's step timeout); the rest as loop-basic.
    """

    error_strategy: Literal["fail_fast", "continue", "retry", "fallback"] = attrs.field(
        default="fail_fast", validator=one_of(_STRATEGIES)
    )
    max_steps: int = attrs.field(
        default=30, validator=number(minimum=1, exclusive=False, integer=True)
    )
    max_attempts: int = attrs.field(
        default=3, validator=number(minimum=1, exclusive=False, integer=True)
    )
    base_delay: float = attrs.field(default=0.5, validator=number(exclusive=False))
    max_delay: float = attrs.field(default=30.0, validator=number(exclusive=False))
    jitter: float = attrs.field(default=0.1, validator=number(exclusive=False))
    parallel_tools: bool = True
    max_parallel_tools: int | None = attrs.field(
        default=None, validator=number(minimum=1, exclusive=False, optional=True, integer=True)
    )
    tool_timeout: float | None = attrs.field(default=None, validator=number(optional=True))
    turn_timeout: float | None = attrs.field(default=None, validator=number(optional=True))
    event_timeout: float = attrs.field(default=5.0, validator=number())
    write_timeout: float = attrs.field(default=5.0, validator=number())
    teardown_timeout: float = attrs.field(default=5.0, validator=number())
    abandon_sync_tools: bool = False
    reasoning_effort: str | None = None
    default_provider: str | None = None
    no_progress: dict[str, Any] | bool | str | None = attrs.field(
        default=None,
        metadata={"doc": "repeated failing tool calls: {repeats: 3} (the default) or off"},
    )

    @classmethod
    def from_dict(cls, config: dict[str, Any] | None) -> LoopLifecycleConfig:
        """Parse a plan's orchestrator config; errors name the key."""
        config = dict(config or {})
        known = {a.name for a in attrs.fields(cls)}
        for key in sorted(set(config) - known):
            logger.warning("loop-lifecycle: ignoring unknown config key %r", key)
            config.pop(key)
        try:
            parsed = structure(config, cls)
        except ValidationError as exc:
            raise ConfigError("; ".join(exc.errors)) from exc
        parsed.retry_policy()  # jitter above 1: a ConfigError naming it
        parsed.turn_config()  # a bad no_progress: a ConfigError naming it
        return parsed

    def retry_policy(self) -> RetryPolicy:
        """RETRY's policy from these settings."""
        return RetryPolicy(
            max_attempts=self.max_attempts,
            base_delay=self.base_delay,
            max_delay=self.max_delay,
            jitter=self.jitter,
        )

    def turn_config(self) -> TurnConfig:
        """The engine's share of these settings."""
        return TurnConfig(
            turn_timeout=self.turn_timeout,
            event_timeout=self.event_timeout,
            reasoning_effort=self.reasoning_effort,
            default_provider=self.default_provider,
            no_progress=no_progress_repeats(self.no_progress, "loop-lifecycle.no_progress"),
        )

    def batch_config(self) -> ToolBatchConfig:
        """The tool batch's share of these settings."""
        return ToolBatchConfig(
            parallel=self.parallel_tools,
            max_parallel_tools=self.max_parallel_tools,
            tool_timeout=self.tool_timeout,
            write_timeout=self.write_timeout,
            abandon_sync_tools=self.abandon_sync_tools,
        )


def parse_plan(text: str, tools: Mapping[str, Any], *, max_steps: int = 30) -> list[Step]:
    """The steps of a planning reply; `ValueError` saying what is wrong otherwise.

    The reply is a JSON list (a Markdown code fence around it is allowed) of objects with
    ``id`` (a string), ``tool`` (a mounted tool), optional ``input`` (an object),
    ``depends_on`` (a list of ids) and ``task`` (a description); the steps form a DAG.
    """
    body = text.strip()
    fenced = _FENCE.match(body)
    if fenced:
        body = fenced.group(1).strip()
    try:
        raw = json.loads(body)
    except ValueError as exc:
        msg = f"the reply is not JSON ({exc})"
        raise ValueError(msg) from None
    if not isinstance(raw, list):
        msg = f"the reply is a JSON {type(raw).__name__}, not a list of steps"
        raise ValueError(msg)
    if len(raw) > max_steps:
        msg = f"the plan has {len(raw)} steps; at most {max_steps} are allowed"
        raise ValueError(msg)
    return validate_plan([_step(n, item, tools) for n, item in enumerate(raw)])


def _step(n: int, item: Any, tools: Mapping[str, Any]) -> Step:
    if not isinstance(item, dict):
        msg = f"step {n} is a {type(item).__name__}, not an object"
        raise ValueError(msg)
    unknown = sorted(set(item) - {"id", "tool", "input", "depends_on", "task"})
    if unknown:
        msg = f"step {n} has unknown fields: {', '.join(unknown)}"
        raise ValueError(msg)
    sid, tool = item.get("id"), item.get("tool")
    if not isinstance(sid, str) or not sid:
        msg = f"step {n}: 'id' must be a non-empty string"
        raise ValueError(msg)
    if not isinstance(tool, str) or tool not in tools:
        mounted = ", ".join(sorted(tools)) or "none"
        msg = f"step {sid!r}: 'tool' must name a mounted tool ({mounted}), not {tool!r}"
        raise ValueError(msg)
    tool_input = item.get("input", {})
    depends_on = item.get("depends_on", [])
    task = item.get("task", tool)
    if not isinstance(tool_input, dict):
        msg = f"step {sid!r}: 'input' must be an object"
        raise ValueError(msg)
    if not isinstance(depends_on, list) or not all(isinstance(d, str) for d in depends_on):
        msg = f"step {sid!r}: 'depends_on' must be a list of step ids"
        raise ValueError(msg)
    if not isinstance(task, str):
        msg = f"step {sid!r}: 'task' must be a string"
        raise ValueError(msg)
    return Step(sid, task, tool_input, depends_on, target=tool)


def _describe_tools(tools: Mapping[str, Any]) -> str:
    lines = []
    for name, tool in sorted(tools.items()):
        description = getattr(tool, "description", None) or ""
        schema = getattr(tool, "input_schema", None) or {"type": "object"}
        lines.append(f"- {name}: {description} Input schema: {json.dumps(schema, sort_keys=True)}")
    return "\n".join(lines) or "(no tools are mounted)"


def _plain(value: Any) -> Any:
    """``value`` as JSON-like data for a hook payload (steps, decisions, metrics as dicts)."""
    if isinstance(value, BaseException):
        return f"{type(value).__name__}: {value}"
    if isinstance(value, ExecutionContext):
        return value.to_dict()
    if attrs.has(type(value)):
        return {f.name: _plain(getattr(value, f.name)) for f in attrs.fields(type(value))}
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items() if k != "exception"}
    if isinstance(value, list | tuple | set | frozenset):
        return [_plain(v) for v in value]
    return thaw(value)


class _DeniedError(Exception):
    """A ``provider:request`` hook denied a lifecycle request."""


class _SessionOrchestrator(ReferenceOrchestrator):
    """The reference orchestrator whose workers are a turn's tools, whose planner and
    aggregator are its provider, and whose waves are tool batches."""

    def __init__(
        self, turn: _LifecycleTurn, provider: Provider, config: LoopLifecycleConfig
    ) -> None:
        super().__init__(
            {},
            retry=config.retry_policy(),
            teardown_timeout=config.teardown_timeout,
        )
        self.turn = turn
        self.provider = provider
        self.config = config
        self.wave: list[StepOutcome] = []
        """The outcomes of the wave in progress (or the last one)."""

    def _targets(self, run: OrchestrationRun) -> list[str]:
        return list(self.turn.tools)

    def _stopping(self, run: OrchestrationRun) -> bool:
        turn = self.turn
        return super()._stopping(run) or turn.token.is_cancelled or turn.halted is not None

    async def _ask(self, injections: list[dict[str, Any]]) -> ChatResponse:
        self.turn.injections.extend(injections)
        response = await self.turn.call_provider(self.provider, with_tools=False)
        if response is None:
            raise _DeniedError(self.turn.text)
        return response

    async def _plan(self, run: OrchestrationRun) -> list[Step]:
        instructions = {
            "role": "user",
            "content": PLAN_INSTRUCTIONS.replace("{tools}", _describe_tools(self.turn.tools)),
        }
        response = await self._ask([instructions])
        try:
            return parse_plan(response.text, self.turn.tools, max_steps=self.config.max_steps)
        except ValueError as exc:
            problem = str(exc)
        logger.warning("loop-lifecycle: invalid plan (%s); asking for a repair", problem)
        repair = [
            instructions,
            {"role": "assistant", "content": response.text},
            {
                "role": "user",
                "content": f"That plan is invalid: {problem}. Reply with the corrected JSON "
                "list of steps and nothing else.",
            },
        ]
        response = await self._ask(repair)
        try:
            return parse_plan(response.text, self.turn.tools, max_steps=self.config.max_steps)
        except ValueError as exc:
            raise OrchestrationError(
                LifecycleStage.PLAN,
                f"the plan is still invalid after one repair request: {exc}",
                context=run.context,
                cause=exc,
            ) from exc

    async def _aggregate(self, run: OrchestrationRun) -> Any:
        response = await self._ask([{"role": "user", "content": AGGREGATE_INSTRUCTIONS}])
        await self.turn.answer(response)
        return response.text

    async def _run_wave(self, run: OrchestrationRun, outcomes: list[StepOutcome]) -> None:
        """The wave as tool batches: the first round runs every step; each later round
        runs the retries and fallbacks the strategy asked for, after the longest backoff."""
        self.wave = outcomes
        start = anyio.current_time()
        round_ = [(outcome, outcome.decision.target) for outcome in outcomes]
        fallbacks = {id(o): o.decision.fallback for o in outcomes}
        while round_:
            await self._batch(run, round_)
            retry_after, next_round, final = 0.0, [], False
            for outcome, target in round_:
                outcome.duration = anyio.current_time() - start
                if not outcome.failed:
                    continue
                error = outcome.error
                assert error is not None
                error.metadata["fallback"] = fallbacks[id(outcome)]
                try:
                    action = await self.handle_error(error, run.strategy) or {}
                except OrchestrationError:
                    final = True
                    continue
                if action.get("action") == "retry":
                    run.retries += 1
                    retry_after = max(retry_after, float(action["delay"]))
                    next_round.append((outcome, target))
                elif action.get("action") == "fallback":
                    new = str(action["target"])
                    outcome.fallback = {"from": target, "error": str(error.cause), "target": new}
                    fallbacks[id(outcome)] = None
                    next_round.append((outcome, new))
            if final and run.strategy is not ErrorPropagation.CONTINUE:
                return  # the orchestration fails: the retries and fallbacks left do not run
            if next_round:
                await anyio.sleep(retry_after)
            round_ = next_round

    async def _batch(self, run: OrchestrationRun, round_: list[tuple[StepOutcome, str]]) -> None:
        turn = self.turn
        calls = []
        for outcome, target in round_:
            outcome.attempts += 1
            outcome.status, outcome.error = StepStatus.CANCELLED, None
            call_id = f"lc-{turn.trace_id[:12]}-{outcome.step.id}-{outcome.attempts}"
            calls.append(ToolCall(id=call_id, name=target, arguments=thaw(outcome.step.input)))
        names = ", ".join(o.step.id for o, _ in round_)
        note = TextBlock(text=f"Running plan steps {names}.")
        message = assistant_message(ChatResponse(content=[note], tool_calls=calls), calls)
        batch = turn.new_batch(calls)
        try:
            await turn.run_tool_batch(batch, message)
        finally:
            contents = batch.contents()
            for index, (outcome, target) in enumerate(round_):
                self._settle(outcome, target, contents[index], batch.succeeded[index])

    def _settle(
        self, outcome: StepOutcome, target: str, content: str | None, ok: bool | None
    ) -> None:
        outcome.target = target
        if ok is None or content is None:
            outcome.status = StepStatus.CANCELLED
            return
        if ok:
            outcome.status, outcome.result, outcome.error = StepStatus.SUCCEEDED, content, None
            return
        cause = RuntimeError(content)
        error = OrchestrationError(
            LifecycleStage.EXECUTE,
            f"step {outcome.step.id!r} failed on {target!r} (attempt {outcome.attempts})",
            context=outcome.context,
            cause=cause,
            recoverable=not content.startswith("Denied by hook"),
            metadata={"step": outcome.step.id, "target": target, "attempt": outcome.attempts},
        )
        error.__cause__ = cause
        outcome.status, outcome.result, outcome.error = StepStatus.FAILED, content, error


@attrs.define(eq=False)
class _ImmediateCancel:
    """What the turn's token cancels on an immediate request (a ``Cancellable``, with the
    request's reason): the orchestration while one runs (so it ends with its own CANCELLED
    stage), else the turn's scope."""

    turn: _LifecycleTurn
    scope: anyio.CancelScope

    def cancel(self, reason: str | None = None) -> None:
        orchestrator = self.turn.orchestration
        if orchestrator is None:
            self.scope.cancel(reason)
            return
        orchestrator.cancel(reason)
        if self.turn.emit_scope is not None:
            self.turn.emit_scope.cancel(reason)


@attrs.define(eq=False)
class _LifecycleTurn(Turn):
    """A turn whose loop is the lifecycle protocol."""

    settings: LoopLifecycleConfig = attrs.field(factory=LoopLifecycleConfig)
    orchestration: _SessionOrchestrator | None = None
    """The orchestrator while its orchestration runs."""
    emit_scope: anyio.CancelScope | None = None
    terminal: LifecycleStage | None = None
    deadline: float = math.inf
    routed: dict[str, Any] = attrs.field(factory=dict)
    """Steps routed and not yet reported executed (id → step)."""
    _turn_scope: anyio.CancelScope | None = None

    def bind_scope(self, scope: anyio.CancelScope) -> AbstractContextManager[Any]:
        self._turn_scope = scope
        return self.token.bind_scope(_ImmediateCancel(self, scope))

    async def body(self) -> None:
        submitted = await self.hook(PROMPT_SUBMIT, {"prompt": self.prompt})
        if submitted.action == "deny":
            self.deny(submitted)
            return
        self.queue_ephemeral(submitted)
        self.provider_name, provider = select_provider(self.providers, self.config.default_provider)
        await self.write("the prompt", {"role": "user", "content": self.prompt})
        orchestrator = _SessionOrchestrator(self, provider, self.settings)
        context = ExecutionContext(
            trace_id=self.trace_id,
            session_id=self.coordinator.session_id or "",
            user_intent=self.prompt,
        )
        # While the orchestration runs, the turn's deadline is the orchestration's: each
        # piece of work (and each hook emit) runs under it, and when it passes the
        # orchestration ends with its own CANCELLED stage rather than being torn apart.
        scope = self._turn_scope
        assert scope is not None
        self.deadline = min(scope.deadline, anyio.current_effective_deadline())
        left = self.deadline - anyio.current_time()
        timeout = None if math.isinf(self.deadline) else max(0.0, left)
        strategy = ErrorPropagation(self.settings.error_strategy)
        stream = orchestrator.orchestrate(
            self.prompt, context, error_strategy=strategy, timeout=timeout
        )
        saved, scope.deadline = scope.deadline, math.inf
        self.orchestration = orchestrator
        try:
            async with contextlib.aclosing(stream) as events:
                await self._follow(events)
        except BaseException as exc:
            if self.terminal is None:
                await self._abandoned(orchestrator, exc)
            raise
        finally:
            self.orchestration = None
            scope.deadline = saved

    async def _follow(self, events: AsyncGenerator[dict[str, Any], None]) -> None:
        async for event in events:
            stage: LifecycleStage = event["stage"]
            data = event["data"]
            if stage is LifecycleStage.ROUTE:
                self.routed[data["step"].id] = data["step"]
            elif stage is LifecycleStage.EXECUTE:
                self.routed.pop(data["step"].id, None)
            await self._emit_stage(stage, _plain(data), shielded=self._winding_down(stage))
            if stage is LifecycleStage.COMPLETE:
                self.status = TurnStatus.SUCCESS
            elif stage is LifecycleStage.CANCELLED:
                self.status = TurnStatus.CANCELLED
            elif stage is LifecycleStage.FAILED:
                cause = data.get("exception")
                if isinstance(getattr(cause, "cause", None), _DeniedError):
                    self.status = TurnStatus.INCOMPLETE  # as loop-basic: the hook's verdict
                else:
                    self.status, self.error = TurnStatus.ERROR, cause

    async def _abandoned(self, orchestrator: _SessionOrchestrator, exc: BaseException) -> None:
        """The orchestration was torn apart (the host's cancel, an unexpected error): its
        routed steps are reported, then one terminal stage, so the stage sequence holds."""
        outcomes = {o.step.id: o for o in orchestrator.wave}
        for sid, step in list(self.routed.items()):
            outcome = outcomes.get(sid)
            data = outcome.data() if outcome is not None else {"step": step, "status": "cancelled"}
            await self._emit_stage(LifecycleStage.EXECUTE, _plain(data), shielded=True)
        self.routed.clear()
        failed = isinstance(exc, Exception)
        stage = LifecycleStage.FAILED if failed else LifecycleStage.CANCELLED
        await self._emit_stage(stage, {"error": _plain(exc)}, shielded=True)

    def _winding_down(self, stage: LifecycleStage) -> bool:
        """Whether the turn is being cancelled or ending: its last lifecycle events are
        emitted under a bounded shield then, so observers see how it ended."""
        return stage.is_terminal or self.token.is_cancelled or anyio.current_time() >= self.deadline

    async def _emit_stage(self, stage: LifecycleStage, data: Any, *, shielded: bool) -> None:
        if stage.is_terminal:
            self.terminal = stage
        payload = {"stage": str(stage), "data": data, "trace_id": self.trace_id}
        event = STAGE_EVENTS[stage]
        if shielded:
            with anyio.CancelScope(shield=True):
                await self.bounded(event, self.hooks.emit(event, payload))
            return
        # Under the turn's deadline, and cut short by an immediate cancel (_ImmediateCancel).
        with anyio.CancelScope(deadline=self.deadline) as scope:
            self.emit_scope = scope
            if self.token.is_immediate:
                scope.cancel(self.token.reason)
            try:
                await self.hooks.emit(event, payload)
            finally:
                self.emit_scope = None


class LoopLifecycleOrchestrator(LoopBasicOrchestrator):
    """The lifecycle protocol as a session orchestrator (see the module docstring).

    The same shell as loop-basic (``execute()``, ``run_turn()``, `last_result`); only
    the turn's loop differs. It cannot resume a turn.
    """

    name = "loop-lifecycle"
    config_class = LoopLifecycleConfig
    turn_class = _LifecycleTurn
    resumable = False

    def turn_options(self) -> dict[str, Any]:
        """The lifecycle settings of the turn."""
        return {"settings": self.config}


async def mount(coordinator: ModuleCoordinator, config: dict[str, Any] | None = None) -> None:
    """Mount loop-lifecycle as the session's orchestrator."""
    await coordinator.mount("orchestrator", LoopLifecycleOrchestrator(config))


CONFIG_SCHEMA = ConfigSchema.from_attrs("loop-lifecycle", LoopLifecycleConfig)
"""The keys loop-lifecycle accepts (checked by ``validate --strict``)."""
