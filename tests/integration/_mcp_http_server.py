"""A streamable-HTTP MCP server (the SDK's MCPServer under uvicorn) for tool-mcp's tests.

Run as ``python _mcp_http_server.py PORT``; it serves ``/mcp`` on 127.0.0.1:PORT until
killed. Tools:

- ``echo(text)`` answers the text;
- ``slow(seconds, tag)`` sleeps, then answers the tag; a call cancelled by the client
  (``notifications/cancelled``) is recorded;
- ``stats()`` answers ``{"calls": n, "cancelled": [tags]}``;
- ``picture()`` answers a text block and a PNG image block;
- ``fail()`` answers an ``is_error`` result;
- ``grow()`` adds the tool ``extra`` and announces that the tool list changed.
"""

from __future__ import annotations

import sys

import anyio
import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.utilities.types import Image

PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082"
)

server = MCPServer("test-http")
state: dict[str, object] = {"calls": 0, "cancelled": []}


@server.tool()
async def echo(text: str) -> str:
    """Answer the text."""
    state["calls"] = int(state["calls"]) + 1  # type: ignore[call-overload]
    return text


@server.tool()
async def slow(seconds: float, tag: str) -> str:
    """Sleep, then answer the tag."""
    state["calls"] = int(state["calls"]) + 1  # type: ignore[call-overload]
    try:
        await anyio.sleep(seconds)
    except anyio.get_cancelled_exc_class():
        state["cancelled"].append(tag)  # type: ignore[attr-defined]
        raise
    return tag


@server.tool()
async def stats() -> dict[str, object]:
    """How many calls ran, and which were cancelled."""
    return dict(state)


@server.tool()
async def picture() -> list[object]:
    """A caption and a one-pixel PNG."""
    return ["a pixel", Image(data=PNG, format="png")]


@server.tool()
async def fail() -> str:
    """Always an error."""
    msg = "this tool always fails"
    raise ValueError(msg)


@server.tool()
async def grow(ctx: Context) -> str:
    """Add the tool ``extra`` and announce the change."""

    def extra() -> str:
        """A tool added at run time."""
        return "extra!"

    server.add_tool(extra)
    await ctx.notify_tools_changed()
    return "grown"


def main() -> None:
    port = int(sys.argv[1])
    app = server.streamable_http_app()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
    anyio.run(uvicorn.Server(config).serve)


if __name__ == "__main__":
    main()
