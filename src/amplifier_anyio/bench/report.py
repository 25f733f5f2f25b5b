"""A run's report as rich tables and as a JSON file: the wheel's suites.

The checkout's ``benchmarks`` package adds its own tables after these (see `Extension`).
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich import box
from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    from .extension import Extension

__all__ = (
    "render_tables",
    "busy_warning",
    "busy_text",
    "BELOW_NOISE",
    "write_json",
    "new_table",
    "fmt_ms",
    "fmt_num",
    "fmt_overhead",
    "short_backend",
)


def fmt_ms(seconds: float | None) -> str:
    """Seconds shown as milliseconds (``-`` for None)."""
    return "-" if seconds is None else fmt_num(seconds * 1000)


def fmt_num(value: float | None) -> str:
    """A number with about three significant digits (``-`` for None)."""
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


def fmt_overhead(value: float | None, show: Callable[[float], str] = fmt_num) -> str:
    """An overhead (ours minus the floor): below zero it is noise, shown as such."""
    if value is None:
        return "-"
    return BELOW_NOISE if value < 0 else show(value)


def new_table(title: str, columns: list[str], markdown: bool) -> Table:
    """A table of ``columns``, the first left-aligned: Markdown, or boxed for a terminal."""
    table = Table(title=title, box=box.MARKDOWN if markdown else box.SIMPLE_HEAVY)
    for index, column in enumerate(columns):
        table.add_column(column, justify="left" if index == 0 else "right")
    return table


def _fanout_tables(report: dict[str, Any], markdown: bool) -> list[Table]:
    """Two tables of at most eight columns each, so either fits 80 columns."""
    timing = new_table(
        "Fan-out through the full loop (median ms; ratio = ours / task-group floor)",
        ["backend", "N", "D ms", "K", "floor", "ours", "ratio", "µs/call"],
        markdown,
    )
    against = new_table(
        "Fan-out: ours against asyncio.gather and in memory (B = bytes)",
        ["backend", "N", "D ms", "K", "gather", "ours/gather", "B/call", "B/call floor"],
        markdown,
    )
    for case in report["fanout"]:
        gather, memory = case["gather"], case["memory"] or {}
        key = (short_backend(case["backend"]), f"{case['n']:,}", f"{case['delay_ms']:g}")
        timing.add_row(
            *key,
            str(case["hooks"]),
            fmt_ms(case["floor"]["median_s"]),
            fmt_ms(case["ours"]["median_s"]),
            f"{case['ratio']:.2f}",
            fmt_overhead(case["overhead_us_per_call"]),
        )
        against.add_row(
            *key,
            str(case["hooks"]),
            fmt_ms(gather["median_s"]) if gather else "-",
            f"{case['ratio_gather']:.2f}" if case["ratio_gather"] is not None else "-",
            fmt_num(memory.get("ours_bytes_per_call")),
            fmt_num(memory.get("floor_bytes_per_call")),
        )
    return [timing, against]


def short_backend(name: str) -> str:
    """Backend names short enough for narrow tables."""
    return name.replace("asyncio+uvloop", "uvloop")


def _emit_table(report: dict[str, Any], markdown: bool) -> Table:
    table = new_table(
        "HookRegistry.emit (no-op handlers: async, or one plain function called inline)",
        ["backend", "handlers", "kind", "ns/emit", "ns/emit min", "ns/handler"],
        markdown,
    )
    for case in report["emit"]:
        table.add_row(
            case["backend"],
            str(case["handlers"]),
            case.get("kind", "async"),
            fmt_num(case["ns_per_emit"]),
            fmt_num(case["ns_per_emit_min"]),
            fmt_num(case["ns_per_handler"]),
        )
    return table


def _batch_table(report: dict[str, Any], markdown: bool) -> Table:
    table = new_table(
        "ToolBatch.run, zero-delay tool, no hooks (median ms)",
        ["backend", "N", "floor", "batch", "ratio", "µs/call"],
        markdown,
    )
    for case in report["batch"]:
        table.add_row(
            case["backend"],
            f"{case['n']:,}",
            fmt_ms(case["floor"]["median_s"]),
            fmt_ms(case["ours"]["median_s"]),
            f"{case['ratio']:.2f}",
            fmt_overhead(case["overhead_us_per_call"]),
        )
    return table


def _compaction_table(report: dict[str, Any], markdown: bool) -> Table:
    compaction = report["compaction"]
    exponents = compaction["scaling_exponent"]
    slope = ", ".join(f"{key} {value:.2f}" for key, value in exponents.items() if value is not None)
    table = new_table(
        f"Compaction to half the history (median ms; time ~ size^k: {slope or '-'})",
        ["messages", "compact", "µs/msg", "request view", "µs/msg", "kept"],
        markdown,
    )
    for case in compaction["cases"]:
        table.add_row(
            f"{case['messages']:,}",
            fmt_ms(case["compact"]["median_s"]),
            fmt_num(case["compact_us_per_message"]),
            fmt_ms(case["request_view"]["median_s"]),
            fmt_num(case["request_view_us_per_message"]),
            f"{case['kept_by_request_view']:,}",
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


def render_tables(
    report: dict[str, Any],
    console: Console,
    *,
    markdown: bool = False,
    extension: Extension | None = None,
) -> None:
    """Print every table the report has data for: tables that fit 80 columns on a terminal,
    Markdown when ``markdown`` or when the console is not a terminal (a pipe, a CI log).
    The ``extension``'s tables and notes follow the wheel's."""
    # A pipe or a CI log gets Markdown: one line per row whatever the reader's width.
    markdown = markdown or not console.is_terminal
    tables = []
    if report["fanout"]:
        tables.extend(_fanout_tables(report, markdown))
    if report["emit"]:
        tables.append(_emit_table(report, markdown))
    if report["batch"]:
        tables.append(_batch_table(report, markdown))
    if report["compaction"]:
        tables.append(_compaction_table(report, markdown))
    if extension is not None:
        tables.extend(extension.tables(report, markdown))
    for table in tables:
        if markdown:
            # One line per row however wide: a console never prints wider than its own
            # width (a pipe's is 80), so the table is laid out on a wide one, then printed
            # as text that is neither wrapped nor cut.
            text = _laid_out(table, max(console.width, 240))
            console.print(text, markup=False, highlight=False, soft_wrap=True)
        else:
            console.print(table)
    for note in extension.notes(report) if extension is not None else ():
        console.print(note, highlight=False)
    if report["skipped_backends"]:
        for name, reason in report["skipped_backends"].items():
            console.print(f"skipped backend {name}: {reason}", highlight=False)


def write_json(report: dict[str, Any], path: Path) -> None:
    """Write the report; a NaN or infinity is refused rather than written."""
    Path(path).write_text(json.dumps(report, indent=2, allow_nan=False) + "\n", encoding="utf-8")
