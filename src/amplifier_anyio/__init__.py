"""amplifier_anyio: an Amplifier-style agent runtime on AnyIO structured concurrency.

It runs unchanged inside trio and asyncio applications::

    async with AmplifierSession(plan) as session:
        result = await session.run("What is in this directory?")
"""

from __future__ import annotations

from .errors import (
    AmplifierError,
    ApprovalDeferred,
    ConfigError,
    ContextWriteError,
    LLMError,
    ModuleLoadError,
    ModuleNotFoundError,
    SessionError,
    ValidationError,
)
from .kernel import (
    AmplifierSession,
    CancellationState,
    CancellationToken,
    HookRegistry,
    ModuleCoordinator,
    ModuleLoader,
    ModuleSpec,
    MountPlan,
    PendingApproval,
    SessionState,
    SessionStatus,
    ToolCallContext,
    TurnResult,
    TurnStatus,
    current_tool_call,
    current_trace_id,
    validate_plan,
)
from .models import (
    ChatRequest,
    ChatResponse,
    HookResult,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    ToolResult,
    ToolSpec,
    Usage,
    structure,
    unstructure,
)

__version__ = "0.1.0"

__all__ = (
    "__version__",
    # sessions and turns
    "AmplifierSession",
    "SessionState",
    "SessionStatus",
    "TurnResult",
    "TurnStatus",
    "PendingApproval",
    "MountPlan",
    "ModuleSpec",
    "validate_plan",
    # kernel
    "ModuleCoordinator",
    "ModuleLoader",
    "HookRegistry",
    "CancellationToken",
    "CancellationState",
    "ToolCallContext",
    "current_tool_call",
    "current_trace_id",
    # models
    "Message",
    "TextBlock",
    "ThinkingBlock",
    "ToolCall",
    "ToolSpec",
    "ToolResult",
    "HookResult",
    "ChatRequest",
    "ChatResponse",
    "Usage",
    "structure",
    "unstructure",
    # errors
    "AmplifierError",
    "ConfigError",
    "ContextWriteError",
    "ApprovalDeferred",
    "ValidationError",
    "SessionError",
    "ModuleNotFoundError",
    "ModuleLoadError",
    "LLMError",
)
