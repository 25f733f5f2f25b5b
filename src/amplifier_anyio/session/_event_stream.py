"""A turn whose events the host reads as a stream: ``session.stream(prompt)``.

The turn is accepted by ``__aenter__`` itself, before it returns (so a busy or closed
session raises [`SessionError`][amplifier_anyio.SessionError] right there, and leaving the block can
always cancel the turn), then runs in a task of a task group entered by ``__aenter__`` and left by
``__aexit__`` (a class, not a generator, so nothing yields from inside the group). Every
event of the session is sent, as ``(name, data)``, into an unbounded memory object stream
that ends when the turn ends. Leaving the block before the turn is over cancels the turn
(immediately) and waits for it to close its events.

No exception group reaches the host: the turn's own exception is kept by its task and
re-raised by ``__aexit__``, and the host's exception leaves the block as it entered it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import anyio
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from ..events import ALL_EVENTS
from ..kernel._handle import TurnHandle
from ..kernel._turns import TurnResult

if TYPE_CHECKING:
    from ..kernel._coordinator import ModuleCoordinator


class _Host(Protocol):
    """What the stream needs of its session (``AmplifierSession``; a protocol, so that
    this module does not import the session's)."""

    coordinator: ModuleCoordinator

    def _accept_turn(self) -> TurnHandle: ...

    def _release_turn(self, handle: TurnHandle) -> None: ...

    async def _run_accepted(self, prompt: str, handle: TurnHandle) -> TurnResult: ...

    def cancel(self, immediate: bool = False, *, reason: str | None = None) -> bool: ...


__all__ = ("TurnEventStream", "Event")

Event = tuple[str, dict[str, Any]]
"""One event as the stream delivers it: its name and a copy of its data."""


class TurnEventStream:
    """``async with session.stream(prompt) as events: async for name, data in events: …``

    After the block, `result` holds the turn's [`TurnResult`][amplifier_anyio.TurnResult].
    """

    def __init__(self, session: _Host, prompt: str) -> None:
        self._session = session
        self._prompt = prompt
        self._group: TaskGroup | None = None
        self._unregister: list[Callable[[], None]] = []
        self._done = anyio.Event()
        self._receive: MemoryObjectReceiveStream[Event] | None = None
        self._error: BaseException | None = None
        self.result: TurnResult | None = None

    async def __aenter__(self) -> MemoryObjectReceiveStream[Event]:
        handle = self._session._accept_turn()
        send, receive = anyio.create_memory_object_stream[Event](max_buffer_size=math.inf)
        hooks = self._session.coordinator.hooks

        def forward(event: str, data: dict[str, Any]) -> None:
            send.send_nowait((event, dict(data)))

        self._unregister = [
            hooks.register(event, forward, priority=1_000_000, name="session-stream")
            for event in ALL_EVENTS
        ]
        self._group = anyio.create_task_group()
        await self._group.__aenter__()
        self._group.start_soon(self._run, send, handle)
        self._receive = receive
        return receive

    async def _run(self, send: MemoryObjectSendStream[Event], handle: TurnHandle) -> None:
        try:
            async with send:
                self.result = await self._session._run_accepted(self._prompt, handle)
        except Exception as exc:  # noqa: BLE001 - re-raised by __aexit__, outside the group
            self._error = exc
        finally:
            self._session._release_turn(handle)
            for unregister in self._unregister:
                unregister()
            self._done.set()

    async def __aexit__(self, *exc_info: Any) -> bool | None:
        assert self._group is not None
        if not self._done.is_set():
            # The host left early (a break, an error): stop the turn rather than wait for it.
            self._session.cancel(
                immediate=True, reason="session.stream: left before the turn ended"
            )
        host_error = exc_info[1]
        try:
            if isinstance(host_error, anyio.get_cancelled_exc_class()):
                # The host's own cancellation must reach the group's scope as it is.
                return await self._group.__aexit__(*exc_info)
            await self._group.__aexit__(None, None, None)
        finally:
            if self._receive is not None:
                self._receive.close()
        if self._error is not None and host_error is None:
            raise self._error
        return None
