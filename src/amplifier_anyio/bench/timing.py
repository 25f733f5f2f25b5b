"""Timing and memory of benchmark jobs, with the same rules for every variant.

Rules (the same for the floors and for the runtime, so ratios compare like with like):
``gc.collect()`` before every timed run, the collector left enabled; the variants of a
case interleave repeat by repeat, in an order rotated each repeat, so that drift in the
machine's load falls on all of them alike; wall time from ``time.perf_counter_ns``.
Memory is measured in separate runs under ``tracemalloc`` (which slows everything down).
"""

from __future__ import annotations

import contextlib
import gc
import statistics
import time
import tracemalloc
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import attrs

from .workloads import Job

__all__ = ("Timing", "time_variants", "peak_bytes", "traced", "ratio")


@attrs.frozen
class Timing:
    """The wall times, in seconds, of the repeats of one variant."""

    samples: tuple[float, ...]

    @property
    def median(self) -> float:
        """The median time (seconds)."""
        return statistics.median(self.samples)

    @property
    def min(self) -> float:
        """The fastest time (seconds)."""
        return min(self.samples)

    def to_dict(self) -> dict[str, Any]:
        """``median_s``, ``min_s`` and every sample."""
        return {"median_s": self.median, "min_s": self.min, "samples_s": list(self.samples)}


def ratio(ours: float, floor: float) -> float:
    """``ours / floor``, finite even for a floor below the clock's resolution."""
    return ours / max(floor, 1e-9)


async def time_variants(
    prepare: Mapping[str, Callable[[], Job]],
    repeats: int,
    checks: Mapping[str, Callable[[], None]] | None = None,
) -> dict[str, Timing]:
    """Time each variant ``repeats`` times, interleaved; run its check after each run."""
    names = list(prepare)
    samples: dict[str, list[float]] = {name: [] for name in names}
    checks = checks or {}
    for repeat in range(repeats):
        shift = repeat % len(names)
        for name in names[shift:] + names[:shift]:
            job = prepare[name]()
            gc.collect()
            start = time.perf_counter_ns()
            await job()
            elapsed = time.perf_counter_ns() - start
            samples[name].append(elapsed / 1e9)
            if name in checks:
                checks[name]()
    return {name: Timing(tuple(values)) for name, values in samples.items()}


@contextlib.contextmanager
def traced() -> Iterator[int]:
    """Memory tracing on (and off again after, unless it was on before), after a full
    collection; gives the bytes traced at the start, the base of any measure."""
    gc.collect()
    started = not tracemalloc.is_tracing()
    if started:
        tracemalloc.start()
    try:
        base, _ = tracemalloc.get_traced_memory()
        yield base
    finally:
        if started:
            tracemalloc.stop()


async def peak_bytes(prepare: Callable[[], Job]) -> int:
    """The peak of memory traced while one run of the job was in flight, in bytes."""
    job = prepare()
    with traced() as base:
        tracemalloc.reset_peak()
        await job()
        _, peak = tracemalloc.get_traced_memory()
    return max(peak - base, 0)
