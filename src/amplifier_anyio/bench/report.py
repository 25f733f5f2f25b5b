"""A run's report as rich tables, as a JSON file and as an optional PNG plot."""

from __future__ import annotations

import importlib
import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from ..errors import ConfigError
from .timing import ratio

__all__ = (
    "render_tables",
    "busy_warning",
    "busy_text",
    "BELOW_NOISE",
    "write_json",
    "write_plot",
    "plot_figure",
    "NOISE_LABEL",
    "plotting_problem",
    "plot_format_problem",
)


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else _num(seconds * 1000)


def _num(value: float | None) -> str:
    if value is None:
        return "-"
    size = abs(value)
    if size >= 100:
        return f"{value:,.0f}"
    if size >= 10:
        return f"{value:.1f}"
    if size >= 1:
        return f"{value:.2f}"
    return f"{value:.3f}"


BELOW_NOISE = "< noise"
"""How an overhead below zero is shown: ours cannot beat the floor doing more work; a
negative difference of two medians is the machine's noise, not a speed-up."""


def _overhead(value: float | None, show: Callable[[float], str] = _num) -> str:
    """An overhead (ours minus the floor): below zero it is noise, shown as such."""
    if value is None:
        return "-"
    return BELOW_NOISE if value < 0 else show(value)


def _table(title: str, columns: list[str], markdown: bool) -> Table:
    table = Table(title=title, box=box.MARKDOWN if markdown else box.SIMPLE_HEAVY)
    for index, column in enumerate(columns):
        table.add_column(column, justify="left" if index == 0 else "right")
    return table


def _fanout_tables(report: dict[str, Any], markdown: bool) -> list[Table]:
    """Two tables of at most eight columns each, so either fits 80 columns."""
    timing = _table(
        "Fan-out through the full loop (median ms; ratio = ours / task-group floor)",
        ["backend", "N", "D ms", "K", "floor", "ours", "ratio", "µs/call"],
        markdown,
    )
    against = _table(
        "Fan-out: ours against asyncio.gather and in memory (B = bytes)",
        ["backend", "N", "D ms", "K", "gather", "ours/gather", "B/call", "B/call floor"],
        markdown,
    )
    for case in report["fanout"]:
        gather, memory = case["gather"], case["memory"] or {}
        key = (_backend(case["backend"]), f"{case['n']:,}", f"{case['delay_ms']:g}")
        timing.add_row(
            *key,
            str(case["hooks"]),
            _ms(case["floor"]["median_s"]),
            _ms(case["ours"]["median_s"]),
            f"{case['ratio']:.2f}",
            _overhead(case["overhead_us_per_call"]),
        )
        against.add_row(
            *key,
            str(case["hooks"]),
            _ms(gather["median_s"]) if gather else "-",
            f"{case['ratio_gather']:.2f}" if case["ratio_gather"] is not None else "-",
            _num(memory.get("ours_bytes_per_call")),
            _num(memory.get("floor_bytes_per_call")),
        )
    return [timing, against]


def _backend(name: str) -> str:
    """Backend names short enough for narrow tables."""
    return name.replace("asyncio+uvloop", "uvloop")


def _emit_table(report: dict[str, Any], markdown: bool) -> Table:
    table = _table(
        "HookRegistry.emit (no-op async handlers)",
        ["backend", "handlers", "ns/emit", "ns/emit min", "ns/handler"],
        markdown,
    )
    for case in report["emit"]:
        table.add_row(
            case["backend"],
            str(case["handlers"]),
            _num(case["ns_per_emit"]),
            _num(case["ns_per_emit_min"]),
            _num(case["ns_per_handler"]),
        )
    return table


def _turn_table(report: dict[str, Any], markdown: bool) -> Table:
    table = _table(
        "One-tool turn, zero-delay tool, no hooks (median µs per turn)",
        ["backend", "turns", "session", "loop alone", "session - loop"],
        markdown,
    )
    for case in report["turn"]:
        table.add_row(
            case["backend"],
            f"{case['turns']:,}",
            _num(case["session_us_per_turn"]),
            _num(case["loop_us_per_turn"]),
            _overhead(case["session_us_per_turn"] - case["loop_us_per_turn"]),
        )
    return table


def _session_tables(report: dict[str, Any], markdown: bool) -> list[Table]:
    tables = []
    if report.get("session_open"):
        opened = _table(
            "Session open + close (µs per session, median)",
            ["backend", "plan", "sessions", "µs", "µs min"],
            markdown,
        )
        for case in report["session_open"]:
            opened.add_row(
                _backend(case["backend"]),
                case["plan"],
                str(case["sessions"]),
                _num(case["us_per_session"]),
                _num(case["us_per_session_min"]),
            )
        tables.append(opened)
    if report.get("session_path"):
        path = _table(
            "Fan-out through a session (median ms; µs/call over the floor)",
            ["backend", "N", "D ms", "floor", "loop", "session", "loop µs", "session µs"],
            markdown,
        )
        for case in report["session_path"]:
            path.add_row(
                _backend(case["backend"]),
                f"{case['n']:,}",
                f"{case['delay_ms']:g}",
                _ms(case["floor"]["median_s"]),
                _ms(case["loop"]["median_s"]),
                _ms(case["session"]["median_s"]),
                _overhead(case["loop_us_per_call"]),
                _overhead(case["session_us_per_call"]),
            )
        tables.append(path)
    if report.get("session_concurrent"):
        many = _table(
            "Sessions at once: demo plan, one turn each (median ms)",
            ["backend", "sessions", "all", "µs/session", "idle B/session"],
            markdown,
        )
        memory = {case["backend"]: case for case in report.get("session_memory", ())}
        for case in report["session_concurrent"]:
            idle = memory.get(case["backend"])
            many.add_row(
                _backend(case["backend"]),
                f"{case['sessions']:,}",
                _ms(case["all"]["median_s"]),
                _num(case["us_per_session"]),
                _num(idle["bytes_per_session"]) if idle else "-",
            )
        tables.append(many)
    return tables


def _cancel_table(report: dict[str, Any], markdown: bool) -> Table:
    table = _table(
        "Cancel with N calls in flight, to run() returning (median ms; paused: no GC)",
        ["backend", "N", "floor", "ours", "ratio", "floor paused", "ours paused", "ratio"],
        markdown,
    )
    for case in report["cancel"]:
        table.add_row(
            _backend(case["backend"]),
            f"{case['n']:,}",
            _ms(case["floor"]["median_s"]),
            _ms(case["ours"]["median_s"]),
            f"{case['ratio']:.2f}",
            _ms(case["floor_paused"]["median_s"]),
            _ms(case["ours_paused"]["median_s"]),
            f"{case['ratio_paused']:.2f}",
        )
    return table


def _batch_table(report: dict[str, Any], markdown: bool) -> Table:
    table = _table(
        "ToolBatch.run, zero-delay tool, no hooks (median ms)",
        ["backend", "N", "floor", "batch", "ratio", "µs/call"],
        markdown,
    )
    for case in report["batch"]:
        table.add_row(
            case["backend"],
            f"{case['n']:,}",
            _ms(case["floor"]["median_s"]),
            _ms(case["ours"]["median_s"]),
            f"{case['ratio']:.2f}",
            _overhead(case["overhead_us_per_call"]),
        )
    return table


def _compaction_table(report: dict[str, Any], markdown: bool) -> Table:
    compaction = report["compaction"]
    exponents = compaction["scaling_exponent"]
    slope = ", ".join(f"{key} {value:.2f}" for key, value in exponents.items() if value is not None)
    table = _table(
        f"Compaction to half the history (median ms; time ~ size^k: {slope or '-'})",
        ["messages", "compact", "µs/msg", "request view", "µs/msg", "kept"],
        markdown,
    )
    for case in compaction["cases"]:
        table.add_row(
            f"{case['messages']:,}",
            _ms(case["compact"]["median_s"]),
            _num(case["compact_us_per_message"]),
            _ms(case["request_view"]["median_s"]),
            _num(case["request_view_us_per_message"]),
            f"{case['kept_by_request_view']:,}",
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
    table = _table(title, columns, markdown)
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
            _overhead(case["overhead_ms_per_call"], lambda value: f"{value:.2f}"),
        )
    return table


def _history_tables(report: dict[str, Any], markdown: bool) -> list[Table]:
    history = report["history"]
    slopes = ", ".join(f"{key} {value:.2f}" for key, value in history["slope"].items() if value)
    table = _table(
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
            _ms(case["request"]["median_s"]),
            _num(case["us_per_message"]),
        )
    runs = _table(
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
            _num(run["first_tenth_median_ms"]),
            _num(run["last_tenth_median_ms"]),
            f"{run['growth']:.1f}",
        )
    tables = [table, runs]
    load = history.get("load")
    if load:
        loading = _table("Loading context-persistent (ms)", ["messages", "load"], markdown)
        loading.add_row(f"{load['messages']:,}", _ms(load["load"]["median_s"]))
        tables.append(loading)
    return tables


def _peers_table(report: dict[str, Any], markdown: bool) -> Table:
    """The fan-out cases with peer rows: the floor, ours and each peer (median ms)."""
    table = _table(
        "Fan-out against peers, K = 0 (median ms; ratio = time / task-group floor)",
        ["backend", "N", "D ms", "variant", "median", "ratio", "µs/call", "/ ours"],
        markdown,
    )
    for case in report["fanout"]:
        if not case.get("peers"):
            continue
        key = (_backend(case["backend"]), f"{case['n']:,}", f"{case['delay_ms']:g}")
        table.add_row(*key, "floor", _ms(case["floor"]["median_s"]), "1.00", "-", "-")
        if case["gather"]:
            gather = case["gather"]["median_s"]
            table.add_row(
                *key,
                "gather",
                _ms(gather),
                f"{ratio(gather, case['floor']['median_s']):.2f}",
                "-",
                f"{ratio(gather, case['ours']['median_s']):.2f}",
            )
        table.add_row(
            *key,
            "ours",
            _ms(case["ours"]["median_s"]),
            f"{case['ratio']:.2f}",
            _overhead(case["overhead_us_per_call"]),
            "1.00",
        )
        for name, peer in case["peers"].items():
            table.add_row(
                *key,
                name,
                _ms(peer["median_s"]),
                f"{peer['ratio']:.2f}",
                _overhead(peer["overhead_us_per_call"]),
                f"{peer['vs_ours']:.2f}",
            )
    return table


def _startup_table(report: dict[str, Any], markdown: bool) -> Table:
    table = _table(
        "Start-up: fresh interpreters (median ms of wall time)",
        ["command", "runs", "wall", "over python"],
        markdown,
    )
    for case in report["startup"]["cases"]:
        table.add_row(
            case["command"],
            str(case["repeats"]),
            _num(case["median_ms"]),
            _num(case["over_python_ms"]),
        )
    return table


def _targets_table(report: dict[str, Any], markdown: bool) -> Table:
    table = _table("Targets", ["target", "backend", "measured", "under", "met"], markdown)
    busy = report.get("machine_busy")
    for target in report["targets"]:
        met = {True: "met", False: "MISSED", None: "-"}[target["met"]]
        if busy and target["met"] is False:
            met += f" (machine busy: {busy_text(busy)})"
        measured = target["measured"]
        table.add_row(
            target["label"],
            _backend(target["backend"]),
            "-" if measured is None else f"{_num(measured)} {target['unit']}",
            f"{target['threshold']:g} {target['unit']}",
            met,
        )
    return table


def _laid_out(table: Table, width: int) -> str:
    wide = Console(file=io.StringIO(), width=width, color_system=None, force_terminal=False)
    with wide.capture() as capture:
        wide.print(table)
    return capture.get()


def busy_text(busy: dict[str, Any]) -> str:
    """``load 3.2 on 2 cores``: the peak load average of a run against the machine's cores."""
    return f"load {busy['load']:.1f} on {busy['cores']} cores"


def busy_warning(report: dict[str, Any]) -> str | None:
    """The warning line for a run on a machine busier than its cores, else None."""
    busy = report.get("machine_busy")
    if not busy:
        return None
    return (
        f"warning: the machine was busy during the run ({busy_text(busy)}): the timings "
        "are noisy, and a missed target may be the load's, not the code's"
    )


def render_tables(report: dict[str, Any], console: Console, *, markdown: bool = False) -> None:
    """Print every table the report has data for: tables that fit 80 columns on a terminal,
    Markdown when ``markdown`` or when the console is not a terminal (a pipe, a CI log)."""
    # A pipe or a CI log gets Markdown: one line per row whatever the reader's width.
    markdown = markdown or not console.is_terminal
    tables = []
    if report["fanout"]:
        tables.extend(_fanout_tables(report, markdown))
    if any(case.get("peers") for case in report["fanout"]):
        tables.append(_peers_table(report, markdown))
    if report["emit"]:
        tables.append(_emit_table(report, markdown))
    if report["batch"]:
        tables.append(_batch_table(report, markdown))
    if report.get("turn"):
        tables.append(_turn_table(report, markdown))
    tables.extend(_session_tables(report, markdown))
    if report.get("cancel"):
        tables.append(_cancel_table(report, markdown))
    if report["compaction"]:
        tables.append(_compaction_table(report, markdown))
    if report.get("executors"):
        tables.append(_executors_table(report, markdown))
    if report.get("history"):
        tables.extend(_history_tables(report, markdown))
    if report.get("startup"):
        tables.append(_startup_table(report, markdown))
    tables.append(_targets_table(report, markdown))
    for table in tables:
        if markdown:
            # One line per row however wide: a console never prints wider than its own
            # width (a pipe's is 80), so the table is laid out on a wide one, then printed
            # as text that is neither wrapped nor cut.
            text = _laid_out(table, max(console.width, 240))
            console.print(text, markup=False, highlight=False, soft_wrap=True)
        else:
            console.print(table)
    for name, reason in (report.get("executors") or {}).get("skipped", {}).items():
        console.print(f"skipped executor {name}: {reason}", highlight=False)
    for name, reason in report.get("skipped_peers", {}).items():
        console.print(f"skipped peer {name}: {reason}", highlight=False)
    if report["skipped_backends"]:
        for name, reason in report["skipped_backends"].items():
            console.print(f"skipped backend {name}: {reason}", highlight=False)


def write_json(report: dict[str, Any], path: Path) -> None:
    """Write the report; a NaN or infinity is refused rather than written."""
    Path(path).write_text(json.dumps(report, indent=2, allow_nan=False) + "\n", encoding="utf-8")


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
