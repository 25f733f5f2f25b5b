"""The kernel: session, mount plans, module loader, coordinator, hooks, cancellation,
and the budget tree of sub-agents."""

from __future__ import annotations

from ._budget import BUDGET_FINISH_REASON, Budget, BudgetMeter, BudgetStatistics
from ._bundles import ResolvedPlan, resolve_plan_dict, resolve_plan_file
from ._cancellation import CancellationState, CancellationStatistics, CancellationToken
from ._coordinator import MOUNT_POINTS, CoordinatorStatistics, ModuleCoordinator
from ._event_stream import Event, TurnEventStream
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
from ._session import AmplifierSession, SessionState, SessionStatus
from ._sources import GitSource, fetch_git_source
from ._tracing import (
    ToolCallContext,
    current_tool_call,
    current_trace_id,
    tool_call_scope,
    trace_scope,
)
from ._turns import PendingApproval, TurnResult, TurnStatus
from ._validation import PlanReport, validate_plan

__all__ = (
    "AmplifierSession",
    "SessionState",
    "SessionStatus",
    "TurnEventStream",
    "Event",
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
    "resolve_plan_file",
    "resolve_plan_dict",
    "ResolvedPlan",
    "validate_plan",
    "PlanReport",
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
