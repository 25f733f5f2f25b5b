"""The ``amplifier-anyio`` command: run a turn, chat, manage sessions, validate, benchmark.

Exit codes: 0 ok; 1 the turn failed; 2 bad usage, a bad plan, or a session that could not
start (one line on stderr, no traceback); 130 interrupted (Ctrl-C, on either backend).

One module per command: `run`, `chat`, `validate`, `bench`; a
group of sub-commands is a module with its own Typer app (`sessions`, `mcp`).
Shared helpers are in ``_common`` and the plan options in ``_plans``.

The commands are declared, not imported: `COMMANDS` names each one's module, which
is imported when that command is invoked (``--help`` lists them all and imports them all).
``amplifier-anyio run`` therefore loads neither the chat loop nor the benchmark nor MCP
(see ``_lazy``, and ``docs/benchmarks.md``, "Start-up").
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from .. import __version__
from ._lazy import LazyCommand, lazy_group

if TYPE_CHECKING:
    from ._plans import DEFAULT_PLAN

__all__ = ("COMMANDS", "DEFAULT_PLAN", "app", "main")

COMMANDS: tuple[LazyCommand, ...] = (
    LazyCommand("run", "run", "run_command"),
    LazyCommand("chat", "chat", "chat_command"),
    LazyCommand("validate", "validate", "validate_command"),
    LazyCommand("bench", "bench", "bench_command"),
    LazyCommand("sessions", "sessions", "app", group=True),
    LazyCommand("mcp", "mcp", "app", group=True),
    LazyCommand("temporal", "temporal", "app", group=True),
)
"""The commands in the order ``--help`` lists them: name, module of this package, and the
function (or, for a group of sub-commands, the Typer app) that module defines."""

app = typer.Typer(
    name="amplifier-anyio",
    help="An Amplifier-style agent runtime on AnyIO: runs on asyncio and trio.",
    cls=lazy_group(COMMANDS),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        from ._common import out, say

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


def __getattr__(name: str) -> Any:
    if name == "DEFAULT_PLAN":  # the embedded demo plan, without importing it for --help
        from ._plans import DEFAULT_PLAN

        return DEFAULT_PLAN
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main() -> None:
    """Console-script entry point."""
    try:
        app()
    except SystemExit as done:
        import sys

        temporal = sys.modules.get(f"{__name__}.temporal")
        if temporal is not None and temporal.CLIENT_USED["value"]:
            # A Temporal client can abort the interpreter's exit (sdk-python issue 300):
            # leave with the command's own exit code once the output is flushed.
            import os

            sys.stdout.flush()
            sys.stderr.flush()
            code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
            os._exit(code)
        raise
