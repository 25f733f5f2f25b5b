"""Why a prompt cache missed: ``provider:cache``, naming the part of the prefix that changed.

A provider caches the longest prefix of a request it has seen: system prompt, tools, then
the messages in order. Each request of a session is compared with the one before it: the
system prompt (the leading system and developer messages), the tools offered, the
provider and model asked, and the history — grown at the end only (the cacheable case),
cut at the front (``compaction``: messages before the newest old one were removed or
summarised), or rewritten (``history``: a message was edited, inserted or removed).

When something changed, or the API explained a miss itself (the Responses API's
``prompt_cache_diagnostics``), ``provider:cache`` carries::

    {provider, model, changed: ["system", "tools", "model", "provider", "compaction" |
     "history"], first_changed_message, input_tokens, cache_read_tokens,
     cache_write_tokens, api_diagnostics}

``first_changed_message`` counts the messages after the system prompt. The comparison
costs a hash of every message, so it runs only while a handler listens to
``provider:cache`` (the first request made with one has nothing to compare with).
"""

from __future__ import annotations

import hashlib
import json
import weakref
from typing import Any

import anyio.lowlevel
import attrs

from ..events import PROVIDER_CACHE
from ..models import ChatRequest, ChatResponse, Message, unstructure
from ._requests import default_model

__all__ = ("PromptPrefix", "changed_parts", "report_cache")


def _digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.blake2b(text.encode(), digest_size=12).hexdigest()


@attrs.frozen(kw_only=True)
class PromptPrefix:
    """The parts of one request a prompt cache keys on, as digests."""

    provider: str
    model: str | None
    system: str
    tools: str
    messages: tuple[str, ...]

    @classmethod
    def of(cls, request: ChatRequest, *, provider: str, model: str | None) -> PromptPrefix:
        """The prefix of ``request`` sent to ``provider``."""
        leading: list[Message] = []
        for message in request.messages:
            if message.role not in ("system", "developer"):
                break
            leading.append(message)
        rest = request.messages[len(leading) :]
        return cls(
            provider=provider,
            model=model,
            system=_digest(unstructure(leading)),
            tools=_digest(unstructure(request.tools or [])),
            messages=tuple(_digest(unstructure(m)) for m in rest),
        )


def changed_parts(before: PromptPrefix, now: PromptPrefix) -> tuple[list[str], int | None]:
    """The parts that changed from ``before`` to ``now``, and the index of the first message
    that differs when the history did (None when it only grew)."""
    changed = [
        part
        for part in ("provider", "model", "system", "tools")
        if getattr(before, part) != getattr(now, part)
    ]
    old, new = before.messages, now.messages
    same = 0
    while same < min(len(old), len(new)) and old[same] == new[same]:
        same += 1
    if same == len(old):
        return changed, None
    newest = old[-1] if old else None
    if newest in new and new.index(newest) < len(old) - 1:
        changed.append("compaction")  # the newest old message survived, with less before it
    else:
        changed.append("history")
    return changed, same


_LAST: weakref.WeakKeyDictionary[Any, PromptPrefix] = weakref.WeakKeyDictionary()


async def report_cache(
    turn: Any, request: ChatRequest, response: ChatResponse, *, module: Any
) -> None:
    """Compare ``request`` with the session's previous one (its ``turn.coordinator``'s)
    and emit ``provider:cache`` when a part changed or the API explained a miss; nothing
    is computed while nobody listens. ``module``: the provider asked."""
    hooks = turn.hooks
    if not hooks.has_handlers(PROVIDER_CACHE):
        await anyio.lowlevel.checkpoint()
        return
    meta = response.metadata or {}
    provider = str(meta.get("provider") or turn.provider_name)  # the failover winner, if any
    model = request.model or default_model(module) or meta.get("model")
    now = PromptPrefix.of(request, provider=provider, model=model)
    before = _LAST.get(turn.coordinator)
    _LAST[turn.coordinator] = now
    diagnostics = meta.get("prompt_cache_diagnostics")
    changed, first = changed_parts(before, now) if before is not None else ([], None)
    if not changed and diagnostics is None:
        await anyio.lowlevel.checkpoint()
        return
    usage = response.usage
    await hooks.emit(
        PROVIDER_CACHE,
        {
            "provider": provider,
            "model": now.model,
            "changed": changed,
            "first_changed_message": first,
            "input_tokens": usage.input_tokens if usage else None,
            "cache_read_tokens": usage.cache_read_tokens if usage else None,
            "cache_write_tokens": usage.cache_write_tokens if usage else None,
            "api_diagnostics": diagnostics,
        },
    )
