"""The one asyncio adapter of the runtime: Temporal's client and worker are asyncio.

Everything else in ``amplifier_anyio`` is anyio; ruff's banned-api lets this module (and
the workflow module, which runs in Temporal's own asyncio-based deterministic loop) import
``asyncio``. [`AsyncioPortal`][amplifier_anyio.temporal._portal.AsyncioPortal] runs
coroutine functions on an asyncio loop: the host's own loop when the host runs asyncio,
else a loop on a thread of its own (a trio host). A cancel of the awaiting task (a trio
cancel scope, an anyio deadline) cancels the coroutine on the loop and waits for it to
settle, then propagates.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import threading
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

import anyio
import anyio.to_thread
import sniffio

__all__ = ("AsyncioPortal", "LoopInbox", "host_is_asyncio", "asyncio_checkpoint")

T = TypeVar("T")


def host_is_asyncio() -> bool:
    """Whether the calling task runs on asyncio."""
    try:
        return sniffio.current_async_library() == "asyncio"
    except sniffio.AsyncLibraryNotFoundError:
        return False


async def asyncio_checkpoint(error: BaseException | None = None) -> None:
    """Raise the cancel of the running asyncio task when one was asked for (a library
    turned it into ``error``, an error of its own), else yield once.

    The cancel raised is the original ``CancelledError`` found in ``error``'s chain, with
    its message: anyio's cancel scopes on asyncio recognise their own cancel by it, and a
    bare ``CancelledError`` would escape the scope that asked for it (a ``move_on_after``
    around ``DurableSession.run`` then cancelled its caller too)."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        seen = error
        while seen is not None and not isinstance(seen, asyncio.CancelledError):
            seen = seen.__cause__ or seen.__context__
        raise seen if seen is not None else asyncio.CancelledError()
    await asyncio.sleep(0)


class LoopInbox(Generic[T]):
    """Items put from any thread, taken in the order put by a task of the asyncio loop the
    inbox was made on (the worker's: workflow code posts its events from other threads).
    Unbounded: a put never blocks the thread that puts."""

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue[T] = asyncio.Queue()

    def put(self, item: T) -> None:
        """Queue ``item`` (thread-safe)."""
        self._loop.call_soon_threadsafe(self._queue.put_nowait, item)

    async def get(self) -> T:
        """The next item, waiting for one."""
        return await self._queue.get()


class AsyncioPortal:
    """Run asyncio coroutine functions from any anyio backend.

    ``thread=False`` (the default) uses the host's loop when the host is asyncio; ``thread=True``
    always uses a loop on a thread of its own (the worker: its modules then live on one loop
    whatever the host). Enter it with ``async with``.
    """

    def __init__(self, *, thread: bool = False) -> None:
        self._want_thread = thread
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._direct = False

    async def __aenter__(self) -> AsyncioPortal:
        if not self._want_thread and host_is_asyncio():
            self._direct = True
            return self
        ready = threading.Event()
        loop = asyncio.new_event_loop()

        def serve() -> None:
            asyncio.set_event_loop(loop)
            loop.call_soon(ready.set)
            try:
                loop.run_forever()
            finally:
                _close_loop(loop)

        self._loop = loop
        self._thread = threading.Thread(target=serve, name="amplifier-asyncio-portal", daemon=True)
        self._thread.start()
        await anyio.to_thread.run_sync(ready.wait)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        with anyio.CancelScope(shield=True):
            loop.call_soon_threadsafe(loop.stop)
            await anyio.to_thread.run_sync(thread.join)
        self._loop = self._thread = None

    async def call(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        """``await fn(*args)`` on the portal's loop; a cancel here cancels it there."""
        if self._direct:
            return await fn(*args)
        loop = self._loop
        if loop is None:
            msg = "the asyncio portal is not open"
            raise RuntimeError(msg)
        return await wait_future(_submit(loop, fn, *args))

    def submit(self, fn: Callable[..., Awaitable[T]], *args: Any) -> concurrent.futures.Future[T]:
        """Start ``fn(*args)`` on the portal's thread loop; its future (``thread=True`` only)."""
        if self._loop is None:
            msg = "submit needs an open portal with a thread of its own"
            raise RuntimeError(msg)
        return _submit(self._loop, fn, *args)

    def call_soon(self, fn: Callable[..., Any], *args: Any) -> None:
        """Call the synchronous ``fn(*args)`` on the portal's loop (from any thread)."""
        if self._direct or self._loop is None:
            fn(*args)
        else:
            self._loop.call_soon_threadsafe(fn, *args, context=contextvars.Context())


async def wait_future(future: concurrent.futures.Future[T]) -> T:
    """Wait for a future of another thread's loop; a cancel cancels it, waits for it to
    settle (so nothing of it runs on after the caller moved on), and propagates.

    Only for a loop's future (``run_coroutine_threadsafe``): its loop reports the task's
    end. A bare ``concurrent.futures.Future`` cancelled here is never reported settled,
    and the wait would not end."""
    try:
        return await anyio.to_thread.run_sync(future.result, abandon_on_cancel=True)
    except anyio.get_cancelled_exc_class():
        future.cancel()
        with anyio.CancelScope(shield=True), anyio.move_on_after(30):
            await anyio.to_thread.run_sync(_settled, future)
        raise


def _settled(future: concurrent.futures.Future[Any]) -> None:
    concurrent.futures.wait([future])


def _submit(
    loop: asyncio.AbstractEventLoop, fn: Callable[..., Awaitable[T]], *args: Any
) -> concurrent.futures.Future[T]:
    """Start ``fn(*args)`` on ``loop`` in an empty context: the caller's context variables
    (a trio host's, whose sniffio marker would make anyio there think it runs trio) stay
    behind."""
    return contextvars.Context().run(asyncio.run_coroutine_threadsafe, _awaited(fn, *args), loop)


async def _awaited(fn: Callable[..., Awaitable[T]], *args: Any) -> T:
    return await fn(*args)


def _close_loop(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel what is left on the loop, let it finish, close the loop."""
    pending = [task for task in asyncio.all_tasks(loop) if not task.done()]
    for task in pending:
        task.cancel()
    if pending:
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
    loop.run_until_complete(loop.shutdown_asyncgens())
    loop.close()
