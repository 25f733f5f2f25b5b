"""The kernel: hook registry, cancellation token, coordinator (and, later, session and loader)."""

from __future__ import annotations

from .cancellation import CancellationState, CancellationStatistics, CancellationToken
from .coordinator import MOUNT_POINTS, ModuleCoordinator
from .hooks import Handler, HookRegistry, HookRegistryStatistics
from .tracing import (
    ToolCallContext,
    current_tool_call,
    current_trace_id,
    tool_call_scope,
    trace_scope,
)

__all__ = (
    "HookRegistry",
    "HookRegistryStatistics",
    "Handler",
    "CancellationToken",
    "CancellationState",
    "CancellationStatistics",
    "ModuleCoordinator",
    "MOUNT_POINTS",
    "ToolCallContext",
    "current_trace_id",
    "current_tool_call",
    "trace_scope",
    "tool_call_scope",
)
