"""The checkout's part of ``amplifier-anyio bench``: the suites that are not in the wheel.

`Checkout` is the `amplifier_anyio.bench.extension.Extension` that ``python -m benchmarks``
passes to the wheel's runner (and that ``amplifier-anyio bench`` finds when run from a
checkout): the ``asyncio.gather`` floor and the peers as rows of the fan-out cases; the
``turn``, ``sessions`` and ``cancel`` suites per backend; ``executors``, ``history`` and
``startup`` once per run; the targets; their tables; the plot.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

from rich.table import Table

from amplifier_anyio.bench.config import BenchConfig
from amplifier_anyio.bench.extension import Step, Variant

from . import report
from .cancel import cancel_case
from .executors import executors_suite
from .gather import prepare_gather
from .history import history_suite, startup_suite
from .peers import peer_turns, skipped_peers
from .sessions import (
    concurrent_sessions_case,
    idle_memory_case,
    open_close_cases,
    session_path_case,
)
from .targets import evaluate_targets
from .turns import turn_case

__all__ = ("Checkout", "SUITES")

SUITES = ("executors", "history", "startup", "peers", "turn", "sessions", "cancel")
"""The ``--suite`` names the checkout runs (the wheel runs fanout, emit, batch, compaction)."""

TURNS_PER_JOB = 200
"""One-tool turns per timed job of the ``turn`` suite."""

SESSION_STEPS = 4
"""Cases of the ``sessions`` suite per backend (one step each)."""

SESSION_PATH_DELAY = 0.01
"""Seconds each call of the sessions suite's fan-out sleeps."""

PER_BACKEND_KEYS = (
    "turn",
    "session_open",
    "session_path",
    "session_concurrent",
    "session_memory",
    "cancel",
)
"""The report's lists of per-backend cases from these suites (empty when not run)."""


class Checkout:
    """The checkout's suites, rows, tables, targets and plot for the wheel's runner."""

    suites = SUITES

    def fanout_variants(
        self, config: BenchConfig, *, n: int, delay: float, hooks: int, on_asyncio: bool
    ) -> dict[str, Variant]:
        """``gather`` on the asyncio backends; the peers' rows with ``--suite peers`` (K = 0)."""
        if not on_asyncio:
            return {}
        variants: dict[str, Variant] = {"gather": (partial(prepare_gather, n, delay), None)}
        if "peers" in config.suites and not hooks:
            for name, peer in peer_turns(n, delay).items():
                variants[name] = (peer.prepare, peer.check)
        return variants

    async def backend_cases(
        self, name: str, config: BenchConfig, step: Step
    ) -> dict[str, list[Any]]:
        """The ``turn``, ``sessions`` and ``cancel`` cases on the running backend."""
        results: dict[str, list[Any]] = {}
        if "turn" in config.suites:
            results["turn"] = [await turn_case(name, config.repeats, TURNS_PER_JOB)]
            step(f"{name}: one-tool turns x{TURNS_PER_JOB}")
        if "sessions" in config.suites:
            results.update(await _sessions(name, config, step))
        if "cancel" in config.suites:
            results["cancel"] = []
            for n in config.cancel_sizes:
                results["cancel"].append(await cancel_case(name, config.repeats, n))
                step(f"{name}: cancel with {n} calls in flight")
        return results

    def count_steps(self, config: BenchConfig, backends: int) -> int:
        """The steps of the checkout's suites in a run with ``backends`` backends."""
        per_backend = 0
        if "turn" in config.suites:
            per_backend += 1
        if "sessions" in config.suites:
            per_backend += SESSION_STEPS
        if "cancel" in config.suites:
            per_backend += len(config.cancel_sizes)
        executors = config.repeats if "executors" in config.suites else 0  # one step a repeat
        # per context (simple, persistent): the sizes twice (compaction off / on), two runs;
        # one load
        history = 4 * len(config.history_sizes) + 5 if "history" in config.suites else 0
        startup = 1 if "startup" in config.suites else 0
        return per_backend * backends + executors + history + startup

    def finish(
        self, report: dict[str, Any], config: BenchConfig, backends: list[str], step: Step
    ) -> None:
        """The suites run once per run: executors, history, start-up; the skipped peers."""
        for key in PER_BACKEND_KEYS:
            report.setdefault(key, [])
        if "peers" in config.suites:
            report["skipped_peers"] = skipped_peers(on_trio="trio" in backends)
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

    def judge(self, report: dict[str, Any], backends: list[str]) -> None:
        """The targets, judged on the finished report."""
        report["targets"] = evaluate_targets(report, backends)

    def tables(self, report_: dict[str, Any], markdown: bool) -> list[Table]:
        """The checkout's tables: peers, turn, sessions, cancel, …, targets."""
        return report.extension_tables(report_, markdown)

    def notes(self, report_: dict[str, Any]) -> list[str]:
        """The executors and peers that were skipped, and why."""
        executors = (report_.get("executors") or {}).get("skipped", {})
        return [
            *(f"skipped executor {name}: {reason}" for name, reason in executors.items()),
            *(
                f"skipped peer {name}: {reason}"
                for name, reason in report_.get("skipped_peers", {}).items()
            ),
        ]

    def plot_problem(self, path: Path) -> str | None:
        """Why ``--plot path`` cannot be drawn: matplotlib missing, an unknown format."""
        if (problem := report.plotting_problem()) is not None:
            return problem
        if (problem := report.plot_format_problem(path)) is not None:
            return f"--plot {path}: {problem}"
        return None

    def write_plot(self, report_: dict[str, Any], path: Path) -> None:
        """The fan-out plot (see `report.write_plot`)."""
        report.write_plot(report_, path)


async def _sessions(name: str, config: BenchConfig, step: Step) -> dict[str, list[Any]]:
    """The ``sessions`` suite's four cases on the running backend."""
    opened = await open_close_cases(name, config.repeats)
    step(f"{name}: session open + close")
    n = config.session_path_size
    path = await session_path_case(name, config.repeats, n, SESSION_PATH_DELAY)
    step(f"{name}: fan-out N={n} through a session")
    count = config.concurrent_sessions
    concurrent = await concurrent_sessions_case(name, config.repeats, count)
    step(f"{name}: {count} sessions at once")
    memory = await idle_memory_case(name, count)
    step(f"{name}: {count} idle sessions")
    return {
        "session_open": opened,
        "session_path": [path],
        "session_concurrent": [concurrent],
        "session_memory": [memory],
    }
