"""The ``amplifier-anyio`` command: run a turn, chat, manage sessions, validate, benchmark.

Exit codes: 0 ok; 1 the turn failed; 2 bad usage, a bad plan, or a session that could not
start (one line on stderr, no traceback); 130 interrupted (Ctrl-C, on either backend).

One module per command: :mod:`.run`, :mod:`.chat`, :mod:`.validate`, :mod:`.bench`; a
group of sub-commands is a module with its own Typer app, added with ``app.add_typer``
(:mod:`.sessions`, :mod:`.mcp`). Shared helpers are in ``_common`` and the plan
options in ``_plans``.
"""

from __future__ import annotations

from typing import Annotated

import typer

from .. import __version__
from . import bench, chat, mcp, run, sessions, validate
from ._common import out, say
from ._plans import DEFAULT_PLAN

__all__ = ("DEFAULT_PLAN", "app", "main")

app = typer.Typer(
    name="amplifier-anyio",
    help="An Amplifier-style agent runtime on AnyIO: runs on asyncio and trio.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        say(f"amplifier-anyio {__version__}", console=out)
        raise typer.Exit


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Show the version."),
    ] = False,
) -> None:
    """Run agent turns offline or against real providers, chat, validate plans, benchmark."""


# -- commands --------------------------------------------------------------------------------
app.command("run")(run.run_command)
app.command("chat")(chat.chat_command)
app.command("validate")(validate.validate_command)
app.command("bench")(bench.bench_command)

# -- groups of sub-commands: one Typer app each ---------------------------------------------
app.add_typer(sessions.app, name="sessions")
app.add_typer(mcp.app, name="mcp")


def main() -> None:
    """Console-script entry point."""
    app()
