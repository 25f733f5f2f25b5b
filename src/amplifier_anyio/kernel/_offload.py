"""Code that may block, kept off the event loop (DESIGN §3: no user code blocks the loop).

`run_blocking` calls a synchronous function in a worker thread and waits for it;
a cancel (a caller's timeout, the turn's cancel) stops the *wait* and abandons the thread,
which then finishes on its own. Callers bound the wait with their own timeout and apply
their fail-closed default when it expires.

`BlockingLane` is for OS work under a shield (a write, an fsync, a rename): calls run
one at a time, in order, each in a daemon thread. A caller that stops waiting (its bound
expired) leaves its call running; the next call waits for it first, so two writes to one
file never interleave however long one is stuck, and a call stuck for good neither hangs
its thread on a stopped loop nor holds the process at exit.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

import anyio
import anyio.lowlevel
import anyio.to_thread

__all__ = ("run_blocking", "BlockingLane")

T = TypeVar("T")


def _boxed(fn: Callable[..., Any], args: tuple[Any, ...]) -> tuple[Any]:
    # Boxed: a callback may return a coroutine (the caller awaits it on the loop), and trio
    # refuses a worker function whose value is one.
    return (fn(*args),)


async def run_blocking(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` in a worker thread; a cancel abandons the thread (it runs on).

    What ``fn`` returns comes back as is, even an awaitable (for the caller to await).
    """
    (value,) = await anyio.to_thread.run_sync(_boxed, fn, args, abandon_on_cancel=True)
    return value


class BlockingLane:
    """Blocking calls one at a time, in daemon threads, each abandonable by its caller.

    The call runs in a daemon thread of its own and never calls back into the event
    loop: it only sets a thread-safe flag when it ends. So a call that was given up on
    (an fsync stuck past its bound) can neither block waiting for a loop that has stopped,
    nor keep the interpreter from exiting. The loop side waits for the flag in short
    slices in a worker thread, each of which ends on its own.
    """

    def __init__(self) -> None:
        self._current: _LaneCall | None = None

    @property
    def busy(self) -> bool:
        """Whether a call (perhaps one its caller gave up on) is still running."""
        return self._current is not None and not self._current.done.is_set()

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """Wait for the call in flight, then run ``fn(*args)`` in a daemon thread.

        A cancel stops the wait; the call then finishes in its thread (and the lane stays
        busy until it has). Its exception, if it raises after being abandoned, is lost:
        callers that abandon a call treat its outcome as unknown.
        """
        previous = self._current
        if previous is not None:
            await previous.wait()
        call = self._current = _LaneCall(fn, args)
        call.start()
        await call.wait()
        value: T = call.outcome()
        return value


_SLICE = 0.25
"""Seconds one worker-thread wait for a lane call lasts: an abandoned wait ends by then."""


class _LaneCall:
    """One blocking call in a daemon thread, its outcome and a flag set when it ends."""

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.fn = fn
        self.args = args
        self.done = threading.Event()
        self.value: Any = None
        self.error: BaseException | None = None

    def start(self) -> None:
        name = f"amplifier-anyio lane: {getattr(self.fn, '__name__', 'call')}"
        threading.Thread(target=self._run, name=name, daemon=True).start()

    def _run(self) -> None:
        try:
            self.value = self.fn(*self.args)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller by outcome()
            self.error = exc
        finally:
            self.done.set()

    async def wait(self) -> None:
        """Until the call ended (a cancel stops the wait, never the call)."""
        done = self.done
        if done.is_set():
            await anyio.lowlevel.checkpoint()
            return
        while not await anyio.to_thread.run_sync(done.wait, _SLICE, abandon_on_cancel=True):
            pass

    def outcome(self) -> Any:
        if self.error is not None:
            error, self.error = self.error, None  # no reference cycle through the traceback
            raise error
        return self.value
