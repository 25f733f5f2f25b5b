"""The ``turn`` bench suite: one-tool turns through a session and through the loop alone.

Only the shape of the case and the work it does are checked, never a timing.
"""

from __future__ import annotations

import math

import pytest
from benchmarks import extension
from benchmarks.turns import turn_case
from rich.console import Console

from amplifier_anyio.bench import BenchConfig, render_tables, run_benchmarks

pytestmark = pytest.mark.anyio

CHECKOUT = extension()
"""The checkout's suites, tables and targets (``python -m benchmarks``)."""


@pytest.mark.slow
async def test_a_turn_case_times_both_variants_per_turn() -> None:
    case = await turn_case("here", repeats=2, turns=3)

    assert case["turns"] == 3
    for variant in ("session", "loop"):
        assert len(case[variant]["samples_s"]) == 2
        assert math.isfinite(case[f"{variant}_us_per_turn"])
        assert case[f"{variant}_us_per_turn"] > 0


@pytest.mark.slow
def test_the_suite_runs_only_when_named_and_prints_its_table() -> None:
    quiet = run_benchmarks(
        BenchConfig(suites=("emit",), backends=("asyncio",), repeats=1), extension=CHECKOUT
    )
    assert quiet["turn"] == []

    report = run_benchmarks(
        BenchConfig(suites=("turn",), backends=("asyncio",), repeats=1), extension=CHECKOUT
    )

    (case,) = report["turn"]
    assert case["backend"] == "asyncio"
    console = Console(record=True, width=200)
    render_tables(report, console, markdown=True, extension=CHECKOUT)
    assert "One-tool turn" in console.export_text()
