"""One benchmark run: every backend in turn, then compaction, then the extension's suites."""

from __future__ import annotations

from typing import Any

import anyio

from .config import BenchConfig, backend_problem, backend_spec
from .environment import LoadWatch, environment, load_average
from .extension import Extension, Step
from .suites import backend_suite, compaction_suite

__all__ = ("SCHEMA", "METHOD", "run_benchmarks", "runnable_backends")

SCHEMA = "amplifier-anyio-bench/1"
"""The ``schema`` field of the JSON report; bumped when its shape changes."""

METHOD = {
    "driver": "LoopBasicOrchestrator.run_turn with a real ModuleCoordinator and LeanContext",
    "turn": "a ScriptedProvider reply with N tool calls, N parallel tool runs, a final answer",
    "tool": "async execute: anyio.sleep(D) then a constant ToolResult (D = 0 still checkpoints)",
    "hooks": "K no-op async handlers on tool:pre and K on tool:post",
    "floor": "a bare anyio task group running the same N sleep_into coroutines into a list",
    "gather": "asyncio.gather of the same N sleep_into coroutines (asyncio backends only;"
    " from a checkout's benchmarks package)",
    "outside_timing": "script, tool calls, tools, hooks, coordinator, context, provider",
    "gc": "gc.collect() before every timed run of every variant; collector left enabled",
    "order": "variants interleaved per repeat, order rotated each repeat; one warm-up run",
    "clock": "time.perf_counter_ns around one await of the job",
    "ratio": "median(ours) / median(floor); ratio_min: min(ours) / min(floor)",
    "overhead_us_per_call": "(median(ours) - median(floor)) / N in microseconds",
    "memory": "separate run under tracemalloc: peak traced bytes during one run / N (D > 0)",
}
"""How the numbers are made, recorded in every JSON report."""


def runnable_backends(config: BenchConfig) -> tuple[list[str], dict[str, str]]:
    """The configured backends that can run here, and why the others cannot."""
    runnable, skipped = [], {}
    for name in config.backends:
        problem = backend_problem(name)
        if problem is None:
            runnable.append(name)
        else:
            skipped[name] = problem
    return runnable, skipped


def _ignore(_: str) -> None:
    """A step callback that shows nothing."""


def _sampling(step: Step, watch: LoadWatch) -> Step:
    """``step`` that samples the load average first (between cases, never in a timed run)."""

    def sampled(description: str) -> None:
        watch.sample()
        step(description)

    return sampled


def run_benchmarks(
    config: BenchConfig, step: Step = _ignore, extension: Extension | None = None
) -> dict[str, Any]:
    """Run every case of ``config`` and return the JSON-ready report.

    Must be called outside any event loop: each backend gets its own ``anyio.run``.
    ``machine_busy`` says whether the load average went above the core count meanwhile.
    The ``extension`` (a checkout's ``benchmarks``) adds its suites, rows and targets.
    """
    backends, skipped = runnable_backends(config)
    watch = LoadWatch()
    step = _sampling(step, watch)

    report: dict[str, Any] = {
        "schema": SCHEMA,
        "environment": environment(),
        "parameters": config.parameters(),
        "method": METHOD,
        "backends": backends,
        "skipped_backends": skipped,
        "fanout": [],
        "emit": [],
        "batch": [],
        "compaction": None,
    }
    for name in backends:
        backend, options = backend_spec(name)
        part = anyio.run(
            backend_suite, name, config, step, extension, backend=backend, backend_options=options
        )
        for key, cases in part.items():
            report.setdefault(key, []).extend(cases)
    if "compaction" in config.suites:
        report["compaction"] = compaction_suite(config.compaction_sizes, config.repeats, step)
    if extension is not None:
        extension.finish(report, config, backends, step)
    report["environment"]["load_average_after"] = load_average()
    watch.sample()
    report["environment"]["load_average_peak"] = watch.peak
    report["machine_busy"] = watch.busy()
    if extension is not None:
        extension.judge(report, backends)
    return report
