"""What every orchestrator shares: the structured tool batch and the turn helpers."""

from __future__ import annotations

from .tool_batch import CANCELLED_MESSAGE, ToolBatch, ToolBatchConfig, cancelled_result
from .turn import (
    LOOP_LIMIT_REMINDER,
    apply_injections,
    assistant_message,
    build_request,
    error_payload,
    pending_injection,
    select_provider,
    tool_calls_of,
)

__all__ = (
    "ToolBatch",
    "ToolBatchConfig",
    "cancelled_result",
    "CANCELLED_MESSAGE",
    "LOOP_LIMIT_REMINDER",
    "select_provider",
    "apply_injections",
    "pending_injection",
    "build_request",
    "tool_calls_of",
    "assistant_message",
    "error_payload",
)
