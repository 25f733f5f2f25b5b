"""The ``asyncio.gather`` floor: the one module of the package that imports asyncio.

The fan-out benchmark holds the runtime to what a plain asyncio program would write —
``asyncio.gather`` of the same coroutines as the task-group floor — so users see all
three side by side. It only runs on the asyncio backends and nothing in the runtime
imports it; everywhere else the package uses anyio alone.
"""

from __future__ import annotations

import asyncio
from typing import Any

from amplifier_anyio.bench.workloads import Job, sleep_into

__all__ = ("gather_floor", "prepare_gather")


async def gather_floor(n: int, delay: float) -> list[Any]:
    """``asyncio.gather`` of ``n`` `sleep_into` coroutines."""
    results: list[Any] = [None] * n
    await asyncio.gather(*(sleep_into(results, index, delay) for index in range(n)))
    return results


def prepare_gather(n: int, delay: float) -> Job:
    """The gather floor as a timed job."""

    async def run() -> None:
        await gather_floor(n, delay)

    return run
