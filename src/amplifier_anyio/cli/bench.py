"""``amplifier-anyio bench``: parallel tool fan-out against the floor, hook emit, compaction.

The wheel's suites; from a checkout (or through ``python -m benchmarks``) also the
repository's ``benchmarks`` package: the other suites, the targets and ``--plot``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..errors import ConfigError
from ._common import cli_command, err, fail, out

__all__ = ("bench_command",)


def bench_command(
    ctx: typer.Context,
    *,
    quick: Annotated[
        bool, typer.Option("--quick", help="The CI run: N up to 1 000, 3 repeats, < 1 min.")
    ] = False,
    json_file: Annotated[
        Path | None, typer.Option("--json", help="Write every case with its floors to FILE.")
    ] = None,
    plot: Annotated[
        Path | None, typer.Option("--plot", help="Plot overhead per call vs N (matplotlib).")
    ] = None,
    backend: Annotated[
        list[str] | None,
        typer.Option("--backend", help="asyncio, asyncio+uvloop or trio (repeatable)."),
    ] = None,
    suite: Annotated[
        list[str] | None,
        typer.Option(
            "--suite",
            help=(
                "fanout, emit, batch, compaction; executors, history, startup, peers,"
                " turn, sessions and cancel only when named (repeatable)."
            ),
        ),
    ] = None,
    size: Annotated[
        list[int] | None, typer.Option("--size", min=1, help="Tool calls per turn (repeatable).")
    ] = None,
    repeats: Annotated[int | None, typer.Option("--repeats", min=1, help="Runs per case.")] = None,
    markdown: Annotated[bool, typer.Option("--markdown", help="Print Markdown tables.")] = False,
) -> None:
    """Benchmark parallel tool fan-out against a bare task group, hook emit and compaction."""
    from ..bench import checkout_extension, make_config, run_command

    with cli_command():
        try:
            # python -m benchmarks passes its suites; from a checkout they are found
            extension = ctx.obj if ctx.obj is not None else checkout_extension()
            config = make_config(
                quick=quick,
                backends=backend,
                suites=suite,
                sizes=size,
                repeats=repeats,
                extension=extension,
            )
            run_command(
                config,
                out=out,
                err=err,
                json_path=json_file,
                plot_path=plot,
                markdown=markdown,
                extension=extension,
            )
        except ConfigError as exc:
            raise fail(str(exc)) from None
