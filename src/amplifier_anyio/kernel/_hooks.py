"""The hook registry: ordered handlers per event and the reduction of their answers.

Handlers run one at a time in ascending priority (ties in registration order) over a
snapshot of the list taken when ``emit`` starts, so (un)registering during an emit only
affects later emits. The backend's cancellation exception is never caught here, so a
cancel scope around ``emit`` stops the running handler and no later handler runs.

A gate fails closed: on a `GATE_EVENTS` event a handler
that raises an ``Exception`` or answers something that is not a verdict *denies*, with a
reason naming the hook and the module that registered it; on every other event it is
logged and skipped.

Plain callbacks run on the loop; code that blocks by nature runs off it (DESIGN §3). A
synchronous handler is called inline, as every asyncio and trio callback is: it may touch
loop objects (``event.set()``, ``scope.cancel()``) and, with no thread hop, a session stays
deterministic under trio's ``MockClock``. The registry times each inline call and reports a
handler that held the loop longer than `HookRegistry.slow_handler` once, by name (a warning
and a ``hook:slow`` event). A handler registered with ``blocking=True`` runs in a worker
thread instead; its ``timeout`` bounds the wait (a cancel stops the wait, not the thread).
A handler whose ``timeout`` expires is a failure: a deny on a gate, skipped elsewhere.

``emit`` does not add a schedule point of its own: with only non-blocking handlers it
returns without yielding, which keeps event emission cheap on hot paths.
"""

from __future__ import annotations

import inspect
import itertools
import logging
import math
import time
import warnings
from bisect import insort
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, Literal, overload

import anyio
import attrs

from ..errors import ConfigError, ForeignModuleError
from ..events import GATE_EVENTS, HOOK_SLOW
from ..models import HookResult
from ..models._results import _new
from ..models._results import _trusted_result as trusted_result
from ._foreign import current_module, hook_result_of
from ._offload import run_blocking
from ._tracing import _trace_id

__all__ = ("HookRegistry", "Handler", "HookAnswer", "HookRegistryStatistics", "utc_timestamp")

logger = logging.getLogger(__name__)

Handler = Callable[[str, dict[str, Any]], Awaitable[HookResult | None] | HookResult | None]
"""A hook handler: ``(event, data) -> HookResult | None``, async or plain."""


@attrs.frozen(order=True)
class _Entry:
    priority: int
    seq: int
    name: str = attrs.field(order=False)
    handler: Handler = attrs.field(order=False, eq=False)
    is_async: bool = attrs.field(order=False)
    module: str | None = attrs.field(default=None, order=False)
    """The module whose mount registered the handler, when known."""
    blocking: bool = attrs.field(default=False, order=False)
    """A synchronous handler that blocks by nature: it runs in a worker thread."""
    timeout: float | None = attrs.field(default=None, order=False)
    """Seconds the emit waits for this handler (async or blocking); None: no bound."""

    inline: bool = attrs.field(
        init=False,
        order=False,
        default=attrs.Factory(lambda e: not e.is_async and not e.blocking, takes_self=True),
    )
    """A plain handler, called on the loop (neither async nor blocking): stored, not a
    property, as ``emit`` reads it per handler."""

    @property
    def label(self) -> str:
        """``hook 'name'`` (``of module 'id'`` when known), for messages."""
        if self.module is None:
            return f"hook {self.name!r}"
        return f"hook {self.name!r} of module {self.module!r}"


@attrs.frozen(kw_only=True)
class HookRegistryStatistics:
    """A snapshot of a registry: handler counts per event and emits so far."""

    handlers: dict[str, int]
    emits: int


@attrs.frozen(kw_only=True)
class HookAnswer:
    """One handler's answer, as ``emit_and_collect(..., answers=True)`` returns it.

    ``registered`` orders handlers by registration (lower: registered earlier), whatever
    the priority they run at; reducers break ties with it.
    """

    handler: str
    registered: int
    result: HookResult


class HookRegistry:
    """Named, prioritised handlers per event; ``emit`` reduces their results."""

    def __init__(self) -> None:
        # Each event's entries are an immutable tuple, replaced on (un)registration: an
        # emit iterates the tuple it read, which is the snapshot, with no copy per emit.
        self._handlers: dict[str, tuple[_Entry, ...]] = {}
        self._defaults: dict[str, Any] = {}
        self._seq = itertools.count()
        self._emits = 0
        self._slow_handler = 0.1
        self._reported_slow: set[int] = set()  # entries' seq: each is reported once

    def register(
        self,
        event: str,
        handler: Handler,
        priority: int = 0,
        name: str | None = None,
        *,
        blocking: bool = False,
        timeout: float | None = None,
        inline: bool | None = None,
    ) -> Callable[[], None]:
        """Add ``handler`` for ``event``; lower priority runs first. Returns its unregister.

        A plain (synchronous) handler is called on the loop: keep it cheap (observe,
        mutate, schedule). One that blocks by nature (a network call, a lock held by
        another thread) is registered with ``blocking=True`` and runs in a worker thread.
        ``timeout`` (seconds) bounds the wait for an async or blocking handler; when it
        expires the handler has failed: on a gate event the emit denies, naming it.
        ``inline`` is the deprecated spelling of the old default (``inline=False`` is
        ``blocking=True``).
        """
        if inline is not None:
            warnings.warn(
                "HookRegistry.register(inline=...) is deprecated: plain handlers run inline; "
                "pass blocking=True for one that blocks",
                DeprecationWarning,
                stacklevel=2,
            )
            blocking = blocking or not inline
        is_async = _is_async(handler)
        _check_options(handler, is_async=is_async, blocking=blocking, timeout=timeout)
        seq = next(self._seq)
        entry = _Entry(
            priority=priority,
            seq=seq,
            name=name or f"_auto_{event}_{seq}",
            handler=handler,
            is_async=is_async,
            module=current_module(),
            blocking=blocking and not is_async,
            timeout=None if timeout is None else float(timeout),
        )
        entries = list(self._handlers.get(event, ()))
        insort(entries, entry)
        self._handlers[event] = tuple(entries)

        def unregister() -> None:
            entries = self._handlers.get(event, ())
            if entry in entries:
                self._handlers[event] = tuple(e for e in entries if e is not entry)

        return unregister

    @property
    def slow_handler(self) -> float:
        """Seconds an inline handler may hold the loop before it is reported (default 0.1).

        A handler over the bound is reported once: a warning log naming it and a
        ``hook:slow`` event (``handler``, ``module``, ``event``, ``seconds``).
        """
        return self._slow_handler

    @slow_handler.setter
    def slow_handler(self, seconds: float) -> None:
        if (
            isinstance(seconds, bool)
            or not isinstance(seconds, int | float)
            or not math.isfinite(seconds)
            or seconds < 0
        ):
            msg = f"slow_handler: expected a finite number of seconds >= 0, got {seconds!r}"
            raise ConfigError(msg)
        self._slow_handler = float(seconds)

    on = register

    def unregister(self, name: str) -> None:
        """Remove every handler registered under ``name``; unknown names are ignored."""
        for event, entries in self._handlers.items():
            self._handlers[event] = tuple(e for e in entries if e.name != name)

    def set_default_fields(self, **defaults: Any) -> None:
        """Replace the fields merged under every emitted event's data."""
        self._defaults = dict(defaults)

    def list_handlers(self, event: str | None = None) -> dict[str, list[str]]:
        """Handler names per event, in the order they run."""
        if event is not None:
            return {event: [e.name for e in self._handlers.get(event, [])]}
        return {
            evt: [e.name for e in entries] for evt, entries in self._handlers.items() if entries
        }

    def has_handlers(self, event: str) -> bool:
        """Whether emitting ``event`` would run any handler."""
        return bool(self._handlers.get(event))

    def statistics(self) -> HookRegistryStatistics:
        """Handler counts per event and the number of emits so far."""
        counts = {evt: len(entries) for evt, entries in self._handlers.items() if entries}
        return HookRegistryStatistics(handlers=counts, emits=self._emits)

    async def emit(self, event: str, data: dict[str, Any]) -> HookResult:  # noqa: PLR0915 - flat: hot path
        """Run the handlers of ``event`` and reduce their answers to one HookResult.

        Handlers see ``{**defaults, **data, "timestamp": now}`` (plus the turn's
        ``trace_id``). Precedence: deny > ask_user > inject_context > modify > continue;
        unlike upstream, a chain that modified the data returns ``action="modify"``, and
        an ``inject_context`` or ``ask_user`` result carries the modified data too: apply
        ``result.data`` whatever the action (deny aside).
        """
        self._emits += 1
        entries = self._handlers.get(event)
        # The registry's own result, built without validation (see models/_results.py);
        # inlined, as is the clock below: a function call is a measurable part of an emit.
        answer = _new(HookResult)  # action: the class's default, "continue"
        fields = answer.__dict__
        if not entries:
            # Nothing to run, stamp or reduce. The one copy stays: the caller's dict is
            # never handed back to be mutated by whoever reads the result (tested).
            fields["data"] = data.copy()
            return answer
        current = {**self._defaults, **data} if self._defaults else data.copy()
        if (trace_id := _trace_id.get()) is not None and "trace_id" not in current:
            current["trace_id"] = trace_id
        # The kernel owns the timestamp: a caller's value is overwritten (utc_timestamp).
        now = _time_ns()
        start, text = _milli_text
        offset = now - start
        if 0 <= offset < 1_000_000:
            current["timestamp"] = text + _MICROS[offset // 1000]
        else:
            current["timestamp"] = _milli_clock(now)
        reducer: _Reduction | None = None  # only built once a handler does more than continue
        for entry in entries:  # an immutable snapshot: see __init__
            if entry.is_async and entry.timeout is None:  # the common case, inlined
                try:
                    got = await entry.handler(event, current)  # type: ignore[misc]
                except Exception as exc:  # noqa: BLE001 - logged, and a deny on a gate
                    got = _failed(entry, event, exc)
                if got is None:
                    continue
                result = got if type(got) is HookResult else _answer(entry, event, got)
            elif entry.inline:  # a plain handler, inlined too: timed, on the loop
                started = _perf_counter()
                try:
                    got = entry.handler(event, current)
                except Exception as exc:  # noqa: BLE001 - logged, and a deny on a gate
                    got = _failed(entry, event, exc)
                held = _perf_counter() - started
                if held > self._slow_handler and entry.seq not in self._reported_slow:
                    await self._report_slow(entry, event, held)
                if got is None:
                    continue
                if type(got) is HookResult:
                    result = got
                elif inspect.isawaitable(got):  # a plain function that returned a coroutine
                    result = await self._awaited(entry, event, got)
                else:
                    result = _answer(entry, event, got)
            else:
                result = await self._call(entry, event, current)
            if result is None or result.action == "continue":
                continue
            if reducer is None:
                reducer = _Reduction(current)
            if reducer.add(result):
                return result
            current = reducer.data
        if reducer is None:
            fields["data"] = current
            return answer
        return reducer.result()

    async def announce(self, event: str, data: dict[str, Any], *, timeout: float = 1.0) -> None:
        """Deliver an observe-only announcement (``session:start``) to *every* handler.

        A cancel interrupts the handler that is running, as for ``emit``; the handlers
        after it are still called (shielded, all of them within ``timeout`` seconds), so
        no observer misses a start whose end it will see; the cancellation is then
        re-raised. Answers are not reduced (an announcement decides nothing).
        """
        entries = self._handlers.get(event, ())
        if not entries:
            await anyio.lowlevel.checkpoint()
            return
        self._emits += 1
        current = {**self._defaults, **data, "timestamp": utc_timestamp()}
        if (trace_id := _trace_id.get()) is not None and "trace_id" not in current:
            current["trace_id"] = trace_id
        cancelled: BaseException | None = None
        rest = iter(entries)
        for entry in rest:
            try:
                await self._call(entry, event, current)
            except anyio.get_cancelled_exc_class() as exc:
                cancelled = exc
                break
        if cancelled is None:
            return
        with anyio.CancelScope(shield=True), anyio.move_on_after(timeout) as bound:
            for entry in rest:
                await self._call(entry, event, current)
        if bound.cancelled_caught:
            logger.error("%s: its handlers did not all finish within %s s", event, timeout)
        raise cancelled

    @overload
    async def emit_and_collect(
        self,
        event: str,
        data: dict[str, Any],
        timeout: float = 1.0,
        *,
        answers: Literal[False] = False,
    ) -> list[dict[str, Any]]: ...

    @overload
    async def emit_and_collect(
        self, event: str, data: dict[str, Any], timeout: float = 1.0, *, answers: Literal[True]
    ) -> list[HookAnswer]: ...

    async def emit_and_collect(
        self, event: str, data: dict[str, Any], timeout: float = 1.0, *, answers: bool = False
    ) -> list[dict[str, Any]] | list[HookAnswer]:
        """Ask every handler of ``event`` and collect the ``data`` of their answers.

        Each handler gets its own ``timeout``; a handler that times out or raises is
        logged and skipped. Actions are not interpreted (a deny does not stop the others).
        With ``answers=True`` the whole answers come back instead (every handler that
        returned a HookResult, in the order they ran), for callers that reduce actions
        themselves, as loop-events' scheduler stage does.
        """
        collected: list[HookAnswer] = []
        for entry in tuple(self._handlers.get(event, ())):
            with anyio.move_on_after(timeout) as scope:
                result = await self._call(entry, event, data, collecting=True)
            if scope.cancelled_caught:
                logger.warning("hook %s timed out after %ss on %s", entry.name, timeout, event)
            elif result is not None and result is not _FAILED:
                collected.append(
                    HookAnswer(handler=entry.name, registered=entry.seq, result=result)
                )
        if answers:
            return collected
        return [a.result.data for a in collected if a.result.data is not None]

    async def _call(
        self, entry: _Entry, event: str, data: dict[str, Any], *, collecting: bool = False
    ) -> HookResult | None:
        """Run one handler: a plain one inline (timed), a blocking one in a worker thread.

        A failure on a gate event denies; elsewhere it is skipped (`_failed`). So does a
        ``timeout`` that expires. An answer that is not our HookResult is converted (an
        amplifier-core HookResult, a dict with ``action``); one that cannot be converted,
        or whose reading raises, is treated as a failure.
        """
        result: Any
        try:
            if entry.inline:
                started = _perf_counter()
                result = entry.handler(event, data)
                held = _perf_counter() - started
                if held > self._slow_handler and entry.seq not in self._reported_slow:
                    await self._report_slow(entry, event, held)
            elif entry.timeout is None:
                result = await _invoke(entry, event, data)
            else:
                with anyio.move_on_after(entry.timeout) as bound:
                    result = await _invoke(entry, event, data)
                if bound.cancelled_caught:
                    return _timed_out(entry, event, collecting=collecting)
            if inspect.isawaitable(result):  # a plain function that returned a coroutine
                result = await result
        except Exception as exc:  # noqa: BLE001 - logged, and a deny on a gate
            return _failed(entry, event, exc, collecting=collecting)
        if result is None or isinstance(result, HookResult):
            return result
        return _answer(entry, event, result, collecting=collecting)

    async def _awaited(self, entry: _Entry, event: str, pending: Any) -> HookResult | None:
        """The answer of a plain handler that returned an awaitable."""
        try:
            result = await pending
        except Exception as exc:  # noqa: BLE001 - logged, and a deny on a gate
            return _failed(entry, event, exc)
        if result is None or isinstance(result, HookResult):
            return result
        return _answer(entry, event, result)

    async def _report_slow(self, entry: _Entry, event: str, held: float) -> None:
        """Name a plain handler that held the loop too long, once (log and ``hook:slow``)."""
        self._reported_slow.add(entry.seq)
        logger.warning(
            "%s held the event loop for %.3f s on %s (slow_handler: %s s); a handler that "
            "blocks by nature is registered with blocking=True",
            entry.label,
            held,
            event,
            self._slow_handler,
        )
        data = {"handler": entry.name, "module": entry.module, "event": event, "seconds": held}
        await self.emit(HOOK_SLOW, data)


_second_text: tuple[int, str] = (-1, "")
_milli_text: tuple[int, str] = (-1_000_000, "")
"""The cached millisecond: its start (nanoseconds since the epoch) and its text."""
_DIGITS = tuple(f"{i:03d}" for i in range(1000))
"""Three zero-padded digits by value: a lookup beats a ``:03d`` format spec."""
_MICROS = tuple(f"{i:03d}+00:00" for i in range(1000))
"""The last three digits of the microseconds and the UTC offset, by value."""
_time_ns = time.time_ns
_perf_counter = time.perf_counter


def utc_timestamp() -> str:
    """Now as UTC ISO-8601 with microseconds (``2026-11-22T02:13:30.853271+00:00``).

    ``datetime.now(UTC).isoformat()`` is the slowest step of an emit. This is a cached
    clock read from integer nanoseconds (no float arithmetic): the text up to the
    millisecond is built once per millisecond (its date-and-second part once per second)
    and within it a call costs a clock read, one subtraction, one small division and one
    concatenation with a looked-up suffix. ``HookRegistry.emit`` inlines the same steps.
    """
    now = _time_ns()
    start, text = _milli_text
    offset = now - start
    if 0 <= offset < 1_000_000:
        return text + _MICROS[offset // 1000]
    return _milli_clock(now)


def _milli_clock(now: int) -> str:
    """The timestamp of ``now`` (nanoseconds since the epoch), caching its millisecond."""
    global _milli_text  # noqa: PLW0603 - a one-entry cache
    millis, rest = divmod(now, 1_000_000)
    second, milli = divmod(millis, 1000)
    text = _second_prefix(second) + _DIGITS[milli]
    _milli_text = (millis * 1_000_000, text)
    return text + _MICROS[rest // 1000]


def _second_prefix(second: int) -> str:
    """``2026-11-22T02:13:30.`` for ``second`` (seconds since the epoch), cached."""
    global _second_text  # noqa: PLW0603 - a one-entry cache
    cached = _second_text
    if cached[0] != second:
        text = datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%S.")
        cached = _second_text = (second, text)
    return cached[1]


def _is_async(handler: Any) -> bool:
    """Whether calling ``handler`` gives a coroutine (a coroutine function, a partial of
    one, or an object whose ``__call__`` is one)."""
    if inspect.iscoroutinefunction(handler):
        return True
    call = getattr(type(handler), "__call__", None)  # noqa: B004 - the class's, not a callable check
    return call is not None and inspect.iscoroutinefunction(call)


_FAILED = HookResult(action="continue", reason="the handler failed")
"""What `HookRegistry._call` gives for a handler that failed on an observe-only event (skipped)."""


async def _invoke(entry: _Entry, event: str, data: dict[str, Any]) -> Any:
    """An async handler awaited, a blocking one in a worker thread (its answer as is)."""
    if entry.is_async:
        return await entry.handler(event, data)  # type: ignore[misc]
    return await run_blocking(entry.handler, event, data)


def _check_options(handler: Any, *, is_async: bool, blocking: Any, timeout: Any) -> None:
    """Reject a registration whose options cannot mean anything (ConfigError)."""
    if not callable(handler):
        msg = f"handler: expected a callable, got {handler!r}"
        raise ConfigError(msg)
    if not isinstance(blocking, bool):
        msg = f"blocking: expected True or False, got {blocking!r}"
        raise ConfigError(msg)
    if timeout is None:
        return
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not math.isfinite(timeout)
        or timeout <= 0
    ):
        msg = f"timeout: expected a finite number of seconds > 0, got {timeout!r}"
        raise ConfigError(msg)
    if not is_async and not blocking:
        msg = (
            "timeout: a plain handler runs inline and cannot be interrupted; "
            "register it with blocking=True (a worker thread) or make it async"
        )
        raise ConfigError(msg)


def _timed_out(entry: _Entry, event: str, *, collecting: bool = False) -> HookResult:
    """A handler past its ``timeout``: a deny naming it on a gate event, else skipped."""
    exc = TimeoutError(f"no answer within {entry.timeout:g} s")
    return _failed(entry, event, exc, collecting=collecting)


def _failed(
    entry: _Entry, event: str, exc: BaseException, *, collecting: bool = False
) -> HookResult:
    """A handler that raised: a deny naming it on a gate event, else skipped (logged)."""
    if event in GATE_EVENTS and not collecting:
        if isinstance(exc, ForeignModuleError):  # an answer that is no verdict: it says so
            logger.error("%s; denied (fail closed)", exc)
            reason = str(exc)
        else:
            logger.error("%s failed on %s; denied (fail closed)", entry.label, event, exc_info=exc)
            reason = f"{entry.label} failed on {event}: {type(exc).__name__}: {exc}"
        return HookResult(action="deny", reason=f"{reason} (denied: fail closed)")
    logger.error("%s failed on %s; skipped", entry.label, event, exc_info=exc)
    return _FAILED


def _answer(
    entry: _Entry, event: str, result: object, *, collecting: bool = False
) -> HookResult | None:
    """A handler's answer as our HookResult (a subclass passes through unchanged).

    One that cannot be converted denies on a gate event and is skipped elsewhere."""
    if isinstance(result, HookResult):
        return result
    try:
        return hook_result_of(result, origin=f"{entry.label} on {event}")
    except Exception as exc:  # noqa: BLE001 - any failure to read the answer is the hook's
        return _failed(entry, event, exc, collecting=collecting)


class _Reduction:
    """Folds handler results in order; ``add`` returns True when the emit must stop."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data
        self.modified = False
        self.injections: list[HookResult] = []
        self.ask: HookResult | None = None

    def add(self, result: HookResult) -> bool:
        action = result.action
        if action == "deny":
            return True
        if action == "modify" and result.data is not None:
            self.data = result.data
            self.modified = True
        elif action == "inject_context" and result.context_injection:
            self.injections.append(result)
        elif action == "ask_user" and self.ask is None:
            self.ask = result
        return False

    def result(self) -> HookResult:
        # A stronger action still carries the modified data: callers apply ``data``
        # whatever the action (deny aside), so a sandboxing modify is never lost.
        if self.ask is not None:
            return attrs.evolve(self.ask, data=self.data) if self.modified else self.ask
        if self.injections:
            merged = self._merged_injection()
            return attrs.evolve(merged, data=self.data) if self.modified else merged
        return trusted_result("modify" if self.modified else "continue", self.data)

    def _merged_injection(self) -> HookResult:
        if len(self.injections) == 1:
            return self.injections[0]
        first = self.injections[0]
        return HookResult(
            action="inject_context",
            context_injection="\n\n".join(r.context_injection or "" for r in self.injections),
            context_injection_role=first.context_injection_role,
            ephemeral=any(r.ephemeral for r in self.injections),
            append_to_last_tool_result=any(r.append_to_last_tool_result for r in self.injections),
            suppress_output=first.suppress_output,
        )
