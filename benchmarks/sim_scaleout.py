"""Scale-out simulation: many sessions' tool traffic against W cluster workers.

``python -m benchmarks.sim_scaleout [--quick] [--sessions 100000] [--target-p99-wait-ms 10]``

The model (docs/scale-out.md explains it):

* ``sessions`` concurrent sessions each send a tool batch after an exponential "think
  time" (the model's turn plus the user's), mean ``think`` seconds. The superposition of
  that many independent sparse streams is a Poisson stream of batches at
  ``sessions / think`` per second (Palm-Khintchine), so the simulation draws that one
  stream instead of a hundred thousand session tasks;
* a batch fans out to ``1 + Geometric`` calls (mean ``fanout``, at most 32);
* a call's tool time is log-normal (median ``tool_median_ms``, shape ``tool_sigma``: a
  long tail), plus the executor's measured per-call overhead (``--overhead NAME=MS``, from
  ``amplifier-anyio bench --suite executors``);
* W workers take calls first come, first served (a Dask scheduler's queue), one at a time:
  each call goes to the worker that is free first (a heap of the workers' free times, exact
  for a FIFO queue of identical workers).

Each run is a trio program on a ``MockClock(autojump_threshold=0)``: the batches arrive
on virtual time, so a minute of a hundred thousand sessions' traffic runs in a second or
two. The first ``warmup`` seconds are not measured. For each executor the table gives, per
W, the utilisation, the queueing delay (mean, p99: the time a call waits for a worker, what
W controls) and the p99 of a call's latency (wait + overhead + tool time), and the smallest
W tried whose p99 queueing delay meets the target.
"""

from __future__ import annotations

import argparse
import heapq
import math
import random
import statistics
import sys
import time
from typing import Any

import attrs
import trio
from trio.testing import MockClock

DEFAULT_OVERHEAD_MS = {"process": 1.7, "dask": 10.0}
"""Per-call overhead measured on the 2-core development machine (docs/scale-out.md)."""

TICK = 0.01
"""Virtual seconds between the arrival loop's wake-ups (arrival times stay exact)."""

UTILISATIONS = (0.995, 0.98, 0.95, 0.9, 0.85, 0.8, 0.7)
"""Offered utilisations tried: W = ceil(offered load / u)."""


@attrs.frozen(kw_only=True)
class Model:
    sessions: int = 100_000
    think: float = 30.0
    fanout: float = 3.0
    tool_median_ms: float = 50.0
    tool_sigma: float = 1.0
    horizon: float = 30.0
    warmup: float = 5.0
    seed: int = 1

    @property
    def batch_rate(self) -> float:
        return self.sessions / self.think

    @property
    def mean_tool_s(self) -> float:
        return self.tool_median_ms / 1000 * math.exp(self.tool_sigma**2 / 2)

    def offered_load(self, overhead_s: float) -> float:
        """Busy workers needed on average: calls/s x mean seconds a worker spends per call."""
        return self.batch_rate * self.fanout * (self.mean_tool_s + overhead_s)


def fanout_of(rng: random.Random, mean: float) -> int:
    """1 + a geometric number of extra calls, mean ``mean``, at most 32."""
    p = 1 / mean
    extra = 0
    while rng.random() > p and extra < 31:
        extra += 1
    return 1 + extra


async def simulate(model: Model, workers: int, overhead_s: float) -> dict[str, Any]:
    """The sessions' batches arrive on virtual time; the scheduler gives each call the
    worker that is free first (first come, first served), tracked as a heap of the times
    the workers become free: exact for a FIFO queue in front of W identical workers."""
    rng = random.Random(model.seed)
    mu = math.log(model.tool_median_ms / 1000)
    free_at = [0.0] * workers  # a heap: when each worker finishes its current call
    waits: list[float] = []
    latencies: list[float] = []
    busy = 0.0
    arrival = rng.expovariate(model.batch_rate)  # the next batch's exact arrival time
    while arrival < model.horizon:
        # Wake at the tick that holds the next arrival, then take every batch due by now
        # at its own exact time: few clock jumps, no rounding of the queueing delays.
        await trio.sleep_until(math.ceil(arrival / TICK) * TICK)
        now = trio.current_time()
        while arrival <= now and arrival < model.horizon:
            for _ in range(fanout_of(rng, model.fanout)):
                service = rng.lognormvariate(mu, model.tool_sigma) + overhead_s
                start = max(arrival, heapq.heappop(free_at))
                heapq.heappush(free_at, start + service)
                if arrival >= model.warmup:
                    waits.append(start - arrival)
                    latencies.append(start - arrival + service)
                end = min(start + service, model.horizon)
                busy += max(0.0, end - max(start, model.warmup))
            arrival += rng.expovariate(model.batch_rate)
    waits.sort()
    latencies.sort()
    measured = model.horizon - model.warmup
    return {
        "workers": workers,
        "calls": len(waits),
        "utilisation": busy / (workers * measured),
        "wait_mean_ms": statistics.fmean(waits) * 1000,
        "wait_p99_ms": waits[int(0.99 * (len(waits) - 1))] * 1000,
        "latency_p99_ms": latencies[int(0.99 * (len(latencies) - 1))] * 1000,
    }


def run(model: Model, workers: int, overhead_s: float) -> dict[str, Any]:
    return trio.run(simulate, model, workers, overhead_s, clock=MockClock(autojump_threshold=0))


def sweep(model: Model, overheads: dict[str, float], target_ms: float) -> list[dict[str, Any]]:
    rows = []
    for name, overhead_ms in overheads.items():
        load = model.offered_load(overhead_ms / 1000)
        tried = sorted({math.ceil(load / u) for u in UTILISATIONS})
        tried = [w for w in tried if w > load]  # at or below the load the queue grows forever
        needed = None
        for workers in tried:
            start = time.perf_counter()
            row = run(model, workers, overhead_ms / 1000)
            row.update(
                executor=name,
                overhead_ms=overhead_ms,
                offered_load=load,
                wall_s=time.perf_counter() - start,
            )
            rows.append(row)
            if needed is None and row["wait_p99_ms"] <= target_ms:
                needed = workers
        for row in rows:
            if row["executor"] == name:
                row["needed"] = needed
    return rows


def table(model: Model, rows: list[dict[str, Any]], target_ms: float) -> str:
    lines = [
        f"sessions {model.sessions:,}, think {model.think:g} s, fan-out mean {model.fanout:g}, "
        f"tool time log-normal (median {model.tool_median_ms:g} ms, sigma {model.tool_sigma:g}, "
        f"mean {model.mean_tool_s * 1000:.1f} ms); "
        f"{model.batch_rate * model.fanout:,.0f} calls/s; "
        f"{model.horizon:g} s simulated ({model.warmup:g} s warm-up); "
        f"target: p99 queueing delay <= {target_ms:g} ms",
        "",
        "| executor | overhead ms | W | utilisation | mean wait ms | p99 wait ms "
        "| p99 latency ms | calls | meets target |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    lines.extend(
        f"| {r['executor']} | {r['overhead_ms']:g} | {r['workers']:,} | {r['utilisation']:.3f} "
        f"| {r['wait_mean_ms']:.2f} | {r['wait_p99_ms']:.2f} | {r['latency_p99_ms']:.1f} "
        f"| {r['calls']:,} | {'yes' if r['wait_p99_ms'] <= target_ms else 'no'} |"
        for r in rows
    )
    lines.append("")
    for name in dict.fromkeys(r["executor"] for r in rows):
        first = next(r for r in rows if r["executor"] == name)
        needed = first["needed"]
        found = f"W = {needed:,}" if needed is not None else "none of the W tried"
        lines.append(
            f"{name}: offered load {first['offered_load']:.1f} workers; "
            f"smallest W tried with p99 queueing delay <= {target_ms:g} ms: {found}"
        )
    return "\n".join(lines)


def parse_overheads(values: list[str] | None) -> dict[str, float]:
    if not values:
        return dict(DEFAULT_OVERHEAD_MS)
    found = {}
    for value in values:
        name, _, ms = value.partition("=")
        found[name] = float(ms)
    return found


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.sim_scaleout")
    parser.add_argument("--sessions", type=int, default=100_000)
    parser.add_argument("--think", type=float, default=30.0, help="mean seconds between batches")
    parser.add_argument("--fanout", type=float, default=3.0, help="mean calls per batch")
    parser.add_argument("--tool-median-ms", type=float, default=50.0)
    parser.add_argument("--tool-sigma", type=float, default=1.0)
    parser.add_argument("--horizon", type=float, default=30.0, help="virtual seconds")
    parser.add_argument("--warmup", type=float, default=5.0, help="virtual seconds not measured")
    parser.add_argument(
        "--target-p99-wait-ms", type=float, default=10.0, help="p99 queueing delay target"
    )
    parser.add_argument("--overhead", action="append", help="NAME=MS per call (repeatable)")
    parser.add_argument("--quick", action="store_true", help="a 10 s horizon (3 s warm-up)")
    args = parser.parse_args(argv)
    model = Model(
        sessions=args.sessions,
        think=args.think,
        fanout=args.fanout,
        tool_median_ms=args.tool_median_ms,
        tool_sigma=args.tool_sigma,
        horizon=10.0 if args.quick else args.horizon,
        warmup=3.0 if args.quick else args.warmup,
    )
    start = time.perf_counter()
    rows = sweep(model, parse_overheads(args.overhead), args.target_p99_wait_ms)
    print(table(model, rows, args.target_p99_wait_ms))
    print(f"\n(simulated in {time.perf_counter() - start:.1f} s of wall time)", file=sys.stderr)


if __name__ == "__main__":
    main()
