"""Relaying a provider's stream as ``content_block:*`` and ``thinking:delta`` events.

The provider's ``open_stream(request)`` (``stream`` in providers written to this
contract's earlier name, see `stream_opener`) is an async context manager yielding event dicts whose
last item is ``{"type": "response", "response": ChatResponse}``. The relay emits each
content event with the provider's name and returns the assembled response; leaving the
``async with`` (a cancel, a hook error) closes the provider's connection.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any

from ..errors import StreamError
from ..events import CONTENT_BLOCK_DELTA, CONTENT_BLOCK_END, CONTENT_BLOCK_START, THINKING_DELTA
from ..models import ChatResponse, unstructure

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable

    from ..kernel._hooks import HookRegistry

__all__ = ("STREAM_EVENTS", "relay_stream", "stream_payload", "stream_opener")

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


async def relay_stream(
    stream: AbstractAsyncContextManager[AsyncIterator[dict[str, Any]]],
    hooks: HookRegistry,
    provider: str,
) -> ChatResponse:
    """Emit the stream's content events and return its final response."""
    final: ChatResponse | None = None
    async with stream as events:
        async for event in events:
            kind = event.get("type")
            if kind == "response":
                final = event["response"]
            elif kind in STREAM_EVENTS:
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
