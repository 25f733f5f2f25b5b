"""The turn handle: one accepted turn, and everything that must reach that turn only.

A turn is accepted synchronously (``session.run()`` on its first line, before any await;
an orchestrator run without a session accepts its own) and gets a fresh
`TurnHandle`. The handle owns the turn's [`CancellationToken`][amplifier_anyio.CancellationToken],
its deadline, the cancel that was asked but not yet announced (``cancel:requested``), and whether
the session's ``session:start`` was delivered by this turn.

Every cancel names its turn. `TurnHandle.cancel` and
`TurnHandle.request_cancel` act on *this* handle's token, looked up once, when they
are called: however slow the ``cancel:requested`` hooks are, a cancel asked during turn
N never lands on turn N+1 (the bug this module exists for: looking the current turn up
*after* awaiting the hooks). Tool batches, context writes and sub-agents hold the handle
they were started under; ``coordinator.cancellation`` stays as a read-only view of the
current handle's token, for upstream modules.

A handle only moves forward: ACCEPTED → RUNNING → DONE. A cancel of a DONE handle does
nothing and says so (returns False).

While the engine runs a turn, its handle is the *current turn* of the task
([`current_turn`][amplifier_anyio.current_turn], a context variable, so every task spawned
inside the turn sees it): a sub-agent spawned by one of the turn's tools runs under it.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

import anyio
import attrs

from ..events import CANCEL_REQUESTED
from ._budget import BudgetMeter
from ._cancellation import CancellationToken

if TYPE_CHECKING:
    from ._hooks import HookRegistry

__all__ = ("TurnHandle", "TurnPhase", "TurnHandleStatistics", "current_turn", "turn_scope")


class TurnPhase(enum.Enum):
    """Where a turn is; it only moves forward."""

    ACCEPTED = "accepted"
    """Taken on (a cancel reaches it), not started yet: modules may still be mounting."""
    RUNNING = "running"
    """The engine runs it."""
    DONE = "done"
    """It returned (or raised); a cancel now does nothing."""


@attrs.frozen(kw_only=True)
class TurnHandleStatistics:
    """A snapshot of a handle."""

    phase: TurnPhase
    cancel_state: str
    cancel_pending: bool
    """A cancel was asked and its ``cancel:requested`` is not emitted yet."""
    announced: bool
    deadline: float


@attrs.define(eq=False)
class TurnHandle:
    """One accepted turn: its token, deadline, pending cancel and ``session:start`` state.

    ``hooks`` is where ``cancel:requested`` goes (None: nowhere, for a bare token use).
    """

    hooks: HookRegistry | None = None
    token: CancellationToken = attrs.field(factory=CancellationToken)
    deadline: float = math.inf
    """The absolute time (``anyio.current_time()``) the turn must end by; set when it runs."""
    parent: TurnHandle | None = None
    """The handle of the turn this one runs inside (a sub-agent's), or None."""
    announced: bool = False
    """Whether this turn delivered the session's ``session:start`` (``session:resume``)."""
    problems: list[str] = attrs.field(factory=list)
    """What went wrong around the turn before its engine ran (a bound that expired); the
    engine adds them to `TurnResult.problems`."""
    budget: BudgetMeter = attrs.field(factory=BudgetMeter)
    """What the turn (and every sub-agent below it) spent, against its limits (§14): a
    limit reached cancels this turn at once (`_budget`)."""
    partial: Callable[[], Any] | None = attrs.field(default=None, repr=False)
    """The turn's result as it stands, set by the engine that runs it: what a turn a
    cancel cut short had spent and how many provider calls it made, for whoever reports it
    (a cancelled sub-agent's ``task:agent_completed``). None before the engine runs."""
    _phase: TurnPhase = attrs.field(default=TurnPhase.ACCEPTED, init=False)
    _pending: dict[str, Any] | None = attrs.field(default=None, init=False)

    def __attrs_post_init__(self) -> None:
        if self.parent is not None:
            # A child sees every cancel of its parent, at once (the token propagates).
            self.parent.token.register_child(self.token)
            self.deadline = min(self.deadline, self.parent.deadline)
            self.budget.parent = self.parent.budget  # spending is charged up the tree
        self.budget.on_exhausted = self._budget_spent

    def _budget_spent(self) -> None:
        self.token.request_immediate(f"budget spent: {self.budget.exhausted}")

    @property
    def phase(self) -> TurnPhase:
        """Where the turn is."""
        return self._phase

    @property
    def done(self) -> bool:
        """Whether the turn has ended."""
        return self._phase is TurnPhase.DONE

    def start(self, timeout: float | None) -> float:
        """Mark the turn running and fix its deadline (``timeout`` seconds from now, never
        past a parent's); returns the deadline for the turn's cancel scope."""
        self._phase = TurnPhase.RUNNING
        if timeout is not None:
            self.deadline = min(self.deadline, anyio.current_time() + timeout)
        return self.deadline

    def finish(self) -> None:
        """Mark the turn done: later cancels do nothing; a parent stops propagating to it."""
        self._phase = TurnPhase.DONE
        if self.parent is not None:
            self.parent.token.unregister_child(self.token)

    @contextmanager
    def bind_scope(self, scope: anyio.CancelScope) -> Iterator[anyio.CancelScope]:
        """Let an immediate cancel of this turn cancel ``scope`` while the block runs."""
        with self.token.bind_scope(scope):
            yield scope

    # -- cancelling ---------------------------------------------------------------------

    def cancel(self, immediate: bool = False, *, reason: str | None = None) -> bool:
        """Cancel this turn now, from synchronous code; True if its state changed.

        The turn emits ``cancel:requested`` (and runs the ``on_cancel`` callbacks) before
        its terminal events (`flush_cancel`). A done turn is not changed. ``reason`` (who
        cancels and why) goes to the cancelled scopes of an immediate cancel.
        """
        payload = self._payload(immediate)
        if payload is None:
            return False
        if self._pending is None or immediate:
            self._pending = payload
        if immediate:
            self.token.request_immediate(reason or "turn handle: cancel(immediate=True)")
        else:
            self.token.request_graceful()
        return True

    async def request_cancel(self, immediate: bool = False, *, reason: str | None = None) -> bool:
        """Emit ``cancel:requested``, run the ``on_cancel`` callbacks, then cancel this turn
        (``reason``: who cancels and why, as in `cancel`).

        In that order: the request is recorded before the turn's terminal events, and a
        tool or hook that stops its own turn still sees every callback run (the bound
        scopes are cancelled last). The turn is the one this handle is, whatever turn is
        current once the hooks return. True if the state changed.
        """
        payload = self._payload(immediate)
        if payload is None:
            await anyio.lowlevel.checkpoint()
            return False
        # A `cancel` made earlier whose event is still due goes first, so the events
        # follow the escalation (graceful, then immediate), each once, never downgraded.
        earlier, self._pending = self._pending, None
        if self.hooks is not None:
            if earlier is not None and earlier is not payload:
                await self.hooks.emit(CANCEL_REQUESTED, earlier)
            await self.hooks.emit(CANCEL_REQUESTED, payload)
        why = reason or "turn handle: request_cancel(immediate=True)"
        return await self.token.request(immediate, reason=why)

    def cancel_flush_due(self) -> bool:
        """Whether `flush_cancel` has anything to do (a ``cancel:requested`` to emit
        or an ``on_cancel`` callback that has not run)."""
        return self._pending is not None or self.token.callbacks_due()

    async def flush_cancel(self) -> None:
        """Emit the ``cancel:requested`` of a `cancel`, if one is due, and run the
        callbacks that have not run yet."""
        payload, self._pending = self._pending, None
        if payload is not None and self.hooks is not None:
            await self.hooks.emit(CANCEL_REQUESTED, payload)
        await self.token.trigger_callbacks()

    def _payload(self, immediate: bool) -> dict[str, Any] | None:
        token = self.token
        if self.done or token.is_immediate or (token.is_graceful and not immediate):
            return None
        return {
            "level": "immediate" if immediate else "graceful",
            "running_tools": sorted(token.running_tools),
            "running_tool_names": token.running_tool_names,
        }

    def statistics(self) -> TurnHandleStatistics:
        """A snapshot of the handle."""
        return TurnHandleStatistics(
            phase=self._phase,
            cancel_state=str(self.token.state),
            cancel_pending=self._pending is not None,
            announced=self.announced,
            deadline=self.deadline,
        )


_current: ContextVar[TurnHandle | None] = ContextVar("amplifier_turn", default=None)


def current_turn() -> TurnHandle | None:
    """The handle of the turn this task runs in (the innermost one), or None outside one."""
    return _current.get()


@contextmanager
def turn_scope(handle: TurnHandle) -> Iterator[TurnHandle]:
    """Make ``handle`` the current turn for the duration of the block (the engine does)."""
    token = _current.set(handle)
    try:
        yield handle
    finally:
        _current.reset(token)
