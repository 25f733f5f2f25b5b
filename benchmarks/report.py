"""The tables of the checkout's suites and the plot, after the wheel's tables.

Turn, sessions, cancel, executors, history, peers, start-up and targets; the fan-out plot
(matplotlib, ``--plot``).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from rich.table import Table

from amplifier_anyio.bench.report import (
    busy_text,
    fmt_ms,
    fmt_num,
    fmt_overhead,
    new_table,
    short_backend,
)
from amplifier_anyio.bench.timing import ratio
from amplifier_anyio.errors import ConfigError

__all__ = (
    "extension_tables",
    "plotting_problem",
    "plot_format_problem",
    "write_plot",
    "plot_figure",
    "NOISE_LABEL",
)


def _turn_table(report: dict[str, Any], markdown: bool) -> Table:
    table = new_table(
        "One-tool turn, zero-delay tool, no hooks (median µs per turn)",
        ["backend", "turns", "session", "loop alone", "session - loop"],
        markdown,
    )
    for case in report["turn"]:
        table.add_row(
            case["backend"],
            f"{case['turns']:,}",
            fmt_num(case["session_us_per_turn"]),
            fmt_num(case["loop_us_per_turn"]),
            fmt_overhead(case["session_us_per_turn"] - case["loop_us_per_turn"]),
        )
    return table


def _session_tables(report: dict[str, Any], markdown: bool) -> list[Table]:
    tables = []
    if report.get("session_open"):
        opened = new_table(
            "Session open + close (µs per session, median)",
            ["backend", "plan", "sessions", "µs", "µs min"],
            markdown,
        )
        for case in report["session_open"]:
            opened.add_row(
                short_backend(case["backend"]),
                case["plan"],
                str(case["sessions"]),
                fmt_num(case["us_per_session"]),
                fmt_num(case["us_per_session_min"]),
            )
        tables.append(opened)
    if report.get("session_path"):
        path = new_table(
            "Fan-out through a session (median ms; µs/call over the floor)",
            ["backend", "N", "D ms", "floor", "loop", "session", "loop µs", "session µs"],
            markdown,
        )
        for case in report["session_path"]:
            path.add_row(
                short_backend(case["backend"]),
                f"{case['n']:,}",
                f"{case['delay_ms']:g}",
                fmt_ms(case["floor"]["median_s"]),
                fmt_ms(case["loop"]["median_s"]),
                fmt_ms(case["session"]["median_s"]),
                fmt_overhead(case["loop_us_per_call"]),
                fmt_overhead(case["session_us_per_call"]),
            )
        tables.append(path)
    if report.get("session_concurrent"):
        many = new_table(
            "Sessions at once: demo plan, one turn each (median ms)",
            ["backend", "sessions", "all", "µs/session", "idle B/session"],
            markdown,
        )
        memory = {case["backend"]: case for case in report.get("session_memory", ())}
        for case in report["session_concurrent"]:
            idle = memory.get(case["backend"])
            many.add_row(
                short_backend(case["backend"]),
                f"{case['sessions']:,}",
                fmt_ms(case["all"]["median_s"]),
                fmt_num(case["us_per_session"]),
                fmt_num(idle["bytes_per_session"]) if idle else "-",
            )
        tables.append(many)
    return tables


def _cancel_table(report: dict[str, Any], markdown: bool) -> Table:
    table = new_table(
        "Cancel with N calls in flight, to run() returning (median ms; paused: no GC)",
        ["backend", "N", "floor", "ours", "ratio", "floor paused", "ours paused", "ratio"],
        markdown,
    )
    for case in report["cancel"]:
        table.add_row(
            short_backend(case["backend"]),
            f"{case['n']:,}",
            fmt_ms(case["floor"]["median_s"]),
            fmt_ms(case["ours"]["median_s"]),
            f"{case['ratio']:.2f}",
            fmt_ms(case["floor_paused"]["median_s"]),
            fmt_ms(case["ours_paused"]["median_s"]),
            f"{case['ratio_paused']:.2f}",
        )
    return table


def _executors_table(report: dict[str, Any], markdown: bool) -> Table:
    suite = report["executors"]
    title = f"Executors: N CPU-bound calls of {suite['rounds']} hash rounds each"
    columns = [
        "executor",
        "workers",
        "N",
        "call ms",
        "seconds",
        "calls/s",
        "ideal s",
        "ratio",
        "overhead ms/call",
    ]
    table = new_table(title, columns, markdown)
    for case in suite["cases"]:
        table.add_row(
            case["executor"],
            str(case["workers"]),
            str(case["n"]),
            f"{case['cost_ms']:.1f}",
            f"{case['seconds']:.3f}",
            f"{case['calls_per_s']:.1f}",
            f"{case['ideal_seconds']:.3f}",
            f"{case['ratio']:.2f}",
            fmt_overhead(case["overhead_ms_per_call"], lambda value: f"{value:.2f}"),
        )
    return table


def _history_tables(report: dict[str, Any], markdown: bool) -> list[Table]:
    history = report["history"]
    slopes = ", ".join(f"{key} {value:.2f}" for key, value in history["slope"].items() if value)
    table = new_table(
        f"One provider request (median ms; time ~ size^k: {slopes or '-'})",
        ["context", "messages", "compaction", "sent", "request", "µs/msg"],
        markdown,
    )
    for case in history["cases"]:
        table.add_row(
            case.get("context", "simple"),
            f"{case['messages']:,}",
            "on" if case["compaction"] else "off",
            f"{case['sent']:,}",
            fmt_ms(case["request"]["median_s"]),
            fmt_num(case["us_per_message"]),
        )
    runs = new_table(
        "An agent run of tool rounds: request cost summed (first / last tenth: median ms)",
        ["context", "rounds", "compaction", "total s", "first", "last", "last / first"],
        markdown,
    )
    for run in history["runs"]:
        runs.add_row(
            run.get("context", "simple"),
            f"{run['iterations']:,}",
            "on" if run["compaction"] else "off",
            f"{run['total_s']:.3f}",
            fmt_num(run["first_tenth_median_ms"]),
            fmt_num(run["last_tenth_median_ms"]),
            f"{run['growth']:.1f}",
        )
    tables = [table, runs]
    load = history.get("load")
    if load:
        loading = new_table("Loading context-persistent (ms)", ["messages", "load"], markdown)
        loading.add_row(f"{load['messages']:,}", fmt_ms(load["load"]["median_s"]))
        tables.append(loading)
    return tables


def _peers_table(report: dict[str, Any], markdown: bool) -> Table:
    """The fan-out cases with peer rows: the floor, ours and each peer (median ms)."""
    table = new_table(
        "Fan-out against peers, K = 0 (median ms; ratio = time / task-group floor)",
        ["backend", "N", "D ms", "variant", "median", "ratio", "µs/call", "/ ours"],
        markdown,
    )
    for case in report["fanout"]:
        if not case.get("peers"):
            continue
        key = (short_backend(case["backend"]), f"{case['n']:,}", f"{case['delay_ms']:g}")
        table.add_row(*key, "floor", fmt_ms(case["floor"]["median_s"]), "1.00", "-", "-")
        if case["gather"]:
            gather = case["gather"]["median_s"]
            table.add_row(
                *key,
                "gather",
                fmt_ms(gather),
                f"{ratio(gather, case['floor']['median_s']):.2f}",
                "-",
                f"{ratio(gather, case['ours']['median_s']):.2f}",
            )
        table.add_row(
            *key,
            "ours",
            fmt_ms(case["ours"]["median_s"]),
            f"{case['ratio']:.2f}",
            fmt_overhead(case["overhead_us_per_call"]),
            "1.00",
        )
        for name, peer in case["peers"].items():
            table.add_row(
                *key,
                name,
                fmt_ms(peer["median_s"]),
                f"{peer['ratio']:.2f}",
                fmt_overhead(peer["overhead_us_per_call"]),
                f"{peer['vs_ours']:.2f}",
            )
    return table


def _startup_table(report: dict[str, Any], markdown: bool) -> Table:
    table = new_table(
        "Start-up: fresh interpreters (median ms of wall time)",
        ["command", "runs", "wall", "over python"],
        markdown,
    )
    for case in report["startup"]["cases"]:
        table.add_row(
            case["command"],
            str(case["repeats"]),
            fmt_num(case["median_ms"]),
            fmt_num(case["over_python_ms"]),
        )
    return table


def _targets_table(report: dict[str, Any], markdown: bool) -> Table:
    table = new_table("Targets", ["target", "backend", "measured", "under", "met"], markdown)
    busy = report.get("machine_busy")
    for target in report["targets"]:
        met = {True: "met", False: "MISSED", None: "-"}[target["met"]]
        if busy and target["met"] is False:
            met += f" (machine busy: {busy_text(busy)})"
        measured = target["measured"]
        table.add_row(
            target["label"],
            short_backend(target["backend"]),
            "-" if measured is None else f"{fmt_num(measured)} {target['unit']}",
            f"{target['threshold']:g} {target['unit']}",
            met,
        )
    return table


def plotting_problem() -> str | None:
    """Why ``--plot`` cannot work here (matplotlib missing), or None."""
    try:
        importlib.import_module("matplotlib")
    except ImportError:
        return "--plot needs matplotlib: pip install 'amplifier-anyio[plot]'"
    return None


def plot_format_problem(path: Path) -> str | None:
    """Why matplotlib cannot save a figure under ``path``'s suffix, or None (no suffix: PNG)."""
    suffix = Path(path).suffix.lower().removeprefix(".")
    if not suffix:
        return None
    backend_bases = importlib.import_module("matplotlib.backend_bases")
    formats = sorted(backend_bases.FigureCanvasBase.get_supported_filetypes())
    if suffix in formats:
        return None
    return f"unknown image format {suffix!r}; use one of {', '.join(formats)}"


_PLOT_FROM = 10
NOISE_LABEL = "below the floor: noise, drawn at 0"
"""The legend of the hollow markers a plot draws at zero for an overhead below zero (a
busy machine's noise, never a speed-up; the tables show it as `BELOW_NOISE`)."""


def write_plot(report: dict[str, Any], path: Path) -> None:
    """Overhead per call over the floor against N (log x), one panel per delay."""
    plt = importlib.import_module("matplotlib.pyplot")
    figure = plot_figure(report)
    figure.savefig(path, dpi=120)
    plt.close(figure)


def plot_figure(report: dict[str, Any]) -> Any:
    """The plot `write_plot` saves, as a matplotlib figure (the caller closes it).

    An overhead below zero is clipped at zero and drawn as a hollow marker labelled
    `NOISE_LABEL`: ours cannot beat the floor doing more work, so a negative difference
    of two medians is the machine's noise."""
    problem = plotting_problem()
    if problem is not None:
        raise ConfigError(problem)
    matplotlib = importlib.import_module("matplotlib")
    matplotlib.use("Agg")
    plt = importlib.import_module("matplotlib.pyplot")
    cases = report["fanout"]
    delays = sorted({c["delay_ms"] for c in cases}) or [0.0]
    figure, axes = plt.subplots(1, len(delays), figsize=(6.5 * len(delays), 4.8), squeeze=False)
    for axis, delay in zip(axes[0], delays, strict=True):
        _plot_panel(axis, [c for c in cases if c["delay_ms"] == delay], delay)
    figure.suptitle("amplifier-anyio: full-loop fan-out overhead over a bare task group")
    figure.tight_layout()
    return figure


def _plot_panel(axis: Any, cases: list[dict[str, Any]], delay: float) -> None:
    # Per-call overhead at N = 1 is one turn's fixed cost and dwarfs the rest: it stays in
    # the table, and the plot starts at N = 10 when the run went that far.
    if any(c["n"] >= _PLOT_FROM for c in cases):
        cases = [c for c in cases if c["n"] >= _PLOT_FROM]
    series = sorted({(c["backend"], c["hooks"]) for c in cases})
    noise: list[tuple[float, float]] = []
    for backend, hooks in series:
        points = sorted(
            (c["n"], c["overhead_us_per_call"])
            for c in cases
            if (c["backend"], c["hooks"]) == (backend, hooks)
        )
        noise.extend((n, 0.0) for n, value in points if value < 0)
        axis.plot(
            [n for n, _ in points],
            [max(value, 0.0) for _, value in points],
            marker="o",
            linestyle="-" if hooks == 0 else "--",
            label=f"{backend}, K={hooks}",
        )
    if noise:
        axis.plot(
            [n for n, _ in noise],
            [value for _, value in noise],
            linestyle="none",
            marker="o",
            markersize=11,
            markerfacecolor="none",
            markeredgecolor="red",
            label=NOISE_LABEL,
        )
    axis.axhline(0, color="grey", linewidth=0.6)
    axis.set_ylim(bottom=0)
    axis.set_xscale("log")
    axis.set_xlabel("tool calls per turn (N)")
    axis.set_ylabel("µs per call over the floor (median)")
    axis.set_title(f"each tool sleeps {delay:g} ms")
    axis.legend(fontsize="small")


def extension_tables(report: dict[str, Any], markdown: bool) -> list[Table]:
    """The checkout's tables of ``report`` that have data, in the order they are printed."""
    tables: list[Table] = []
    if any(case.get("peers") for case in report["fanout"]):
        tables.append(_peers_table(report, markdown))
    if report.get("turn"):
        tables.append(_turn_table(report, markdown))
    tables.extend(_session_tables(report, markdown))
    if report.get("cancel"):
        tables.append(_cancel_table(report, markdown))
    if report.get("executors"):
        tables.append(_executors_table(report, markdown))
    if report.get("history"):
        tables.extend(_history_tables(report, markdown))
    if report.get("startup"):
        tables.append(_startup_table(report, markdown))
    if "targets" in report:
        tables.append(_targets_table(report, markdown))
    return tables
