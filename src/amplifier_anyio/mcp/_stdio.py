"""tool-mcp's stdio transport: the server process, its pipes and what can go wrong with them.

The SDK's own stdio client reads the server's stdout as strict UTF-8 text and watches only
for end-of-file, so two things hang a call there: a server that dies while a child it
started still holds its stdout (no end-of-file ever comes), and one reply that is not valid
UTF-8 (the reader stops; the call, its siblings and every later call wait out their
timeouts, for ever with none). Here:

- The server's **exit** ends the connection as surely as end-of-file: once its process is
  gone, what it wrote before is read for a short grace, then the session's read stream
  ends, so every pending call is answered at once (the SDK fails the requests of a
  connection that closed).
- Each line is one frame, decoded and parsed on its own. A frame that cannot be decoded
  or validated but still names a pending request (its ``id``) fails that request alone,
  with a JSON-RPC error saying why; a frame without one (a notification) is dropped with a
  warning; a frame that is not JSON at all means the stream cannot be trusted: the
  connection is reported lost at once.
- Closing stops the server as the spec says (stdin closed, a grace, then SIGTERM and
  SIGKILL to its whole process group, including a child that outlived it), shielded and
  bounded.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import sys
from collections.abc import AsyncIterator
from typing import Any, Final

import anyio
import anyio.abc
import mcp_types
from mcp.client.stdio import get_default_environment
from mcp.os.posix.utilities import terminate_posix_process_tree
from mcp.shared.message import SessionMessage

__all__ = ("stdio_transport",)

logger = logging.getLogger(__name__)

EXIT_POLL: Final = 0.02
"""Seconds between two looks at whether the server process has exited."""
EXIT_GRACE: Final = 0.2
"""Seconds the output of a server that exited may still be read before the connection ends."""
STOP_GRACE: Final = 2.0
"""Seconds a server has to exit by itself once its stdin is closed."""
KILL_GRACE: Final = 2.0
"""Seconds between SIGTERM and SIGKILL to the server's process group."""
_MAX_LINE: Final = 64 * 1024 * 1024  # one frame; past it the stream is out of step


class _Frames:
    """Turns the server's lines into messages; knows which requests are pending."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.pending: set[str | int] = set()

    def sent(self, message: SessionMessage) -> None:
        if isinstance(message.message, mcp_types.JSONRPCRequest):
            self.pending.add(message.message.id)

    def read(self, line: bytes) -> SessionMessage | None:
        """The message of one line, an error for its request, or None (dropped).

        Raises ValueError when the line is not JSON at all (the stream is lost)."""
        try:
            message = mcp_types.jsonrpc_message_adapter.validate_json(
                line.decode("utf-8"), by_name=False
            )
        except ValueError as exc:
            return self._unreadable(line, exc)
        if isinstance(message, mcp_types.JSONRPCResponse | mcp_types.JSONRPCError):
            self.pending.discard(message.id)
        return SessionMessage(message)

    def _unreadable(self, line: bytes, exc: ValueError) -> SessionMessage | None:
        reason = (
            "is not valid UTF-8"
            if isinstance(exc, UnicodeDecodeError)
            else "is not a valid JSON-RPC message"
        )
        try:
            value: Any = json.loads(line.decode("utf-8", "replace"))
        except ValueError:
            msg = f"MCP server {self.name!r} wrote a line that is not JSON: {_head(line)}"
            raise ValueError(msg) from None
        ident = value.get("id") if isinstance(value, dict) else None
        if isinstance(ident, bool) or not isinstance(ident, str | int) or ident not in self.pending:
            logger.warning("MCP server %r: dropped a message that %s", self.name, reason)
            return None
        self.pending.discard(ident)
        logger.warning("MCP server %r: the reply to request %r %s", self.name, ident, reason)
        error = mcp_types.ErrorData(
            code=mcp_types.PARSE_ERROR, message=f"the server's reply {reason}: {_head(line)}"
        )
        return SessionMessage(mcp_types.JSONRPCError(jsonrpc="2.0", id=ident, error=error))


def _head(line: bytes, size: int = 80) -> str:
    text = line[:size].decode("utf-8", "backslashreplace")
    return text + ("…" if len(line) > size else "")


@contextlib.asynccontextmanager
async def stdio_transport(
    name: str,
    command: str,
    args: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
    cwd: str | None = None,
) -> AsyncIterator[tuple[Any, Any]]:
    """Start the server ``command`` and yield the session's (read, write) streams.

    The read stream ends when the server's stdout ends, when its process exits, or when
    a line is not JSON; leaving the context stops the server and its process group."""
    process = await anyio.open_process(
        [command, *args],
        env=get_default_environment() | (env or {}),
        cwd=cwd,
        stderr=sys.stderr,
        start_new_session=True,
    )
    # No await until the task group is entered: a cancel here would leak the process.
    pipes = _Pipes(name, process)
    async with anyio.create_task_group() as tg:
        tg.start_soon(pipes.reader)
        tg.start_soon(pipes.writer)
        tg.start_soon(pipes.exit_watcher)
        try:
            yield pipes.read_stream, pipes.write_stream
        finally:
            with anyio.CancelScope(shield=True):
                await pipes.stop()
            tg.cancel_scope.cancel(f"MCP server {name!r}: stdio transport closed")


class _Pipes:
    """The server process and the tasks between its pipes and the session's streams."""

    def __init__(self, name: str, process: anyio.abc.Process) -> None:
        self.name = name
        self.process = process
        self.frames = _Frames(name)
        self.ended = anyio.Event()
        self.to_session, self.read_stream = anyio.create_memory_object_stream[
            SessionMessage | Exception
        ](0)
        self.write_stream, self.from_session = anyio.create_memory_object_stream[SessionMessage](0)

    async def reader(self) -> None:
        """Server stdout -> session, one line a frame; ends the read stream when done."""
        assert self.process.stdout is not None
        buffer = bytearray()
        try:
            async with self.to_session:
                async for chunk in self.process.stdout:
                    buffer += chunk
                    while (end := buffer.find(b"\n")) >= 0:
                        line = bytes(buffer[:end]).strip()
                        del buffer[: end + 1]
                        if line and (message := self.frames.read(line)) is not None:
                            await self.to_session.send(message)
                    if len(buffer) > _MAX_LINE:
                        msg = f"MCP server {self.name!r} wrote a line over {_MAX_LINE} bytes"
                        raise ValueError(msg)
        except ValueError as exc:
            logger.error("%s; the connection is lost", exc)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            pass  # our own close, or the session is gone
        finally:
            self.ended.set()

    async def writer(self) -> None:
        """Session -> server stdin; a server that cannot read ends the connection."""
        assert self.process.stdin is not None
        try:
            async with self.from_session:
                async for message in self.from_session:
                    self.frames.sent(message)
                    data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await self.process.stdin.send(data.encode() + b"\n")
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            await self.to_session.aclose()

    async def exit_watcher(self) -> None:
        """The server's exit ends the connection, even with its stdout still held open."""
        await _exited(self.process, math.inf)
        with anyio.move_on_after(EXIT_GRACE):
            await self.ended.wait()
        if not self.ended.is_set():  # a child holds stdout: no end-of-file will come
            logger.warning(
                "MCP server %r exited (code %s) while another process holds its stdout",
                self.name,
                self.process.returncode,
            )
            await self.to_session.aclose()

    async def stop(self) -> None:
        """Close stdin, let the server exit, then end its whole process group; bounded."""
        process = self.process
        self.write_stream.close()
        self.read_stream.close()
        assert process.stdin is not None
        assert process.stdout is not None
        with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
            await process.stdin.aclose()
        await _exited(process, STOP_GRACE)
        # The group even when the server is gone: a child it left would hold the pipes.
        await terminate_posix_process_tree(process, KILL_GRACE)
        with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
            await process.stdout.aclose()
        await _exited(process, KILL_GRACE)
        _close_transport(process)


async def _exited(process: anyio.abc.Process, seconds: float) -> bool:
    """Whether ``process`` exits within ``seconds``. Polled: on asyncio ``wait()`` also
    waits for its pipes' end-of-file, which a child holding them never gives."""
    with anyio.move_on_after(seconds):
        while process.returncode is None:  # noqa: ASYNC110 - no event tells of the exit alone
            await anyio.sleep(EXIT_POLL)
    return process.returncode is not None


def _close_transport(process: anyio.abc.Process) -> None:
    """Close asyncio's subprocess transport (it warns when collected open); none on trio."""
    transport = getattr(getattr(process, "_process", None), "_transport", None)
    close = getattr(transport, "close", None)
    if callable(close):
        with contextlib.suppress(PermissionError, ProcessLookupError):
            close()
