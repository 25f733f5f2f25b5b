"""A logging hook, plain or async, on the fan-out turn: ``python -m benchmarks.bench_plain_hooks``.

Plain hook handlers run inline on the loop (docs/hooks.md). This times the fan-out turn of
``amplifier-anyio bench`` (loop-basic, N parallel calls of a zero-delay tool, a real
ModuleCoordinator, the lean context) in three variants, interleaved repeat by repeat with
the rules of :mod:`amplifier_anyio.bench.timing`:

* ``none`` — no hook;
* ``async`` — one ``async def`` logging handler on ``tool:pre`` and one on ``tool:post``;
* ``plain`` — the same handlers as plain functions.

Each handler appends ``(event, tool_call_id)`` to a list, as a logging hook does. Prints a
Markdown table: µs per call over the turn without hooks, per backend.

Options: ``--backend asyncio|trio`` (repeatable), ``--size N``, ``--repeats R``.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import anyio

from amplifier_anyio.bench.timing import time_variants
from amplifier_anyio.bench.workloads import FanoutTurn, Job
from amplifier_anyio.events import TOOL_POST, TOOL_PRE


class LoggedTurn(FanoutTurn):
    """The fan-out turn with a logging handler on tool:pre and tool:post."""

    def __init__(self, n: int, *, plain: bool) -> None:
        super().__init__(n, 0.0)
        self.plain = plain

    def prepare(self) -> Job:
        job = super().prepare()
        coordinator = _last_coordinator(job)
        seen: list[tuple[str, Any]] = []
        if self.plain:

            def log(event: str, data: dict[str, Any]) -> None:
                seen.append((event, data.get("tool_call_id")))

            handler: Callable[..., Any] = log
        else:

            async def alog(event: str, data: dict[str, Any]) -> None:
                seen.append((event, data.get("tool_call_id")))

            handler = alog
        coordinator.hooks.register(TOOL_PRE, handler, name="log")
        coordinator.hooks.register(TOOL_POST, handler, name="log")
        return job


def _last_coordinator(job: Job) -> Any:
    """The coordinator a prepared turn closes over (FanoutTurn builds a fresh one)."""
    cells = {type(c.cell_contents).__name__: c.cell_contents for c in job.__closure__ or ()}
    return cells["ModuleCoordinator"]


async def measure(size: int, repeats: int) -> dict[str, float]:
    variants = {
        "none": FanoutTurn(size, 0.0).prepare,
        "async": LoggedTurn(size, plain=False).prepare,
        "plain": LoggedTurn(size, plain=True).prepare,
    }
    timings = await time_variants(variants, repeats)
    base = timings["none"].median
    return {name: (t.median - base) / size * 1e6 for name, t in timings.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", action="append", choices=["asyncio", "trio"])
    parser.add_argument("--size", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    print("| backend | N | async hook, µs/call | plain hook, µs/call |")
    print("|---|---:|---:|---:|")
    for backend in args.backend or ["asyncio", "trio"]:
        over = anyio.run(measure, args.size, args.repeats, backend=backend)
        print(f"| {backend} | {args.size} | {over['async']:.2f} | {over['plain']:.2f} |")


if __name__ == "__main__":
    main()
