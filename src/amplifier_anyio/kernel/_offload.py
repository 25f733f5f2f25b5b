"""Code that may block, kept off the event loop (DESIGN §3: no user code blocks the loop).

`run_blocking` calls a synchronous function in a worker thread and waits for it;
a cancel (a caller's timeout, the turn's cancel) stops the *wait* and abandons the thread,
which then finishes on its own. Callers bound the wait with their own timeout and apply
their fail-closed default when it expires.

`BlockingLane` is for OS work under a shield (a write, an fsync, a rename): calls run
one at a time, in order, each in a worker thread. A caller that stops waiting (its bound
expired) leaves its call running; the next call waits for it first, so two writes to one
file never interleave however long one is stuck.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any, TypeVar

import anyio
import anyio.from_thread
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
    """Blocking calls one at a time, in worker threads, each abandonable by its caller."""

    def __init__(self) -> None:
        self._idle: anyio.Event | None = None  # set when the call in flight ends

    @property
    def busy(self) -> bool:
        """Whether a call (perhaps one its caller gave up on) is still running."""
        return self._idle is not None and not self._idle.is_set()

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """Wait for the call in flight, then run ``fn(*args)`` in a worker thread.

        A cancel stops the wait; the call then finishes in its thread (and the lane stays
        busy until it has). Its exception, if it raises after being abandoned, is lost:
        callers that abandon a call treat its outcome as unknown.
        """
        while self.busy:
            assert self._idle is not None
            await self._idle.wait()
        idle = self._idle = anyio.Event()
        try:
            value: T = await anyio.to_thread.run_sync(
                _signalling, fn, args, idle, abandon_on_cancel=True
            )
        except anyio.get_cancelled_exc_class():
            raise  # the thread goes on and sets ``idle`` when it ends
        except BaseException:
            idle.set()  # it ended (with an exception); the thread did not reach set()
            raise
        return value


def _signalling(fn: Callable[..., T], args: tuple[Any, ...], idle: anyio.Event) -> T:
    try:
        return fn(*args)
    finally:
        with contextlib.suppress(RuntimeError):  # the loop is gone: nobody waits any more
            anyio.from_thread.run_sync(idle.set)
