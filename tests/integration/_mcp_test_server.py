"""An MCP server (the SDK's MCPServer) for tool-mcp's tests, over stdio or streamable HTTP.

``python _mcp_test_server.py PORT`` serves ``/mcp`` on 127.0.0.1:PORT (uvicorn) until
killed; ``python _mcp_test_server.py stdio`` serves on stdin / stdout. Tools:

- ``echo(text)`` answers the text;
- ``slow(seconds, tag)`` sleeps, then answers the tag; a call cancelled by the client
  (``notifications/cancelled``) is recorded;
- ``stats()`` answers ``{"calls": n, "cancelled": [tags], "max_active": m}`` (m: the most
  ``slow`` calls running at once);
- ``picture()`` answers a text block and a PNG image block;
- ``fail()`` answers an ``is_error`` result;
- ``header(name)`` answers the value of one HTTP request header;
- ``grow(name)`` adds a tool ``name`` and announces that the tool list changed (a
  ``subscriptions/listen`` event to a modern client, ``notifications/tools/list_changed``
  to a legacy one);
- ``job(seconds, tag)`` sleeps, then answers the tag — as a task of the tasks extension
  (``io.modelcontextprotocol/tasks``) for a 2026-07-28 client that declares it; its
  starts, ends and cancellations, and every ``tasks/cancel`` the server received, are
  in ``stats()`` (``jobs``, ``task_cancels``).
"""

from __future__ import annotations

import base64
import sys
from pathlib import Path

# The checkout beside this file, whatever environment the client starts us in (the SDK's
# stdio client passes only a few variables, not PYTHONPATH).
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

import anyio
import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, ImageContent, TextContent
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from amplifier_anyio.mcp.tasks import TaskRunner, TasksExtension

PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082"
)

state: dict[str, object] = {
    "calls": 0,
    "cancelled": [],
    "active": 0,
    "max_active": 0,
    "jobs": {},
    "task_cancels": [],
}
tasks = TaskRunner(poll_ms=50, on_cancel=state["task_cancels"].append)  # type: ignore[attr-defined]
server = MCPServer("test-server", log_level="WARNING", extensions=[TasksExtension(tasks, {"job"})])


@server.tool()
async def echo(text: str) -> str:
    """Answer the text."""
    state["calls"] = int(state["calls"]) + 1  # type: ignore[call-overload]
    return text


@server.tool()
async def slow(seconds: float, tag: str) -> str:
    """Sleep, then answer the tag."""
    state["calls"] = int(state["calls"]) + 1  # type: ignore[call-overload]
    state["active"] = int(state["active"]) + 1  # type: ignore[call-overload]
    state["max_active"] = max(int(state["max_active"]), int(state["active"]))  # type: ignore[call-overload]
    try:
        await anyio.sleep(seconds)
    except anyio.get_cancelled_exc_class():
        state["cancelled"].append(tag)  # type: ignore[attr-defined]
        raise
    finally:
        state["active"] = int(state["active"]) - 1  # type: ignore[call-overload]
    return tag


@server.tool()
async def job(seconds: float, tag: str) -> str:
    """Sleep, then answer the tag (a task for a client that takes tasks)."""
    jobs: dict[str, str] = state["jobs"]  # type: ignore[assignment]
    jobs[tag] = "running"
    try:
        await anyio.sleep(seconds)
    except anyio.get_cancelled_exc_class():
        jobs[tag] = "cancelled"
        raise
    jobs[tag] = "done"
    return tag


@server.tool()
async def stats() -> dict[str, object]:
    """How many calls ran, and which were cancelled."""
    return dict(state)


@server.tool()
async def picture() -> CallToolResult:
    """A caption and a one-pixel PNG."""
    image = ImageContent(type="image", data=base64.b64encode(PNG).decode(), mime_type="image/png")
    return CallToolResult(content=[TextContent(type="text", text="a pixel"), image])


@server.tool()
async def fail() -> str:
    """Always an error."""
    msg = "this tool always fails"
    raise ToolError(msg)


@server.tool()
async def header(name: str, ctx: Context) -> str:
    """The value of one HTTP request header ('' when absent)."""
    return (ctx.headers or {}).get(name.lower(), "")


@server.tool()
async def grow(name: str, ctx: Context) -> str:
    """Add a tool ``name`` and announce the change."""

    def extra() -> str:
        """A tool added at run time."""
        return f"{name}!"

    server.add_tool(extra, name=name)
    if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
        await ctx.notify_tools_changed()  # to subscriptions/listen
    else:
        await ctx.session.send_tool_list_changed()  # notifications/tools/list_changed
    return "grown"


async def serve(where: str) -> None:
    async with tasks.running():
        if where == "stdio":
            await server.run_stdio_async()
            return
        app = server.streamable_http_app()
        config = uvicorn.Config(app, host="127.0.0.1", port=int(where), log_level="warning")
        await uvicorn.Server(config).serve()


def main() -> None:
    anyio.run(serve, sys.argv[1])


if __name__ == "__main__":
    main()
