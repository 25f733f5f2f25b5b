"""The benchmark's report: every case beside its floors, finite ratios, honest work.

The numbers themselves are never asserted (they depend on the machine); the shape of the
report and the work each timed turn does are.
"""

from __future__ import annotations

import ast
import copy
import io
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from benchmarks import extension
from benchmarks.targets import TARGETS, evaluate_targets
from rich.console import Console
from typer.testing import CliRunner

from amplifier_anyio import bench as bench_package
from amplifier_anyio.bench import (
    SCHEMA,
    BenchConfig,
    FanoutTurn,
    conversation,
    make_config,
    render_tables,
    run_benchmarks,
    run_command,
    taskgroup_floor,
    write_json,
)
from amplifier_anyio.bench.config import BACKENDS, backend_problem
from amplifier_anyio.bench.environment import LoadWatch
from amplifier_anyio.bench.report import BELOW_NOISE, busy_warning
from amplifier_anyio.cli import app
from amplifier_anyio.errors import ConfigError
from tiers import needs

pytestmark = pytest.mark.anyio

TINY = BenchConfig(
    sizes=(1, 8),
    delays=(0.0, 0.002),
    hook_counts=(0, 2),
    repeats=1,
    emit_handlers=(0, 1, 3),
    emit_iterations=50,
    batch_size=10,
    compaction_sizes=(20, 200),
)
INSTALLED = [name for name in BACKENDS if backend_problem(name) is None]

CHECKOUT = extension()
"""The checkout's suites, tables and targets (``python -m benchmarks``)."""


# A measured run takes many seconds: the tests of one are in the full tier (marked slow).
@pytest.fixture(scope="module")
def report() -> dict[str, Any]:
    return run_benchmarks(TINY, extension=CHECKOUT)


def _numbers(value: Any) -> list[float]:
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return []
    if isinstance(value, int | float):
        return [float(value)]
    if isinstance(value, dict):
        return [n for item in value.values() for n in _numbers(item)]
    if isinstance(value, list):
        return [n for item in value for n in _numbers(item)]
    return []


class TestReport:
    @pytest.mark.slow
    def test_header_describes_the_run(self, report: dict[str, Any]) -> None:
        assert report["schema"] == SCHEMA
        assert report["backends"] == INSTALLED
        assert set(report["skipped_backends"]) == set(BACKENDS) - set(INSTALLED)
        environment = report["environment"]
        for key in ("machine", "platform", "python", "cpu_count", "versions"):
            assert environment[key], key
        assert environment["versions"]["anyio"]
        assert report["parameters"]["sizes"] == [1, 8]
        assert report["parameters"]["repeats"] == 1
        assert "gc" in report["method"]

    @pytest.mark.slow
    def test_every_fanout_case_sits_beside_its_floors(self, report: dict[str, Any]) -> None:
        cases = report["fanout"]
        expected = {
            (backend, n, delay * 1000, hooks)
            for backend in INSTALLED
            for n in TINY.sizes
            for delay in TINY.delays
            for hooks in TINY.hook_counts
        }
        assert {(c["backend"], c["n"], c["delay_ms"], c["hooks"]) for c in cases} == expected
        for case in cases:
            assert len(case["ours"]["samples_s"]) == len(case["floor"]["samples_s"]) == 1
            on_asyncio = case["backend"].startswith("asyncio")
            assert (case["gather"] is not None) == on_asyncio
            assert (case["ratio_gather"] is not None) == on_asyncio
            assert (case["memory"] is not None) == (case["delay_ms"] > 0)

    @pytest.mark.slow
    def test_every_ratio_and_timing_is_a_finite_number(self, report: dict[str, Any]) -> None:
        for section in ("fanout", "emit", "batch"):
            assert report[section], section
            for case in report[section]:
                numbers = _numbers({k: v for k, v in case.items() if k != "backend"})
                assert numbers
                assert all(math.isfinite(n) for n in numbers), case
        for case in report["fanout"]:
            assert isinstance(case["ratio"], float)
            assert isinstance(case["ratio_min"], float)
        numbers = _numbers(report["compaction"])
        assert all(math.isfinite(n) for n in numbers)

    @pytest.mark.slow
    def test_emit_cost_per_handler_is_derived_from_the_empty_emit(
        self, report: dict[str, Any]
    ) -> None:
        for backend in INSTALLED:
            cases = {c["handlers"]: c for c in report["emit"] if c["backend"] == backend}
            assert set(cases) == {0, 1, 3}
            assert cases[0]["ns_per_handler"] is None
            expected = (cases[3]["ns_per_emit"] - cases[0]["ns_per_emit"]) / 3
            assert cases[3]["ns_per_handler"] == pytest.approx(expected)

    @pytest.mark.slow
    def test_compaction_drops_messages_at_every_size(self, report: dict[str, Any]) -> None:
        cases = report["compaction"]["cases"]
        assert [c["messages"] for c in cases] == [20, 200]
        for case in cases:
            assert 0 < case["kept_by_compact"] < case["messages"]
            assert 0 < case["kept_by_request_view"] < case["messages"]
        assert set(report["compaction"]["scaling_exponent"]) == {"compact", "request_view"}

    @pytest.mark.slow
    def test_every_target_is_judged_on_every_backend(self, report: dict[str, Any]) -> None:
        targets = report["targets"]
        assert {(t["name"], t["backend"]) for t in targets} == {
            (target.name, backend)
            for target in TARGETS
            for backend in (INSTALLED if target.per_backend else ["-"])
        }
        by_name = {(t["name"], t["backend"]): t for t in targets}
        for backend in INSTALLED:
            # the tiny run has no N = 1 000 or 10 000 case: reported as not measured
            assert by_name["fanout_ratio", backend]["measured"] is None
            assert by_name["fanout_ratio", backend]["met"] is None
            emit = by_name["emit_one_handler", backend]
            assert emit["met"] == (emit["measured"] < emit["threshold"])
            memory = by_name["memory_per_call", backend]
            assert memory["case"] == {"n": 8, "delay_ms": 2.0, "hooks": 0}
        # the run had no history or startup suite: its run-wide targets are not measured
        for target in TARGETS:
            if not target.per_backend:
                assert by_name[target.name, "-"]["met"] is None

    @pytest.mark.slow
    def test_json_file_round_trips(self, report: dict[str, Any], tmp_path: Path) -> None:
        path = tmp_path / "bench.json"
        write_json(report, path)
        assert json.loads(path.read_text(encoding="utf-8")) == report

    def test_json_refuses_a_non_finite_number(self, tmp_path: Path) -> None:
        with pytest.raises(ValueError, match="not JSON compliant"):
            write_json({"ratio": math.inf}, tmp_path / "bad.json")


class TestWorkloads:
    async def test_fanout_turn_runs_every_call_through_the_loop(self) -> None:
        turn = FanoutTurn(n=25, delay=0.0, hooks=2)
        job = turn.prepare()
        await job()
        turn.check()  # raises unless the turn succeeded with 25 tool results

    async def test_check_refuses_a_turn_that_did_not_run(self) -> None:
        turn = FanoutTurn(n=3, delay=0.0)
        turn.prepare()
        with pytest.raises(RuntimeError, match="has not run"):
            turn.check()

    async def test_floor_fills_every_slot(self) -> None:
        assert await taskgroup_floor(50, 0.0) == list(range(50))

    async def test_each_prepare_gives_a_fresh_turn(self) -> None:
        turn = FanoutTurn(n=4, delay=0.0)
        for _ in range(2):
            await turn.prepare()()
            turn.check()


class TestConfig:
    def test_conversation_has_the_size_asked_and_answers_every_call(self) -> None:
        for size in (1, 5, 37):
            messages = conversation(size)
            assert len(messages) == size
            calls = [c["id"] for m in messages for c in m.get("tool_calls", [])]
            answered = [m["tool_call_id"] for m in messages if m["role"] == "tool"]
            assert calls == answered

    @pytest.mark.parametrize(
        "changes",
        [{"repeats": 0}, {"sizes": (0,)}, {"backends": ("curio",)}, {"delays": (-1.0,)}],
    )
    def test_bad_parameters_are_refused(self, changes: dict[str, Any]) -> None:
        with pytest.raises(ConfigError):
            BenchConfig(**changes)

    def test_quick_run_stays_small(self) -> None:
        quick = BenchConfig.quick_run()
        assert max(quick.sizes) <= 1_000
        assert quick.repeats == 3


class TestCommand:
    @pytest.mark.slow
    def test_bench_writes_the_json_it_prints(self, tmp_path: Path) -> None:
        path = tmp_path / "out.json"
        args = ["bench", "--size", "3", "--repeats", "1"]
        args += ["--suite", "fanout", "--backend", "asyncio", "--json", str(path)]
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, result.output
        data = json.loads(path.read_text(encoding="utf-8"))
        assert {c["n"] for c in data["fanout"]} == {3}
        assert data["backends"] == ["asyncio"]
        assert "Fan-out through the full loop" in result.output

    def test_unknown_backend_is_a_usage_error(self) -> None:
        result = CliRunner().invoke(app, ["bench", "--backend", "curio"])
        assert result.exit_code == 2
        assert "backends" in result.output

    @needs("matplotlib")
    def test_plot_is_drawn(self, tmp_path: Path) -> None:
        path = tmp_path / "fanout.png"
        args = ["bench", "--size", "2", "--repeats", "1", "--suite", "fanout"]
        # the plot is the checkout's (benchmarks/), as `python -m benchmarks` runs it
        result = CliRunner().invoke(
            app, [*args, "--backend", "asyncio", "--plot", str(path)], obj=CHECKOUT
        )
        assert result.exit_code == 0, result.output
        assert path.read_bytes().startswith(b"\x89PNG")


class TestOutput:
    """Readable wherever it is read: 80 columns on a terminal, Markdown in a pipe or a log."""

    @staticmethod
    def render(report: dict[str, Any], width: int, *, terminal: bool = True) -> list[str]:
        console = Console(width=width, force_terminal=terminal, record=True, color_system=None)
        with console.capture() as capture:
            render_tables(report, console, extension=CHECKOUT)
        return capture.get().splitlines()

    @pytest.mark.slow
    def test_no_table_wraps_or_overflows_at_80_columns(self, report: dict[str, Any]) -> None:
        # a run on a busy machine says so in its missed targets' cells, which may wrap
        report = {**report, "machine_busy": None}
        narrow = self.render(report, 80)
        assert max(len(line) for line in narrow) <= 80
        # The same lines as on a very wide terminal: no cell was wrapped or cut.
        wide = self.render(report, 400)
        assert [line.strip() for line in narrow] == [line.strip() for line in wide]
        assert any("fan-out 1 000 x 10 ms / floor" in line for line in narrow)

    @pytest.mark.slow
    def test_a_pipe_gets_markdown_tables(self, report: dict[str, Any]) -> None:
        lines = self.render(report, 80, terminal=False)
        rows = [line for line in lines if line.startswith("|")]
        assert len(rows) > len(report["targets"])
        assert all(line.endswith("|") for line in rows)

    @pytest.mark.slow
    def test_a_log_shows_progress_with_the_time_left(self) -> None:
        args = ["bench", "--size", "2", "--repeats", "1", "--suite", "emit"]
        result = CliRunner().invoke(app, [*args, "--backend", "asyncio"])
        assert result.exit_code == 0, result.output
        progress = [line for line in result.stderr.splitlines() if line.startswith("[")]
        assert progress
        assert progress[-1].startswith(f"[{len(progress)}/{len(progress)}] ")
        assert all(line.endswith(" s left)") for line in progress)

    @needs("matplotlib")
    def test_a_plot_without_the_fanout_suite_is_refused_before_measuring(
        self, tmp_path: Path
    ) -> None:
        path = tmp_path / "emit.png"
        args = ["bench", "--suite", "emit", "--backend", "asyncio", "--plot", str(path)]
        result = CliRunner().invoke(app, args, obj=CHECKOUT)
        assert result.exit_code == 2
        assert "the plot shows the fanout suite; add --suite fanout" in result.stderr
        assert not path.exists()


def test_run_wide_targets_read_the_history_and_startup_suites() -> None:
    def request(context: str, compaction: bool, ms: float) -> dict[str, Any]:
        return {"context": context, "messages": 100_000, "compaction": compaction, "request_ms": ms}

    report: dict[str, Any] = {
        "history": {
            "cases": [
                request("simple", False, 1.5),
                request("simple", True, 0.3),
                request("persistent", False, 7.0),
                request("persistent", True, 0.3),
                {"context": "simple", "messages": 10_000, "compaction": False, "request_ms": 9.0},
            ],
            "runs": [
                {"context": "simple", "iterations": 1000, "compaction": False, "growth": 1.1},
                {"context": "persistent", "iterations": 1000, "compaction": True, "growth": 1.4},
            ],
            "load": {"messages": 100_000, "load_ms": 313.0},
        },
        "startup": {
            "cases": [
                {"command": "import amplifier_anyio", "median_ms": 24.0},
                {"command": "cli run (demo, no delay)", "median_ms": 620.0},
            ]
        },
    }
    judged = {t["name"]: t for t in evaluate_targets(report, ["asyncio"]) if t["backend"] == "-"}
    # the dearer of compaction off / on, at 100 000 messages only
    assert judged["request_simple_100k"]["measured"] == 1.5
    assert judged["request_simple_100k"]["met"] is True
    assert judged["request_persistent_100k"]["measured"] == 7.0
    assert judged["request_persistent_100k"]["met"] is False
    assert judged["request_growth"]["measured"] == 1.4
    assert judged["request_growth"]["case"]["context"] == "persistent"
    assert judged["load_persistent_100k"]["met"] is True
    assert judged["import_time"]["met"] is True
    assert judged["demo_run_time"]["measured"] == 620.0
    assert judged["demo_run_time"]["met"] is False


# -- a noisy machine ---------------------------------------------------------------------------


def markdown_rows(report: dict[str, Any]) -> list[str]:
    console = Console(width=80, force_terminal=False, record=True, color_system=None)
    with console.capture() as capture:
        render_tables(report, console, extension=CHECKOUT)
    return [line for line in capture.get().splitlines() if line.startswith("|")]


@pytest.mark.slow
def test_an_overhead_below_zero_is_shown_as_noise(report: dict[str, Any]) -> None:
    noisy = copy.deepcopy(report)
    for case in noisy["fanout"] + noisy["batch"]:
        case["overhead_us_per_call"] = 5.0
    # the floor's median happened to be the slower one
    noisy["fanout"][0]["overhead_us_per_call"] = -12.5
    noisy["batch"][0]["overhead_us_per_call"] = -3.0

    rows = markdown_rows(noisy)

    assert not any("-12.5" in row or "-3.00" in row for row in rows)
    assert [row.split("|")[-2].strip() for row in rows].count(BELOW_NOISE) == 2


@pytest.mark.slow
def test_a_busy_machine_is_named_beside_each_missed_target(report: dict[str, Any]) -> None:
    busy = copy.deepcopy(report)
    busy["machine_busy"] = {"load": 3.46, "cores": 2}
    [missed, *_] = busy["targets"]
    missed.update(measured=missed["threshold"] * 2, met=False)
    quiet = {**busy, "machine_busy": None}

    busy_row = next(r for r in markdown_rows(busy) if f"| {missed['label']}" in r)
    quiet_row = next(r for r in markdown_rows(quiet) if f"| {missed['label']}" in r)

    assert busy_row.split("|")[-2].strip() == "MISSED (machine busy: load 3.5 on 2 cores)"
    assert quiet_row.split("|")[-2].strip() == "MISSED"
    assert busy_warning(busy) == (
        "warning: the machine was busy during the run (load 3.5 on 2 cores): the timings are "
        "noisy, and a missed target may be the load's, not the code's"
    )
    assert busy_warning(quiet) is None


@pytest.mark.parametrize(("load", "busy"), [(1.5, False), (2.0, False), (2.01, True)])
def test_the_load_peak_of_a_run_is_compared_with_the_cores(
    monkeypatch: pytest.MonkeyPatch, load: float, busy: bool
) -> None:
    loads = iter([0.5, load, 1.0])
    monkeypatch.setattr(os, "getloadavg", lambda: (next(loads, 0.2), 0.0, 0.0))
    watch = LoadWatch()
    watch.sample()
    watch.sample()

    assert watch.peak == max(0.5, load)
    assert (watch.busy(cores=2) is not None) is busy


@pytest.mark.slow
def test_bench_warns_on_stderr_when_the_machine_was_busy(monkeypatch: pytest.MonkeyPatch) -> None:
    cores = os.cpu_count() or 1
    monkeypatch.setattr(os, "getloadavg", lambda: (cores + 1.5, 0.0, 0.0))
    args = ["bench", "--suite", "emit", "--backend", "asyncio", "--repeats", "1"]

    result = CliRunner().invoke(app, args)

    assert result.exit_code == 0, result.output
    expected = f"warning: the machine was busy during the run (load {cores + 1.5:.1f} on {cores}"
    assert [line for line in result.stderr.splitlines() if line.startswith(expected)]


# -- the wheel's part and the checkout's ------------------------------------------------------


def test_the_wheels_bench_imports_neither_asyncio_nor_trio_nor_the_checkout() -> None:
    """What ships is the fan-out runner: anyio only, about 1.5k lines, no ``benchmarks``."""
    folder = Path(bench_package.__file__).parent
    lines = 0
    for path in sorted(folder.glob("*.py")):
        source = path.read_text(encoding="utf-8")
        lines += len(source.splitlines())
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                assert name.split(".")[0] not in {"asyncio", "trio", "benchmarks"}, (path, name)
    assert lines <= 1_600


@pytest.mark.parametrize("suite", ["sessions", "peers", "history"])
def test_a_checkout_suite_without_the_checkout_names_python_m_benchmarks(suite: str) -> None:
    with pytest.raises(ConfigError, match=rf"python -m benchmarks --suite {suite}"):
        make_config(suites=["fanout", suite])
    assert suite in make_config(suites=[suite], extension=CHECKOUT).suites


def test_a_plot_without_the_checkout_is_refused_before_measuring(tmp_path: Path) -> None:
    console = Console(file=io.StringIO())
    config = make_config(suites=["fanout"], sizes=[1], repeats=1)
    with pytest.raises(ConfigError, match=r"--plot .*python -m benchmarks --plot FILE"):
        run_command(config, out=console, err=console, plot_path=tmp_path / "plot.png")
    assert console.file.getvalue() == ""  # type: ignore[attr-defined]


REPO = Path(__file__).resolve().parents[2]
"""This repository: its ``src`` is what a checkout's ``amplifier-anyio bench`` runs (CI
installs a wheel, so the subprocesses below put the checkout's ``src`` first)."""


def _checkout_env() -> dict[str, str]:
    env = {**os.environ, "COLUMNS": "100", "NO_COLOR": "1", "TERM": "dumb"}
    env["PYTHONPATH"] = os.pathsep.join(
        [str(REPO / "src"), *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    return env


def test_this_checkout_is_found_by_the_wheels_command() -> None:
    probe = (
        "from amplifier_anyio.bench.extension import checkout_extension\n"
        "found = checkout_extension()\n"
        "print(sorted(found.suites) if found is not None else None)"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=REPO,
        env=_checkout_env(),
        capture_output=True,
        text=True,
        check=True,
    )
    suites = {"executors", "history", "startup", "peers", "turn", "sessions", "cancel"}
    assert done.stdout.strip() == str(sorted(suites))


def test_python_m_benchmarks_is_the_bench_command() -> None:
    env = _checkout_env()
    ours = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--help"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    cli = CliRunner().invoke(app, ["bench", "--help"], prog_name="python -m benchmarks", env=env)
    assert "Usage: python -m benchmarks [OPTIONS]" in ours
    assert (
        ours.split()
        == cli.output.replace("python -m benchmarks bench", "python -m benchmarks").split()
    )


def _outside_a_checkout(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``amplifier-anyio bench ARGS`` with the package as a wheel installs it (no
    ``benchmarks/`` beside it)."""
    site = tmp_path / "site-packages"
    if not site.exists():
        shutil.copytree(Path(bench_package.__file__).parents[1], site / "amplifier_anyio")
    return subprocess.run(
        [sys.executable, "-c", "from amplifier_anyio.cli import main; main()", "bench", *args],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(site), "NO_COLOR": "1"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_outside_a_checkout_the_checkouts_options_are_one_line_each(tmp_path: Path) -> None:
    refused = _outside_a_checkout(tmp_path, "--suite", "sessions")
    assert refused.returncode == 2
    assert refused.stderr == (
        "error: --suite sessions: the checkout's benchmarks package: run "
        "`python -m benchmarks --suite sessions` in a checkout\n"
    )
    plot = _outside_a_checkout(tmp_path, "--plot", str(tmp_path / "plot.png"))
    assert plot.returncode == 2
    assert "python -m benchmarks --plot FILE" in plot.stderr


@pytest.mark.slow  # a measured run
def test_outside_a_checkout_the_wheels_suites_run(tmp_path: Path) -> None:
    args = ["--suite", "emit", "--backend", "asyncio", "--repeats", "1", "--markdown"]
    ran = _outside_a_checkout(tmp_path, *args)
    assert ran.returncode == 0, ran.stderr
    assert "HookRegistry.emit" in ran.stdout
    assert "Targets" not in ran.stdout
