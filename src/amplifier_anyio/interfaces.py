"""The protocols modules implement.

They are structural (``typing.Protocol``) and, as upstream, not runtime-checkable: the
loader and the coordinator check for the attributes they use. Context managers speak plain
message dicts (as upstream); orchestrators convert at the provider edge with
[`amplifier_anyio.models.structure`][amplifier_anyio.structure].
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any, Literal, Protocol

import attrs

from .errors import ValidationError
from .models import (
    ChatRequest,
    ChatResponse,
    HookResult,
    ModelInfo,
    ProviderInfo,
    ToolCall,
    ToolResult,
)

__all__ = (
    "Orchestrator",
    "Provider",
    "StreamingProvider",
    "Tool",
    "Claims",
    "ContextManager",
    "ToolJournal",
    "HookHandler",
    "HookRegistry",
    "ApprovalSystem",
    "DisplaySystem",
    "ModuleSource",
    "ModuleSourceResolver",
    "MountFunction",
    "Cleanup",
)

Cleanup = Callable[[], Any]
"""What ``mount()`` may return: a sync or async callable run at session cleanup."""

MountFunction = Callable[[Any, dict[str, Any]], Awaitable[Cleanup | None]]
"""A module's ``async def mount(coordinator, config) -> cleanup | None``."""


class Orchestrator(Protocol):
    """Runs one turn: prompt in, answer out. ``kwargs`` carries ``coordinator``."""

    async def execute(
        self,
        prompt: str,
        context: ContextManager,
        providers: dict[str, Provider],
        tools: dict[str, Tool],
        hooks: HookRegistry,
        **kwargs: Any,
    ) -> str: ...


class Provider(Protocol):
    """A model backend."""

    @property
    def name(self) -> str: ...

    def get_info(self) -> ProviderInfo: ...

    async def list_models(self) -> list[ModelInfo]: ...

    async def complete(self, request: ChatRequest, **kwargs: Any) -> ChatResponse: ...

    def parse_tool_calls(self, response: ChatResponse) -> list[ToolCall]: ...


class StreamingProvider(Provider, Protocol):
    """A provider that can also stream.

    ``open_stream()`` is an async context manager yielding an async iterator of event
    dicts (``{"type": "content_block:delta", ...}``) whose last item is
    ``{"type": "response", "response": ChatResponse}``; leaving the context closes the
    underlying connection, so a cancelled stream never leaks a response.

    A provider whose ``stream()`` is such a context manager (this contract's earlier
    name) is streamed too. Name it ``open_stream``: upstream's loop-streaming sees a
    ``stream`` attribute and takes its path that never runs tool calls
    (``docs/upstream.md``).
    """

    def open_stream(
        self, request: ChatRequest, **kwargs: Any
    ) -> AbstractAsyncContextManager[AsyncIterator[dict[str, Any]]]: ...


class Tool(Protocol):
    """A capability the model can call. ``execute`` may also be a plain function.

    A tool whose calls are safe to run twice may say so with a class attribute
    ``idempotent = True``: after a crash, a call of it that was running is run again by
    ``session.resume()`` instead of being answered as interrupted (``docs/durable.md``).

    A tool whose calls touch something shared may say what with an optional, synchronous
    method ``claims(input) -> Claims``: the tool batch then runs the calls of one reply
    that conflict (one writes what another reads or writes) in call order, and the rest
    in parallel. It gets the call's final input (after ``tool:pre`` hooks), runs in a
    worker thread, and must be quick and free of side effects; if it raises, that call is
    answered with an error result. A tool without ``claims`` touches nothing shared
    (``docs/concurrency.md``).
    """

    @property
    def name(self) -> str: ...

    @property
    def description(self) -> str: ...

    @property
    def input_schema(self) -> dict[str, Any]: ...

    async def execute(self, input: dict[str, Any]) -> ToolResult: ...


def _keys(value: Iterable[str]) -> frozenset[str]:
    """A collection of resource keys as a frozenset; a key is a non-empty string."""
    if isinstance(value, str | bytes):
        problem = f"expected a collection of keys, not one {type(value).__name__} ({value!r})"
        raise ValidationError([problem])
    keys = frozenset(value)
    for key in keys:
        if not isinstance(key, str) or not key:
            raise ValidationError([f"a resource key must be a non-empty string, got {key!r}"])
    return keys


@attrs.frozen(kw_only=True)
class Claims:
    """What one tool call touches: the resources it reads and those it writes.

    A resource is a string key: the resolved real path of a file or directory (symlinks
    and ``..`` resolved, so that two names of one file are one key), or any other string
    naming something shared (``"db:orders"``). Two absolute paths conflict when they are
    equal or one lies inside the other (a directory covers what is under it); other keys
    conflict when they are equal. Within one batch, a call waits for every earlier call
    that writes what it reads or writes, or reads what it writes; readers share.
    ``reads`` / ``writes`` take any collection of strings.
    """

    reads: frozenset[str] = attrs.field(default=frozenset(), converter=_keys)
    writes: frozenset[str] = attrs.field(default=frozenset(), converter=_keys)


class ContextManager(Protocol):
    """Stores the conversation and hands out the view a request should send.

    A context manager may also offer ``async add_messages(messages)``; the tool batch then
    writes all of a batch's results in one call (one fsync for a file-backed context). And
    ``async request_view(token_budget=None, provider=None)`` returning a
    [`RequestView`][amplifier_anyio.contexts.RequestView]: the turn engine then takes the
    request's converted messages from it instead of converting
    ``get_messages_for_request()`` (see ``docs/contexts.md``).
    """

    async def add_message(self, message: dict[str, Any]) -> None: ...

    async def get_messages_for_request(
        self, token_budget: int | None = None, provider: Any | None = None
    ) -> list[dict[str, Any]]: ...

    async def get_messages(self) -> list[dict[str, Any]]: ...

    async def set_messages(self, messages: list[dict[str, Any]]) -> None: ...

    async def clear(self) -> None: ...


class ToolJournal(Protocol):
    """The optional protocol of a context that journals tool calls (context-persistent).

    The tool batch looks for ``journal_started`` on its context; a context without it pays
    nothing. ``journal_started`` is awaited (durably recorded) before the tool runs and
    returns the call's idempotency key; ``journal_finished`` records the result as soon as
    it exists; ``journal_deferred`` records a call held for an approval. After a crash the
    context answers a finished call with its recorded result, never running it again. A
    context may also offer ``journal_noted(call_id, fields)`` (context-persistent does):
    what a running tool noted to resume its work, carried by the call's interrupted result.
    See ``docs/durable.md``.
    """

    async def journal_started(
        self, call_id: str, tool: str, arguments: Any, *, idempotent: bool = False
    ) -> str: ...

    async def journal_finished(
        self, call_id: str, content: str, *, success: bool = True
    ) -> None: ...

    async def journal_deferred(
        self, call_id: str, tool: str, tool_input: Any, prompt: str
    ) -> None: ...


class HookHandler(Protocol):
    """A hook: ``await handler(event, data)`` returns a HookResult (or None: continue)."""

    async def __call__(self, event: str, data: dict[str, Any]) -> HookResult | None: ...


class HookRegistry(Protocol):
    """What an orchestrator needs of the hook registry (the kernel's ``HookRegistry`` is one).

    Handlers run in ascending priority; ``emit`` reduces their answers to one
    [`HookResult`][amplifier_anyio.HookResult] (docs/hooks.md).
    """

    def register(
        self,
        event: str,
        handler: Callable[..., Any],
        priority: int = 0,
        name: str | None = None,
        *,
        blocking: bool = False,
        timeout: float | None = None,
    ) -> Callable[[], None]:
        """Add a handler; returns its unregister function."""
        ...

    def has_handlers(self, event: str) -> bool:
        """Whether emitting ``event`` would run any handler."""
        ...

    async def emit(self, event: str, data: dict[str, Any]) -> HookResult:
        """Run the handlers of ``event`` and reduce their answers."""
        ...


class ApprovalSystem(Protocol):
    """Asks a human. Returns the chosen option, or raises ApprovalTimeoutError."""

    async def request_approval(
        self,
        prompt: str,
        options: list[str],
        timeout: float,
        default: Literal["allow", "deny", "defer"],
    ) -> str: ...


class DisplaySystem(Protocol):
    """Shows hook messages to the user. Synchronous, as upstream."""

    def show_message(
        self, message: str, level: Literal["info", "warning", "error"], source: str = "hook"
    ) -> None: ...


class ModuleSource(Protocol):
    """Where a module's code lives on disk."""

    def resolve(self) -> Path: ...


class ModuleSourceResolver(Protocol):
    """Maps a module id (and an optional source hint) to a
    [`ModuleSource`][amplifier_anyio.interfaces.ModuleSource]."""

    def resolve(
        self, module_id: str, source_hint: Any = None, profile_hint: Any = None
    ) -> ModuleSource: ...
