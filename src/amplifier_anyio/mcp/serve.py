"""A session served as an MCP server (``amplifier-anyio mcp serve [--http]``).

The server offers one tool, ``run(prompt)``: it runs one turn of the session and answers
the turn's text, with ``{"text", "status", "turn_count", "error"}`` as structured content.
A turn that ends in ``error`` is an ``is_error`` result; a turn cancelled by the client
(``notifications/cancelled``) is cancelled in the session like any host cancellation. The
session runs one turn at a time: concurrent ``run`` calls wait their turn.

It speaks protocol ``2026-07-28`` to a client that does (``server/discover``, no
initialize handshake) and the older revisions otherwise. To a ``2026-07-28`` client that
declares the tasks extension (`amplifier_anyio.mcp.tasks`), ``run`` answers with a task at
once: the turn runs in the server's task runner, the client polls ``tasks/get``, and
``tasks/cancel`` cancels the turn.

The session is opened (``async with``) by the task that serves, around the whole server,
so its module services (an MCP client of ``tool-mcp``, a log writer) live exactly as long
as the server. Over stdio it runs on either backend: ``anyio.run(serve_stdio, plan,
backend="trio")``. Over streamable HTTP (`serve_http`) it listens on loopback by default
and checks each request's ``Host`` and ``Origin`` against DNS rebinding; the HTTP server
(the SDK's, on uvicorn) runs on asyncio. Needs the ``[mcp]`` extra.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import sniffio

from amplifier_anyio.kernel import MountPlan, TurnStatus
from amplifier_anyio.session import AmplifierSession

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer
    from mcp.server.transport_security import TransportSecuritySettings

    from amplifier_anyio.mcp.tasks import TaskRunner

__all__ = (
    "RUN_DESCRIPTION",
    "LOOPBACK",
    "build_server",
    "serve_stdio",
    "serve_http",
    "http_security",
)

RUN_DESCRIPTION = (
    "Run one turn of the agent session with this prompt and answer its reply. The structured "
    "result also gives the turn's status (success, incomplete, error, cancelled), how many "
    "model calls it took, and the error if it failed. The session keeps its conversation "
    "between calls."
)
"""The description of the ``run`` tool."""

LOOPBACK = ("127.0.0.1", "localhost", "[::1]")
"""The host names a loopback server answers to (``Host``, and ``Origin`` over http/https)."""


def build_server(
    session: AmplifierSession, *, name: str = "amplifier-anyio", tasks: TaskRunner | None = None
) -> MCPServer:
    """An MCP server (the SDK's ``MCPServer``) whose tool ``run`` runs ``session``'s turns.

    The caller owns ``session`` (opens it before serving, closes it after). With
    ``tasks`` (a runner the caller keeps running while the server serves), ``run`` is a
    task for a client that takes tasks.
    """
    from mcp.server.mcpserver import MCPServer  # noqa: PLC0415 - the [mcp] extra
    from mcp_types import CallToolResult, TextContent  # noqa: PLC0415

    from amplifier_anyio.mcp.tasks import TasksExtension  # noqa: PLC0415 - the [mcp] extra

    extensions = [] if tasks is None else [TasksExtension(tasks, {"run"})]
    server: MCPServer = MCPServer(
        name, instructions=RUN_DESCRIPTION, log_level="WARNING", extensions=extensions
    )
    lock = anyio.Lock()

    async def run(prompt: str) -> Any:  # a CallToolResult (resolvable annotations only)
        async with lock:
            result = await session.run(prompt)
        error = None if result.error is None else str(result.error)
        structured = {
            "text": result.text,
            "status": result.status.value,
            "turn_count": result.turn_count,
            "error": error,
        }
        text = result.text or (error or f"(no reply; status {result.status.value})")
        return CallToolResult(
            content=[TextContent(type="text", text=text)],
            structured_content=structured,
            is_error=result.status is TurnStatus.ERROR,
        )

    server.add_tool(run, name="run", description=RUN_DESCRIPTION)
    return server


async def serve_stdio(
    plan: dict[str, Any] | MountPlan | str | Path, *, strict: bool = False
) -> None:
    """Open a session over ``plan`` and serve it as an MCP server on stdin / stdout until
    the client closes the connection; then close the session (a ``run`` task still
    running is cancelled first)."""
    from amplifier_anyio.mcp.tasks import TaskRunner  # noqa: PLC0415 - the [mcp] extra

    tasks = TaskRunner()
    async with AmplifierSession(plan, strict=strict) as session, tasks.running():
        await build_server(session, tasks=tasks).run_stdio_async()


def http_security(
    host: str = "127.0.0.1",
    allowed_hosts: Sequence[str] = (),
    allowed_origins: Sequence[str] = (),
) -> TransportSecuritySettings:
    """The DNS-rebinding check of `serve_http`: a request is answered only when its
    ``Host`` names the server (a loopback name, the ``host`` it listens on when that is a
    name or a single address, or one of ``allowed_hosts``; with any port) — else 421 —
    and its ``Origin``, when it has one, is ``http(s)://`` one of those names or one of
    ``allowed_origins`` — else 403."""
    from mcp.server.transport_security import TransportSecuritySettings  # noqa: PLC0415

    names = list(LOOPBACK)
    listening = f"[{host}]" if ":" in host and not host.startswith("[") else host
    if listening not in ("0.0.0.0", "[::]", *names):  # noqa: S104 - compared, not bound
        names.append(listening)
    names.extend(allowed_hosts)
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[form for name in names for form in (name, f"{name}:*")],
        allowed_origins=[
            *(
                f"{scheme}://{name}{port}"
                for scheme in ("http", "https")
                for name in names
                for port in ("", ":*")
            ),
            *allowed_origins,
        ],
    )


async def serve_http(
    plan: dict[str, Any] | MountPlan | str | Path,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    path: str = "/mcp",
    strict: bool = False,
    allowed_hosts: Sequence[str] = (),
    allowed_origins: Sequence[str] = (),
) -> None:
    """Open a session over ``plan`` and serve it over streamable HTTP at
    ``http://host:port/path`` until the process is told to stop (SIGINT or SIGTERM);
    then close the session. ``port=0`` picks a free port. The address served is written
    to stderr once the server listens (``serving http://127.0.0.1:8000/mcp``).

    Requests are checked against DNS rebinding (`http_security`); the HTTP server is the
    SDK's app on uvicorn, so this runs on asyncio only."""
    import uvicorn  # noqa: PLC0415 - the [mcp] extra (the SDK's server needs it)

    from amplifier_anyio.mcp.tasks import TaskRunner  # noqa: PLC0415 - the [mcp] extra

    if sniffio.current_async_library() != "asyncio":
        msg = "mcp serve --http runs on asyncio only (its HTTP server is uvicorn)"
        raise RuntimeError(msg)
    if not path.startswith("/"):
        msg = f"path: expected a path starting with '/', got {path!r}"
        raise ValueError(msg)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((host.strip("[]"), port))
        listener.listen(128)
        listener.setblocking(False)
        bound = listener.getsockname()[1]
        tasks = TaskRunner()
        async with AmplifierSession(plan, strict=strict) as session, tasks.running():
            app = build_server(session, tasks=tasks).streamable_http_app(
                streamable_http_path=path,
                transport_security=http_security(host, allowed_hosts, allowed_origins),
                host=host,
            )
            server = _quiet_server(uvicorn.Config(app, log_level="warning", lifespan="on"))
            shown = f"[{host.strip('[]')}]" if ":" in host else host
            async with anyio.create_task_group() as tg:
                tg.start_soon(_watch, server, f"serving http://{shown}:{bound}{path}")
                await server.serve(sockets=[listener])
                tg.cancel_scope.cancel("mcp serve: the server stopped")
    finally:
        listener.close()


def _quiet_server(config: Any) -> Any:
    """A uvicorn server that leaves the process's signals to `serve_http` (uvicorn's own
    handling raises the signal again once it stops, which would end the process before
    the session closes)."""
    import uvicorn  # noqa: PLC0415 - the [mcp] extra

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

    return Server(config)


async def _watch(server: Any, announce: str) -> None:
    """Say where the server listens once it does; stop it at SIGINT or SIGTERM."""
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        while not server.started:  # noqa: ASYNC110 - uvicorn sets a flag, not an event
            await anyio.sleep(0.01)
        sys.stderr.write(announce + "\n")
        sys.stderr.flush()
        async for _signal in signals:
            server.should_exit = True
            return
