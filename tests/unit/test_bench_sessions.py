"""The ``sessions`` and ``cancel`` bench suites: what each case does and reports.

Only the shape of the cases and the work they do are checked, never a timing.
"""

from __future__ import annotations

import gc
import math
from collections.abc import Iterator
from typing import Any

import pytest
from benchmarks import extension, sessions
from benchmarks.cancel import cancel_case
from benchmarks.sessions import (
    OPEN_PLANS,
    OPENS_PER_JOB,
    concurrent_sessions_case,
    idle_memory_case,
    open_close_cases,
    session_path_case,
)
from benchmarks.targets import TARGETS
from rich.console import Console

from amplifier_anyio.bench import BenchConfig, render_tables, run_benchmarks
from amplifier_anyio.errors import ConfigError

pytestmark = pytest.mark.anyio

CHECKOUT = extension()
"""The checkout's suites, tables and targets (``python -m benchmarks``)."""


@pytest.fixture(autouse=True)
def _frozen_heap() -> Iterator[None]:
    """The test process's objects out of the way of the collections the bench makes before
    every timed run: each would walk all of pytest's heap (~50 ms), which is not the
    bench's work and would make these tests slow."""
    gc.freeze()
    yield
    gc.unfreeze()


async def test_open_close_times_every_plan_per_session() -> None:
    cases = await open_close_cases("here", repeats=2)

    assert [case["plan"] for case in cases] == list(OPEN_PLANS)
    for case in cases:
        assert case["sessions"] == OPENS_PER_JOB
        assert len(case["open_close"]["samples_s"]) == 2
        assert math.isfinite(case["us_per_session"])
        assert case["us_per_session"] > 0


async def test_the_session_path_runs_the_fan_out_through_a_session_and_the_loop() -> None:
    case = await session_path_case("here", repeats=2, n=5, delay=0.0)

    assert (case["n"], case["delay_ms"]) == (5, 0.0)
    for variant in ("floor", "loop", "session"):
        assert len(case[variant]["samples_s"]) == 2
    assert math.isfinite(case["session_over_loop_us_per_call"])


async def test_concurrent_sessions_each_run_a_turn() -> None:
    case = await concurrent_sessions_case("here", repeats=1, count=4)

    assert case["sessions"] == 4
    assert case["us_per_session"] > 0


async def test_idle_sessions_hold_memory() -> None:
    case = await idle_memory_case("here", count=3)

    assert case["bytes_per_session"] > 0


async def test_a_cancel_case_measures_both_sides_with_and_without_the_collector() -> None:
    case = await cancel_case("here", repeats=2, n=20)

    assert case["n"] == 20
    for variant in ("floor", "ours", "floor_paused", "ours_paused"):
        assert len(case[variant]["samples_s"]) == 2
    assert math.isfinite(case["ratio"])
    assert math.isfinite(case["ratio_paused"])


def test_the_suites_run_only_when_named_and_their_targets_are_judged(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sessions, "OPENS_PER_JOB", 5)  # the shape, not the timing
    quiet = run_benchmarks(
        BenchConfig(suites=("emit",), backends=("asyncio",), repeats=1, emit_iterations=100),
        extension=CHECKOUT,
    )
    assert quiet["session_open"] == quiet["cancel"] == []

    config = BenchConfig(
        suites=("sessions", "cancel"),
        backends=("asyncio",),
        repeats=1,
        session_path_size=4,
        concurrent_sessions=3,
        cancel_sizes=(10,),
    )
    report = run_benchmarks(config, extension=CHECKOUT)

    assert len(report["session_open"]) == len(OPEN_PLANS)
    assert [len(report[key]) for key in ("session_path", "session_concurrent")] == [1, 1]
    assert [case["n"] for case in report["cancel"]] == [10]
    targets = {t["name"]: t for t in report["targets"] if t["backend"] == "asyncio"}
    assert (
        targets["session_open_close"]["measured"]
        == max(case["us_per_session"] for case in report["session_open"]) / 1000
    )
    assert targets["session_path"]["case"] == {"n": 4, "delay_ms": 10.0}
    # no N >= 10 000 in this run: the cancel targets are not measured
    assert targets["cancel_10000"]["measured"] is None
    console = Console(record=True, width=200)
    render_tables(report, console, markdown=True, extension=CHECKOUT)
    text = console.export_text()
    for title in ("Session open + close", "Fan-out through a session", "Sessions at once"):
        assert title in text
    assert "Cancel with N calls in flight" in text


def test_every_new_target_is_declared() -> None:
    names = {target.name for target in TARGETS}

    assert {"session_open_close", "session_path", "cancel_10000", "cancel_10000_paused"} <= names


@pytest.mark.parametrize(
    "changes",
    [{"concurrent_sessions": 0}, {"session_path_size": 0}, {"cancel_sizes": (0,)}],
)
def test_bad_session_and_cancel_parameters_are_refused(changes: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        BenchConfig(**changes)


def test_the_quick_run_keeps_the_suites_small() -> None:
    quick = BenchConfig.quick_run()

    assert quick.concurrent_sessions <= 100
    assert max(quick.cancel_sizes) <= 1_000
