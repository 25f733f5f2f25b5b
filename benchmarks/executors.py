"""The ``executors`` suite: N CPU-bound tool calls through each executor.

One turn of a session whose scripted provider asks for N parallel ``hash_work`` calls
(``tool-compute``; pure-Python SHA-256 rounds calibrated to ``cost`` seconds a call on
this machine), run through ``local``, ``thread``, ``process`` (2 worker processes) and a
2-worker Dask ``LocalCluster`` of processes (when ``distributed`` is installed). Each
executor's session is open for the whole suite and gets one untimed warm-up turn (worker
processes start, workers mount the tool), then ``repeats`` timed turns, the executors
taking turns in a rotated order (a change in the machine's load falls on all of them).
The median is reported with the throughput and the ratio to the ideal
``N * cost / workers`` (1 worker for local and thread: the tool holds the GIL; ``cost`` is
the fastest local turn / N: local runs the calls one at a time at no measurable cost of
its own). Interleaved turns of N empty calls (0 rounds) give
``overhead_ms_per_call = median(empty turn) * workers / N``: what the executor adds to a
call. Runs on asyncio (the executors' own costs do not depend on the backend).
"""

from __future__ import annotations

import importlib.util
import statistics
import time
from collections.abc import Callable
from contextlib import AsyncExitStack
from typing import Any

import anyio

from amplifier_anyio import AmplifierSession
from amplifier_anyio.tools.compute import hash_rounds

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


async def _turn(session: AmplifierSession) -> float:
    start = time.perf_counter()
    result = await session.run("go")
    elapsed = time.perf_counter() - start
    if str(result.status) != "success":
        msg = f"the benchmark turn ended {result.status}: {result.error}"
        raise RuntimeError(msg)
    return elapsed


async def _measure(
    names: list[str], n: int, rounds: int, repeats: int, step: Callable[[str], None]
) -> dict[str, tuple[list[float], list[float]]]:
    """Every executor's session open at once; per repeat, each runs a turn of N calls of
    ``rounds`` rounds and a turn of N empty calls (0 rounds: the executor's own cost), in
    an order rotated each repeat, so that a change in the machine's load falls on all of
    them. A first turn each warms up, untimed."""
    turns = [rounds] + [r for _ in range(repeats) for r in (rounds, 0)]
    found: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in names}
    async with AsyncExitStack() as stack:
        sessions = {}
        for name in names:
            plan = _plan(EXECUTOR_CASES[name][0], n, turns)
            sessions[name] = await stack.enter_async_context(AmplifierSession(plan))
            await _turn(sessions[name])
        for repeat in range(repeats):
            order = names[repeat % len(names) :] + names[: repeat % len(names)]
            for name in order:
                work, empty = found[name]
                work.append(await _turn(sessions[name]))
                empty.append(await _turn(sessions[name]))
            step(f"executors: repeat {repeat + 1} of {repeats}, N={n}")
    return found


def executors_suite(
    *, n: int, cost: float, repeats: int, step: Callable[[str], None]
) -> dict[str, Any]:
    """Every executor case; must be called outside any event loop."""
    rounds = calibrate_rounds(cost)
    skipped: dict[str, str] = {}
    names = list(EXECUTOR_CASES)
    if importlib.util.find_spec("distributed") is None:
        skipped["dask"] = "distributed is not installed (the [dask] extra)"
        names.remove("dask")
    runs = anyio.run(_measure, names, n, rounds, repeats, step, backend="asyncio")
    measured = {name: (*runs[name], EXECUTOR_CASES[name][1]) for name in names}
    # One call's cost: the fastest local turn / N (local runs the calls one at a time, at
    # no measurable cost of its own), so the ideal moves with the machine's load.
    call_cost = min(measured["local"][0]) / n
    cases: list[dict[str, Any]] = []
    for name, (times, empty, workers) in measured.items():
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
    return {
        "rounds": rounds,
        "target_cost_ms": cost * 1000,
        "cases": cases,
        "skipped": skipped,
    }
