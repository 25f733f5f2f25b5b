"""Resource claims: the calls of one batch that touch the same thing run in call order.

A tool may declare what a call touches (``claims(input) -> Claims``, see
[`Claims`][amplifier_anyio.Claims]). When two or more calls of a parallel batch
belong to tools that do, the batch runs each call through `ClaimTable.run` and,
between its ``tool:pre`` hooks and its execution, through `ClaimTable.enter`:

1. The call's claims are computed from its *final* input (what ``tool:pre`` left), in a
   worker thread (``claims()`` may resolve paths), so the claim is what actually runs.
2. Order is decided in call order, not in the order the calls get there: the call waits
   until every earlier call with claims has published its own (it has passed its hooks,
   or ended without running), then takes as *blockers* the earlier calls that conflict
   with it — they write what it reads or writes, or read what it writes — and that have
   not finished.
3. It waits for the blockers' completion, announcing it with ``tool:waiting``.

Each call waits only for earlier calls, so the waits form a graph without cycles: the
earliest unfinished call never waits, and the batch cannot deadlock. The outcome is the
one of running the conflicting calls one by one in call order; readers of one resource
share it. While it waits a call holds no seat of the batch's ``max_parallel_tools``
limiter (the seat is given back and taken again before the call runs), so waiting calls
never starve the calls they wait for. A call that ends in any way — a result, a denial, a
failure, a cancellation — publishes its claims and its completion in a ``finally``: a
later call is never left waiting for it.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

import anyio
import anyio.lowlevel
import anyio.to_thread

from ..errors import AmplifierError
from ..events import TOOL_WAITING
from ..interfaces import Claims

if TYPE_CHECKING:
    from ..kernel._hooks import HookRegistry
    from ..models import ToolCall

__all__ = ("ClaimTable", "ClaimsError", "claim_table", "conflicts", "keys_overlap")

NO_CLAIMS = Claims()


class ClaimsError(AmplifierError):
    """A tool's ``claims()`` raised, or answered something that is not a Claims."""


def keys_overlap(a: str, b: str) -> bool:
    """Whether two resource keys name overlapping things: equal, or both absolute paths
    with one inside the other (a directory covers what lies under it)."""
    if a == b:
        return True
    if not (os.path.isabs(a) and os.path.isabs(b)):
        return False
    shorter, longer = (a, b) if len(a) < len(b) else (b, a)
    return longer.startswith(shorter.rstrip(os.sep) + os.sep)


def _overlap(left: frozenset[str], right: frozenset[str]) -> bool:
    if not left or not right:
        return False
    if not left.isdisjoint(right):
        return True
    return any(keys_overlap(a, b) for a in left for b in right)


def conflicts(earlier: Claims, later: Claims) -> bool:
    """Whether ``later`` must wait for ``earlier``: one writes what the other touches."""
    return _overlap(earlier.writes, later.reads | later.writes) or _overlap(
        earlier.reads, later.writes
    )


def claim_table(
    calls: Sequence[ToolCall], tools: Mapping[str, Any], hooks: HookRegistry, group_id: str
) -> ClaimTable | None:
    """The table of a parallel batch, or None when fewer than two of its calls belong to
    tools with ``claims`` (nothing to order: the batch runs as it always did)."""
    claiming = {name for name, tool in tools.items() if _claims_method(tool) is not None}
    if not claiming:  # the common case costs one look at each mounted tool
        return None
    members = [i for i, call in enumerate(calls) if call.name in claiming]
    if len(members) < 2:
        return None
    return ClaimTable(calls, members, hooks, group_id)


def _claims_method(tool: Any) -> Callable[[Any], Any] | None:
    method = getattr(tool, "claims", None)
    return method if callable(method) else None


class _Seat:
    """One call's seat of the batch's limiter, which it can give back while it waits."""

    __slots__ = ("held", "limiter")

    def __init__(self, limiter: anyio.CapacityLimiter) -> None:
        self.limiter = limiter
        self.held = False

    async def take(self) -> None:
        await self.limiter.acquire_on_behalf_of(self)
        self.held = True

    def give_back(self) -> None:
        if self.held:
            self.held = False
            self.limiter.release_on_behalf_of(self)


class ClaimTable:
    """The claims of one batch's calls, and who waits for whom (see the module doc).

    ``members`` are the indexes of the calls whose tool (as the model named it) has
    ``claims``; the others never wait and are never waited for.
    """

    def __init__(
        self, calls: Sequence[ToolCall], members: list[int], hooks: HookRegistry, group_id: str
    ) -> None:
        self.members = frozenset(members)
        self._order = members  # ascending: enumerate order
        self._ids = [call.id for call in calls]
        self._hooks = hooks
        self._group_id = group_id
        self._claims: dict[int, Claims] = {}
        self._known = {i: anyio.Event() for i in members}
        self._done = {i: anyio.Event() for i in members}
        self._seats: dict[int, _Seat] = {}

    async def run(
        self,
        execute: Callable[[int, ToolCall], Awaitable[None]],
        index: int,
        call: ToolCall,
        limiter: anyio.CapacityLimiter | None,
    ) -> None:
        """``execute(index, call)`` under a seat of ``limiter`` (if any); however it ends,
        the call's claims and completion are published for the calls after it."""
        seat = None
        if limiter is not None:
            seat = self._seats[index] = _Seat(limiter)
        try:
            if seat is not None:
                await seat.take()
            await execute(index, call)
        finally:
            self.leave(index)
            if seat is not None:
                seat.give_back()

    def leave(self, index: int) -> None:
        """The call is over: a call that never published claims published none."""
        if index in self.members:
            self._known[index].set()
            self._done[index].set()

    async def enter(self, index: int, call: ToolCall, tool: Any, tool_input: Any) -> None:
        """Compute the call's claims and wait for the earlier calls that conflict.

        Raises `ClaimsError` when ``claims()`` fails (the call's error result).
        """
        claims = await self._compute(call.name, tool, tool_input)
        self._claims[index] = claims
        self._known[index].set()
        if not (claims.reads or claims.writes):
            return
        earlier = self._order[: bisect.bisect_left(self._order, index)]
        seat = self._seats.get(index)
        undecided = [i for i in earlier if not self._known[i].is_set()]
        if undecided:
            # Their hooks still run (an approval may be pending): whether they conflict
            # is not known yet. Waited for without a seat, and not announced: it is
            # usually a matter of microseconds (docs/concurrency.md).
            if seat is not None:
                seat.give_back()
            for i in undecided:
                await self._known[i].wait()
        blockers = [
            i
            for i in earlier
            if not self._done[i].is_set() and conflicts(self._claims.get(i, NO_CLAIMS), claims)
        ]
        if blockers:
            if seat is not None:
                seat.give_back()
            await self._announce(index, call, blockers, claims)
            for i in blockers:
                await self._done[i].wait()
        if seat is not None and not seat.held:
            await seat.take()

    async def _compute(self, name: str, tool: Any, tool_input: Any) -> Claims:
        method = _claims_method(tool)
        if method is None:  # a scheduler routed the call to a tool without claims
            await anyio.lowlevel.checkpoint()
            return NO_CLAIMS
        try:
            # Abandoned on cancel: a claims() has no side effect to wait for.
            answer = await anyio.to_thread.run_sync(
                partial(method, tool_input), abandon_on_cancel=True
            )
        except Exception as exc:
            msg = f"claims() of tool {name!r} failed: {type(exc).__name__}: {exc}"
            raise ClaimsError(msg) from exc
        if answer is None:
            return NO_CLAIMS
        if not isinstance(answer, Claims):
            msg = f"claims() of tool {name!r} returned {type(answer).__name__}, not Claims"
            raise ClaimsError(msg)
        return answer

    async def _announce(
        self, index: int, call: ToolCall, blockers: list[int], claims: Claims
    ) -> None:
        if not self._hooks.has_handlers(TOOL_WAITING):
            return
        payload = {
            "tool_name": call.name,
            "tool_call_id": call.id,
            "parallel_group_id": self._group_id,
            "index": index,
            "waiting_for": [self._ids[i] for i in blockers],
            "resources": sorted(claims.reads | claims.writes),
        }
        await self._hooks.emit(TOOL_WAITING, payload)
