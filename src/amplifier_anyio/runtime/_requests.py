"""The request side of a turn: provider choice, injections, building a ChatRequest."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from ..contexts._messages import LOST_RESULT, lost_result, to_model
from ..errors import ConfigError, LLMError
from ..kernel._foreign import tool_calls_of as foreign_tool_calls
from ..models import (
    ChatRequest,
    ChatResponse,
    HookResult,
    Message,
    ToolCall,
    ToolSpec,
    unstructure,
)

__all__ = (
    "LOOP_LIMIT_REMINDER",
    "select_provider",
    "apply_injections",
    "pending_injection",
    "ephemeral_injection",
    "build_request",
    "chat_request",
    "tool_calls_of",
    "assistant_message",
    "error_payload",
    "llm_request_payload",
    "default_model",
    "llm_response_payload",
    "answer_orphaned_calls",
    "LOST_RESULT",
    "request_messages",
    "inject",
)

LOOP_LIMIT_REMINDER = (
    '<system-reminder source="orchestrator-loop-limit">\n'
    "You have reached the maximum number of iterations for this turn.\n"
    "Please provide a response to the user now, summarizing your progress\n"
    "and noting what remains to be done. You can continue in the next turn\n"
    "if needed.\n"
    "\n"
    "DO NOT mention this iteration limit or reminder to the user explicitly.\n"
    "Simply wrap up naturally.\n"
    "</system-reminder>"
)
"""The user message added to the final request when the iteration limit is reached."""

_DEFAULT_PRIORITY = 100


def _priority(provider: Any) -> int:
    value = getattr(provider, "priority", None)
    if value is None:
        config = getattr(provider, "config", None)
        value = config.get("priority") if isinstance(config, Mapping) else None
    return int(value) if value is not None else _DEFAULT_PRIORITY


def select_provider(providers: Mapping[str, Any], default: str | None = None) -> tuple[str, Any]:
    """The provider to call: lowest ``priority`` first, then ``default``, then mount order."""
    if not providers:
        msg = "providers: no provider mounted"
        raise ConfigError(msg)
    if default is not None and default not in providers:
        msg = f"default_provider: {default!r} is not mounted (mounted: {', '.join(providers)})"
        raise ConfigError(msg)
    ranked = sorted(
        enumerate(providers.items()),
        key=lambda item: (_priority(item[1][1]), item[1][0] != default, item[0]),
    )
    return ranked[0][1]


def pending_injection(result: HookResult) -> dict[str, Any]:
    """The injection of a hook result as
    [`apply_injections`][amplifier_anyio.runtime.apply_injections] takes it."""
    return {
        "role": result.context_injection_role,
        "content": result.context_injection,
        "append_to_last_tool_result": result.append_to_last_tool_result,
    }


def ephemeral_injection(result: HookResult) -> dict[str, Any] | None:
    """The injection a hook result asks for the next request only (an ephemeral
    ``inject_context``), as [`pending_injection`][amplifier_anyio.runtime.pending_injection]
    gives it; None when it asks for none."""
    if result.action == "inject_context" and result.ephemeral and result.context_injection:
        return pending_injection(result)
    return None


def apply_injections(
    messages: list[dict[str, Any]], injections: Sequence[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Messages with ephemeral injections added for one request only (input untouched)."""
    if not injections:
        return messages
    result = list(messages)
    for injection in injections:
        last = result[-1] if result else None
        if injection.get("append_to_last_tool_result") and last and last.get("role") == "tool":
            result[-1] = {**last, "content": f"{last.get('content', '')}\n\n{injection['content']}"}
        else:
            result.append(
                {"role": injection.get("role", "system"), "content": injection["content"]}
            )
    return result


def inject(messages: list[Message], injections: Sequence[dict[str, Any]]) -> list[Message]:
    """[`apply_injections`][amplifier_anyio.runtime.apply_injections] over converted messages: the
    same result, as models.

    ``messages`` is a request's own list: it is extended in place and returned.
    """
    for injection in injections:
        last = messages[-1] if messages else None
        if injection.get("append_to_last_tool_result") and last and last.role == "tool":
            content = last.content if isinstance(last.content, str) else unstructure(last.content)
            messages[-1] = attrs.evolve(last, content=f"{content}\n\n{injection['content']}")
        else:
            role = injection.get("role", "system")
            messages.append(to_model({"role": role, "content": injection["content"]}))
    return messages


async def request_messages(
    context: Any, provider: Any | None = None
) -> tuple[list[Message], tuple[str, ...]]:
    """A request's messages, every tool call answered, and the ids the repair answered.

    Through the context's ``request_view`` when it has one (context-simple and
    context-persistent: their kept models, the cost of what was added since the last
    request); else its ``get_messages_for_request``,
    [`answer_orphaned_calls`][amplifier_anyio.runtime.answer_orphaned_calls] and a conversion of
    every message (a foreign context). The list is the caller's own.
    """
    view_of = getattr(context, "request_view", None)
    if view_of is not None:
        view = await view_of(provider=provider)
        return view.messages, tuple(view.repaired)
    dicts = await context.get_messages_for_request(provider=provider)
    dicts, repaired = answer_orphaned_calls(dicts)
    return [to_model(message) for message in dicts], tuple(repaired)


def build_request(
    messages: Sequence[dict[str, Any] | Message],
    tools: Mapping[str, Any] | None,
    **options: Any,
) -> ChatRequest:
    """A ChatRequest from context dicts (or converted messages, used as they are) and
    mounted tools (``None``: no tools offered)."""
    structured = [m if isinstance(m, Message) else to_model(m) for m in messages]
    return chat_request(structured, tools, **options)


def chat_request(
    messages: list[Message], tools: Mapping[str, Any] | None, **options: Any
) -> ChatRequest:
    """A ChatRequest from converted messages (the list is used as it is) and mounted tools
    (``None``: no tools offered): [`build_request`][amplifier_anyio.runtime.build_request] without
    the conversion."""
    specs = None
    if tools:
        specs = [
            ToolSpec(
                name=name,
                description=getattr(tool, "description", None),
                parameters=getattr(tool, "input_schema", None) or {"type": "object"},
            )
            for name, tool in tools.items()
        ]
    clean = {k: v for k, v in options.items() if v is not None}
    return ChatRequest(messages=messages, tools=specs, **clean)


def tool_calls_of(provider: Any, response: ChatResponse) -> list[ToolCall]:
    """The tool calls a response asks for, through the provider's parser when it has one."""
    parse = getattr(provider, "parse_tool_calls", None)
    calls = parse(response) if parse is not None else response.tool_calls
    if not calls:
        return []
    # An amplifier-core provider's parser may give its own pydantic ToolCalls.
    return foreign_tool_calls(calls, origin=f"provider {getattr(provider, 'name', provider)!r}")


def assistant_message(response: ChatResponse, calls: Sequence[ToolCall]) -> dict[str, Any]:
    """The context dict of an assistant response (blocks kept: thinking signatures matter)."""
    message: dict[str, Any] = {"role": "assistant", "content": unstructure(response.content)}
    if calls:
        message["tool_calls"] = [unstructure(call) for call in calls]
    if response.metadata:
        message["metadata"] = response.metadata
    return message


def error_payload(provider: str, exc: BaseException) -> dict[str, Any]:
    """The ``provider:error`` payload for ``exc``."""
    payload: dict[str, Any] = {
        "provider": provider,
        "error": {"type": type(exc).__name__, "msg": str(exc)},
    }
    if isinstance(exc, LLMError):
        payload["retryable"] = exc.retryable
        payload["status_code"] = exc.status_code
    return payload


def llm_request_payload(provider: str, request: ChatRequest, module: Any = None) -> dict[str, Any]:
    """The ``llm:request`` payload: the request as sent (plain dicts), emitted only when
    a hook listens, since unstructuring the whole history costs a pass over it. ``model``
    is the model asked for: the request's, else the provider ``module``'s default."""
    return {
        "provider": provider,
        "model": request.model or default_model(module),
        "message_count": len(request.messages),
        "request": unstructure(request),
    }


def default_model(provider: Any) -> str | None:
    """The model a provider asks for when a request names none: its ``model`` attribute
    (the HTTP providers'), else ``get_info().defaults["model"]``; None when it says none."""
    model = getattr(provider, "model", None)
    if isinstance(model, str) and model:
        return model
    try:
        defaults = getattr(provider.get_info(), "defaults", None)
    except Exception:  # noqa: BLE001 - a foreign provider's get_info: the model is optional
        return None
    model = defaults.get("model") if isinstance(defaults, dict) else None
    return model if isinstance(model, str) and model else None


def llm_response_payload(provider: str, response: ChatResponse) -> dict[str, Any]:
    """The ``llm:response`` payload: the response as received (plain dicts)."""
    return {
        "provider": provider,
        "model": (response.metadata or {}).get("model"),
        "usage": unstructure(response.usage) if response.usage else None,
        "finish_reason": response.finish_reason,
        "response": unstructure(response),
    }


def answer_orphaned_calls(
    messages: list[dict[str, Any]],
) -> tuple[list[dict[str, Any]], list[str]]:
    """The messages with every unanswered tool call answered, and the ids it answered.

    A provider rejects an assistant tool call that no ``role: tool`` message answers.
    The turn keeps its context consistent, but a context write can fail (a full disk) or
    a foreign module can leave a gap; so the request edge never sends an orphan. The
    input is untouched; with nothing to repair it is returned as is (one pass, no copy).
    """
    repaired: list[str] = []
    result: list[dict[str, Any]] | None = None
    index, count = 0, len(messages)
    while index < count:
        message = messages[index]
        index += 1
        calls = message.get("tool_calls") if message.get("role") == "assistant" else None
        if not calls:
            if result is not None:
                result.append(message)
            continue
        end = index
        answered = set()
        while end < count and messages[end].get("role") == "tool":
            answered.add(messages[end].get("tool_call_id"))
            end += 1
        missing = [c for c in calls if isinstance(c, dict) and c.get("id") not in answered]
        if missing and result is None:
            result = list(messages[: index - 1])
        if result is not None:
            result.extend(messages[index - 1 : end])
            result.extend(lost_result(call) for call in missing)
        repaired.extend(str(call.get("id")) for call in missing)
        index = end
    return (messages if result is None else result), repaired
