"""The cancellation token of one turn, wired to cancel scopes.

States only move forward: none → graceful → immediate, and never back: like a trio
``Event``, a token that was cancelled stays cancelled, so every turn gets a fresh one
(created by whoever accepts the turn; see ``ModuleCoordinator.begin_turn``). Graceful is
a request: the turn lets the running tool batch finish and stops before its next provider
call. Immediate is structural: every cancel scope bound to the token (the turn binds its
own) is cancelled, so an in-flight provider call, hook or tool is interrupted at its next
checkpoint — no polling needed.

An immediate request says why (``reason``: "session.cancel(immediate=True)", "budget
spent: …"); the reason goes to every bound scope's ``cancel(reason)``, so the backend's
cancellation exception names it, and to a debug log line of this module.

``on_cancel`` callbacks run once each.
[`CancellationToken.request`][amplifier_anyio.CancellationToken.request] runs them *before* it
cancels the bound scopes, so a tool that stops its own turn still sees them run.
"""

from __future__ import annotations

import enum
import inspect
import logging
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any, Protocol, TypeVar

import anyio
import attrs

__all__ = ("Cancellable", "CancellationState", "CancellationStatistics", "CancellationToken")

logger = logging.getLogger(__name__)

CancelCallback = Callable[[], Awaitable[Any] | Any]

_S = TypeVar("_S", bound="Cancellable")

_NO_REASON = "cancellation token: immediate request"
"""The reason of an immediate request that gave none."""


class Cancellable(Protocol):
    """What a token cancels: an ``anyio.CancelScope``, or an object that decides which
    scope to cancel when the turn is cancelled (the lifecycle loop's)."""

    def cancel(self, reason: str | None = None) -> None:
        """Cancel, saying why."""
        ...


class CancellationState(enum.StrEnum):
    """Where a token is; compares equal to upstream's strings."""

    NONE = "none"
    GRACEFUL = "graceful"
    IMMEDIATE = "immediate"


@attrs.frozen(kw_only=True)
class CancellationStatistics:
    """A snapshot of a token."""

    state: CancellationState
    running_tools: int
    bound_scopes: int
    children: int
    callbacks: int


class CancellationToken:
    """Graceful / immediate cancellation of one turn (a fresh token per turn)."""

    def __init__(self) -> None:
        self._state = CancellationState.NONE
        self._running: dict[str, str] = {}
        self._children: list[CancellationToken] = []
        self._callbacks: list[CancelCallback] = []
        self._scopes: list[Cancellable] = []
        self._fired = 0  # how many callbacks have run: each runs once
        self._reason: str | None = None

    @property
    def state(self) -> CancellationState:
        """The current state."""
        return self._state

    @property
    def is_cancelled(self) -> bool:
        """True once any cancellation was requested."""
        return self._state is not CancellationState.NONE

    @property
    def is_graceful(self) -> bool:
        """True while the request is graceful (not yet immediate)."""
        return self._state is CancellationState.GRACEFUL

    @property
    def is_immediate(self) -> bool:
        """True once immediate cancellation was requested."""
        return self._state is CancellationState.IMMEDIATE

    @property
    def reason(self) -> str | None:
        """Why the token was made immediate (None while it is not)."""
        return self._reason

    @property
    def running_tools(self) -> set[str]:
        """The tool_call_ids currently executing (a copy)."""
        return set(self._running)

    @property
    def running_tool_names(self) -> list[str]:
        """The names of the tools currently executing."""
        return list(self._running.values())

    def register_tool_start(self, tool_call_id: str, tool_name: str) -> None:
        """Record that a tool call started."""
        self._running[tool_call_id] = tool_name

    def register_tool_complete(self, tool_call_id: str) -> None:
        """Record that a tool call ended, however it ended."""
        self._running.pop(tool_call_id, None)

    def request_graceful(self) -> bool:
        """Ask the turn to stop after the current tool batch. True if the state changed."""
        if self._state is not CancellationState.NONE:
            return False
        self._state = CancellationState.GRACEFUL
        for child in tuple(self._children):
            child.request_graceful()
        return True

    def request_immediate(self, reason: str | None = None) -> bool:
        """Cancel the bound turn scopes now, for ``reason``. True if the state changed.

        Synchronous, so the ``on_cancel`` callbacks are left for the next
        [`trigger_callbacks`][amplifier_anyio.CancellationToken.trigger_callbacks] (the turn runs
        them before its terminal events); use [`request`][amplifier_anyio.CancellationToken.request]
        to run them first.
        """
        if self._state is CancellationState.IMMEDIATE:
            return False
        self._become_immediate(reason)
        self._cancel_scopes()
        return True

    request_cancellation = request_graceful

    async def request(self, immediate: bool = False, *, reason: str | None = None) -> bool:
        """Cancel, running the ``on_cancel`` callbacks before any bound scope is cancelled
        (``reason``: why, for an immediate request).

        From inside the turn (a tool that stops its own turn) the callbacks therefore run
        to completion; the caller is then cancelled at its next checkpoint. Returns True
        if the state changed.
        """
        if self._state is CancellationState.IMMEDIATE or (self.is_graceful and not immediate):
            await anyio.lowlevel.checkpoint()
            return False
        if not immediate:
            self.request_graceful()
            await self.trigger_callbacks()
            return True
        self._become_immediate(reason)
        await self._run_callbacks()
        self._cancel_scopes()
        await anyio.lowlevel.checkpoint()
        return True

    def _become_immediate(self, reason: str | None) -> None:
        self._state = CancellationState.IMMEDIATE
        self._reason = reason or _NO_REASON
        logger.debug("turn cancelled immediately: %s", self._reason)

    def _cancel_scopes(self) -> None:
        for scope in tuple(self._scopes):
            scope.cancel(self._reason)
        for child in tuple(self._children):
            child.request_immediate(self._parents_reason())

    def _parents_reason(self) -> str:
        return f"parent turn cancelled: {self._reason}"

    def register_child(self, child: CancellationToken) -> None:
        """Propagate this token's requests to ``child``, starting with its current state."""
        self._children.append(child)
        if self.is_immediate:
            child.request_immediate(self._parents_reason())
        elif self.is_graceful:
            child.request_graceful()

    def unregister_child(self, child: CancellationToken) -> None:
        """Stop propagating to ``child``."""
        if child in self._children:
            self._children.remove(child)

    @contextmanager
    def bind_scope(self, scope: _S) -> Iterator[_S]:
        """Let ``request_immediate()`` cancel ``scope`` (with the request's reason) while
        the block runs.

        If the token is already immediate the scope is cancelled at once.
        """
        self._scopes.append(scope)
        if self.is_immediate:
            scope.cancel(self._reason)
        try:
            yield scope
        finally:
            self._scopes.remove(scope)

    def on_cancel(self, callback: CancelCallback) -> None:
        """Run ``callback`` (sync or async) once, when this token's cancellation is carried out."""
        self._callbacks.append(callback)

    def callbacks_due(self) -> bool:
        """Whether some ``on_cancel`` callback has not run yet."""
        return self._fired < len(self._callbacks)

    async def trigger_callbacks(self) -> None:
        """Run the callbacks that have not run yet, in order.

        A failing one is logged and the rest still run. Always a checkpoint (at the end,
        so a cancelled caller still runs every callback first).
        """
        await self._run_callbacks()
        await anyio.lowlevel.checkpoint()

    async def _run_callbacks(self) -> None:
        while self._fired < len(self._callbacks):
            callback = self._callbacks[self._fired]
            self._fired += 1
            try:
                result = callback()
                if inspect.isawaitable(result):
                    await result
            except Exception:
                logger.exception("cancel callback %r failed", callback)

    def statistics(self) -> CancellationStatistics:
        """A snapshot of the token's state and bookkeeping."""
        return CancellationStatistics(
            state=self._state,
            running_tools=len(self._running),
            bound_scopes=len(self._scopes),
            children=len(self._children),
            callbacks=len(self._callbacks),
        )
