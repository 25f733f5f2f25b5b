"""The MCP tasks extension (``io.modelcontextprotocol/tasks``, protocol ``2026-07-28``).

A server that has the extension may answer a ``tools/call`` with a *task handle*
(``resultType: "task"``) instead of the result; the client then polls ``tasks/get`` until
the task is ``completed`` (the ``CallToolResult`` inlined), ``failed`` (a JSON-RPC error)
or ``cancelled``, and may ask ``tasks/cancel`` (cooperative: the server decides). The
client declares the extension in each request's capabilities; a server never answers a
task to a client that did not. Needs the ``[mcp]`` extra (the SDK's extension API).

Both sides are here:

- `TasksClient`, given to ``mcp.Client(extensions=[...])`` (tool-mcp does): a task answer
  is polled to its end at the interval the server asks (within bounds); the call's
  ``read_timeout_seconds`` bounds the whole wait; a local cancel — the tool call
  cancelled, or that timeout — sends ``tasks/cancel`` (shielded, bounded) before the
  cancel goes on. A task that asks for input (``input_required``) is cancelled: tool-mcp
  answers no elicitation;
- `TaskRunner` (running while ``async with runner.running():`` lasts) and
  `TasksExtension`, given to an ``MCPServer(extensions=[...])``
  (``mcp serve`` does): the calls of the named tools become tasks, each run in the
  runner's task group in its own cancel scope, so ``tasks/cancel`` cancels exactly that
  work; ``tasks/get`` answers the task's state; ``tasks/update`` is acknowledged (these
  tasks never ask for input).

Only ``2026-07-28`` connections carry it; a client of an older revision gets plain
results.
"""

from __future__ import annotations

import logging
import math
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Mapping
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any, Final, Literal

import anyio
import anyio.abc
import attrs
import mcp_types
from mcp import MCPError
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.server.extension import Extension, MethodBinding
from mcp_types import CallToolResult, Request, RequestParams, Result
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import Field

__all__ = (
    "TASKS_EXTENSION",
    "TERMINAL_STATUSES",
    "TasksClient",
    "TaskRunner",
    "TaskState",
    "TasksExtension",
    "declares_tasks",
    "TaskIdParams",
    "UpdateTaskParams",
    "GetTaskRequest",
    "CancelTaskRequest",
    "CreateTaskResult",
    "DetailedTask",
)

logger = logging.getLogger(__name__)

TASKS_EXTENSION: Final = "io.modelcontextprotocol/tasks"
"""The extension's identifier."""
TERMINAL_STATUSES: Final = frozenset({"completed", "failed", "cancelled"})
"""The statuses a task never leaves."""

_CANCEL_TIMEOUT: Final = 5.0  # seconds a shielded tasks/cancel may take
_MIN_POLL: Final = 0.05  # seconds: a server asking for less is not obeyed
_MAX_POLL: Final = 5.0
_DEFAULT_POLL: Final = 0.5
_STATUSES = Literal["working", "input_required", "completed", "cancelled", "failed"]


# -- wire shapes -----------------------------------------------------------------------------


class TaskIdParams(RequestParams):
    """``{taskId}``: the params of ``tasks/get`` and ``tasks/cancel``."""

    task_id: str


class UpdateTaskParams(TaskIdParams):
    """``{taskId, inputResponses}``: the params of ``tasks/update``."""

    input_responses: dict[str, Any] = Field(default_factory=dict)


class GetTaskRequest(Request):  # type: ignore[type-arg] # fields typed below
    """Poll a task."""

    method: Literal["tasks/get"] = "tasks/get"
    params: TaskIdParams
    name_param = "taskId"  # routed by task over streamable HTTP (Mcp-Name)


class CancelTaskRequest(Request):  # type: ignore[type-arg] # fields typed below
    """Ask for a task to be cancelled."""

    method: Literal["tasks/cancel"] = "tasks/cancel"
    params: TaskIdParams
    name_param = "taskId"


class _TaskFields(Result):
    task_id: str
    status: _STATUSES
    status_message: str | None = None
    created_at: str | None = None
    last_updated_at: str | None = None
    ttl_ms: int | None = None
    poll_interval_ms: int | None = None


class CreateTaskResult(_TaskFields):
    """A ``tools/call`` answered with a task handle."""

    result_type: Literal["task"] = "task"


class DetailedTask(_TaskFields):
    """A ``tasks/get`` answer: the task, with its result, error or input requests."""

    result_type: str | None = "complete"
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    input_requests: dict[str, Any] | None = None


# -- the client side ----------------------------------------------------------------------


def _interval(task: _TaskFields) -> float:
    if task.poll_interval_ms is None:
        return _DEFAULT_POLL
    return min(max(task.poll_interval_ms / 1000, _MIN_POLL), _MAX_POLL)


class TasksClient(ClientExtension):
    """The client side: declare the extension, and finish a task answer into the
    ``CallToolResult`` it stands for (see the module docstring)."""

    identifier = TASKS_EXTENSION

    def __init__(
        self,
        *,
        on_task: Callable[[str], None] | None = None,
        on_cancel: Callable[[str], None] | None = None,
    ) -> None:
        self.on_task = on_task
        """Called with the id of each task a server answered with (tests, logs)."""
        self.on_cancel = on_cancel
        """Called with the id of each task this client asked to cancel (tests, logs)."""

    def claims(self) -> list[ResultClaim[Any]]:
        """A ``resultType: "task"`` answer of ``tools/call``, on modern connections."""
        return [
            ResultClaim(
                result_type="task",
                model=CreateTaskResult,
                resolve=self.resolve,
                protocol_versions=frozenset(MODERN_PROTOCOL_VERSIONS),
            )
        ]

    async def resolve(self, created: CreateTaskResult, ctx: ClaimContext) -> CallToolResult:
        """Poll the task to its end; a local cancel or the call's timeout cancels it."""
        session = ctx.session
        task_id = created.task_id
        if self.on_task is not None:
            self.on_task(task_id)
        timeout = ctx.read_timeout_seconds
        task: _TaskFields = created
        try:
            with anyio.fail_after(timeout if timeout is not None else math.inf):
                while task.status not in TERMINAL_STATUSES:
                    if task.status == "input_required":
                        await self._cancel(session, task_id)
                        return _error_result(
                            f"the task {task_id} asked for input, which this client does not give"
                        )
                    await anyio.sleep(_interval(task))
                    request = GetTaskRequest(params=TaskIdParams(task_id=task_id))
                    task = await session.send_request(request, DetailedTask)
        except TimeoutError:
            await self._cancel(session, task_id)
            message = f"{ctx.tool_name}: the task did not finish within {timeout:g} s"
            raise MCPError(mcp_types.REQUEST_TIMEOUT, message) from None
        except anyio.get_cancelled_exc_class():
            await self._cancel(session, task_id)
            raise
        return _finished(task, task_id)

    async def _cancel(self, session: Any, task_id: str) -> None:
        """``tasks/cancel``, shielded and bounded: the cancel that called it goes on."""
        if self.on_cancel is not None:
            self.on_cancel(task_id)
        with anyio.move_on_after(_CANCEL_TIMEOUT, shield=True):
            try:
                request = CancelTaskRequest(params=TaskIdParams(task_id=task_id))
                await session.send_request(request, Result)
            except Exception as exc:  # noqa: BLE001 - cancelling is best effort: the server decides
                logger.warning("tasks/cancel of %s failed: %s", task_id, exc)


def _error_result(message: str) -> CallToolResult:
    return CallToolResult(content=[mcp_types.TextContent(type="text", text=message)], is_error=True)


def _finished(task: _TaskFields, task_id: str) -> CallToolResult:
    if task.status == "completed" and isinstance(task, DetailedTask) and task.result is not None:
        return CallToolResult.model_validate(task.result)
    if task.status == "failed" and isinstance(task, DetailedTask) and task.error:
        code = int(task.error.get("code", mcp_types.INTERNAL_ERROR))
        raise MCPError(code, str(task.error.get("message") or task.status_message or "failed"))
    reason = f": {task.status_message}" if task.status_message else ""
    return _error_result(f"the task {task_id} ended {task.status}{reason}")


# -- the server side ----------------------------------------------------------------------


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@attrs.define(eq=False)
class TaskState:
    """One task of a `TaskRunner`: its status and, at the end, its result or error."""

    task_id: str
    status: str = "working"
    status_message: str | None = None
    created_at: str = attrs.field(factory=_now)
    last_updated_at: str = attrs.field(factory=_now)
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    cancel_requested: bool = False
    scope: anyio.CancelScope = attrs.field(factory=anyio.CancelScope, repr=False)
    done: anyio.Event = attrs.field(factory=anyio.Event, repr=False)

    def wire(self, *, ttl_ms: int | None, poll_ms: int) -> dict[str, Any]:
        """The task as ``tasks/get`` answers it (``DetailedTask``)."""
        out: dict[str, Any] = {
            "taskId": self.task_id,
            "status": self.status,
            "createdAt": self.created_at,
            "lastUpdatedAt": self.last_updated_at,
            "ttlMs": ttl_ms,
            "pollIntervalMs": poll_ms,
        }
        if self.status_message:
            out["statusMessage"] = self.status_message
        if self.status == "completed" and self.result is not None:
            out["result"] = self.result
        if self.status == "failed" and self.error is not None:
            out["error"] = self.error
        return out

    def finish(self, status: str, message: str | None = None) -> None:
        self.status, self.status_message, self.last_updated_at = status, message, _now()
        self.done.set()


Work = Callable[[], Awaitable[Any]]


@attrs.define(eq=False)
class TaskRunner:
    """The tasks of one server, each run in the runner's task group in its own cancel
    scope, while ``async with runner.running():`` lasts (leaving it cancels the work still
    running). ``ttl_ms`` is what the tasks advertise (None: unlimited); ``poll_ms`` the
    polling interval they ask for; ``on_cancel`` is called with each task id a client asked
    to cancel.
    """

    ttl_ms: int | None = 3_600_000
    poll_ms: int = 200
    on_cancel: Callable[[str], None] | None = None
    tasks: dict[str, TaskState] = attrs.field(factory=dict)
    _group: anyio.abc.TaskGroup | None = None

    @asynccontextmanager
    async def running(self) -> AsyncIterator[TaskRunner]:
        """Run tasks for the duration of the block."""
        async with anyio.create_task_group() as group:
            self._group = group
            try:
                yield self
            finally:
                self._group = None
                group.cancel_scope.cancel("MCP tasks: the runner is closing")

    def start(self, work: Work) -> TaskState:
        """Run ``work`` (returning a ``CallToolResult``) as a new task."""
        if self._group is None:
            msg = "the task runner is not running (async with runner.running())"
            raise RuntimeError(msg)
        task = TaskState(task_id=str(uuid.uuid4()), status_message="the work is running")
        self.tasks[task.task_id] = task
        self._group.start_soon(self._run, task, work, name=f"mcp task {task.task_id}")
        return task

    async def _run(self, task: TaskState, work: Work) -> None:
        with task.scope:
            try:
                result = await work()
            except MCPError as exc:
                task.error = exc.error.model_dump(mode="json", exclude_none=True)
                task.finish("failed", exc.error.message)
                return
            except Exception as exc:
                logger.exception("MCP task %s failed", task.task_id)
                task.error = {"code": mcp_types.INTERNAL_ERROR, "message": str(exc)}
                task.finish("failed", f"{type(exc).__name__}: {exc}")
                return
            dump = getattr(result, "model_dump", None)
            task.result = (
                dump(by_alias=True, mode="json", exclude_none=True) if callable(dump) else result
            )
            task.finish("completed")
            return
        task.finish("cancelled", "cancelled at the client's request")  # the scope caught it

    def get(self, task_id: str) -> TaskState:
        """The task, or the spec's ``-32602`` error naming the id."""
        task = self.tasks.get(task_id)
        if task is None:
            raise MCPError(
                mcp_types.INVALID_PARAMS, f"Failed to retrieve task: {task_id} not found"
            )
        return task

    def cancel(self, task_id: str) -> TaskState:
        """Cancel a task's work (a finished task stays as it is)."""
        task = self.get(task_id)
        task.cancel_requested = True
        if self.on_cancel is not None:
            self.on_cancel(task_id)
        if task.status not in TERMINAL_STATUSES:
            task.scope.cancel(f"MCP tasks/cancel of task {task_id!r}")
        return task


def declares_tasks(meta: Mapping[str, Any] | None) -> bool:
    """Whether a request's ``_meta`` declares the tasks extension in its capabilities."""
    capabilities = (meta or {}).get(mcp_types.CLIENT_CAPABILITIES_META_KEY)
    extensions = capabilities.get("extensions") if isinstance(capabilities, Mapping) else None
    return isinstance(extensions, Mapping) and TASKS_EXTENSION in extensions


def _refuse(ctx: Any) -> None:
    if not declares_tasks(ctx.meta):
        raise MCPError(
            mcp_types.MISSING_REQUIRED_CLIENT_CAPABILITY,
            "Missing required client capability",
            {"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}},
        )


class TasksExtension(Extension):
    """The server side: calls of ``tools`` become tasks of ``runner`` for a client that
    declares the extension; ``tasks/get``, ``tasks/cancel`` and ``tasks/update``."""

    identifier = TASKS_EXTENSION

    def __init__(self, runner: TaskRunner, tools: Collection[str]) -> None:
        self.runner = runner
        self.task_tools = frozenset(tools)

    def methods(self) -> list[MethodBinding]:
        """The three task methods, on modern connections."""
        modern = frozenset(MODERN_PROTOCOL_VERSIONS)
        return [
            MethodBinding("tasks/get", TaskIdParams, self._get, protocol_versions=modern),
            MethodBinding("tasks/cancel", TaskIdParams, self._cancel, protocol_versions=modern),
            MethodBinding("tasks/update", UpdateTaskParams, self._update, protocol_versions=modern),
        ]

    async def intercept_tool_call(self, params: Any, ctx: Any, call_next: Any) -> Any:
        """A call of one of ``tools``, from a declaring client, becomes a task."""
        if params.name not in self.task_tools or not declares_tasks(ctx.meta):
            return await call_next(ctx)
        task = self.runner.start(lambda: call_next(ctx))
        await anyio.lowlevel.checkpoint()
        wire = task.wire(ttl_ms=self.runner.ttl_ms, poll_ms=self.runner.poll_ms)
        return {"resultType": "task", **wire}

    async def _get(self, ctx: Any, params: TaskIdParams) -> dict[str, Any]:
        _refuse(ctx)
        await anyio.lowlevel.checkpoint()
        task = self.runner.get(params.task_id)
        wire = task.wire(ttl_ms=self.runner.ttl_ms, poll_ms=self.runner.poll_ms)
        return {"resultType": "complete", **wire}

    async def _cancel(self, ctx: Any, params: TaskIdParams) -> dict[str, Any]:
        _refuse(ctx)
        await anyio.lowlevel.checkpoint()
        self.runner.cancel(params.task_id)
        return {"resultType": "complete"}

    async def _update(self, ctx: Any, params: UpdateTaskParams) -> dict[str, Any]:
        _refuse(ctx)
        await anyio.lowlevel.checkpoint()
        self.runner.get(params.task_id)  # these tasks ask for nothing: the answers are ignored
        return {"resultType": "complete"}
