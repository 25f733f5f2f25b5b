"""A parent session whose sub-agent is running when the process is killed.

Usage: ``python _agents_crash_parent.py TRANSCRIPT BACKEND``. The parent (session id
``root``, context-persistent at TRANSCRIPT) delegates to ``researcher``, whose probe tool
prints ``probing`` and waits for ever: the test kills this process with SIGKILL then.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).parent))

from _agents_kit import Children, answer, calls, plan, task

from amplifier_anyio import AmplifierSession
from amplifier_anyio.providers.scripted import ScriptedProvider


async def probe() -> str:
    os.write(sys.stdout.fileno(), b"probing\n")
    await anyio.sleep_forever()
    return "never"  # pragma: no cover


async def main(transcript: str) -> None:
    context = {"module": "context-persistent", "config": {"path": transcript}}
    children = Children(
        {"researcher": [calls(("probe", {}), prefix="p"), answer("never")]},
        probe=lambda child: probe,
    )
    parent = ScriptedProvider([calls(task("researcher", "dig")), answer("never")])
    async with AmplifierSession(plan(context=context), session_id="root") as session:
        session.child_setup.append(children)
        await session.coordinator.mount("providers", parent, name="scripted")
        await session.run("dig")


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], backend=sys.argv[2])
