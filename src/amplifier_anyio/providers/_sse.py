"""A small server-sent events decoder (the WHATWG ``text/event-stream`` rules we need).

It reads lines, not bytes, so it sits on ``httpx.Response.aiter_lines()``; it does not
insist on a ``text/event-stream`` content type, because several OpenAI-compatible servers
send another one.
"""

from __future__ import annotations

import attrs

__all__ = ("SSEEvent", "SSEDecoder")


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


class SSEDecoder:
    """Turns lines (terminators removed) into events, one line at a time.

    A blank line dispatches the event being built; comment lines (``:`` first) are
    skipped; :meth:`flush` dispatches what is still pending when the lines end, so a
    server that omits the final blank line loses nothing. It is push-style, not an async
    generator, so the only generator over the response is the one the caller closes.
    """

    def __init__(self) -> None:
        self._pending = _Pending()

    def feed(self, line: str) -> SSEEvent | None:
        """Take one line; return the event it completes, if any."""
        line = line.rstrip("\r\n")
        if not line:
            return self._pending.dispatch()
        if not line.startswith(":"):
            self._pending.feed(line)
        return None

    def flush(self) -> SSEEvent | None:
        """The event left pending at the end of the stream, if any."""
        return self._pending.dispatch()
