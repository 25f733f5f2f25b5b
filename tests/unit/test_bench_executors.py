"""The bench's executors suite: every executor runs the CPU-bound turn and is reported."""

from __future__ import annotations

import io

import pytest
from benchmarks import extension
from benchmarks.executors import EXECUTOR_CASES, executors_suite
from rich.console import Console

from amplifier_anyio.bench import BenchConfig
from amplifier_anyio.bench.report import render_tables
from amplifier_anyio.errors import ConfigError
from tiers import needs

CHECKOUT = extension()
"""The checkout's suites, tables and targets (``python -m benchmarks``)."""


@needs("distributed")
def test_every_executor_runs_the_turn_and_is_reported() -> None:
    steps: list[str] = []
    suite = executors_suite(n=4, cost=0.002, repeats=1, step=steps.append)
    cases = {case["executor"]: case for case in suite["cases"]}
    assert list(cases) == list(EXECUTOR_CASES)
    assert len(steps) == 1  # one step a repeat
    for case in cases.values():
        assert case["n"] == 4
        assert case["seconds"] > 0
        assert case["ideal_seconds"] == pytest.approx(4 * case["cost_ms"] / 1000 / case["workers"])
        assert case["ratio"] == pytest.approx(case["seconds"] / case["ideal_seconds"])
    out = io.StringIO()
    report = {
        "fanout": [],
        "emit": [],
        "batch": [],
        "compaction": None,
        "executors": suite,
        "targets": [],
        "skipped_backends": {},
    }
    render_tables(report, Console(file=out, width=200), markdown=True, extension=CHECKOUT)
    table = out.getvalue()
    assert "Executors: N CPU-bound calls" in table
    for name in EXECUTOR_CASES:
        assert f"| {name} " in table


def test_the_executors_suite_is_chosen_by_name_only() -> None:
    assert "executors" not in BenchConfig().suites
    assert BenchConfig(suites=("executors",)).suites == ("executors",)
    with pytest.raises(ConfigError, match="executor_calls"):
        BenchConfig(executor_calls=0)
    with pytest.raises(ConfigError, match="executor_cost"):
        BenchConfig(executor_cost=float("nan"))
