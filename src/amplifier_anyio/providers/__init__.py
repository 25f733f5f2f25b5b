"""Providers: the offline ScriptedProvider and the HTTP providers (OpenAI-compatible, Anthropic)."""

from __future__ import annotations

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
