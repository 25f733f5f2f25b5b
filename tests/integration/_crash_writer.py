"""Writer processes for the crash-safety test, forked from a small server.

Usage: ``python _crash_writer.py PATH``. The server reads commands on stdin:
``spawn BACKEND`` forks a writer, which resumes the persistent context at PATH, prints
``ready <pid>`` and appends turns (a user message, assistant tool calls and their results,
an answer) until it is killed; ``reap <pid>`` waits for that writer to be gone and prints
``reaped <pid>``. Forking from a warm server makes a writer cost milliseconds instead of an
interpreter start. Every message carries ``metadata.seq`` and a content that
:func:`content_for` rebuilds from it, so a reader can tell a whole message from a torn one.
"""

from __future__ import annotations

import os
import signal
import sys
import traceback
from typing import Any

import anyio

from amplifier_anyio.contexts import PersistentContextManager


def content_for(seq: int) -> str:
    """The content of message ``seq``: up to ~12 kB, so that writes take a while."""
    return f"{seq}:" + "abcdefghij"[seq % 10] * ((seq * 7919) % 12_000)


def call_ids_for(seq: int) -> list[str]:
    """The tool call ids of assistant message ``seq`` (one to three calls)."""
    return [f"call-{seq}-{j}" for j in range(1 + seq % 3)]


def _message(seq: int, role: str, **extra: Any) -> dict[str, Any]:
    return {"role": role, "content": content_for(seq), "metadata": {"seq": seq}, **extra}


async def main(path: str) -> None:
    manager = PersistentContextManager(path)
    await manager.load()
    history = await manager.get_messages()
    seqs = [m["metadata"]["seq"] for m in history if "seq" in (m.get("metadata") or {})]
    seq = max(seqs, default=-1) + 1
    # One write() for the whole line: print() may write the text and its newline separately,
    # and a SIGKILL between the two would glue the server's next line onto this one.
    _say(f"ready {os.getpid()}")
    while True:
        await manager.add_message(_message(seq, "user"))
        seq += 1
        for _ in range(seq % 3):
            calls = [{"id": i, "name": "work", "arguments": {}} for i in call_ids_for(seq)]
            await manager.add_message(_message(seq, "assistant", tool_calls=calls))
            seq += 1
            for call in calls:
                await manager.add_message(_message(seq, "tool", tool_call_id=call["id"]))
                seq += 1
        await manager.add_message(_message(seq, "assistant"))
        seq += 1


def _say(line: str) -> None:
    """One line in one write(): with PYTHONUNBUFFERED set, print() writes the text and its
    newline in two, and a writer's ``ready`` line could land between them."""
    os.write(sys.stdout.fileno(), f"{line}\n".encode())


def serve(path: str) -> None:
    """Fork a writer per ``spawn`` command (printing ``forked <pid>``); reap it on ``reap``."""
    # import both backends once here, not in every forked writer
    import anyio._backends._asyncio  # noqa: PLC0415
    import anyio._backends._trio  # noqa: PLC0415, F401

    live: set[int] = set()
    try:
        for line in sys.stdin:
            command, argument = line.split()
            if command == "spawn":
                sys.stdout.flush()
                child = os.fork()
                if child == 0:
                    _write_forever(path, argument)
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


def _write_forever(path: str, backend: str) -> None:
    try:
        anyio.run(main, path, backend=backend)
    except BaseException:
        traceback.print_exc()
    finally:
        os._exit(1)


if __name__ == "__main__":
    serve(sys.argv[1])
