"""``amplifier-anyio mcp serve``: the session as an MCP server over stdio or streamable HTTP."""

from __future__ import annotations

import functools
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
    *,
    plan: Annotated[
        Path | None,
        typer.Option("--plan", help="A mount plan (.yaml/.yml/.toml); default: the offline demo."),
    ] = None,
    backend: Annotated[str, typer.Option("--backend", help="asyncio or trio.")] = "asyncio",
    strict: Annotated[
        bool, typer.Option("--strict", help="Refuse config keys a module does not declare.")
    ] = False,
    http: Annotated[
        bool, typer.Option("--http", help="Serve over streamable HTTP instead of stdio.")
    ] = False,
    host: Annotated[
        str, typer.Option("--host", help="With --http: the address to listen on.")
    ] = "127.0.0.1",
    port: Annotated[
        int, typer.Option("--port", help="With --http: the port (0: a free one).", min=0)
    ] = 8000,
    path: Annotated[str, typer.Option("--path", help="With --http: the endpoint's path.")] = "/mcp",
    allow_host: Annotated[
        list[str] | None,
        typer.Option(
            "--allow-host",
            help="With --http: another host name requests may name (Host, Origin); repeatable.",
        ),
    ] = None,
) -> None:
    """Serve the session as an MCP server, one tool, run(prompt): on stdin/stdout, or with
    --http over streamable HTTP (loopback by default; Host and Origin checked)."""
    check_backend(backend)
    if importlib.util.find_spec("mcp") is None:
        raise fail("mcp serve needs the MCP SDK (pip install 'amplifier-anyio[mcp]')")
    if http and backend != "asyncio":
        raise fail("mcp serve --http runs on asyncio only (its HTTP server is uvicorn)")
    if not http and (host, port, path, allow_host) != ("127.0.0.1", 8000, "/mcp", None):
        raise fail("--host, --port, --path and --allow-host need --http")
    if not path.startswith("/"):
        raise fail(f"--path: expected a path starting with '/', got {path!r}")
    from amplifier_anyio.mcp.serve import serve_http, serve_stdio

    with cli_command():
        mount_plan = MountPlan.from_dict(DEFAULT_PLAN) if plan is None else load_plan_file(plan)
        serve: Any = (
            functools.partial(
                serve_http, host=host, port=port, path=path, allowed_hosts=tuple(allow_host or ())
            )
            if http
            else serve_stdio
        )
        try:
            anyio.run(_serve, serve, mount_plan, strict, backend=backend)
        except Exception as exc:  # noqa: BLE001 - one line on stderr: stdout is the wire
            raise fail(cause(leaf(exc))) from None


async def _serve(serve: Any, plan: MountPlan, strict: bool) -> None:
    await serve(plan, strict=strict)
