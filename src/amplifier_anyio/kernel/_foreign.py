"""Answers of modules written for amplifier-core, converted into ours.

Upstream modules build their answers as pydantic models (``amplifier_core.HookResult``,
``ToolResult``, ``ChatResponse``, content blocks, ``ToolCall``). They are recognised
here by their shape — duck typing, ``model_dump`` where there is one — never by
importing amplifier_core, and converted at the edge where they enter: the hook registry
(verdicts), the tool batch (tool results), the turn engine (provider responses and tool
calls) and the contexts and the request builder (messages holding pydantic blocks).
The other direction enters at our providers: an upstream orchestrator's pydantic
``ChatRequest`` is converted by `chat_request_of`, and `watch_provider_calls` lets the
session see a provider failure that such an orchestrator swallowed.

A value that cannot be converted is a
[`ForeignModuleError`][amplifier_anyio.errors.ForeignModuleError] naming where it came from; the
callers decide what that means (the hook registry fails closed: the verdict becomes a ``deny``).

While a module's ``mount`` (or ``on_session_ready``) runs, `module_scope` names
it, so that a hook it registers can be named by its module in those errors.
"""

from __future__ import annotations

import contextvars
import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import attrs

from ..errors import ForeignModuleError, ValidationError
from ..models import ChatRequest, ChatResponse, HookResult, ToolCall, ToolResult, structure

__all__ = (
    "hook_result_of",
    "tool_result_of",
    "chat_response_of",
    "chat_request_of",
    "tool_calls_of",
    "plain_message",
    "plain_value",
    "module_scope",
    "current_module",
    "ProviderCalls",
    "watch_provider_calls",
    "provider_call_ended",
)

_HOOK_FIELDS = frozenset(f.name for f in attrs.fields(HookResult))
_CURRENT_MODULE: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "amplifier_anyio_current_module", default=None
)
_PROVIDER_CALLS: contextvars.ContextVar[ProviderCalls | None] = contextvars.ContextVar(
    "amplifier_anyio_provider_calls", default=None
)


def current_module() -> str | None:
    """The id of the module whose ``mount`` / ``on_session_ready`` is running, if any."""
    return _CURRENT_MODULE.get()


@contextmanager
def module_scope(module_id: str) -> Iterator[None]:
    """Name ``module_id`` as the module being mounted for the duration of the block."""
    token = _CURRENT_MODULE.set(module_id)
    try:
        yield
    finally:
        _CURRENT_MODULE.reset(token)


def plain_value(value: Any) -> Any:
    """``value`` with every pydantic model inside it (``model_dump``) turned into plain
    dicts and lists; dicts and lists are copied only where something changed."""
    dump = getattr(value, "model_dump", None)
    if dump is not None and not isinstance(value, type):
        return plain_value(dump(mode="json", exclude_none=True))
    if isinstance(value, dict):
        items = {k: plain_value(v) for k, v in value.items()}
        return items if any(items[k] is not value[k] for k in value) else value
    if isinstance(value, list | tuple):
        converted = [plain_value(v) for v in value]
        if isinstance(value, tuple) or any(a is not b for a, b in zip(converted, value)):  # noqa: B905
            return converted
        return value
    return value


def plain_message(message: Any) -> Any:
    """A context message dict whose content blocks or tool calls are pydantic models
    (an upstream orchestrator stores ``response.content`` as it is) as plain dicts.

    Cheap when there is nothing to convert: the message is returned as it is.
    """
    if message.__class__ is not dict and not isinstance(message, Mapping):
        return plain_value(message)
    content = message.get("content")
    calls = message.get("tool_calls")
    if (content.__class__ is str or not _needs_plain(content)) and (
        calls is None or not _needs_plain(calls)
    ):
        return message
    converted = dict(message)
    if _needs_plain(content):
        converted["content"] = plain_value(content)
    if _needs_plain(calls):
        converted["tool_calls"] = plain_value(calls)
    return converted


def _needs_plain(value: Any) -> bool:
    # On every request for every message: a plain loop over exact types is the cheap way.
    kind = value.__class__
    if kind is not list:
        return kind is tuple
    for item in value:  # noqa: SIM110 - any() over a generator costs more
        if item.__class__ is not dict and item.__class__ is not str:
            return True
    return False


def _dump(value: Any) -> dict[str, Any] | None:
    """A pydantic model's fields (python mode: values kept as they are), else None."""
    dump = getattr(value, "model_dump", None)
    if dump is None or isinstance(value, type):
        return None
    try:
        dumped = dump()
    except Exception:  # noqa: BLE001 - the caller reports the value
        return None
    return dumped if isinstance(dumped, dict) else None


def _describe(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:119] + "…"


def hook_result_of(value: Any, *, origin: str) -> HookResult | None:
    """A hook handler's answer as our [`HookResult`][amplifier_anyio.HookResult] (None stays None:
    continue).

    Accepted: ours; an object with ``action`` (an amplifier-core ``HookResult``: its
    ``model_dump``, or its attributes); a dict with ``action`` (amplifier-core parses
    those too). amplifier-core 2.0's ``context_injections`` list is folded into one
    injection when ``context_injection`` is empty. Anything else raises
    [`ForeignModuleError`][amplifier_anyio.errors.ForeignModuleError] naming ``origin``.
    """
    if value is None or isinstance(value, HookResult):
        return value
    if isinstance(value, Mapping):
        fields: dict[str, Any] | None = dict(value)
    else:
        fields = _dump(value)
        if fields is None and hasattr(value, "action"):
            fields = {name: getattr(value, name) for name in _HOOK_FIELDS if hasattr(value, name)}
    if not fields or "action" not in fields:
        msg = f"{origin} returned {_describe(value)}, which is not a hook result"
        raise ForeignModuleError(msg)
    injections = fields.get("context_injections")
    if injections and not fields.get("context_injection"):
        texts = [_injection_text(item) for item in injections]
        fields["context_injection"] = "\n\n".join(t for t in texts if t)
        if fields.get("action") == "continue" and fields["context_injection"]:
            fields["action"] = "inject_context"
    kept = {k: v for k, v in fields.items() if k in _HOOK_FIELDS}
    if kept.get("data") is not None:  # pydantic values inside (a ToolResult…) as dicts
        kept["data"] = plain_value(kept["data"])
    if kept.get("approval_options") is not None:
        kept["approval_options"] = list(kept["approval_options"])
    try:
        return HookResult(**kept)
    except (TypeError, ValueError) as exc:
        msg = f"{origin} returned a hook result that is not valid here: {exc}"
        raise ForeignModuleError(msg) from exc


def _injection_text(item: Any) -> str:
    if isinstance(item, Mapping):
        return str(item.get("content") or "")
    return str(getattr(item, "content", "") or "")


def tool_result_of(value: Any, *, origin: str) -> ToolResult:
    """A tool's return value as our [`ToolResult`][amplifier_anyio.ToolResult].

    Ours is kept; an object with a boolean ``success`` (an amplifier-core ``ToolResult``)
    keeps its success, output and error — a failure's output (stdout, stderr, return
    code…) reaches the model; its 2.0 ``content`` text blocks stand in for a missing
    output. Any other value is the output of a success, as before.
    """
    if isinstance(value, ToolResult):
        return value
    if isinstance(value, Mapping | str | int | float | list | tuple) or value is None:
        return ToolResult(success=True, output=value)
    if not hasattr(value, "success"):
        return ToolResult(success=True, output=value)
    fields = _dump(value)
    if fields is None:
        fields = {
            "success": getattr(value, "success", None),
            "output": getattr(value, "output", None),
            "error": getattr(value, "error", None),
        }
    success = fields.get("success")
    if not isinstance(success, bool):
        msg = f"{origin} returned a result whose success is {_describe(success)}, not a bool"
        raise ForeignModuleError(msg)
    output = plain_value(fields.get("output"))
    if output is None and fields.get("content"):
        texts = [b.get("text") for b in plain_value(fields["content"]) if isinstance(b, Mapping)]
        output = "\n".join(t for t in texts if isinstance(t, str)) or None
    error = plain_value(fields.get("error"))
    if error is not None and not isinstance(error, Mapping):
        error = {"message": str(error)}
    return ToolResult(success=success, output=output, error=dict(error) if error else None)


def chat_response_of(value: Any, *, origin: str) -> ChatResponse:
    """A provider's answer as our [`ChatResponse`][amplifier_anyio.ChatResponse].

    Ours is kept; a pydantic ``ChatResponse`` (or a dict of that shape) is structured
    through our converter: its blocks become ours, unknown fields are dropped, and
    amplifier-core's ``degradation`` lands in ``metadata``. Anything that does not fit
    raises [`ForeignModuleError`][amplifier_anyio.errors.ForeignModuleError] naming ``origin`` and
    the field.
    """
    if isinstance(value, ChatResponse):
        return value
    data = _plain(value, f"{origin} returned", "a chat response")
    if not isinstance(data, dict) or "content" not in data:
        msg = f"{origin} returned {_describe(value)}, not a chat response (no content)"
        raise ForeignModuleError(msg)
    degradation = data.pop("degradation", None)
    if degradation:
        data["metadata"] = {**(data.get("metadata") or {}), "degradation": degradation}
    if isinstance(data.get("tool_calls"), list):
        data["tool_calls"] = [_call_fields(c, origin) for c in data["tool_calls"]]
    try:
        return structure(data, ChatResponse)
    except ValidationError as exc:
        msg = f"{origin} returned a chat response that does not fit ours: {exc}"
        raise ForeignModuleError(msg) from exc


def tool_calls_of(calls: Any, *, origin: str) -> list[ToolCall]:
    """Tool calls (ours, pydantic ``ToolCall``s, dicts) as our
    [`ToolCall`][amplifier_anyio.ToolCall] list."""
    if not calls:
        return []
    if all(isinstance(c, ToolCall) for c in calls):
        return list(calls)
    converted = []
    for call in calls:
        if isinstance(call, ToolCall):
            converted.append(call)
            continue
        fields = _call_fields(call, origin)
        try:
            converted.append(structure(fields, ToolCall))
        except ValidationError as exc:
            msg = f"{origin} gave a tool call that does not fit ours: {exc}"
            raise ForeignModuleError(msg) from exc
    return converted


def _call_fields(call: Any, origin: str) -> dict[str, Any]:
    """A tool call's ``id``, ``name`` and ``arguments`` (a JSON text is decoded;
    upstream transcripts may say ``tool`` / ``input``)."""
    if isinstance(call, Mapping):
        fields = dict(call)
    else:
        fields = _dump(call) or {
            k: getattr(call, k) for k in ("id", "name", "arguments") if hasattr(call, k)
        }
    name = fields.get("name", fields.get("tool"))
    arguments = fields.get("arguments", fields.get("input", {}))
    if isinstance(arguments, str | bytes):
        try:
            arguments = json.loads(arguments or "{}")
        except ValueError as exc:
            msg = f"{origin} gave tool call {fields.get('id')!r} arguments that are not JSON"
            raise ForeignModuleError(msg) from exc
    if not isinstance(fields.get("id"), str) or not isinstance(name, str):
        msg = f"{origin} gave {_describe(call)}, which is not a tool call (id and name)"
        raise ForeignModuleError(msg)
    return {"id": fields["id"], "name": name, "arguments": plain_value(arguments)}


def chat_request_of(value: Any, *, origin: str) -> ChatRequest:
    """A request as our [`ChatRequest`][amplifier_anyio.ChatRequest]: ours is kept; an
    amplifier-core ``ChatRequest`` (or a dict of that shape) is converted.

    Upstream orchestrators build it from their context's dicts: messages whose content
    holds pydantic blocks, assistant ``tool_calls`` written ``{id, tool, arguments}``,
    the ``function`` role, extras such as ``thinking_block``. Those become ours (``tool``
    becomes ``name``, ``function`` becomes ``tool``; extras are dropped). Anything that
    does not fit raises [`ForeignModuleError`][amplifier_anyio.errors.ForeignModuleError] naming
    ``origin`` and the field.
    """
    if isinstance(value, ChatRequest):
        return value
    data = _plain(value, f"{origin} was given", "a chat request")
    if not isinstance(data, dict) or not isinstance(data.get("messages"), list):
        msg = f"{origin} was given {_describe(value)}, not a chat request (no messages)"
        raise ForeignModuleError(msg)
    data["messages"] = [_message_fields(m, origin) for m in data["messages"]]
    if data.get("stream") is None:
        data.pop("stream", None)  # upstream's is optional, ours a bool
    try:
        return structure(data, ChatRequest)
    except ValidationError as exc:
        msg = f"{origin} was given a chat request that does not fit ours: {exc}"
        raise ForeignModuleError(msg) from exc


def _message_fields(message: Any, origin: str) -> Any:
    if not isinstance(message, dict):
        return message  # the converter names it
    fields = dict(message)
    if fields.get("role") == "function":  # OpenAI's old name for a tool's answer
        fields["role"] = "tool"
    if fields.get("content") is None:
        fields["content"] = ""
    if isinstance(fields.get("tool_calls"), list):
        fields["tool_calls"] = [_call_fields(c, origin) for c in fields["tool_calls"]]
    return fields


@attrs.define(eq=False)
class ProviderCalls:
    """What `watch_provider_calls` saw: ``failure`` is the error of the last provider call
    made for an upstream caller, None when that call succeeded (or none was made)."""

    failure: Exception | None = None
    calls: int = 0


@contextmanager
def watch_provider_calls() -> Iterator[ProviderCalls]:
    """Record, for the block (and the tasks started in it), how the provider calls made
    for upstream callers ended. The session wraps an upstream orchestrator's turn in it:
    an orchestrator that returns while its last provider call failed (upstream
    loop-events turns the error into its answer) has failed, whatever it returned."""
    calls = ProviderCalls()
    token = _PROVIDER_CALLS.set(calls)
    try:
        yield calls
    finally:
        _PROVIDER_CALLS.reset(token)


def provider_call_ended(failure: Exception | None) -> None:
    """Note how a provider call made for an upstream caller ended (a provider calls this)."""
    calls = _PROVIDER_CALLS.get()
    if calls is not None:
        calls.calls += 1
        calls.failure = failure


def _plain(value: Any, said: str, noun: str) -> Any:
    """A mapping or a pydantic-style model as plain data; anything else raises
    ForeignModuleError (``"<said> <what it is>, not <noun>"``)."""
    if isinstance(value, Mapping):
        return plain_value(dict(value))
    if _dump(value) is not None:
        return plain_value(value)
    msg = f"{said} {_describe(value)}, not {noun}"
    raise ForeignModuleError(msg)
