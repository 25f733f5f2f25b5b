"""Messages in the shape the GenAI semantic conventions give captured content.

Used by ``hooks-otel`` only when content capture is on. Input and output messages are
``{"role", "parts": [...]}`` objects; a part is ``{"type": "text", "content"}``,
``{"type": "reasoning", "content"}``, ``{"type": "tool_call", "id", "name", "arguments"}``
or ``{"type": "tool_call_response", "id", "response"}`` (other blocks keep their own
fields under their own type). Everything is serialised to one JSON string per attribute,
as span attributes cannot hold nested objects.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = (
    "to_json",
    "input_messages",
    "system_instructions",
    "output_messages",
    "tool_definitions",
    "text_message",
)


def to_json(value: Any) -> str:
    """Compact JSON; a value JSON cannot hold is written as its ``str``."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def _block_part(block: Any) -> dict[str, Any]:
    if not isinstance(block, Mapping):
        return {"type": "text", "content": str(block)}
    kind = block.get("type")
    if kind == "text":
        return {"type": "text", "content": block.get("text", "")}
    if kind == "thinking":
        return {"type": "reasoning", "content": block.get("thinking", "")}
    if kind == "tool_call":
        return {
            "type": "tool_call",
            "id": block.get("id"),
            "name": block.get("name"),
            "arguments": block.get("input"),
        }
    if kind == "tool_result":
        return {
            "type": "tool_call_response",
            "id": block.get("tool_call_id"),
            "response": block.get("output"),
        }
    return {k: v for k, v in block.items() if k != "visibility"}


def _parts(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    if message.get("role") == "tool":
        return [
            {"type": "tool_call_response", "id": message.get("tool_call_id"), "response": content}
        ]
    if isinstance(content, str):
        parts: list[dict[str, Any]] = [{"type": "text", "content": content}] if content else []
    else:
        parts = [_block_part(block) for block in content or ()]
    seen = {p.get("id") for p in parts if p.get("type") == "tool_call"}
    for call in message.get("tool_calls") or ():
        if isinstance(call, Mapping) and call.get("id") not in seen:
            parts.append(
                {
                    "type": "tool_call",
                    "id": call.get("id"),
                    "name": call.get("name"),
                    "arguments": call.get("arguments"),
                }
            )
    return parts


def input_messages(messages: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The request's messages except the system ones (those are the instructions)."""
    return [
        {"role": m.get("role"), "parts": _parts(m)}
        for m in messages
        if m.get("role") not in ("system", "developer")
    ]


def system_instructions(messages: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The parts of the request's system (and developer) messages, in order."""
    return [
        part for m in messages if m.get("role") in ("system", "developer") for part in _parts(m)
    ]


def output_messages(response: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The response as one assistant message with its finish reason."""
    message = {"role": "assistant", "content": response.get("content") or []}
    message["tool_calls"] = response.get("tool_calls") or []
    return [
        {
            "role": "assistant",
            "parts": _parts(message),
            "finish_reason": response.get("finish_reason") or "stop",
        }
    ]


def tool_definitions(tools: Iterable[Mapping[str, Any]] | None) -> list[dict[str, Any]]:
    """The request's tool specs as ``{"type": "function", name, description, parameters}``."""
    return [
        {
            "type": "function",
            "name": t.get("name"),
            "description": t.get("description"),
            "parameters": t.get("parameters"),
        }
        for t in tools or ()
    ]


def text_message(role: str, text: str) -> list[dict[str, Any]]:
    """One message of one text part (the turn's prompt, the turn's answer)."""
    return [{"role": role, "parts": [{"type": "text", "content": text}]}]
