"""A small HTTP/1.1 server on 127.0.0.1, run inside a test's task group (both backends).

``async with open_loopback(handler) as server:`` listens on a free port of 127.0.0.1
(``server.url``). Each request is read (headers and a ``content-length`` body), given to
``handler(request)``, and answered with the `Reply` it returns: after ``delay`` seconds
the status line, then a JSON body, or server-sent events (``events``, ``gap`` seconds
apart; ``cut`` closes the connection before the last one; ``drop`` sends nothing at
all). Every reply closes its
connection (``Connection: close``).

The server watches each connection while it answers: a client that closes it early (a
cancelled request) is recorded — ``request.disconnected`` is set, and the reply stops.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager, suppress
from typing import Any

import anyio
import attrs
from anyio.abc import SocketStream
from anyio.streams.buffered import BufferedByteReceiveStream

_REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    429: "Too Many Requests",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


@attrs.define(eq=False)
class Request:
    """One request as the server read it, and what became of it."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    number: int
    disconnected: anyio.Event = attrs.field(factory=anyio.Event)
    """Set when the client closed the connection before the reply was complete."""
    answered: bool = False
    """The whole reply was written."""


@attrs.frozen(kw_only=True)
class Reply:
    status: int = 200
    json: Any = None
    events: Sequence[bytes] = ()
    delay: float = 0.0
    gap: float = 0.0
    cut: bool = False
    drop: bool = False
    """Close the connection after ``delay`` without answering."""
    headers: dict[str, str] = attrs.field(factory=dict)


Handler = Callable[[Request], Awaitable[Reply]]


@attrs.define(eq=False)
class Loopback:
    url: str
    requests: list[Request] = attrs.field(factory=list)
    open_connections: int = 0
    _idle: anyio.Event = attrs.field(factory=anyio.Event)

    def opened(self) -> None:
        if not self.open_connections:
            self._idle = anyio.Event()
        self.open_connections += 1

    def closed(self) -> None:
        self.open_connections -= 1
        if not self.open_connections:
            self._idle.set()

    async def wait_idle(self) -> None:
        """Until no connection is open."""
        if self.open_connections:
            await self._idle.wait()


def sse_event(data: Any, event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data) if not isinstance(data, str) else data}\n\n".encode()


async def _read_request(stream: SocketStream, number: int) -> Request | None:
    buffered = BufferedByteReceiveStream(stream)
    try:
        head = await buffered.receive_until(b"\r\n\r\n", 65536)
    except (anyio.EndOfStream, anyio.IncompleteRead):
        return None
    lines = head.decode("latin-1").split("\r\n")
    method, path, _ = lines[0].split(" ", 2)
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    size = int(headers.get("content-length", "0"))
    try:
        raw = await buffered.receive_exactly(size) if size else b""
    except (anyio.EndOfStream, anyio.IncompleteRead):
        return None  # the client left mid-request (a hedged request's loser, cancelled)
    body = json.loads(raw) if raw else None
    return Request(method=method, path=path, headers=headers, body=body, number=number)


async def _write_reply(stream: SocketStream, reply: Reply, request: Request) -> None:
    await anyio.sleep(reply.delay)
    if reply.drop:
        return
    headers = {"connection": "close", **reply.headers}
    if reply.events:
        headers["content-type"] = "text/event-stream"
        payload = b""
    else:
        payload = json.dumps(reply.json).encode() if reply.json is not None else b""
        headers["content-type"] = "application/json"
        headers["content-length"] = str(len(payload))
    reason = _REASONS.get(reply.status, "Status")
    lines = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    events = list(reply.events)
    if reply.cut and events:
        events = events[:-1]
    # "answered" is set before the last write: the client may close as soon as it has it
    request.answered = not (reply.cut or events)
    await stream.send(f"HTTP/1.1 {reply.status} {reason}\r\n{lines}\r\n".encode() + payload)
    for index, event in enumerate(events):
        if index and reply.gap:
            await anyio.sleep(reply.gap)
        if index == len(events) - 1:
            request.answered = not reply.cut
        await stream.send(event)


@asynccontextmanager
async def open_loopback(handler: Handler) -> AsyncIterator[Loopback]:
    """Serve ``handler`` on 127.0.0.1 for the block; stopped (every connection closed) after."""
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    server = Loopback(url=f"http://127.0.0.1:{port}")

    async def serve(stream: SocketStream) -> None:
        server.opened()
        try:
            async with stream:
                request = await _read_request(stream, len(server.requests))
                if request is None:
                    return
                server.requests.append(request)
                async with anyio.create_task_group() as tg:

                    async def watch() -> None:
                        # a client that goes away mid-reply: record it, stop replying
                        with suppress(anyio.EndOfStream, anyio.BrokenResourceError, OSError):
                            await stream.receive()
                        if not request.answered:
                            request.disconnected.set()
                            tg.cancel_scope.cancel()

                    tg.start_soon(watch)
                    try:
                        await _write_reply(stream, await handler(request), request)
                    except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                        request.disconnected.set()
                    tg.cancel_scope.cancel()
        finally:
            server.closed()

    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, serve)
        try:
            yield server
        finally:
            tg.cancel_scope.cancel()
