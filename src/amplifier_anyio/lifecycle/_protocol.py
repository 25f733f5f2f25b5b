"""The protocol's shapes: steps, the lifecycle and orchestrator protocols, results, metrics."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import anyio
import attrs

from ..errors import OrchestrationError
from ._context import ExecutionContext
from ._frozen import FrozenDict, freeze
from ._routing import RoutingDecision
from ._stages import ErrorPropagation, LifecycleStage

__all__ = (
    "Step",
    "AgentLifecycle",
    "BasicLifecycle",
    "OrchestratorProtocol",
    "OrchestratorMetrics",
    "OrchestrationResult",
    "OrchestratorEvent",
    "Worker",
    "Planner",
)

OrchestratorEvent = dict[str, Any]
"""One event of an orchestration: ``{"stage": LifecycleStage, "data": ..., "context":
ExecutionContext}``."""


def _frozen_input(value: Mapping[str, Any] | None) -> FrozenDict:
    frozen = freeze(value or {}, "input")
    if not isinstance(frozen, FrozenDict):
        msg = f"input: expected a mapping, got {type(value).__name__}"
        raise TypeError(msg)
    return frozen


def _ids(value: Iterable[str]) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    return tuple(value)


@attrs.frozen
class Step:
    """One unit of a plan: ``task`` for a worker, with read-only ``input``, the ids it
    ``depends_on`` (it starts only once they all succeeded) and an optional explicit
    ``target`` that routing honours when that worker exists."""

    id: str
    task: str
    input: FrozenDict = attrs.field(factory=FrozenDict, converter=_frozen_input)
    depends_on: tuple[str, ...] = attrs.field(default=(), converter=_ids)
    target: str | None = None


Worker = Callable[[Step, ExecutionContext], Awaitable[Any]]
"""An async callable ``(step, context) -> result`` that carries out one step."""

Planner = Callable[[str, ExecutionContext], Awaitable[Sequence[Step]]]
"""An async callable ``(goal, context) -> steps`` that decomposes a goal."""


@runtime_checkable
class AgentLifecycle(Protocol):
    """Set-up and tear-down around an orchestration.

    ``initialize`` may raise (the orchestration then ends FAILED); ``teardown`` must not
    (an exception from it is logged and dropped) and runs exactly once per orchestration
    that started, however it ends. ``get_stage`` says where the last orchestration stands.
    """

    async def initialize(self, context: ExecutionContext) -> None:
        """Acquire what the orchestration needs."""
        ...

    async def teardown(self, context: ExecutionContext) -> None:
        """Release it; never raises."""
        ...

    def get_stage(self) -> LifecycleStage:
        """The stage of the last event."""
        ...


@attrs.define(eq=False)
class BasicLifecycle:
    """The lifecycle used when none is given: it holds nothing and records what happened
    (``initialized`` / ``torn_down`` count calls; ``stage`` is the last event's)."""

    stage: LifecycleStage = LifecycleStage.INITIALIZE
    initialized: int = 0
    torn_down: int = 0

    async def initialize(self, context: ExecutionContext) -> None:
        """Count the call."""
        await anyio.lowlevel.checkpoint()
        self.initialized += 1

    async def teardown(self, context: ExecutionContext) -> None:
        """Count the call."""
        await anyio.lowlevel.checkpoint()
        self.torn_down += 1

    def get_stage(self) -> LifecycleStage:
        """The stage of the last event."""
        return self.stage

    def record_stage(self, stage: LifecycleStage) -> None:
        """Called by the orchestrator for each event."""
        self.stage = stage


@runtime_checkable
class OrchestratorProtocol(Protocol):
    """What every orchestrator of this protocol offers (subclass it or match it)."""

    @abstractmethod
    def orchestrate(
        self,
        goal: str,
        context: ExecutionContext,
        *,
        error_strategy: ErrorPropagation = ErrorPropagation.FAIL_FAST,
    ) -> AsyncIterator[OrchestratorEvent]:
        """Yield the orchestration's events, ending with exactly one terminal stage."""

    @abstractmethod
    def make_routing_decision(
        self, task: str, context: ExecutionContext, available_agents: list[str]
    ) -> RoutingDecision:
        """Choose a target for ``task``: the same inputs always give an equal decision."""

    @abstractmethod
    async def handle_error(
        self, error: OrchestrationError, strategy: ErrorPropagation
    ) -> dict[str, Any] | None:
        """What to do about ``error`` under ``strategy`` (raises it when it is final)."""

    @abstractmethod
    def get_lifecycle(self) -> AgentLifecycle:
        """The lifecycle that initialises and tears down each orchestration."""


@attrs.frozen(kw_only=True)
class OrchestratorMetrics:
    """Counts of one orchestration: steps that ran to an outcome, how many succeeded and
    failed, retries, routing decisions, and the mean duration of a step (every attempt
    and backoff included) in milliseconds of anyio's clock."""

    total_steps: int = 0
    successful_steps: int = 0
    failed_steps: int = 0
    retries: int = 0
    routing_decisions: int = 0
    average_step_duration_ms: float = 0.0


@attrs.frozen(kw_only=True)
class OrchestrationResult:
    """How an orchestration ended: the terminal ``stage``, the ``output`` (the aggregated
    results), every event, the ids of the ``failed_steps`` and of the ``skipped_steps``
    (not run because a dependency failed), the metrics and, when it failed, the error."""

    stage: LifecycleStage
    output: Any = None
    events: tuple[OrchestratorEvent, ...] = attrs.field(default=(), eq=False)
    failed_steps: tuple[str, ...] = ()
    skipped_steps: tuple[str, ...] = ()
    metrics: OrchestratorMetrics = attrs.field(factory=OrchestratorMetrics)
    error: BaseException | None = attrs.field(default=None, eq=False)

    @property
    def success(self) -> bool:
        """Completed with every step succeeded."""
        return self.stage is LifecycleStage.COMPLETE and not (
            self.failed_steps or self.skipped_steps
        )

    @property
    def stages(self) -> list[LifecycleStage]:
        """The stage of each event, in order."""
        return [event["stage"] for event in self.events]
