"""Providers: the offline ScriptedProvider and the HTTP providers (OpenAI-compatible, Anthropic).

The names are imported on first use (PEP 562): a plan with the scripted provider does not
import httpx or the HTTP providers.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._http import RetryPolicy, invalid_tool_call
    from .anthropic import AnthropicProvider
    from .openai import OpenAIChatProvider
    from .scripted import ScriptedProvider, ScriptExhaustedError

__all__ = (
    "ScriptedProvider",
    "ScriptExhaustedError",
    "OpenAIChatProvider",
    "AnthropicProvider",
    "RetryPolicy",
    "invalid_tool_call",
)

_LAZY: dict[str, str] = {
    "ScriptedProvider": "scripted",
    "ScriptExhaustedError": "scripted",
    "OpenAIChatProvider": "openai",
    "AnthropicProvider": "anthropic",
    "RetryPolicy": "_http",
    "invalid_tool_call": "_http",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        msg = f"module {__name__!r} has no attribute {name!r}"
        raise AttributeError(msg)
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
