"""One provider call of a turn, read top to bottom: request → race or stream → response.

`call_provider` is the whole path, one step per function, in the order they run:

1. **the gate** (`_gate`): a spent budget here or above starts no call (the turn ends
   ``cancelled``); ``provider:request`` may deny the call (the turn ends ``incomplete``)
   or inject a message for this request only;
2. **the request** (`_request`): the context's messages, a tool call left unanswered
   answered (``provider:tool_sequence_repaired`` says which), the pending injections and
   the tools offered, as one ``ChatRequest`` (``runtime/_requests``); ``llm:request``
   when a hook listens;
3. **the answer** (`_answer`): under the session's ``providers_policy`` a race of
   attempts, failover and hedging (``runtime/_race``); else the provider asked once, its
   stream relayed as content events or its ``complete()`` (``runtime/_streaming``). A
   failure emits ``provider:error`` and propagates;
4. **the response** (`_account`, `_report`): priced and charged to the turn's usage and
   budget, then ``provider:cache``, ``llm:response`` and ``provider:response``.

The modules it calls are leaves: they build, race, relay and price, and none of them
calls back into the turn engine (``runtime/_turn``), which calls this path once per
provider call.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Protocol

import anyio.lowlevel

from ..events import (
    LLM_REQUEST,
    LLM_RESPONSE,
    PROVIDER_CACHE,
    PROVIDER_ERROR,
    PROVIDER_REQUEST,
    PROVIDER_RESPONSE,
    PROVIDER_TOOL_SEQUENCE_REPAIRED,
)
from ..kernel._turns import TurnStatus
from ..models import ChatRequest, ChatResponse, Usage, unstructure
from ..models._pricing import PriceTable
from ._policy import denial, limit_reminder
from ._prompt_cache import report_cache
from ._race import PROVIDERS_POLICY, call_with_policy
from ._requests import (
    chat_request,
    ephemeral_injection,
    error_payload,
    inject,
    llm_request_payload,
    llm_response_payload,
    request_messages,
)
from ._streaming import ask, stream_opener

if TYPE_CHECKING:
    from ..interfaces import ContextManager, Provider
    from ..kernel._coordinator import ModuleCoordinator
    from ..kernel._handle import TurnHandle
    from ..kernel._hooks import HookRegistry

__all__ = ("CallingTurn", "call_provider")

logger = logging.getLogger(__name__)


class _Options(Protocol):
    @property
    def extended_thinking(self) -> bool: ...

    @property
    def reasoning_effort(self) -> str | None: ...


class CallingTurn(Protocol):
    """What a provider call reads and writes of its turn
    ([`Turn`][amplifier_anyio.runtime.Turn] is one)."""

    providers: dict[str, Any]
    tools: dict[str, Any]
    context: ContextManager
    hooks: HookRegistry
    coordinator: ModuleCoordinator
    handle: TurnHandle
    orchestrator: str
    streaming: bool
    provider_name: str
    iterations: int
    usage: Usage
    injections: list[dict[str, Any]]
    finish_reason: str | None
    status: TurnStatus
    text: str

    @property
    def config(self) -> _Options: ...


async def call_provider(
    turn: CallingTurn, provider: Provider, *, with_tools: bool, reminder: bool = False
) -> ChatResponse | None:
    """One provider call of ``turn`` with its events: the response, or None when the call
    did not start (a spent budget, a hook's deny; the turn's status says which).

    ``with_tools``: offer the turn's tools; ``reminder``: the one last call at the
    iteration limit (its request ends with the wrap-up reminder).
    """
    if not await _gate(turn, provider, reminder=reminder):
        return None
    request = await _request(turn, provider, with_tools=with_tools, reminder=reminder)
    turn.iterations += 1
    if turn.hooks.has_handlers(LLM_REQUEST):  # the whole request: only for a listener
        asked = llm_request_payload(turn.provider_name, request, provider)
        await turn.hooks.emit(LLM_REQUEST, asked)
    try:
        response = await _answer(turn, provider, request)
    except Exception as exc:
        await turn.hooks.emit(PROVIDER_ERROR, error_payload(turn.provider_name, exc))
        raise
    _account(turn, request, response)
    await _report(turn, provider, request, response)
    return response


async def _gate(turn: CallingTurn, provider: Provider, *, reminder: bool) -> bool:
    """Whether the call starts: no spent budget, and ``provider:request`` did not deny
    it (its ephemeral injection is kept for this request)."""
    if turn.handle.budget.over is not None:
        # a spent budget here or above: no call starts (the turn owning the limit was
        # cancelled when it ran out, and this scope is inside it)
        await anyio.lowlevel.checkpoint_if_cancelled()
        turn.status = TurnStatus.CANCELLED
        return False
    payload: dict[str, Any] = {
        "provider": turn.provider_name,
        "iteration": turn.iterations,
        "stream": turn.streaming and stream_opener(provider) is not None,
    }
    if reminder:
        payload["max_reached"] = True
    emitted = await turn.hooks.emit(PROVIDER_REQUEST, payload)
    requested = await turn.coordinator.process_hook_result(
        emitted, PROVIDER_REQUEST, turn.orchestrator
    )
    if requested.action == "deny":
        turn.text, turn.status = denial(requested)
        return False
    injection = ephemeral_injection(requested)
    if injection is not None:
        turn.injections.append(injection)
    return True


async def _request(
    turn: CallingTurn, provider: Provider, *, with_tools: bool, reminder: bool
) -> ChatRequest:
    """The request: the context's messages (its kept view when it offers one), every tool
    call answered, the turn's pending injections (taken) and the tools offered."""
    messages, repaired = await request_messages(turn.context, provider)
    if repaired:
        logger.error("answered %d tool calls without a recorded result", len(repaired))
        await turn.hooks.emit(
            PROVIDER_TOOL_SEQUENCE_REPAIRED,
            {"provider": turn.provider_name, "tool_call_ids": list(repaired)},
        )
    injections, turn.injections = turn.injections, []
    if reminder:
        injections.append(limit_reminder())
    return chat_request(
        inject(messages, injections),
        turn.tools if with_tools else None,
        reasoning_effort=turn.config.reasoning_effort,
    )


async def _answer(turn: CallingTurn, provider: Provider, request: ChatRequest) -> ChatResponse:
    """The response: a race under the session's ``providers_policy``, else ``provider``
    asked once."""
    kwargs = {"extended_thinking": True} if turn.config.extended_thinking else {}
    policy = turn.coordinator.get_capability(PROVIDERS_POLICY)
    if policy is not None:  # failover and hedging: the call is a race (runtime/_race)
        return await call_with_policy(turn, policy, request, kwargs)
    return await ask(
        provider, turn.provider_name, request, kwargs, turn.hooks, streaming=turn.streaming
    )


def _account(turn: CallingTurn, request: ChatRequest, response: ChatResponse) -> None:
    """Add the response's usage (priced) to the turn and charge it to the budget; keep its
    finish reason."""
    if response.usage is not None:
        usage = _priced(turn, request, response, response.usage)
        turn.usage = turn.usage + usage
        turn.handle.budget.charge_usage(usage, float(usage.cost_usd or 0))
    turn.finish_reason = response.finish_reason


def _priced(turn: CallingTurn, request: ChatRequest, response: ChatResponse, usage: Usage) -> Usage:
    """A call's usage with its dollars: the provider's own ``cost_usd`` (its ``pricing``
    table, by model), else the price its plan entry's ``config.pricing`` gives (a
    provider that does not price, an upstream one), by the same rules; without a price
    ``cost_usd`` stays None (and the budget charges 0)."""
    if usage.cost_usd is not None:
        return usage
    spec = turn.coordinator.provider_specs.get(turn.provider_name)
    table = PriceTable.from_config(spec.config.get("pricing") if spec else None)
    answered = (response.metadata or {}).get("model")
    priced = table.priced(usage, request.model, answered if isinstance(answered, str) else None)
    return priced if priced is not None else usage


async def _report(
    turn: CallingTurn, provider: Provider, request: ChatRequest, response: ChatResponse
) -> None:
    """The response's events: ``provider:cache`` (which part of the prompt prefix
    changed) and ``llm:response`` for a listener, then ``provider:response``."""
    hooks = turn.hooks
    if hooks.has_handlers(PROVIDER_CACHE):
        await report_cache(turn, request, response, module=provider)
    if hooks.has_handlers(LLM_RESPONSE):
        await hooks.emit(LLM_RESPONSE, llm_response_payload(turn.provider_name, response))
    meta = response.metadata or {}
    await hooks.emit(
        PROVIDER_RESPONSE,
        {
            "provider": turn.provider_name,
            "usage": unstructure(response.usage) if response.usage else None,
            "tool_calls": len(response.tool_calls or ()),
            "finish_reason": response.finish_reason,
            "response_id": meta.get("response_id"),
            "model": meta.get("model"),
        },
    )
