"""Writer processes for the durable-run crash test, forked from a small server.

Usage: ``python _durable_crash_writer.py TRANSCRIPT SIDE_EFFECTS``. The server reads
commands on stdin: ``spawn BACKEND`` forks a writer that opens a session on the
transcript (the app of ``_durable_app.py``), prints ``ready <pid>``, resumes whatever turn
a crash left unfinished, then runs turns until it is killed; ``finish BACKEND`` forks one
that only resumes and prints ``finished <pid> <status>``; ``reap <pid>`` waits for a writer
to be gone and prints ``reaped <pid>``. Forking from a warm server makes a writer cost
milliseconds instead of an interpreter start.
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
    # one write() per line: a SIGKILL between a text and its newline would glue lines
    os.write(sys.stdout.fileno(), f"{text}\n".encode())


async def main(transcript: str, side_effects: str, mode: str) -> None:
    session, _ = await app.open_session(Path(transcript), Path(side_effects))
    async with session:
        if mode == "finish":
            result = await session.resume()
            _say(f"finished {os.getpid()} {result.status}")
            return
        _say(f"ready {os.getpid()}")
        await session.resume()
        turn = 0
        while True:
            turn += 1
            await session.run(f"turn {turn}")


def serve(transcript: str, side_effects: str) -> None:
    """Fork a writer per ``spawn`` / ``finish`` command; reap it on ``reap``."""
    # import both backends and every module a writer loads once here, not in each writer
    import anyio._backends._asyncio  # noqa: PLC0415
    import anyio._backends._trio  # noqa: PLC0415, F401

    import amplifier_anyio.contexts.persistent  # noqa: PLC0415
    import amplifier_anyio.orchestrators.loop_basic  # noqa: PLC0415, F401

    live: set[int] = set()
    try:
        for line in sys.stdin:
            command, argument = line.split()
            if command in ("spawn", "finish"):
                sys.stdout.flush()
                child = os.fork()
                if child == 0:
                    _child(transcript, side_effects, argument, command)
                live.add(child)
                _say(f"forked {child}")
            elif command == "reap":
                os.waitpid(int(argument), 0)
                live.discard(int(argument))
                _say(f"reaped {argument}")
    finally:
        for child in live:  # the test went away: take its writers along
            os.kill(child, signal.SIGKILL)
            os.waitpid(child, 0)


def _child(transcript: str, side_effects: str, backend: str, mode: str) -> None:
    code = 1
    try:
        anyio.run(main, transcript, side_effects, mode, backend=backend)
        code = 0
    except BaseException:
        traceback.print_exc()
    finally:
        os._exit(code)


if __name__ == "__main__":
    serve(sys.argv[1], sys.argv[2])
