"""The process executor's worker: ``python -m amplifier_anyio.runtime._process_worker``.

It reads pickled commands on stdin and answers each ``run`` with one reply on stdout: 8
bytes of length (big-endian), then the pickled ``(status, value)`` — ``("ok", result)`` or
``("error", exception)``. Commands:

- ``("path", entries)`` — the parent's ``sys.path`` (no reply), so the modules resolve as
  they do in the parent;
- ``("run", module, source, config_json, tool_name, tool_input)`` — run one call with the
  tools of that plan entry, mounted on first use and kept
  (`run_tool_in_worker` of the executors module);
- ``("stop",)`` — run the cleanups of every mounted module, reply ``("stopped", problems)``
  and exit. The end of stdin (the parent went away) runs the cleanups too.

What the tools print goes to the null device: only replies use stdout.
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
from typing import Any, BinaryIO

__all__ = ("main",)


def _reply(channel: BinaryIO, status: str, value: Any) -> None:
    try:
        data = pickle.dumps((status, value), pickle.HIGHEST_PROTOCOL)
    except Exception as exc:  # noqa: BLE001 - an answer that cannot travel is an error
        from ._executors import WorkerToolError  # noqa: PLC0415

        error = WorkerToolError(f"the worker's answer cannot be sent back: {exc!r} ({value!r})")
        data = pickle.dumps(("error", error), pickle.HIGHEST_PROTOCOL)
    channel.write(len(data).to_bytes(8, "big") + data)
    channel.flush()


def main() -> None:
    """Serve commands until ``stop`` or the end of stdin, then clean up."""
    # Ctrl-C reaches the terminal's whole process group: the parent decides this
    # process's end (a kill on cancel, a stop at its session's end), not the signal
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    commands, replies = sys.stdin.buffer, sys.stdout.buffer
    sys.stdin = open(os.devnull)  # noqa: SIM115 - the process's streams for its lifetime
    sys.stdout = open(os.devnull, "w")  # noqa: SIM115
    from ._executors import close_worker_tools, run_tool_in_worker  # noqa: PLC0415

    stopping = False
    while not stopping:
        try:
            command, *args = pickle.load(commands)  # noqa: S301 - from the parent process
        except EOFError:
            break
        if command == "path":
            sys.path[:] = args[0]
        elif command == "run":
            try:
                _reply(replies, "ok", run_tool_in_worker(*args))
            except BaseException as exc:  # noqa: BLE001 - the call's failure, sent back
                _reply(replies, "error", exc)
        else:
            stopping = command == "stop"
    problems = close_worker_tools()
    if stopping:
        _reply(replies, "stopped", problems)


if __name__ == "__main__":
    main()
