"""A small server-sent events decoder (the WHATWG ``text/event-stream`` rules we need).

It reads lines, not bytes, so it sits on ``httpx.Response.aiter_lines()``; it does not
insist on a ``text/event-stream`` content type, because several OpenAI-compatible servers
send another one.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator

import attrs

__all__ = ("SSEEvent", "aiter_sse")


@attrs.frozen(kw_only=True)
class SSEEvent:
    """One dispatched event: its name (``message`` when the stream gave none) and data."""

    event: str = "message"
    data: str = ""
    id: str | None = None


@attrs.define
class _Pending:
    event: str = ""
    data: list[str] = attrs.field(factory=list)
    id: str | None = None

    def feed(self, line: str) -> None:
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            self.data.append(value)
        elif name == "event":
            self.event = value
        elif name == "id" and "\0" not in value:
            self.id = value
        # "retry" and unknown fields are ignored, as the standard says.

    def dispatch(self) -> SSEEvent | None:
        if not self.data:
            self.event = ""
            return None
        event = SSEEvent(event=self.event or "message", data="\n".join(self.data), id=self.id)
        self.event, self.data = "", []
        return event


async def aiter_sse(lines: AsyncIterable[str]) -> AsyncIterator[SSEEvent]:
    """Decode events from an iterable of lines (line terminators already removed).

    A blank line dispatches the event being built; comment lines (``:`` first) are
    skipped; an event still pending when the lines end is dispatched, so a server that
    omits the final blank line loses nothing.
    """
    pending = _Pending()
    async for raw in lines:
        line = raw.rstrip("\r\n")
        if not line:
            event = pending.dispatch()
            if event is not None:
                yield event
        elif not line.startswith(":"):
            pending.feed(line)
    event = pending.dispatch()
    if event is not None:
        yield event
