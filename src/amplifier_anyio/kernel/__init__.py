"""The kernel, the core only: hooks, cancellation, the turn handle, the budget tree,
the coordinator, services, offload, tracing, the upstream-module adapter, mount plans,
the module loader and sources. It imports nothing above it (docs/architecture.md).

The session, the turn event stream, bundles and plan validation moved up to
`amplifier_anyio.session`; their names here still work for one release, with a
``DeprecationWarning``."""

from __future__ import annotations

from ._budget import BUDGET_FINISH_REASON, Budget, BudgetMeter, BudgetStatistics
from ._cancellation import CancellationState, CancellationStatistics, CancellationToken
from ._coordinator import MOUNT_POINTS, CoordinatorStatistics, ModuleCoordinator
from ._foreign import chat_response_of, hook_result_of, tool_result_of
from ._handle import TurnHandle, TurnHandleStatistics, TurnPhase, current_turn, turn_scope
from ._hooks import Handler, HookAnswer, HookRegistry, HookRegistryStatistics
from ._loader import ENTRY_POINT_GROUP, ModuleLoader, package_name
from ._mount_plan import (
    CASSETTE_MODES,
    FAILOVER_CONDITIONS,
    CassetteSpec,
    ModuleSpec,
    MountPlan,
    ProvidersPolicy,
    expand_variables,
)
from ._services import ServiceFunction, ServiceState, ServiceStatistics
from ._sources import GitSource, fetch_git_source
from ._tracing import (
    ToolCallContext,
    current_tool_call,
    current_trace_id,
    tool_call_scope,
    trace_scope,
)
from ._turns import PendingApproval, TurnResult, TurnStatus

__all__ = (
    "TurnResult",
    "TurnStatus",
    "PendingApproval",
    "MountPlan",
    "ModuleSpec",
    "CassetteSpec",
    "CASSETTE_MODES",
    "ProvidersPolicy",
    "FAILOVER_CONDITIONS",
    "expand_variables",
    "ModuleLoader",
    "ENTRY_POINT_GROUP",
    "package_name",
    "GitSource",
    "fetch_git_source",
    "hook_result_of",
    "tool_result_of",
    "chat_response_of",
    "HookRegistry",
    "HookRegistryStatistics",
    "HookAnswer",
    "Handler",
    "CancellationToken",
    "TurnHandle",
    "Budget",
    "BudgetMeter",
    "BudgetStatistics",
    "BUDGET_FINISH_REASON",
    "TurnPhase",
    "TurnHandleStatistics",
    "CancellationState",
    "CancellationStatistics",
    "ModuleCoordinator",
    "CoordinatorStatistics",
    "ServiceFunction",
    "ServiceState",
    "ServiceStatistics",
    "MOUNT_POINTS",
    "ToolCallContext",
    "current_trace_id",
    "current_tool_call",
    "current_turn",
    "trace_scope",
    "turn_scope",
    "tool_call_scope",
)

_MOVED_TO_SESSION = frozenset(
    {
        "AmplifierSession",
        "SessionState",
        "SessionStatus",
        "TurnEventStream",
        "Event",
        "resolve_plan_file",
        "resolve_plan_dict",
        "ResolvedPlan",
        "validate_plan",
        "PlanReport",
    }
)


def __getattr__(name: str) -> object:
    """The names that moved to `amplifier_anyio.session`, with a DeprecationWarning."""
    if name in _MOVED_TO_SESSION:
        import importlib  # noqa: PLC0415 - only for a deprecated name
        import warnings  # noqa: PLC0415

        warnings.warn(
            f"amplifier_anyio.kernel.{name} moved to amplifier_anyio.session.{name}; "
            "the old name goes in the next release",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module("amplifier_anyio.session"), name)
    msg = f"module {__name__!r} has no attribute {name!r}"
    raise AttributeError(msg)
