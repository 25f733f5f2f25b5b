"""A SessionWorker in a process of its own, for kill -9 tests.

``python _worker_process.py PLAN.json ADDRESS TASK_QUEUE``: prints ``ready`` once it polls,
runs until killed. It leaves by ``os._exit`` (a Temporal client can abort at interpreter
exit: temporalio's sdk-python issue 300).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

from amplifier_anyio.temporal import SessionWorker


async def main(plan: dict[str, object], address: str, task_queue: str) -> None:
    worker = SessionWorker(plan, address=address, task_queue=task_queue)
    await worker.serve(ready=lambda: print("ready", flush=True))


if __name__ == "__main__":
    code = 0
    try:
        plan = json.loads(Path(sys.argv[1]).read_text())
        asyncio.run(main(plan, sys.argv[2], sys.argv[3]))
    except BaseException as exc:  # reported, then the exit code says it
        print(f"worker failed: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
