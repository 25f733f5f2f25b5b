"""Resuming writers for the approval crash test, forked from a small server.

Usage: ``python _approval_crash_writer.py``. The server reads commands on stdin:
``spawn BACKEND DIRECTORY`` forks a writer that opens the session of ``_durable_app.py`` on
``DIRECTORY/context-messages.jsonl`` (side effects in ``DIRECTORY/side-effects.txt``),
prints ``ready <pid>``, resumes the held turn (the decisions come from the decisions file)
and prints ``resumed <pid> <status>``, then waits to be killed; ``reap <pid>`` waits for a
writer to be gone and prints ``reaped <pid>``.
"""

from __future__ import annotations

import os
import signal
import sys
import traceback
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).parent))

import _durable_app as app


def _say(text: str) -> None:
    os.write(sys.stdout.fileno(), f"{text}\n".encode())


async def main(directory: str) -> None:
    where = Path(directory)
    session, _ = await app.open_session(
        where / "context-messages.jsonl", where / "side-effects.txt"
    )
    async with session:
        _say(f"ready {os.getpid()}")
        result = await session.resume()
        _say(f"resumed {os.getpid()} {result.status}")
        await anyio.sleep_forever()


def serve() -> None:
    import anyio._backends._asyncio  # noqa: PLC0415
    import anyio._backends._trio  # noqa: PLC0415, F401

    import amplifier_anyio.contexts.persistent  # noqa: PLC0415
    import amplifier_anyio.orchestrators.loop_basic  # noqa: PLC0415, F401

    live: set[int] = set()
    try:
        for line in sys.stdin:
            command, *arguments = line.split()
            if command == "spawn":
                backend, directory = arguments
                sys.stdout.flush()
                child = os.fork()
                if child == 0:
                    _child(directory, backend)
                live.add(child)
                _say(f"forked {child}")
            elif command == "reap":
                os.waitpid(int(arguments[0]), 0)
                live.discard(int(arguments[0]))
                _say(f"reaped {arguments[0]}")
    finally:
        for child in live:
            os.kill(child, signal.SIGKILL)
            os.waitpid(child, 0)


def _child(directory: str, backend: str) -> None:
    code = 1
    try:
        anyio.run(main, directory, backend=backend)
        code = 0
    except BaseException:
        traceback.print_exc()
    finally:
        os._exit(code)


if __name__ == "__main__":
    serve()
