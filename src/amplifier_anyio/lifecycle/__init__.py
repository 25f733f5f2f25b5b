"""The lifecycle orchestrator protocol, done right, and its reference orchestrator.

An orchestration goes initialize → plan → (route → execute)* → aggregate → complete, or
ends early with failed or cancelled; exactly one terminal stage, then nothing.
[`ReferenceOrchestrator`][amplifier_anyio.lifecycle.ReferenceOrchestrator] runs each wave of ready
steps concurrently in a task group between two yields of its async generator, retries with
exponential backoff and jitter on anyio's clock, really runs the fallback target, reports CONTINUE's
failures honestly, ends CANCELLED on ``cancel()`` or its timeout, and tears down on every path.
[`ExecutionContext`][amplifier_anyio.lifecycle.ExecutionContext] is deeply immutable and hashable,
and routing is a pure function. ``loop-lifecycle`` (`amplifier_anyio.orchestrators.loop_lifecycle`)
runs the same protocol inside a session. See ``docs/lifecycle.md``.
"""

from __future__ import annotations

from ..errors import OrchestrationError
from ._context import ExecutionContext
from ._frozen import FrozenDict
from ._protocol import (
    AgentLifecycle,
    BasicLifecycle,
    OrchestrationResult,
    OrchestratorEvent,
    OrchestratorMetrics,
    OrchestratorProtocol,
    Planner,
    Step,
    Worker,
)
from ._reference import OrchestrationRun, ReferenceOrchestrator, StepOutcome, validate_plan
from ._retry import RetryPolicy
from ._routing import RoutingDecision, route
from ._stages import TERMINAL_STAGES, ErrorPropagation, LifecycleStage

__all__ = (
    "LifecycleStage",
    "ErrorPropagation",
    "TERMINAL_STAGES",
    "ExecutionContext",
    "FrozenDict",
    "RoutingDecision",
    "route",
    "OrchestrationError",
    "AgentLifecycle",
    "BasicLifecycle",
    "OrchestratorProtocol",
    "OrchestratorEvent",
    "Step",
    "Worker",
    "Planner",
    "validate_plan",
    "RetryPolicy",
    "OrchestrationResult",
    "OrchestratorMetrics",
    "ReferenceOrchestrator",
    "OrchestrationRun",
    "StepOutcome",
)
