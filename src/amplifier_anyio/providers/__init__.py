"""Providers: the offline ScriptedProvider and the HTTP providers (OpenAI-compatible, Anthropic).

The names are imported on first use (PEP 562): a plan with the scripted provider does not
import httpx or the HTTP providers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_names

if TYPE_CHECKING:
    from ._http import RetryPolicy, invalid_tool_call
    from ._upstream import UpstreamView, answers_upstream
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
    "answers_upstream",
    "UpstreamView",
)

_LAZY: dict[str, str] = {
    "ScriptedProvider": "scripted",
    "ScriptExhaustedError": "scripted",
    "OpenAIChatProvider": "openai",
    "AnthropicProvider": "anthropic",
    "RetryPolicy": "_http",
    "invalid_tool_call": "_http",
    "answers_upstream": "_upstream",
    "UpstreamView": "_upstream",
}


__getattr__, __dir__ = lazy_names(__name__, globals(), _LAZY)
