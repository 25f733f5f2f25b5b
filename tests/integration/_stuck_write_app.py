"""A program whose fsync sticks for good mid-turn: its turn gives up, then it must exit.

``python _stuck_write_app.py BACKEND DIRECTORY`` runs one warm-up turn on
context-persistent, then a second turn with a 0.3 s ``write_timeout`` in which every
``os.fsync`` from its first tool call on blocks for ever (the batch's results cannot be
written). It prints the second turn's status and returns from ``main`` as any program
does: the interpreter must then exit although a thread is still stuck in fsync.
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import anyio

from amplifier_anyio import AmplifierSession

forever = threading.Event()
real_fsync = os.fsync
stuck = False


def fsync(fd: int) -> None:
    if stuck:
        forever.wait()  # never set: the disk is gone for good
    real_fsync(fd)


async def main(directory: Path) -> None:
    plan = {
        "session": {
            "orchestrator": {"module": "loop-basic", "config": {"write_timeout": 0.3}},
            "context": {
                "module": "context-persistent",
                "config": {"path": str(directory / "s.jsonl")},
            },
        },
        "providers": [{"module": "provider-scripted", "config": {"demo": True}}],
        "tools": [{"module": "tool-demo", "config": {"delay": 0}}],
    }

    def stick(event: str, data: object) -> None:
        global stuck  # noqa: PLW0603 - the switch the program flips mid-run
        stuck = True

    async with AmplifierSession(plan) as session:
        await session.run("warm up")
        session.coordinator.hooks.register("tool:pre", stick)
        result = await session.run("count my words")
    print(result.status, flush=True)


os.fsync = fsync
anyio.run(main, Path(sys.argv[2]), backend=sys.argv[1])
