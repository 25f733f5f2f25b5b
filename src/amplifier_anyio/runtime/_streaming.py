"""One provider asked once (`ask`): its stream relayed as ``content_block:*`` and
``thinking:delta`` events, or its ``complete()``.

The provider's ``open_stream(request)`` (``stream`` in providers written to this
contract's earlier name, see `stream_opener`) is an async context manager yielding event dicts whose
last item is ``{"type": "response", "response": ChatResponse}``. The relay emits each
content event with the provider's name and returns the assembled response; leaving the
``async with`` (a cancel, a hook error) closes the provider's connection.

A leaf of the provider call (``runtime/_provider_call``): the plain call and every
attempt of a race (``runtime/_race``) ask through here.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any

from ..errors import StreamError
from ..events import CONTENT_BLOCK_DELTA, CONTENT_BLOCK_END, CONTENT_BLOCK_START, THINKING_DELTA
from ..kernel._foreign import chat_response_of
from ..models import ChatRequest, ChatResponse, unstructure

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable

    from ..kernel._hooks import HookRegistry

__all__ = ("STREAM_EVENTS", "ask", "relay_stream", "stream_payload", "stream_opener")

STREAM_EVENTS = frozenset(
    {CONTENT_BLOCK_START, CONTENT_BLOCK_DELTA, CONTENT_BLOCK_END, THINKING_DELTA}
)
"""The stream event types relayed as hook events (others are ignored)."""


def stream_opener(
    provider: Any,
) -> Callable[..., AbstractAsyncContextManager[AsyncIterator[dict[str, Any]]]] | None:
    """The provider's ``open_stream``, else its ``stream`` (the contract's earlier name),
    else None: it does not stream."""
    opener = getattr(provider, "open_stream", None)
    if opener is None:
        opener = getattr(provider, "stream", None)
    return opener if callable(opener) else None


async def ask(
    provider: Any,
    name: str,
    request: ChatRequest,
    kwargs: dict[str, Any],
    hooks: HookRegistry,
    *,
    streaming: bool,
    first: Callable[[], Awaitable[None]] | None = None,
) -> ChatResponse:
    """Ask ``provider`` (mounted as ``name``) once: with ``streaming`` and a provider that
    streams, its stream relayed (``first`` awaited before the first content event is
    emitted); else its ``complete()``. An amplifier-core provider's pydantic response is
    converted (``kernel/_foreign``)."""
    opener = stream_opener(provider) if streaming else None
    if opener is None:
        response: Any = await provider.complete(request, **kwargs)
    else:
        response = await relay_stream(opener(request, **kwargs), hooks, name, first=first)
    if isinstance(response, ChatResponse):
        return response
    return chat_response_of(response, origin=f"provider {name!r}")


async def relay_stream(
    stream: AbstractAsyncContextManager[AsyncIterator[dict[str, Any]]],
    hooks: HookRegistry,
    provider: str,
    *,
    first: Callable[[], Awaitable[None]] | None = None,
) -> ChatResponse:
    """Emit the stream's content events and return its final response; ``first`` (if
    given) is awaited once, before the first content event is emitted."""
    final: ChatResponse | None = None
    async with stream as events:
        async for event in events:
            kind = event.get("type")
            if kind == "response":
                final = event["response"]
            elif kind in STREAM_EVENTS:
                if first is not None:
                    await first()
                    first = None
                await hooks.emit(kind, stream_payload(provider, event))
    if final is None:
        msg = "the stream ended without a response"
        raise StreamError(msg, provider=provider)
    return final


def stream_payload(provider: str, event: dict[str, Any]) -> dict[str, Any]:
    """The hook payload of one stream event: its fields (blocks as dicts) plus ``provider``."""
    payload = {k: v for k, v in event.items() if k != "type"}
    if "block" in payload and not isinstance(payload["block"], dict):
        payload["block"] = unstructure(payload["block"])
    return {"provider": provider, **payload}
