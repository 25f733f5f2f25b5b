"""Reading tool calls and tool results out of plain message dicts.

Both shapes are recognised: OpenAI style (``tool_calls`` on the assistant message,
``role: tool`` answers) and content blocks (``{"type": "tool_call"}`` in an assistant's
content, ``{"type": "tool_result"}`` in any message's content; Anthropic's ``tool_use`` /
``tool_use_id`` spellings too, since transcripts of both kinds exist).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ..kernel._foreign import plain_message
from ..models import Message, structure

__all__ = (
    "call_ids",
    "calls",
    "result_ids",
    "copy_message",
    "estimate_tokens",
    "flat_cost",
    "to_model",
    "stored_model",
    "lost_result",
    "LOST_RESULT",
)

_CALL_BLOCKS = ("tool_call", "tool_use")


def calls(message: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(id, name)`` of every tool call an assistant message makes, in order, no repeats."""
    if message.get("role") != "assistant":
        return []
    found: list[tuple[str, str]] = []
    listed = message.get("tool_calls")
    if isinstance(listed, list):
        found.extend(_call(item) for item in listed if isinstance(item, Mapping))
    content = message.get("content")
    if isinstance(content, list):
        found.extend(
            _call(block)
            for block in content
            if isinstance(block, Mapping) and block.get("type") in _CALL_BLOCKS
        )
    seen: set[str] = set()
    unique = []
    for call_id, name in found:
        # a call listed both in tool_calls and as a block is still one call
        if call_id and call_id not in seen:
            seen.add(call_id)
            unique.append((call_id, name))
    return unique


def call_ids(message: Mapping[str, Any]) -> list[str]:
    """The ids of the tool calls an assistant message makes."""
    return [call_id for call_id, _ in calls(message)]


def result_ids(message: Mapping[str, Any]) -> list[str]:
    """The tool call ids a message answers (``role: tool`` or ``tool_result`` blocks)."""
    found: list[str] = []
    if message.get("role") == "tool":
        tool_call_id = message.get("tool_call_id")
        if isinstance(tool_call_id, str):
            found.append(tool_call_id)
    content = message.get("content")
    if isinstance(content, list):
        for block in content:
            if isinstance(block, Mapping) and block.get("type") == "tool_result":
                block_id = block.get("tool_call_id", block.get("tool_use_id"))
                if isinstance(block_id, str):
                    found.append(block_id)
    return found


def _call(item: Mapping[str, Any]) -> tuple[str, str]:
    call_id = item.get("id")
    name = item.get("name", item.get("tool"))
    function = item.get("function")
    if name is None and isinstance(function, Mapping):
        name = function.get("name")
    return (call_id if isinstance(call_id, str) else "", str(name) if name is not None else "")


_LEAVES = frozenset({str, int, float, bool, type(None)})
"""The exact types of a JSON value that is never copied (one set look-up each)."""


def copy_message(value: Any) -> Any:
    """Copy the dicts and lists of a JSON-like value; leave leaves shared (they are immutable).

    A dict or list subclass comes back as a plain dict or list, as it always did.
    """
    kind = value.__class__
    if kind is dict:  # the common case: one C-level copy, then only nested containers
        copied = value.copy()
        for key, item in copied.items():
            if item.__class__ not in _LEAVES and isinstance(item, dict | list):
                copied[key] = copy_message(item)  # same keys: no resize while iterating
        return copied
    if kind is list:
        return [
            item
            if item.__class__ in _LEAVES or not isinstance(item, dict | list)
            else copy_message(item)
            for item in value
        ]
    if isinstance(value, dict):
        return {key: copy_message(item) for key, item in value.items()}
    if isinstance(value, list):
        return [copy_message(item) for item in value]
    return value


_quoted = json.encoder.encode_basestring  # what json.dumps(ensure_ascii=False) writes for a str
_KEY_LENGTHS: dict[str, int] = {}
"""The quoted length of each key seen (a message has a handful of distinct keys)."""


def flat_cost(message: dict[str, Any]) -> int | None:
    """`estimate_tokens` of a message whose keys and values are all strings (a tool
    result, a prompt), without building its JSON; None for any other message.

    The JSON's length is ``{`` and ``}``, n - 1 commas, n colons, and each key and value
    quoted as ``json.dumps`` quotes it.
    """
    size = 2 * len(message) + 1
    known = _KEY_LENGTHS
    for key, value in message.items():
        if value.__class__ is not str:
            return None
        length = known.get(key)
        if length is None:
            if key.__class__ is not str:
                return None
            length = len(_quoted(key))
            if len(known) < 256:
                known[key] = length
        size += length + len(_quoted(value))
    return max(1, (size + 3) // 4)


def estimate_tokens(message: Mapping[str, Any]) -> int:
    """About one token per four characters of the message's compact JSON (at least 1)."""
    if message.__class__ is dict:
        cost = flat_cost(message)
        if cost is not None:
            return cost
    text = json.dumps(message, ensure_ascii=False, separators=(",", ":"), default=str)
    return max(1, (len(text) + 3) // 4)


# -- converted models and the lost-result answer ------------------------------------------

LOST_RESULT = "Error: the result of this call was not recorded (the context could not be written)"
"""The content a request gives a tool call whose result never reached the context."""


def lost_result(call: Mapping[str, Any]) -> dict[str, Any]:
    """The ``role: tool`` answer a request gives an unanswered call (see LOST_RESULT)."""
    return {
        "role": "tool",
        "tool_call_id": call.get("id"),
        "name": call.get("name") or call.get("tool"),
        "content": LOST_RESULT,
    }


def _normalise(message: dict[str, Any]) -> dict[str, Any]:
    # A context of amplifier-core's may hold pydantic blocks: plain dicts first.
    message = plain_message(message)
    # Amplifier transcripts name the tool of a call "tool"; our ToolCall says "name".
    listed = message.get("tool_calls")
    if not listed or all("name" in c for c in listed if isinstance(c, dict)):
        return message
    fixed = [
        {**c, "name": c["tool"]} if isinstance(c, dict) and "name" not in c and "tool" in c else c
        for c in listed
    ]
    return {**message, "tool_calls": fixed}


_STRING_FIELDS = frozenset({"role", "content", "name", "tool_call_id"})
"""The fields of a Message that a message of strings only can set."""


def to_model(message: dict[str, Any]) -> Message:
    """The [`Message`][amplifier_anyio.Message] of a context's message dict."""
    if message.__class__ is dict:
        # A tool result or a prompt (strings in Message's string fields): built directly,
        # the same Message the converter builds, without its per-field machinery. A
        # message it refuses goes to the converter, which says what is wrong.
        for key, value in message.items():
            if value.__class__ is not str or key not in _STRING_FIELDS:
                break
        else:
            try:
                return Message(**message)
            except (TypeError, ValueError):
                pass
    converted: Message = structure(_normalise(message), Message)
    return converted


def stored_model(message: dict[str, Any]) -> Message:
    """The model of a message a context stores (already plain), sharing nothing with it.

    A message of strings only is converted as it is (there is nothing in it to share or
    to make plain); any other from a copy.
    """
    for value in message.values():
        if value.__class__ is not str:
            return to_model(copy_message(message))
    return to_model(message)
