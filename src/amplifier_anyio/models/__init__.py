"""Models of amplifier_anyio: attrs values and the converter that (un)structures them.

Every model round-trips: ``structure(unstructure(x), type(x)) == x``.
"""

from __future__ import annotations

from ._converter import converter, structure, unstructure
from ._info import ModelInfo, ModuleInfo, ModuleType, ProviderInfo
from ._messages import (
    BLOCK_TYPES,
    INVALID_ARGUMENTS_KEY,
    ChatRequest,
    ChatResponse,
    ContentBlock,
    ImageBlock,
    Message,
    ProviderBlock,
    ReasoningBlock,
    RedactedThinkingBlock,
    Role,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    ToolCallBlock,
    ToolResultBlock,
    ToolSpec,
    Usage,
    Visibility,
)
from ._pricing import PRICE_KEYS, Price, PriceTable
from ._results import HOOK_ACTIONS, ContextInjection, HookAction, HookResult, ToolResult

__all__ = (
    # content blocks
    "TextBlock",
    "ThinkingBlock",
    "RedactedThinkingBlock",
    "ToolCallBlock",
    "ToolResultBlock",
    "ImageBlock",
    "ReasoningBlock",
    "ProviderBlock",
    "ContentBlock",
    "BLOCK_TYPES",
    "Visibility",
    # messages and the provider envelope
    "Role",
    "Message",
    "ToolCall",
    "INVALID_ARGUMENTS_KEY",
    "ToolSpec",
    "Usage",
    "Price",
    "PriceTable",
    "PRICE_KEYS",
    "ChatRequest",
    "ChatResponse",
    # results
    "ToolResult",
    "HookResult",
    "HookAction",
    "HOOK_ACTIONS",
    "ContextInjection",
    # descriptions
    "ProviderInfo",
    "ModelInfo",
    "ModuleInfo",
    "ModuleType",
    # conversion
    "converter",
    "structure",
    "unstructure",
)
