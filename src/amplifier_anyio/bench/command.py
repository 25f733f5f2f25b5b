"""``amplifier-anyio bench`` and ``python -m benchmarks``: one code path for both."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ..errors import ConfigError
from .config import ALL_SUITES, SUITES, BenchConfig, backend_problem
from .extension import Extension
from .report import busy_warning, render_tables, write_json
from .runner import run_benchmarks, runnable_backends
from .suites import count_steps

__all__ = ("make_config", "run_command")

CHECKOUT = "the checkout's benchmarks package: run `python -m benchmarks {option}` in a checkout"
"""Why an option is refused by a wheel without the checkout's ``benchmarks``."""


def make_config(
    *,
    quick: bool = False,
    backends: Sequence[str] | None = None,
    suites: Sequence[str] | None = None,
    sizes: Sequence[int] | None = None,
    repeats: int | None = None,
    extension: Extension | None = None,
) -> BenchConfig:
    """The run's config: the full or quick preset with the user's choices on top.

    A backend asked for by name must be installed; by default the missing ones are
    skipped (and named in the report). A suite beyond the wheel's needs the ``extension``.
    """
    changes: dict[str, Any] = {}
    if backends:
        for name in backends:
            problem = backend_problem(name) if isinstance(name, str) else None
            if problem is not None:
                raise ConfigError(f"--backend {name}: {problem}")
        changes["backends"] = tuple(backends)
    if suites:
        changes["suites"] = tuple(suites)
        extra = extension.suites if extension is not None else ()
        for name in suites:
            if name in ALL_SUITES and name not in SUITES and name not in extra:
                raise ConfigError(f"--suite {name}: " + CHECKOUT.format(option=f"--suite {name}"))
    if sizes:
        changes["sizes"] = tuple(sizes)
    if repeats is not None:
        changes["repeats"] = repeats
    return BenchConfig.quick_run(**changes) if quick else BenchConfig.full(**changes)


def run_command(
    config: BenchConfig,
    *,
    out: Console,
    err: Console,
    json_path: Path | None = None,
    plot_path: Path | None = None,
    markdown: bool = False,
    extension: Extension | None = None,
) -> dict[str, Any]:
    """Run with a progress bar on ``err``, print the tables on ``out``, write the files.

    The output files are checked before minutes of measuring, not after: a missing folder
    is created; a path that cannot be written is a ConfigError naming the option. The
    ``extension`` (a checkout's ``benchmarks``) adds its suites, tables and the plot.
    """
    _check_outputs(config, json_path, plot_path, extension)
    report = _measure(config, err, extension)
    if markdown and not out.is_terminal:
        # Markdown goes to files and pages: never squeeze columns to a terminal width.
        out = Console(file=out.file, width=240)
    if (warning := busy_warning(report)) is not None:
        err.print(warning, markup=False, highlight=False, soft_wrap=True)
    render_tables(report, out, markdown=markdown, extension=extension)
    if json_path is not None:
        _write("--json", json_path, write_json, report)
        err.print(f"wrote {json_path}", highlight=False)
    if plot_path is not None and extension is not None:
        _write("--plot", plot_path, extension.write_plot, report)
        err.print(f"wrote {plot_path}", highlight=False)
    return report


def _check_outputs(
    config: BenchConfig,
    json_path: Path | None,
    plot_path: Path | None,
    extension: Extension | None,
) -> None:
    """Refuse, before measuring, an output the run could not write or draw."""
    if plot_path is not None:
        if extension is None:
            raise ConfigError(f"--plot {plot_path}: " + CHECKOUT.format(option="--plot FILE"))
        if (problem := extension.plot_problem(plot_path)) is not None:
            raise ConfigError(problem)
        _check_writable("--plot", plot_path)
        if "fanout" not in config.suites:
            msg = f"--plot {plot_path}: the plot shows the fanout suite; add --suite fanout"
            raise ConfigError(msg)
    if json_path is not None:
        _check_writable("--json", json_path)


def _measure(config: BenchConfig, err: Console, extension: Extension | None) -> dict[str, Any]:
    """`run_benchmarks` with its progress on ``err``: a bar on a terminal, lines in a log."""
    backends, _ = runnable_backends(config)
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        auto_refresh=False,  # no refresh thread competing with the timed runs
        transient=True,
    )
    total = count_steps(config, len(backends), extension)
    log = _ProgressLog(err, total) if not err.is_terminal else None
    with progress:
        task = progress.add_task("benchmarking", total=total)

        def step(description: str) -> None:
            progress.update(task, advance=1, description=description)
            progress.refresh()
            if log is not None:
                log.step(description)

        progress.refresh()
        return run_benchmarks(config, step, extension)


class _ProgressLog:
    """One plain line per case for logs that are not a terminal (CI): where the run is and
    an estimate of the time left, from the mean time per case so far."""

    def __init__(self, console: Console, total: int) -> None:
        self.console = console
        self.total = max(total, 1)
        self.done = 0
        self.start = time.monotonic()

    def step(self, description: str) -> None:
        self.done += 1
        elapsed = time.monotonic() - self.start
        left = elapsed / self.done * (self.total - self.done)
        self.console.print(
            f"[{self.done}/{self.total}] {description} ({elapsed:.0f} s, ~{left:.0f} s left)",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )


def _check_writable(option: str, path: Path) -> None:
    """Create ``path``'s folder if it is missing; refuse a path that cannot be written."""
    if path.is_dir():
        raise ConfigError(f"{option} {path}: is a folder, not a file name")
    existing = next(p for p in path.absolute().parents if p.exists())
    if not existing.is_dir():
        raise ConfigError(f"{option} {path}: {existing} is not a folder")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        existed = path.exists()
        with path.open("ab"):  # appending: an existing file is left as it is
            pass
        if not existed:
            path.unlink()
    except OSError as exc:
        raise ConfigError(f"{option} {path}: cannot write: {exc.strerror or exc}") from exc


def _write(
    option: str, path: Path, write: Callable[[dict[str, Any], Path], None], report: dict[str, Any]
) -> None:
    try:
        write(report, path)
    except OSError as exc:  # checked before measuring, but the disk may have filled since
        raise ConfigError(f"{option} {path}: cannot write: {exc.strerror or exc}") from exc
