"""tool-mcp: mount the tools of MCP servers (stdio or streamable HTTP) as session tools.

Each configured server is one **module service**
([`ModuleCoordinator.start_service`][amplifier_anyio.ModuleCoordinator.start_service]): one task
opens the SDK's `mcp.Client` (the transport, the server process, the protocol session), lists the
tools, reports them through ``task_status.started(...)`` and keeps the connection until the session
closes. The task that enters the client is the task that exits it, so no cancel scope is ever
entered in one task and left in another, whoever calls a tool first. A tool call, from a tool-batch
task, only sends a request on the connection and waits for its answer (the SDK routes requests
through memory streams owned by the service task), so a call can be cancelled without touching the
connection.

- The servers start at once. A server that fails to start (a command that does not
  exist, a URL that does not answer, a handshake past ``startup_timeout``) fails the
  session start with one line naming the server and the cause, unless the server entry
  says ``optional: true``.
- Each MCP tool becomes one of our tools, named by ``prefix`` (default ``{server}__``)
  plus the MCP name, with the server's description and input schema. ``include`` /
  ``exclude`` (globs on the MCP names) choose which tools mount.
- The client speaks protocol ``2026-07-28`` (no initialize handshake: ``server/discover``)
  where the server does, an older revision otherwise (``mode: legacy`` forces the
  handshake).
- A call runs under the tool batch's limiter and ``tool_timeout``; ``timeout`` (per server)
  bounds one request and fails that call alone. A cancelled call is abandoned: the SDK
  tells the server (``notifications/cancelled``) and the connection stays usable.
- The tasks extension (`amplifier_anyio.mcp.tasks`): a server may answer a long call with
  a task; the call then polls ``tasks/get`` until the task ends, ``timeout`` bounds the
  whole wait, and a cancelled or timed-out call sends ``tasks/cancel``.
- ``is_error`` results become error results; text, image, audio and resource blocks and
  ``structured_content`` are kept (see `result_of`).
- An MCP tool claims nothing (its calls run in parallel with any other), unless the
  server's ``claims`` maps its name (a glob) to the resources it reads or writes
  (``{reads: [...], writes: [...]}``); calls that conflict then run in call order
  (``docs/concurrency.md``).
- A server that dies mid-session makes its tools answer an error naming it; with
  ``reconnect`` the service reconnects (that many times, with doubling backoff). A stdio
  server's death is seen through its process exit as well as the end of its stdout, and
  every call pending on a lost connection is answered at once; a reply that cannot be
  read fails its own call (``amplifier_anyio.mcp._stdio``).
- ``notifications/tools/list_changed`` (or a modern server's ``subscriptions/listen``
  event) makes the service list the tools again; the mounted set is updated at the start
  of the next turn (``prompt:submit``), never in the middle of one.
- When the session closes, each service's scope is cancelled and the transport is closed
  under a shield: a stdio server gets its stdin closed, then SIGTERM and SIGKILL to its
  process group (even once the server itself exited), so no server process outlives the
  session.

See ``docs/mcp.md``.
"""

from __future__ import annotations

import contextlib
import enum
import fnmatch
import json
import logging
import math
import re
from collections.abc import Mapping
from types import TracebackType
from typing import Any

import anyio
import anyio.abc
import attrs
import mcp
import mcp_types
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from amplifier_anyio.config_schema import ConfigSchema, Setting
from amplifier_anyio.errors import ConfigError, MCPServerError, describe
from amplifier_anyio.events import PROMPT_SUBMIT
from amplifier_anyio.interfaces import Claims
from amplifier_anyio.mcp._stdio import stdio_transport
from amplifier_anyio.mcp.tasks import TasksClient
from amplifier_anyio.models import ToolResult

__all__ = (
    "MCPServerConfig",
    "MCPConfig",
    "MCPConnection",
    "MCPConnectionState",
    "MCPTool",
    "ClaimingMCPTool",
    "result_of",
    "mount",
    "CONFIG_SCHEMA",
)

logger = logging.getLogger(__name__)

_NAME = re.compile(r"^[A-Za-z0-9_-]+$")
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
_MAX_PAGES = 100  # a tools/list cursor that never ends cannot hang a start


# -- configuration ---------------------------------------------------------------------------


def _number(where: str, value: Any, *, optional: bool = False, zero: bool = False) -> Any:
    if value is None and optional:
        return None
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value < 0 or (value == 0 and not zero):
        msg = f"{where}: expected a finite number {'>=' if zero else '>'} 0, got {value!r}"
        raise ConfigError(msg)
    return float(value)


def _strings(where: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, list | tuple):
        msg = f"{where}: expected a list of strings, got {value!r}"
        raise ConfigError(msg)
    for index, item in enumerate(value):
        if not isinstance(item, str):
            msg = f"{where}[{index}]: expected a string, got {item!r}"
            raise ConfigError(msg)
    return tuple(value)


def _string_map(where: str, value: Any) -> dict[str, str]:
    if not isinstance(value, Mapping):
        msg = f"{where}: expected a mapping of strings, got {value!r}"
        raise ConfigError(msg)
    out: dict[str, str] = {}
    for key, item in value.items():
        if not isinstance(key, str) or not isinstance(item, str | int | float):
            msg = f"{where}.{key}: expected a string, got {item!r}"
            raise ConfigError(msg)
        out[key] = str(item)
    return out


_SERVER_KEYS = frozenset(
    {
        "name",
        "command",
        "args",
        "env",
        "cwd",
        "url",
        "headers",
        "timeout",
        "startup_timeout",
        "include",
        "exclude",
        "optional",
        "reconnect",
        "reconnect_delay",
        "mode",
        "claims",
    }
)
_MODES = ("auto", "legacy")


def _check_keys(where: str, entry: Any) -> None:
    """A ``servers`` entry is a mapping of known keys."""
    if not isinstance(entry, Mapping):
        msg = f"{where}: expected a mapping, got {entry!r}"
        raise ConfigError(msg)
    for key in entry:
        if key not in _SERVER_KEYS:
            known = ", ".join(sorted(_SERVER_KEYS))
            msg = f"{where}.{key}: unknown key (known: {known})"
            raise ConfigError(msg)


def _transport(where: str, entry: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """An entry's ``command`` (stdio) or ``url`` (streamable HTTP): exactly one, non-empty,
    the URL http(s), and no key of the other transport."""
    command, url = entry.get("command"), entry.get("url")
    if (command is None) == (url is None):
        msg = f"{where}: give exactly one of command (stdio) or url (streamable HTTP)"
        raise ConfigError(msg)
    for key, value in (("command", command), ("url", url), ("cwd", entry.get("cwd"))):
        if value is not None and (not isinstance(value, str) or not value):
            msg = f"{where}.{key}: expected a non-empty string, got {value!r}"
            raise ConfigError(msg)
    if url is not None and not str(url).startswith(("http://", "https://")):
        msg = f"{where}.url: expected an http:// or https:// URL, got {url!r}"
        raise ConfigError(msg)
    stdio_only = ("args", "env", "cwd") if url is not None else ()
    http_only = ("headers",) if command is not None else ()
    for key in (*stdio_only, *http_only):
        if entry.get(key) is not None:
            kind = "a url" if url is not None else "a command"
            msg = f"{where}.{key}: does not apply to a server given by {kind}"
            raise ConfigError(msg)
    return command, url


def _reconnect(where: str, value: Any) -> int:
    """``reconnect``: reconnections allowed, an integer >= 0 (a boolean counts 0 or 1)."""
    if isinstance(value, bool):
        value = int(value)
    if not isinstance(value, int) or value < 0:
        msg = f"{where}.reconnect: expected an integer >= 0 (or a boolean), got {value!r}"
        raise ConfigError(msg)
    return value


def _claims_map(where: str, value: Any) -> tuple[tuple[str, Claims], ...]:
    """``claims``: MCP tool name (a glob) -> ``{reads: [...], writes: [...]}``."""
    if not isinstance(value, Mapping):
        msg = f"{where}: expected a mapping of tool names to {{reads, writes}}, got {value!r}"
        raise ConfigError(msg)
    parsed: list[tuple[str, Claims]] = []
    for pattern, entry in value.items():
        here = f"{where}.{pattern}"
        if not isinstance(entry, Mapping):
            msg = f"{here}: expected a mapping with reads and/or writes, got {entry!r}"
            raise ConfigError(msg)
        for key in entry:
            if key not in ("reads", "writes"):
                msg = f"{here}.{key}: unknown key (known: reads, writes)"
                raise ConfigError(msg)
        keys = {k: _strings(f"{here}.{k}", entry.get(k) or []) for k in ("reads", "writes")}
        for kind, items in keys.items():
            if any(not item for item in items):
                msg = f"{here}.{kind}: a resource must be a non-empty string"
                raise ConfigError(msg)
        parsed.append((str(pattern), Claims(reads=keys["reads"], writes=keys["writes"])))
    return tuple(parsed)


@attrs.frozen(kw_only=True)
class MCPServerConfig:
    """One MCP server: a stdio ``command`` (with ``args``, ``env``, ``cwd``) or a
    streamable-HTTP ``url`` (with ``headers``).

    ``timeout`` bounds one request (seconds; None: only the batch's ``tool_timeout``);
    ``startup_timeout`` bounds connecting and listing the tools; ``include`` / ``exclude``
    are globs on the server's tool names; ``optional`` lets the session start without it;
    ``reconnect`` is how many times the connection is re-opened after it is lost, the
    first after ``reconnect_delay`` seconds, each next one after twice the previous wait;
    ``mode`` is the SDK's protocol negotiation (``auto`` or ``legacy``); ``claims`` maps
    tool names (globs on the server's names) to the resources their calls claim.
    """

    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: dict[str, str] | None = None
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] | None = None
    timeout: float | None = None
    startup_timeout: float = 30.0
    include: tuple[str, ...] | None = None
    exclude: tuple[str, ...] = ()
    optional: bool = False
    reconnect: int = 0
    reconnect_delay: float = 1.0
    mode: str = "auto"
    claims: tuple[tuple[str, Claims], ...] = ()

    @classmethod
    def from_dict(cls, where: str, entry: Any) -> MCPServerConfig:
        """Parse one ``servers`` entry; errors name the key (``servers[1].url: ...``)."""
        _check_keys(where, entry)
        name = entry.get("name")
        if not isinstance(name, str) or not _NAME.match(name):
            msg = f"{where}.name: expected a name of letters, digits, '_' and '-', got {name!r}"
            raise ConfigError(msg)
        command, url = _transport(where, entry)
        reconnect = _reconnect(where, entry.get("reconnect", 0))
        optional = entry.get("optional", False)
        if not isinstance(optional, bool):
            msg = f"{where}.optional: expected a boolean, got {optional!r}"
            raise ConfigError(msg)
        mode = entry.get("mode", "auto")
        if mode not in _MODES:
            msg = f"{where}.mode: expected one of {', '.join(_MODES)}, got {mode!r}"
            raise ConfigError(msg)
        include = entry.get("include")
        return cls(
            name=name,
            command=command,
            args=_strings(f"{where}.args", entry.get("args") or []),
            env=None if entry.get("env") is None else _string_map(f"{where}.env", entry["env"]),
            cwd=entry.get("cwd"),
            url=url,
            headers=None
            if entry.get("headers") is None
            else _string_map(f"{where}.headers", entry["headers"]),
            timeout=_number(f"{where}.timeout", entry.get("timeout"), optional=True),
            startup_timeout=_number(f"{where}.startup_timeout", entry.get("startup_timeout", 30.0)),
            include=None if include is None else _strings(f"{where}.include", include),
            exclude=_strings(f"{where}.exclude", entry.get("exclude") or []),
            optional=optional,
            reconnect=reconnect,
            reconnect_delay=_number(
                f"{where}.reconnect_delay", entry.get("reconnect_delay", 1.0), zero=True
            ),
            mode=mode,
            claims=_claims_map(f"{where}.claims", entry.get("claims") or {}),
        )

    def claims_of(self, tool_name: str) -> Claims | None:
        """What calls of the server's tool ``tool_name`` claim: the union of every
        ``claims`` entry whose glob matches it, or None when none does."""
        matched = [c for p, c in self.claims if fnmatch.fnmatchcase(tool_name, p)]
        if not matched:
            return None
        reads = frozenset().union(*(c.reads for c in matched))
        writes = frozenset().union(*(c.writes for c in matched))
        return Claims(reads=reads, writes=writes)

    def wants(self, tool_name: str) -> bool:
        """Whether the server's tool ``tool_name`` passes ``include`` and ``exclude``."""
        if self.include is not None and not any(
            fnmatch.fnmatchcase(tool_name, p) for p in self.include
        ):
            return False
        return not any(fnmatch.fnmatchcase(tool_name, p) for p in self.exclude)


@attrs.frozen(kw_only=True)
class MCPConfig:
    """tool-mcp's settings: the ``servers`` and the tool name ``prefix`` (``{server}``
    is replaced by the server's name)."""

    servers: tuple[MCPServerConfig, ...]
    prefix: str = "{server}__"

    @classmethod
    def from_dict(cls, config: Mapping[str, Any] | None) -> MCPConfig:
        """Parse a plan's tool-mcp config; a bad value is a one-line ConfigError naming it."""
        config = dict(config or {})
        for key in config:
            if key not in ("servers", "prefix"):
                msg = f"{key}: unknown tool-mcp key (known: prefix, servers)"
                raise ConfigError(msg)
        servers = config.get("servers")
        if not isinstance(servers, list) or not servers:
            msg = f"servers: expected a non-empty list of servers, got {servers!r}"
            raise ConfigError(msg)
        parsed = tuple(
            MCPServerConfig.from_dict(f"servers[{i}]", entry) for i, entry in enumerate(servers)
        )
        seen: set[str] = set()
        for index, server in enumerate(parsed):
            if server.name in seen:
                msg = f"servers[{index}].name: {server.name!r} is used by another server"
                raise ConfigError(msg)
            seen.add(server.name)
        prefix = config.get("prefix", "{server}__")
        if not isinstance(prefix, str):
            msg = f"prefix: expected a string, got {prefix!r}"
            raise ConfigError(msg)
        try:
            prefix.format(server="x")
        except (KeyError, IndexError, ValueError) as exc:
            msg = f"prefix: only {{server}} may be substituted, got {prefix!r} ({exc})"
            raise ConfigError(msg) from None
        return cls(servers=parsed, prefix=prefix)


CONFIG_SCHEMA = ConfigSchema(
    "tool-mcp",
    {
        "servers": Setting(
            (list,),
            "MCP servers: {name, command, args, env, cwd} or {name, url, headers}, each with "
            "optional timeout, startup_timeout, include, exclude, optional, reconnect, "
            "reconnect_delay, mode, claims",
            nullable=False,
        ),
        "prefix": Setting((str,), "tool name prefix; {server} is the server's name"),
    },
)
"""The keys tool-mcp accepts (checked by ``validate --strict``)."""


# -- results ---------------------------------------------------------------------------------


def _block(block: Any) -> dict[str, Any]:
    """One MCP content block as a plain dict (our ImageBlock shape for images)."""
    kind = getattr(block, "type", None)
    if kind == "text":
        return {"type": "text", "text": block.text}
    if kind == "image":
        source = {"type": "base64", "media_type": block.mime_type, "data": block.data}
        return {"type": "image", "source": source}
    if kind == "audio":
        return {"type": "audio", "mime_type": block.mime_type, "data": block.data}
    if kind == "resource":
        resource = block.resource
        out: dict[str, Any] = {"type": "resource", "uri": str(resource.uri)}
        if getattr(resource, "mime_type", None):
            out["mime_type"] = resource.mime_type
        if hasattr(resource, "text"):
            out["text"] = resource.text
        else:
            out["blob"] = resource.blob
        return out
    if kind == "resource_link":
        link = {"type": "resource_link", "uri": str(block.uri), "name": block.name}
        if getattr(block, "mime_type", None):
            link["mime_type"] = block.mime_type
        return link
    dump = getattr(block, "model_dump", None)
    if callable(dump):
        dumped: dict[str, Any] = dump(mode="json", by_alias=True, exclude_none=True)
        return dumped
    return {"type": str(kind), "value": repr(block)}


def result_of(result: Any, server: str) -> ToolResult:
    """An MCP ``CallToolResult`` as a [`ToolResult`][amplifier_anyio.ToolResult].

    - Only text blocks and no structured content: the text (blocks joined by newlines).
    - Structured content whose text blocks only repeat it (the spec's compatibility text,
      or an SDK's ``{"result": text}`` wrapping of a plain answer): the structured
      content (respectively the text) alone.
    - Otherwise a dict with ``content`` (every block: ``text``, ``image`` with a base64
      ``source``, ``audio``, ``resource``, ``resource_link``) and, when the server gave
      it, ``structured_content``.

    ``is_error`` makes it an error result whose message is the text the server gave.
    """
    blocks = [_block(b) for b in result.content]
    structured = result.structured_content
    texts = [b["text"] for b in blocks if b["type"] == "text"]
    joined = "\n".join(texts)
    only_text = len(texts) == len(blocks)
    output: Any
    if only_text and (structured is None or (texts and structured == {"result": joined})):
        output = joined
    elif only_text and texts and _json_equal(joined, structured):
        output = structured
    else:
        output = {"content": blocks}
        if structured is not None:
            output["structured_content"] = structured
    if result.is_error:
        message = joined or f"the MCP server {server!r} reported an error"
        return ToolResult(
            success=False, output=output, error={"message": message, "type": "MCPToolError"}
        )
    return ToolResult(output=output)


def _json_equal(text: str, value: Any) -> bool:
    try:
        return bool(json.loads(text) == value)
    except ValueError:
        return False


def _error(message: str, kind: str) -> ToolResult:
    return ToolResult(success=False, error={"message": message, "type": kind})


# -- the connection --------------------------------------------------------------------------


class MCPConnectionState(enum.Enum):
    """Where one server's connection is."""

    CONNECTING = "connecting"
    READY = "ready"
    LOST = "lost"
    """The connection ended (the server exited or the stream broke); maybe reconnecting."""
    CLOSED = "closed"
    """The session closed it."""


class _WatchedStream:
    """The transport's read stream; its end (EOF, closed) sets ``lost``."""

    def __init__(self, stream: Any, lost: anyio.Event) -> None:
        self._stream = stream
        self._lost = lost

    @property
    def last_context(self) -> Any:
        return getattr(self._stream, "last_context", None)

    async def receive(self) -> Any:
        try:
            return await self._stream.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._lost.set()
            raise

    async def aclose(self) -> None:
        await self._stream.aclose()

    def __aiter__(self) -> _WatchedStream:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> _WatchedStream:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


class _WatchedTransport:
    """A transport whose read stream tells the connection when the server is gone."""

    def __init__(self, transport: Any, lost: anyio.Event) -> None:
        self._transport = transport
        self._lost = lost

    async def __aenter__(self) -> tuple[Any, Any]:
        read, write = await self._transport.__aenter__()
        return _WatchedStream(read, self._lost), write

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        result: bool | None = await self._transport.__aexit__(exc_type, exc, tb)
        return result


@attrs.define(eq=False)
class MCPConnection:
    """One MCP server's connection, owned by its service task (see the module docstring).

    ``tools`` are the mounted tools by our name; ``pending`` is a new listing waiting for
    the next turn; ``connects`` counts successful connections (1 + reconnections).
    """

    config: MCPServerConfig
    prefix: str = "{server}__"
    state: MCPConnectionState = MCPConnectionState.CONNECTING
    error: str | None = None
    connects: int = 0
    tools: dict[str, MCPTool] = attrs.field(factory=dict)
    pending: dict[str, MCPTool] | None = None
    _client: Any = None
    _relist: anyio.Event = attrs.field(factory=anyio.Event)

    @property
    def name(self) -> str:
        """The server's configured name."""
        return self.config.name

    def tool_name(self, mcp_name: str) -> str:
        """Our name for the server's tool ``mcp_name``: the prefix and the MCP name, with
        any character a provider refuses in a function name (outside ``A-Za-z0-9_-``,
        such as ``.`` or ``/``) replaced by ``_``."""
        return _UNSAFE.sub("_", self.prefix.format(server=self.name) + mcp_name)

    # The service task ---------------------------------------------------------------------

    async def serve(self, *, task_status: anyio.abc.TaskStatus[dict[str, MCPTool]]) -> None:
        """Connect, report the tools, keep the connection; reconnect if configured.

        Raises [`MCPServerError`][amplifier_anyio.errors.MCPServerError] when the first connection
        fails.
        """
        attempts = 0
        delay = self.config.reconnect_delay
        while True:
            try:
                await self._connect_once(task_status)
            except Exception as exc:
                self.error = describe(exc)
                if self.connects == 0:
                    self.state = MCPConnectionState.LOST
                    msg = f"MCP server {self.name!r} failed to start: {self.error}"
                    raise MCPServerError(msg) from exc
            self.state = MCPConnectionState.LOST
            if attempts >= self.config.reconnect:
                logger.error("MCP server %r: connection lost (%s)", self.name, self.error)
                return
            attempts += 1
            logger.warning(
                "MCP server %r: connection lost (%s); reconnecting in %gs (%d/%d)",
                self.name,
                self.error,
                delay,
                attempts,
                self.config.reconnect,
            )
            await anyio.sleep(delay)
            delay *= 2
            self.state = MCPConnectionState.CONNECTING

    async def _connect_once(self, task_status: anyio.abc.TaskStatus[dict[str, MCPTool]]) -> None:
        lost = anyio.Event()
        self.error = "the connection ended"
        # One scope around the whole client, so the deadline bounds only the start and
        # every scope the client enters is left by this task, in order.
        with anyio.CancelScope() as startup:
            startup.deadline = anyio.current_time() + self.config.startup_timeout
            async with self._open(lost) as client:
                tools = await self._list(client)
                startup.deadline = math.inf
                self._client = client
                self.state = MCPConnectionState.READY
                self.connects += 1
                if self.connects == 1:
                    self.tools = tools
                    task_status.started(tools)
                else:
                    self.pending = tools
                    logger.info("MCP server %r: reconnected", self.name)
                try:
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(self._watch_list, client)
                        await lost.wait()
                        tg.cancel_scope.cancel(f"MCP server {self.name!r}: connection lost")
                finally:
                    self._client = None
        if startup.cancelled_caught:
            msg = f"no answer within startup_timeout ({self.config.startup_timeout:g} s)"
            raise TimeoutError(msg)

    def _open(self, lost: anyio.Event) -> Any:
        if self.config.command is not None:
            transport: Any = stdio_transport(
                self.name,
                self.config.command,
                self.config.args,
                env=self.config.env,
                cwd=self.config.cwd,
            )
        else:
            assert self.config.url is not None
            transport = _HTTPTransport(self.config.url, self.config.headers)
        return mcp.Client(
            _WatchedTransport(transport, lost),
            mode=self.config.mode,
            message_handler=self._on_message,
            cache=None,
            extensions=[TasksClient()],  # a 2026-07-28 server may answer a call with a task
        )

    async def _on_message(self, message: Any) -> None:
        """A legacy server's ``notifications/tools/list_changed``: list again."""
        if getattr(message, "method", None) == "notifications/tools/list_changed":
            self._relist.set()
        await anyio.lowlevel.checkpoint()

    async def _watch_list(self, client: Any) -> None:
        """Re-list the tools whenever the server says they changed."""
        async with anyio.create_task_group() as tg:
            if self._modern_list_changed(client):
                tg.start_soon(self._listen, client)
            while True:
                await self._relist.wait()
                self._relist = anyio.Event()
                try:
                    self.pending = await self._list(client)
                except Exception as exc:  # noqa: BLE001 - the old tools stay mounted
                    logger.warning("MCP server %r: listing tools failed: %s", self.name, exc)
                    continue
                logger.info("MCP server %r: tool list changed", self.name)

    @staticmethod
    def _modern_list_changed(client: Any) -> bool:
        tools = getattr(client.server_capabilities, "tools", None)
        return bool(
            client.protocol_version in MODERN_PROTOCOL_VERSIONS
            and tools is not None
            and getattr(tools, "list_changed", False)
        )

    async def _listen(self, client: Any) -> None:
        """A modern server's tool-change events (``subscriptions/listen``)."""
        try:
            async with client.listen(tools_list_changed=True) as subscription:
                async for _event in subscription:
                    self._relist.set()
        except Exception as exc:  # noqa: BLE001 - without it the listing just stays as it is
            logger.warning("MCP server %r: listening for tool changes failed: %s", self.name, exc)

    async def _list(self, client: Any) -> dict[str, MCPTool]:
        listed: list[Any] = []
        cursor: str | None = None
        for _ in range(_MAX_PAGES):
            page = await client.list_tools(cursor=cursor)
            listed.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        else:
            logger.warning("MCP server %r: tools/list gave over %d pages", self.name, _MAX_PAGES)
        tools: dict[str, MCPTool] = {}
        for tool in listed:
            if not self.config.wants(tool.name):
                continue
            claims = self.config.claims_of(tool.name)
            ours = (
                MCPTool(self, tool.name, tool.description or "", dict(tool.input_schema))
                if claims is None
                else ClaimingMCPTool(
                    self, tool.name, tool.description or "", dict(tool.input_schema), claims
                )
            )
            if ours.name in tools:
                logger.warning(
                    "MCP server %r: tools %r and %r are both named %r; the first is kept",
                    self.name,
                    tools[ours.name].mcp_name,
                    tool.name,
                    ours.name,
                )
                continue
            tools[ours.name] = ours
        return tools

    def take_pending(self) -> dict[str, MCPTool] | None:
        """The listing that changed since the last turn, if any (and forget it)."""
        pending, self.pending = self.pending, None
        if pending is not None:
            self.tools = pending
        return pending

    # Calls, from any task ---------------------------------------------------------------

    async def call(self, mcp_name: str, arguments: dict[str, Any]) -> ToolResult:
        """Call the server's tool ``mcp_name``; every failure is an error result."""
        client = self._client
        if client is None or self.state is not MCPConnectionState.READY:
            await anyio.lowlevel.checkpoint()
            return _error(self._unavailable(), "MCPServerUnavailable")
        try:
            result = await client.call_tool(
                mcp_name, arguments, read_timeout_seconds=self.config.timeout
            )
        except mcp.MCPError as exc:
            if exc.code == mcp_types.REQUEST_TIMEOUT:
                message = (
                    f"MCP server {self.name!r}: {mcp_name} timed out after "
                    f"{self.config.timeout:g} s (the server was told to cancel it)"
                )
                return _error(message, "TimeoutError")
            if exc.code == mcp_types.CONNECTION_CLOSED:
                return _error(self._unavailable(), "MCPServerUnavailable")
            return _error(f"MCP server {self.name!r}: {exc.error.message}", "MCPError")
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            return _error(self._unavailable(), "MCPServerUnavailable")
        except RuntimeError as exc:  # the session is gone, or an output-schema mismatch
            if self._client is None:
                return _error(self._unavailable(), "MCPServerUnavailable")
            return _error(f"MCP server {self.name!r}: {exc}", "MCPError")
        return result_of(result, self.name)

    def _unavailable(self) -> str:
        if self.state is MCPConnectionState.CONNECTING:
            return f"MCP server {self.name!r} is reconnecting; try again shortly"
        if self.state is MCPConnectionState.CLOSED:
            return f"MCP server {self.name!r} is closed (the session ended)"
        return f"MCP server {self.name!r} is not available: {self.error or 'connection lost'}"


class _HTTPTransport:
    """The SDK's streamable-HTTP transport over an HTTP client carrying ``headers``."""

    def __init__(self, url: str, headers: dict[str, str] | None) -> None:
        self._url = url
        self._headers = headers
        self._stack = contextlib.AsyncExitStack()

    async def __aenter__(self) -> tuple[Any, Any]:
        stack = self._stack
        try:
            http = await stack.enter_async_context(create_mcp_http_client(headers=self._headers))
            streams: tuple[Any, Any] = await stack.enter_async_context(
                streamable_http_client(self._url, http_client=http)
            )
        except BaseException:
            await stack.aclose()
            raise
        return streams

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        return await self._stack.__aexit__(exc_type, exc, tb)


# -- our tools -------------------------------------------------------------------------------


class MCPTool:
    """One MCP tool as a session tool: the server's description and input schema."""

    def __init__(
        self,
        connection: MCPConnection,
        mcp_name: str,
        description: str,
        input_schema: dict[str, Any],
    ) -> None:
        self.connection = connection
        self.mcp_name = mcp_name
        self.name = connection.tool_name(mcp_name)
        self.description = description
        self.input_schema = input_schema

    async def execute(self, input: dict[str, Any]) -> ToolResult:
        """Call the tool on its server (see `MCPConnection.call`)."""
        return await self.connection.call(self.mcp_name, dict(input or {}))

    def __repr__(self) -> str:
        return f"<MCPTool {self.name} ({self.connection.name}:{self.mcp_name})>"


class ClaimingMCPTool(MCPTool):
    """An MCP tool whose calls claim the resources its server's ``claims`` gives it.

    Only tools the plan configures are of this class: the others have no ``claims`` at
    all, so the batch never orders them (nor waits for their hooks)."""

    def __init__(
        self,
        connection: MCPConnection,
        mcp_name: str,
        description: str,
        input_schema: dict[str, Any],
        claimed: Claims,
    ) -> None:
        super().__init__(connection, mcp_name, description, input_schema)
        self.claimed = claimed

    def claims(self, input: dict[str, Any]) -> Claims:
        """The configured claims, whatever the input."""
        return self.claimed


# -- mount -----------------------------------------------------------------------------------


async def mount(coordinator: Any, config: dict[str, Any] | None = None) -> Any:
    """Start one service per server and mount its tools; returns the cleanup."""
    parsed = MCPConfig.from_dict(config)
    candidates = [MCPConnection(server, prefix=parsed.prefix) for server in parsed.servers]
    listings: dict[int, dict[str, MCPTool] | None] = {}
    failures: list[Exception] = []

    async def start(index: int, connection: MCPConnection) -> None:
        name = f"mcp:{connection.name}"
        try:
            listings[index] = await coordinator.start_service(connection.serve, name=name)
        except MCPServerError as exc:
            if not connection.config.optional:
                failures.append(exc)
                return
            logger.warning("optional %s; going on without it", exc)
        except Exception as exc:  # noqa: BLE001 - raised below, outside the task group
            failures.append(exc)

    # The servers start at once: a slow one does not delay the others.
    async with anyio.create_task_group() as tg:
        for index, connection in enumerate(candidates):
            tg.start_soon(start, index, connection)
    if failures:
        raise failures[0]  # the services that did start are stopped by the session
    connections: list[MCPConnection] = []
    for index, connection in enumerate(candidates):
        tools = listings.get(index)
        if tools is None:  # left out (optional), or validate_plan: no service starts
            continue
        connections.append(connection)
        for name, tool in tools.items():
            await coordinator.mount("tools", tool, name=name)

    async def refresh(_event: str, _data: dict[str, Any]) -> None:
        """At a turn's start: mount what changed since the last turn."""
        for connection in connections:
            previous = dict(connection.tools)
            fresh = connection.take_pending()
            if fresh is None:
                continue
            for name in previous:
                if name not in fresh:
                    await coordinator.unmount("tools", name)
            for name, tool in fresh.items():
                await coordinator.mount("tools", tool, name=name)

    unregister = coordinator.hooks.register(
        PROMPT_SUBMIT, refresh, priority=-1000, name="tool-mcp:refresh"
    )

    async def cleanup() -> None:
        unregister()
        for connection in connections:
            connection.state = MCPConnectionState.CLOSED
            connection._client = None
        await anyio.lowlevel.checkpoint()

    return cleanup
