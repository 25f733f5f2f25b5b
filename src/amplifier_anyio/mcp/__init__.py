"""MCP: the client (tool-mcp), ``amplifier-anyio mcp serve``, the tasks extension.

- `amplifier_anyio.mcp.client`: tool-mcp, the tools of MCP servers (stdio or streamable
  HTTP) mounted as session tools (the module ``tool-mcp``; ``docs/mcp.md``);
- `amplifier_anyio.mcp.serve`: a session served as an MCP server;
- `amplifier_anyio.mcp.tasks`: the tasks extension (``io.modelcontextprotocol/tasks``),
  client and server sides.

The names below are imported on first use, so importing this package needs nothing; using
them needs the ``[mcp]`` extra (the MCP SDK, the top-level package ``mcp``, which this
package never shadows: every import here is absolute).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from amplifier_anyio._lazy import lazy_names

if TYPE_CHECKING:
    from amplifier_anyio.mcp.client import (
        ClaimingMCPTool,
        MCPConfig,
        MCPConnection,
        MCPConnectionState,
        MCPServerConfig,
        MCPTool,
        result_of,
    )
    from amplifier_anyio.mcp.serve import build_server, serve_http, serve_stdio
    from amplifier_anyio.mcp.tasks import TaskRunner, TasksClient, TasksExtension

__all__ = (
    "MCPConfig",
    "MCPServerConfig",
    "MCPConnection",
    "MCPConnectionState",
    "MCPTool",
    "ClaimingMCPTool",
    "result_of",
    "build_server",
    "serve_stdio",
    "serve_http",
    "TaskRunner",
    "TasksClient",
    "TasksExtension",
)

_LAZY: dict[str, str] = {
    "MCPConfig": "client",
    "MCPServerConfig": "client",
    "MCPConnection": "client",
    "MCPConnectionState": "client",
    "MCPTool": "client",
    "ClaimingMCPTool": "client",
    "result_of": "client",
    "build_server": "serve",
    "serve_stdio": "serve",
    "serve_http": "serve",
    "TaskRunner": "tasks",
    "TasksClient": "tasks",
    "TasksExtension": "tasks",
}

__getattr__, __dir__ = lazy_names(__name__, globals(), _LAZY)
