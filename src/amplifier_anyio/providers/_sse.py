"""A small server-sent events decoder (the WHATWG ``text/event-stream`` rules we need).

It reads lines, not bytes: `LineSplitter` cuts the response's text into lines
(``\r\n``, ``\n`` or ``\r`` only, as the standard says — not ``httpx``'s
``aiter_lines()``, which also splits at U+2028, U+0085 and other characters a JSON string
may hold raw), and one network chunk is one wait, however many lines it brings. It does
not insist on a ``text/event-stream`` content type, because several OpenAI-compatible
servers send another one.
"""

from __future__ import annotations

import re

import attrs

__all__ = ("SSEEvent", "SSEDecoder", "LineSplitter")

_LINE_END = re.compile(r"\r\n|\r|\n")


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
    skipped; `flush` dispatches what is still pending when the lines end, so a
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


class LineSplitter:
    """Cuts text that arrives in pieces into lines, at ``\\r\\n``, ``\\n`` or ``\\r``.

    A line split across pieces is kept as a list of parts joined once (linear however it
    trickles in); a ``\\r\\n`` split between two pieces is one line end. One byte-order
    mark (U+FEFF) at the very start of the stream is dropped, as the standard says.
    """

    def __init__(self) -> None:
        self._partial: list[str] = []
        self._after_cr = False
        self._started = False

    def feed(self, text: str) -> list[str]:
        """The lines ``text`` completes (terminators removed)."""
        if not text:
            return []
        if not self._started:
            self._started = True
            text = text.removeprefix("\ufeff")
            if not text:
                return []
        if self._after_cr and text.startswith("\n"):
            text = text[1:]
        self._after_cr = False
        if not text:
            return []
        pieces = _LINE_END.split(text)
        if len(pieces) == 1:
            self._partial.append(text)
            return []
        if self._partial:
            pieces[0] = "".join(self._partial) + pieces[0]
        last = pieces.pop()
        self._partial = [last] if last else []
        self._after_cr = text.endswith("\r")
        return pieces

    def flush(self) -> list[str]:
        """The unterminated last line, if any."""
        line = "".join(self._partial)
        self._partial = []
        return [line] if line else []
