"""Failover and hedged requests: one provider call as a structured race.

With ``session: {providers_policy: {fallback, on, hedge_after}}`` a provider call of the
turn engine runs here (`call_with_policy`). Each attempt — one provider asked once — is a
task of one task group, inside its own cancel scope:

- **failover**: an attempt that fails with a condition of ``on`` is followed by the next
  provider of ``[turn's provider, *fallback]`` (``provider:failover`` names both and the
  reason); any other failure is the call's. A stream that breaks after its first token is
  a ``stream_cut``: the next provider starts *from the beginning* (no prefill: an answer
  continued by another model would not be one answer), and the event says ``partial``;
- **hedging**: when the running attempt has produced nothing ``hedge_after`` seconds after
  the call began, the next provider is asked too (``provider:hedge``). The first attempt
  to answer — a stream's first content event, or a whole response — wins; the others are
  cancelled through their scopes, which leaves their ``async with provider.open_stream()`` /
  HTTP response and closes the connection. ``provider:hedge_settled`` names the winner.

Exactly one response comes out, so exactly one assistant message lands in the context; the
content events of a stream are relayed only for the attempt that won. Its usage counts
every attempt that delivered one (a loser that finished before its cancel took effect);
an attempt cancelled mid-flight reported nothing to count. With a cassette installed the
calls are recorded one by one and hedging is off (a replay must make the recorded calls in
the recorded order).

A leaf of the provider call (``runtime/_provider_call``): it reads the turn's providers,
hooks and streaming flag, and asks each provider through ``runtime/_streaming``.
"""

from __future__ import annotations

import functools
import logging
import math
import weakref
from typing import TYPE_CHECKING, Any, Protocol

import anyio
import anyio.lowlevel
import attrs

from ..errors import ConfigError
from ..events import PROVIDER_FAILOVER, PROVIDER_HEDGE, PROVIDER_HEDGE_SETTLED
from ..models import ChatRequest, ChatResponse, Usage
from ._streaming import ask

if TYPE_CHECKING:
    from anyio.abc import TaskGroup
    from anyio.streams.memory import MemoryObjectSendStream

    from ..kernel._hooks import HookRegistry
    from ..kernel._mount_plan import ProvidersPolicy

__all__ = ("PROVIDERS_POLICY", "call_with_policy")

logger = logging.getLogger(__name__)

PROVIDERS_POLICY = "providers_policy"
"""The coordinator capability holding the session's
[`ProvidersPolicy`][amplifier_anyio.kernel.ProvidersPolicy]."""


class Turn(Protocol):
    """What a race uses of the turn engine's turn."""

    providers: dict[str, Any]
    hooks: HookRegistry
    coordinator: Any
    streaming: bool
    provider_name: str


@attrs.define(eq=False)
class _Attempt:
    name: str
    provider: Any
    scope: anyio.CancelScope = attrs.field(factory=anyio.CancelScope)
    answered: bool = False
    """It produced a token (or its response) and holds the win."""


_Note = tuple[str, _Attempt, Any]  # ("done", attempt, response) | ("failed", attempt, exc)


@attrs.define(eq=False)
class _Race:
    turn: Turn
    policy: ProvidersPolicy
    request: ChatRequest
    kwargs: dict[str, Any]
    waiting: list[str]
    """Providers not asked yet, in order."""
    hedging: bool
    winner: _Attempt | None = None
    running: set[_Attempt] = attrs.field(factory=set)
    extra: Usage | None = None
    """Usage of attempts that answered but did not win."""
    counted: list[str] = attrs.field(factory=list)
    hedged: bool = False
    beaten: list[str] = attrs.field(factory=list)
    """Providers cancelled because another answered first: asked again if the winner's
    stream breaks and nobody else is left."""

    # -- one attempt ---------------------------------------------------------------------

    async def attempt(self, attempt: _Attempt, send: MemoryObjectSendStream[_Note]) -> None:
        with attempt.scope:
            try:
                response = await self.call(attempt)
            except Exception as exc:  # noqa: BLE001 - reported to the race, which decides
                send.send_nowait(("failed", attempt, exc))
                return
            self.claim(attempt)
            send.send_nowait(("done", attempt, response))

    async def call(self, attempt: _Attempt) -> ChatResponse:
        """Ask the attempt's provider; a stream claims the win at its first content
        event (or stops there, beaten)."""
        return await ask(
            attempt.provider,
            attempt.name,
            self.request,
            self.kwargs,
            self.turn.hooks,
            streaming=self.turn.streaming,
            first=functools.partial(self.claim_or_lose, attempt),
        )

    def claim(self, attempt: _Attempt) -> bool:
        """Take the win if nobody holds it; the others are cancelled. No await: the check
        and the claim are one step."""
        if self.winner is None:
            self.winner, attempt.answered = attempt, True
            for other in self.running - {attempt}:
                _cancel(other, f"hedge: {attempt.name!r} answered first")
                self.beaten.append(other.name)
            self.running = {attempt}
        return self.winner is attempt

    async def claim_or_lose(self, attempt: _Attempt) -> None:
        if not self.claim(attempt):
            assert self.winner is not None  # another answered first: this one stops here
            _cancel(attempt, f"hedge: {self.winner.name!r} answered first")
            await anyio.lowlevel.checkpoint()

    # -- the race --------------------------------------------------------------------------

    async def run(self) -> ChatResponse:
        send, receive = anyio.create_memory_object_stream[_Note](math.inf)
        response: ChatResponse | None = None
        failure: Exception | None = None
        with send, receive:
            async with anyio.create_task_group() as tg:
                self.launch(tg, send)
                after = self.policy.hedge_after
                hedge_at = anyio.current_time() + after if self.hedging and after else math.inf
                while response is None and failure is None:
                    note: _Note | None = None
                    with anyio.move_on_at(hedge_at):
                        note = await receive.receive()
                    if note is None:
                        hedge_at = math.inf  # one hedge per call
                        await self.hedge(tg, send)
                    elif note[0] == "done":
                        response = self.done(note[1], note[2])
                    else:
                        failure = await self.failed(tg, send, note[1], note[2])
                tg.cancel_scope.cancel("provider race settled")
            while True:  # answers that arrived while the race was being settled
                try:
                    kind, attempt, value = receive.receive_nowait()
                except anyio.WouldBlock:
                    break
                if kind == "done":
                    self.done(attempt, value)
        if failure is not None:
            raise failure
        assert response is not None
        return await self.settled(response)

    def launch(self, tg: TaskGroup, send: MemoryObjectSendStream[_Note]) -> _Attempt:
        name = self.waiting.pop(0)
        attempt = _Attempt(name=name, provider=_provider(self.turn, name))
        self.running.add(attempt)
        tg.start_soon(self.attempt, attempt, send, name=f"provider attempt {name}")
        return attempt

    async def hedge(self, tg: TaskGroup, send: MemoryObjectSendStream[_Note]) -> None:
        if self.winner is not None or not self.waiting or not self.running:
            return
        primary = next(iter(self.running)).name
        attempt = self.launch(tg, send)
        self.hedged = True
        await self.turn.hooks.emit(
            PROVIDER_HEDGE,
            {"primary": primary, "hedge": attempt.name, "after": self.policy.hedge_after},
        )

    def done(self, attempt: _Attempt, response: ChatResponse) -> ChatResponse | None:
        """The winner's response; a loser's is only counted."""
        self.running.discard(attempt)
        if response.usage is not None:
            self.counted.append(attempt.name)
            if attempt is not self.winner:
                self.extra = response.usage if self.extra is None else self.extra + response.usage
        return response if attempt is self.winner else None

    async def failed(
        self,
        tg: TaskGroup,
        send: MemoryObjectSendStream[_Note],
        attempt: _Attempt,
        exc: Exception,
    ) -> Exception | None:
        """Go on after a failed attempt (None), or the failure that ends the call."""
        if self.winner is not None and attempt is not self.winner:
            return None  # a loser failing while it was being cancelled: nothing to do
        self.running.discard(attempt)
        partial = attempt is self.winner
        if partial:
            self.winner = None
        reason = self.policy.reason(exc, partial=partial)
        if reason is not None and not (self.waiting or self.running):
            self.waiting, self.beaten = self.beaten, []
        if reason is None or not (self.waiting or self.running):
            return exc
        # the next provider, unless a hedge is already running: then it is the next
        following = self.launch(tg, send) if not self.running else next(iter(self.running))
        await self.turn.hooks.emit(
            PROVIDER_FAILOVER,
            {
                "from": attempt.name,
                "to": following.name,
                "reason": reason,
                "partial": partial,
                "status_code": getattr(exc, "status_code", None),
                "error": {"type": type(exc).__name__, "msg": str(exc)},
            },
        )
        return None

    async def settled(self, response: ChatResponse) -> ChatResponse:
        winner = self.winner
        assert winner is not None
        if self.hedged:
            await self.turn.hooks.emit(
                PROVIDER_HEDGE_SETTLED,
                {"winner": winner.name, "counted": list(self.counted)},
            )
        changes: dict[str, Any] = {}
        if self.extra is not None:
            usage = response.usage
            changes["usage"] = self.extra if usage is None else usage + self.extra
        if winner.name != self.turn.provider_name:
            changes["metadata"] = {**(response.metadata or {}), "provider": winner.name}
        return attrs.evolve(response, **changes) if changes else response


def _cancel(attempt: _Attempt, reason: str) -> None:
    """Cancel a losing attempt, saying why (its scope's reason, and a debug line)."""
    logger.debug("provider attempt %r cancelled: %s", attempt.name, reason)
    attempt.scope.cancel(reason)


def _provider(turn: Turn, name: str) -> Any:
    provider = turn.providers.get(name)
    if provider is None:
        mounted = ", ".join(turn.providers) or "none"
        msg = f"session.providers_policy.fallback: {name!r} is not mounted (mounted: {mounted})"
        raise ConfigError(msg)
    return provider


_warned: weakref.WeakSet[Any] = weakref.WeakSet()


def _hedging(turn: Turn, policy: ProvidersPolicy) -> bool:
    if policy.hedge_after is None:
        return False
    if turn.coordinator.get_capability("cassette") is None:
        return True
    if turn.coordinator not in _warned:  # once per session
        _warned.add(turn.coordinator)
        logger.warning("providers_policy.hedge_after: hedging is off while a cassette records")
    return False


async def call_with_policy(
    turn: Turn, policy: ProvidersPolicy, request: ChatRequest, kwargs: dict[str, Any]
) -> ChatResponse:
    """One provider call of ``turn`` under ``policy``: the turn's provider first, then the
    fallbacks (failover), with a hedge after ``hedge_after``."""
    chain = [turn.provider_name, *(f for f in policy.fallback if f != turn.provider_name)]
    for name in chain[1:]:
        _provider(turn, name)  # a fallback that is not mounted fails the call at once
    race = _Race(
        turn=turn,
        policy=policy,
        request=request,
        kwargs=kwargs,
        waiting=chain,
        hedging=_hedging(turn, policy) and len(chain) > 1,
    )
    return await race.run()
