"""The ``executors`` suite: N CPU-bound tool calls through each executor.

One turn of a session whose scripted provider asks for N parallel ``hash_work`` calls
(``tool-compute``; pure-Python SHA-256 rounds calibrated to ``cost`` seconds a call on
this machine), run through ``local``, ``thread``, ``process`` (2 worker processes) and a
2-worker Dask ``LocalCluster`` of processes (when ``distributed`` is installed). Each
executor gets one untimed warm-up turn (worker processes start, workers mount the tool),
then ``repeats`` timed turns; the median is reported with the throughput and the ratio to
the ideal ``N * cost / workers`` (1 worker for local and thread: the tool holds the GIL;
``cost`` is one call's time measured in this process after the case, so a loaded machine
moves both sides). Interleaved turns of N empty calls (0 rounds) give
``overhead_ms_per_call = median(empty turn) * workers / N``: what the executor adds to a
call. Runs on asyncio (the executors' own costs do not depend on the backend).
"""

from __future__ import annotations

import importlib.util
import statistics
import time
from collections.abc import Callable
from typing import Any

import anyio

from ..kernel._session import AmplifierSession
from ..tools.compute import hash_rounds

__all__ = ("EXECUTOR_CASES", "calibrate_rounds", "executors_suite")

EXECUTOR_CASES: dict[str, tuple[Any, int]] = {
    "local": (None, 1),
    "thread": ("thread", 1),
    "process": ({"module": "process", "config": {"max_workers": 2}}, 2),
    "dask": (
        {
            "module": "executor-dask",
            "config": {"local": {"n_workers": 2, "processes": True, "threads_per_worker": 1}},
        },
        2,
    ),
}
"""Executor name -> (the plan's ``session.executor``, workers that can run the tool)."""


def calibrate_rounds(cost: float) -> int:
    """Hash rounds that take about ``cost`` seconds here (median of five measurements)."""
    probe = 20_000
    return max(1, round(probe * cost / _median_seconds(probe)))


def _median_seconds(rounds: int, times: int = 5) -> float:
    measured = []
    for _ in range(times):
        start = time.perf_counter()
        hash_rounds(rounds)
        measured.append(time.perf_counter() - start)
    return statistics.median(measured)


def _plan(executor: Any, n: int, turns: list[int]) -> dict[str, Any]:
    replies: list[dict[str, Any]] = []
    for rounds in turns:
        calls = [
            {"id": f"call_{i}", "name": "hash_work", "arguments": {"rounds": rounds}}
            for i in range(n)
        ]
        replies.append({"content": [], "tool_calls": calls})
        replies.append({"content": [{"type": "text", "text": "done"}]})
    session: dict[str, Any] = {"orchestrator": "loop-basic", "context": "context-simple"}
    if executor is not None:
        session["executor"] = executor
    return {
        "session": session,
        "providers": [{"module": "provider-scripted", "config": {"responses": replies}}],
        "tools": [{"module": "tool-compute"}],
    }


async def _measure(
    executor: Any, n: int, rounds: int, repeats: int
) -> tuple[list[float], list[float]]:
    """Timed turns of N calls of ``rounds`` rounds, interleaved with turns of N empty
    calls (0 rounds: the executor's own cost); the first turn warms up, untimed."""
    turns = [rounds] + [r for _ in range(repeats) for r in (rounds, 0)]
    work: list[float] = []
    empty: list[float] = []
    async with AmplifierSession(_plan(executor, n, turns)) as session:
        for index, turn_rounds in enumerate(turns):
            start = time.perf_counter()
            result = await session.run("go")
            elapsed = time.perf_counter() - start
            if str(result.status) != "success":
                msg = f"the benchmark turn ended {result.status}: {result.error}"
                raise RuntimeError(msg)
            if index:
                (work if turn_rounds else empty).append(elapsed)
    return work, empty


def executors_suite(
    *, n: int, cost: float, repeats: int, step: Callable[[str], None]
) -> dict[str, Any]:
    """Every executor case; must be called outside any event loop."""
    rounds = calibrate_rounds(cost)
    cases: list[dict[str, Any]] = []
    skipped: dict[str, str] = {}
    for name, (executor, workers) in EXECUTOR_CASES.items():
        if name == "dask" and importlib.util.find_spec("distributed") is None:
            skipped[name] = "distributed is not installed (the [dask] extra)"
            continue
        times, empty = anyio.run(_measure, executor, n, rounds, repeats, backend="asyncio")
        # The cost of one call measured now, in this process: the machine may be loaded.
        call_cost = _median_seconds(rounds, times=3)
        median = statistics.median(times)
        ideal = n * call_cost / workers
        cases.append(
            {
                "executor": name,
                "workers": workers,
                "n": n,
                "cost_ms": call_cost * 1000,
                "seconds": median,
                "seconds_min": min(times),
                "calls_per_s": n / median,
                "ideal_seconds": ideal,
                "ratio": median / ideal,
                "empty_seconds": statistics.median(empty),
                "overhead_ms_per_call": statistics.median(empty) * workers / n * 1000,
            }
        )
        step(f"executors: {name} N={n}")
    return {
        "rounds": rounds,
        "target_cost_ms": cost * 1000,
        "cases": cases,
        "skipped": skipped,
    }
