"""A session served as an MCP server (``amplifier-anyio mcp serve``).

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
as the server. It runs on either backend: ``anyio.run(serve_stdio, plan, backend="trio")``.
Needs the ``[mcp]`` extra.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from amplifier_anyio.kernel import AmplifierSession, MountPlan, TurnStatus

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

    from amplifier_anyio.mcp.tasks import TaskRunner

__all__ = ("RUN_DESCRIPTION", "build_server", "serve_stdio")

RUN_DESCRIPTION = (
    "Run one turn of the agent session with this prompt and answer its reply. The structured "
    "result also gives the turn's status (success, incomplete, error, cancelled), how many "
    "model calls it took, and the error if it failed. The session keeps its conversation "
    "between calls."
)
"""The description of the ``run`` tool."""


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
