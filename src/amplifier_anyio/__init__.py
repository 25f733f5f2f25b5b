"""amplifier_anyio: an Amplifier-style agent runtime on AnyIO structured concurrency.

It runs unchanged inside trio and asyncio applications:

```python
async with AmplifierSession(plan) as session:
    result = await session.run("What is in this directory?")
```
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._lazy import lazy_names

if TYPE_CHECKING:
    from .errors import (
        AmplifierError,
        ApprovalDeferred,
        CassetteMismatchError,
        ConfigError,
        ContextWriteError,
        DelegationError,
        LLMError,
        ModuleLoadError,
        ModuleNotFoundError,
        SessionError,
        ValidationError,
    )
    from .interfaces import Claims
    from .kernel import (
        CancellationState,
        CancellationToken,
        HookRegistry,
        ModuleCoordinator,
        ModuleLoader,
        ModuleSpec,
        MountPlan,
        PendingApproval,
        ToolCallContext,
        TurnHandle,
        TurnResult,
        TurnStatus,
        current_tool_call,
        current_trace_id,
        current_turn,
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
    from .session import AmplifierSession, SessionState, SessionStatus, validate_plan

# The public names are imported on first use (PEP 562): ``import amplifier_anyio`` alone
# stays cheap for a program that only needs, say, the models or the CLI's --help.
_LAZY: dict[str, str] = {
    "AmplifierError": "errors",
    "ApprovalDeferred": "errors",
    "CassetteMismatchError": "errors",
    "ConfigError": "errors",
    "ContextWriteError": "errors",
    "DelegationError": "errors",
    "LLMError": "errors",
    "ModuleLoadError": "errors",
    "ModuleNotFoundError": "errors",
    "SessionError": "errors",
    "ValidationError": "errors",
    "Claims": "interfaces",
    "AmplifierSession": "session",
    "CancellationState": "kernel",
    "CancellationToken": "kernel",
    "TurnHandle": "kernel",
    "HookRegistry": "kernel",
    "ModuleCoordinator": "kernel",
    "ModuleLoader": "kernel",
    "ModuleSpec": "kernel",
    "MountPlan": "kernel",
    "PendingApproval": "kernel",
    "SessionState": "session",
    "SessionStatus": "session",
    "ToolCallContext": "kernel",
    "TurnResult": "kernel",
    "TurnStatus": "kernel",
    "current_tool_call": "kernel",
    "current_trace_id": "kernel",
    "current_turn": "kernel",
    "validate_plan": "session",
    "ChatRequest": "models",
    "ChatResponse": "models",
    "HookResult": "models",
    "Message": "models",
    "TextBlock": "models",
    "ThinkingBlock": "models",
    "ToolCall": "models",
    "ToolResult": "models",
    "ToolSpec": "models",
    "Usage": "models",
    "structure": "models",
    "unstructure": "models",
}


__getattr__, __dir__ = lazy_names(__name__, globals(), _LAZY)


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
    "TurnHandle",
    "CancellationState",
    "ToolCallContext",
    "current_tool_call",
    "current_trace_id",
    "current_turn",
    # tools
    "Claims",
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
    "DelegationError",
    "ModuleNotFoundError",
    "ModuleLoadError",
    "LLMError",
    "CassetteMismatchError",
)
