"""The test side of a fork server (``_crash_writer.py``, ``_durable_crash_writer.py``):
commands go to its stdin, and the lines of the server and of its forked writers, which
arrive in any order, are kept until a test claims them."""

from __future__ import annotations

from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream


class Lane:
    def __init__(self, process: Process) -> None:
        self.process = process
        assert process.stdout is not None
        self.lines = BufferedByteReceiveStream(process.stdout)
        self.pending: list[str] = []

    async def send(self, command: str) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.send(command.encode() + b"\n")

    async def take(self, prefix: str) -> str:
        """The first unclaimed line starting with ``prefix``, waiting for it if need be."""
        while True:
            for line in self.pending:
                if line.startswith(prefix):
                    self.pending.remove(line)
                    return line
            self.pending.append((await self.lines.receive_until(b"\n", 4096)).decode())
