"""One benchmark run: every backend in turn, then compaction, then the targets."""

from __future__ import annotations

from typing import Any

import anyio

from .config import BenchConfig, backend_problem, backend_spec
from .environment import LoadWatch, environment, load_average
from .executors import executors_suite
from .history import history_suite, startup_suite
from .peers import skipped_peers
from .suites import Step, backend_suite, compaction_suite
from .targets import evaluate_targets

__all__ = ("SCHEMA", "METHOD", "run_benchmarks", "runnable_backends")

SCHEMA = "amplifier-anyio-bench/1"
"""The ``schema`` field of the JSON report; bumped when its shape changes."""

METHOD = {
    "driver": "LoopBasicOrchestrator.run_turn with a real ModuleCoordinator and LeanContext",
    "turn": "a ScriptedProvider reply with N tool calls, N parallel tool runs, a final answer",
    "tool": "async execute: anyio.sleep(D) then a constant ToolResult (D = 0 still checkpoints)",
    "hooks": "K no-op async handlers on tool:pre and K on tool:post",
    "floor": "a bare anyio task group running the same N sleep_into coroutines into a list",
    "gather": "asyncio.gather of the same N sleep_into coroutines (asyncio backends only)",
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


def run_benchmarks(config: BenchConfig, step: Step = _ignore) -> dict[str, Any]:
    """Run every case of ``config`` and return the JSON-ready report.

    Must be called outside any event loop: each backend gets its own ``anyio.run``.
    ``machine_busy`` says whether the load average went above the core count meanwhile.
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
        "turn": [],
        "session_open": [],
        "session_path": [],
        "session_concurrent": [],
        "session_memory": [],
        "cancel": [],
        "compaction": None,
    }
    for name in backends:
        backend, options = backend_spec(name)
        part = anyio.run(
            backend_suite, name, config, step, backend=backend, backend_options=options
        )
        for key, cases in part.items():
            report[key].extend(cases)
    if "peers" in config.suites:
        report["skipped_peers"] = skipped_peers(on_trio="trio" in backends)
    if "compaction" in config.suites:
        report["compaction"] = compaction_suite(config.compaction_sizes, config.repeats, step)
    if "executors" in config.suites:
        report["executors"] = executors_suite(
            n=config.executor_calls,
            cost=config.executor_cost,
            repeats=config.repeats,
            step=step,
        )
    if "history" in config.suites:
        report["history"] = history_suite(
            config.history_sizes, config.history_iterations, config.repeats, step
        )
    if "startup" in config.suites:
        report["startup"] = startup_suite(max(config.repeats, 5), step)
    report["environment"]["load_average_after"] = load_average()
    watch.sample()
    report["environment"]["load_average_peak"] = watch.peak
    report["machine_busy"] = watch.busy()
    report["targets"] = evaluate_targets(report, backends)
    return report
