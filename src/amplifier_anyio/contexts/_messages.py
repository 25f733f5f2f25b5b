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

__all__ = (
    "call_ids",
    "calls",
    "result_ids",
    "copy_message",
    "estimate_tokens",
    "hand_out",
    "cached_model",
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


def copy_message(value: Any) -> Any:
    """Copy the dicts and lists of a JSON-like value; leave leaves shared (they are immutable).

    A dict or list subclass comes back as a plain dict or list, as it always did.
    """
    kind = value.__class__
    if kind is dict:  # the common case: one C-level copy, then only nested containers
        copied = value.copy()
        for key, item in copied.items():
            if item.__class__ is dict or item.__class__ is list or isinstance(item, dict | list):
                copied[key] = copy_message(item)  # same keys: no resize while iterating
        return copied
    if kind is list:
        return [
            copy_message(item)
            if item.__class__ is dict or item.__class__ is list or isinstance(item, dict | list)
            else item
            for item in value
        ]
    if isinstance(value, dict):
        return {key: copy_message(item) for key, item in value.items()}
    if isinstance(value, list):
        return [copy_message(item) for item in value]
    return value


def estimate_tokens(message: Mapping[str, Any]) -> int:
    """About one token per four characters of the message's compact JSON (at least 1)."""
    text = json.dumps(message, ensure_ascii=False, separators=(",", ":"), default=str)
    return max(1, (len(text) + 3) // 4)


# -- structured models of handed-out copies ---------------------------------------------
# A request view hands out copies of the stored messages, and the turn engine converts each
# copy into a ``Message`` for the provider request. The conversion of a stored message
# never changes (history is append-only; set_messages / clear store new dicts), so a
# context keeps one slot per stored message for its model, and registers each copy it
# hands out with the stored message and the slot. ``build_request`` reuses the model when
# the copy it is given is a registered one and still equal to the stored message (a caller
# may have changed its copy: then it is converted afresh, as before).

_handed: dict[int, tuple[dict[str, Any], dict[str, Any], list[Any]]] = {}


def hand_out(stored: list[dict[str, Any]], slots: list[list[Any]]) -> list[dict[str, Any]]:
    """Copies of ``stored`` for a request, registered with their slots (see above).

    A slot holds ``[stored message, model]`` once filled, so a slot paired with another
    message (a subclass that keeps its own list) is never believed; slots of another
    length than ``stored`` are not used at all.
    """
    global _handed  # noqa: PLW0603 - the registry of the latest view only
    copies = [copy_message(message) for message in stored]
    # A new registry per view: the previous view's copies are released; a view of another
    # context being converted meanwhile only misses the cache.
    _handed = (
        {
            id(copy): (copy, message, slot)
            for copy, message, slot in zip(copies, stored, slots, strict=True)
        }
        if len(slots) == len(stored)
        else {}
    )
    return copies


def cached_model(message: dict[str, Any]) -> tuple[Any, Any]:
    """``(fill, model)`` for a message given to a request: ``model`` is the cached one or
    None; ``fill(model)`` caches a fresh one (None when the message is not a handed-out
    copy still equal to its stored message)."""
    entry = _handed.get(id(message))
    if entry is None or entry[0] is not message or message != entry[1]:
        return None, None
    stored, slot = entry[1], entry[2]
    if slot and slot[0] is stored:
        return None, slot[1]

    def fill(model: Any) -> None:
        slot[:] = [stored, model]

    return fill, None
