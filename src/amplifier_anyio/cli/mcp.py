"""``amplifier-anyio mcp serve``: the session as an MCP server over stdio."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Annotated, Any

import anyio
import typer

from ..kernel._mount_plan import MountPlan
from ._common import cause, check_backend, cli_command, fail, leaf, load_plan_file
from ._plans import DEFAULT_PLAN

__all__ = ("app", "serve_command")

app = typer.Typer(help="Serve a session over MCP.", no_args_is_help=True)


@app.command("serve")
def serve_command(
    plan: Annotated[
        Path | None,
        typer.Option("--plan", help="A mount plan (.yaml/.yml/.toml); default: the offline demo."),
    ] = None,
    backend: Annotated[str, typer.Option("--backend", help="asyncio or trio.")] = "asyncio",
    strict: Annotated[
        bool, typer.Option("--strict", help="Refuse config keys a module does not declare.")
    ] = False,
) -> None:
    """Serve the session as an MCP server on stdin/stdout: one tool, run(prompt)."""
    check_backend(backend)
    if importlib.util.find_spec("mcp") is None:
        raise fail("mcp serve needs the MCP SDK (pip install 'amplifier-anyio[mcp]')")
    from amplifier_anyio.mcp.serve import serve_stdio

    with cli_command():
        mount_plan = MountPlan.from_dict(DEFAULT_PLAN) if plan is None else load_plan_file(plan)
        try:
            anyio.run(_serve, serve_stdio, mount_plan, strict, backend=backend)
        except Exception as exc:  # noqa: BLE001 - one line on stderr: stdout is the wire
            raise fail(cause(leaf(exc))) from None


async def _serve(serve: Any, plan: MountPlan, strict: bool) -> None:
    await serve(plan, strict=strict)
