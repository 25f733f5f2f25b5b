"""Where a tool call runs: the [`ToolExecutor`][amplifier_anyio.runtime.ToolExecutor] seam of the
tool batch.

The tool batch decides *what* happens to a call (hooks, timeout, its slot, the cancelled
result); an executor decides only *where* the tool's code runs. A plan chooses one for the
session and may override it per tool entry:

```yaml
session:
  orchestrator: loop-basic
  context: context-simple
  executor: {module: process, config: {max_workers: 4}}
tools:
  - {module: tool-compute}                   # runs in a worker process
  - {module: tool-demo, executor: local}     # a cheap tool stays in the event loop
```

Built in:

- ``local`` (the default) — the call runs in the batch's task group, exactly as it did
  before executors existed: a tool without an executor takes no extra step at all;
- ``thread`` — each call in a worker thread (an async tool in a fresh event loop there),
  under one `anyio.CapacityLimiter` shared by all its calls (``max_workers``, or
  anyio's default thread limiter). A cancel waits for the thread, as for a synchronous
  tool: a thread cannot be interrupted;
- ``process`` — each call in a worker process of the executor's own pool, which rebuilds
  the tool from its plan entry (module id + config, mounted once per worker process) and
  runs it. A cancel kills that worker process, so nothing of the call runs on. At the
  session's end the workers are stopped: each runs the cleanups of the modules it mounted,
  then exits (a worker that does not within ``stop_timeout`` is killed).

Other executors are modules (``executor-dask``): the module's ``mount(coordinator,
config)`` returns its executor. An executor with ``needs_service = True`` (the default for
modules) is started and stopped as a module service: ``start()`` then ``stop()`` in one
service task of the session (so a plan that uses one needs ``async with``).

Whatever the executor, the batch keeps DESIGN §6's invariants: the executor returns a
result or raises; a timeout or cancel reaches it as a cancellation of the awaiting task,
and the call then gets the batch's timeout or cancelled result.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import logging
import pickle
import subprocess
import sys
import threading
from collections.abc import Mapping
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol, Self, runtime_checkable

import anyio
import anyio.abc
import attrs
from anyio.streams.buffered import BufferedByteReceiveStream

from ..errors import ConfigError
from ..kernel._mount_plan import ModuleSpec
from ..kernel._tracing import ToolCallContext
from ..models import ToolCall, ToolResult
from ..models._validators import number

if TYPE_CHECKING:
    from ..interfaces import Tool

__all__ = (
    "ToolExecutor",
    "ToolExecutionContext",
    "LocalExecutor",
    "ThreadExecutor",
    "ProcessExecutor",
    "BUILTIN_EXECUTORS",
    "builtin_executor",
    "run_tool_in_worker",
    "close_worker_tools",
    "WorkerToolError",
)

logger = logging.getLogger(__name__)


@attrs.frozen(kw_only=True)
class ToolExecutionContext:
    """What an executor learns about one call besides the tool and its input.

    ``spec`` is the plan entry that mounted the tool (module id, source, config): an
    executor that runs the call elsewhere rebuilds the tool from it. ``session_id`` and
    ``call.trace_id`` (the turn) name the call on a cluster.
    """

    call: ToolCallContext
    spec: ModuleSpec | None = None
    session_id: str | None = None


@runtime_checkable
class ToolExecutor(Protocol):
    """Runs one tool call somewhere and returns its result.

    ``run`` returns the call's [`ToolResult`][amplifier_anyio.ToolResult] (or raises: the
    batch turns an exception into the call's error result). A timeout or cancel arrives as
    the awaiting task's cancellation: the executor releases what it holds for the call and
    lets the cancellation propagate. ``start`` / ``stop`` bracket the executor's life in a
    module service of the session (when ``needs_service`` is true).
    """

    name: str
    needs_service: bool

    async def run(
        self, call: ToolCall, tool: Tool, tool_input: Any, ctx: ToolExecutionContext
    ) -> ToolResult:
        """Run ``tool`` on ``tool_input`` for ``call``."""
        ...

    async def start(self) -> None:
        """Acquire what the executor needs (a client, a cluster)."""
        ...

    async def stop(self) -> None:
        """Release it (called shielded and bounded at the session's cleanup)."""
        ...


class WorkerToolError(RuntimeError):
    """A tool could not be rebuilt or run in a worker (the message says why)."""


def as_result(value: Any) -> ToolResult:
    """A tool's return value as a ToolResult."""
    return value if isinstance(value, ToolResult) else ToolResult(success=True, output=value)


async def _call_tool(tool: Any, tool_input: Any) -> ToolResult:
    """Run a tool in the current event loop (a sync tool directly: this is a worker)."""
    value = tool.execute(tool_input)
    if inspect.isawaitable(value):
        value = await value
    return as_result(value)


class _Builtin:
    """Shared parts of the built-in executors: no service, nothing to start or stop."""

    name = "local"
    needs_service = False

    async def start(self) -> None:
        """Nothing to start."""
        await anyio.lowlevel.checkpoint()

    async def stop(self) -> None:
        """Nothing to stop."""
        await anyio.lowlevel.checkpoint()


class LocalExecutor(_Builtin):
    """The call runs in the batch's task group (the batch's own path; this class exists
    for callers that want an explicit executor object, e.g. a benchmark)."""

    name = "local"

    async def run(
        self, call: ToolCall, tool: Tool, tool_input: Any, ctx: ToolExecutionContext
    ) -> ToolResult:
        """Await an async tool here; a sync tool in a worker thread (waited for on cancel)."""
        if inspect.iscoroutinefunction(tool.execute):
            return as_result(await tool.execute(tool_input))
        value: Any = await anyio.to_thread.run_sync(tool.execute, tool_input)
        if inspect.isawaitable(value):
            value = await value
        return as_result(value)


def _max_workers(config: Mapping[str, Any], field: str) -> int | None:
    value = config.get("max_workers")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        msg = f"{field}.config.max_workers: expected an integer >= 1, got {value!r}"
        raise ConfigError(msg)
    return value


def _run_in_thread(tool: Any, tool_input: Any) -> ToolResult:
    """In a worker thread: a sync tool directly, an async one in a fresh event loop."""
    if inspect.iscoroutinefunction(tool.execute):
        return anyio.run(_call_tool, tool, tool_input)
    value = tool.execute(tool_input)
    if inspect.isawaitable(value):
        return anyio.run(_await, value)
    return as_result(value)


async def _await(value: Any) -> ToolResult:
    return as_result(await value)


@attrs.define(eq=False)
class _Limited(_Builtin):
    """A built-in executor whose calls share one limiter of ``max_workers`` (None: the
    backend's default limiter for threads or processes, shared with the whole process)."""

    max_workers: int | None = attrs.field(
        default=None, validator=number(minimum=1, exclusive=False, optional=True, integer=True)
    )
    _limiter: anyio.CapacityLimiter | None = attrs.field(init=False, default=None)

    @classmethod
    def from_config(cls, config: Mapping[str, Any], field: str = "executor") -> Self:
        """Build from a plan's ``config`` table (``max_workers``)."""
        _unknown(config, ("max_workers",), field)
        return cls(max_workers=_max_workers(config, field))

    def _default_limiter(self) -> anyio.CapacityLimiter:
        raise NotImplementedError

    def _limit(self) -> anyio.CapacityLimiter:
        if self._limiter is None:
            if self.max_workers is None:
                self._limiter = self._default_limiter()
            else:
                self._limiter = anyio.CapacityLimiter(self.max_workers)
        return self._limiter


@attrs.define(eq=False)
class ThreadExecutor(_Limited):
    """Each call in a worker thread, under one limiter shared by all its calls.

    ``max_workers``: threads at once (None: anyio's default thread limiter, shared with
    every other ``to_thread`` call of the process). A cancel waits for the thread to end:
    its side effects happen, and its result is the call's result if it arrived in time.
    """

    name: str = "thread"

    def _default_limiter(self) -> anyio.CapacityLimiter:
        return anyio.to_thread.current_default_thread_limiter()

    async def run(
        self, call: ToolCall, tool: Tool, tool_input: Any, ctx: ToolExecutionContext
    ) -> ToolResult:
        """Run the tool in a worker thread of the shared limiter."""
        return await anyio.to_thread.run_sync(
            _run_in_thread, tool, tool_input, limiter=self._limit()
        )


@attrs.define(eq=False)
class _Worker:
    """One worker process of a `ProcessExecutor` and its two pipes."""

    process: anyio.abc.Process
    replies: BufferedByteReceiveStream

    @classmethod
    async def start(cls) -> _Worker:
        command = [sys.executable, "-u", "-m", "amplifier_anyio.runtime._process_worker"]
        # Shielded: a cancel landing while asyncio connects the pipes would lose the handle
        # of a process that runs on; the handle once ours, a cancel kills the process.
        with anyio.CancelScope(shield=True):
            process = await anyio.open_process(
                command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=None
            )
        assert process.stdout is not None
        worker = cls(process, BufferedByteReceiveStream(process.stdout))
        try:
            await worker.send(("path", list(sys.path)))
        except BaseException:
            await worker.kill()  # shielded and bounded inside
            raise
        return worker

    async def send(self, command: tuple[Any, ...]) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.send(pickle.dumps(command, pickle.HIGHEST_PROTOCOL))

    async def receive(self) -> tuple[str, Any]:
        size = int.from_bytes(await self.replies.receive_exactly(8), "big")
        status, value = pickle.loads(await self.replies.receive_exactly(size))  # noqa: S301 - our worker
        return status, value

    async def kill(self) -> None:
        """Kill the process and reap it (shielded: it is quick once killed)."""
        with contextlib.suppress(ProcessLookupError):
            self.process.kill()
        with anyio.CancelScope(shield=True), anyio.move_on_after(5):
            await self.process.aclose()

    async def stop(self, timeout: float) -> None:
        """Let the worker run its modules' cleanups and exit; kill it past ``timeout``."""
        with anyio.move_on_after(timeout):
            try:
                await self.send(("stop",))
                status, problems = await self.receive()
            except (anyio.BrokenResourceError, anyio.EndOfStream, OSError):
                status, problems = "gone", None
            if status == "stopped" and problems:
                for problem in problems:
                    logger.error("process executor: a worker's cleanup failed: %s", problem)
            await self.process.wait()
        if self.process.returncode is None:
            logger.error("process executor: a worker did not stop within %s s; killed", timeout)
        await self.kill()


@attrs.define(eq=False)
class ProcessExecutor(_Limited):
    """Each call in a worker process that rebuilds the tool from its plan entry.

    The tool's module must be importable in the worker (an installed package, an entry
    point or a plan entry's ``source``); a worker mounts a given module + config once and
    keeps it. ``max_workers``: processes at once (None: anyio's default process limiter,
    the CPU count). Workers are the executor's own, kept between calls: a cancel kills the
    worker running the call; `stop` (at the session's cleanup) has each worker run
    the cleanups of the modules it mounted and exit.
    """

    name: str = "process"
    stop_timeout: float = 5.0
    """Seconds a worker may take to run its cleanups and exit before it is killed."""
    _idle: list[_Worker] = attrs.field(init=False, factory=list)
    _busy: set[_Worker] = attrs.field(init=False, factory=set)

    def _default_limiter(self) -> anyio.CapacityLimiter:
        return anyio.to_process.current_default_process_limiter()

    async def run(
        self, call: ToolCall, tool: Tool, tool_input: Any, ctx: ToolExecutionContext
    ) -> ToolResult:
        """Send module id, config, tool name and input to a worker process."""
        spec = ctx.spec
        if spec is None:
            msg = f"tool {call.name!r} has no plan entry to rebuild it from in a worker process"
            raise WorkerToolError(msg)
        config = json.dumps(spec.config, sort_keys=True, default=str)
        command = ("run", spec.module, spec.source, config, call.name, tool_input)
        async with self._limit():
            worker = self._idle.pop() if self._idle else await _Worker.start()
            self._busy.add(worker)
            try:
                await worker.send(command)
                status, value = await worker.receive()
            except BaseException:  # cancelled, or the worker died: it runs nothing more
                self._busy.discard(worker)
                await worker.kill()  # shielded and bounded inside
                raise
            self._busy.discard(worker)
            self._idle.append(worker)
        if status != "ok":
            raise value if isinstance(value, BaseException) else WorkerToolError(str(value))
        result: ToolResult = value
        return result

    async def stop(self) -> None:
        """Stop every worker: each runs its modules' cleanups and exits (bounded)."""
        idle, self._idle = self._idle, []
        busy, self._busy = list(self._busy), set()
        async with anyio.create_task_group() as group:
            for worker in idle:
                group.start_soon(worker.stop, self.stop_timeout)
            for worker in busy:  # a call still running at the end: nothing waits for it
                group.start_soon(worker.kill)

    @property
    def workers(self) -> int:
        """Worker processes alive now (idle and busy)."""
        return len(self._idle) + len(self._busy)


BUILTIN_EXECUTORS = ("local", "thread", "process")
"""Executor ids the session builds itself (``executor-local`` etc. are the same)."""


def builtin_executor(
    module: str, config: Mapping[str, Any], field: str = "executor"
) -> ToolExecutor | None:
    """The built-in executor named ``module`` (None for ``local``: the batch's own path).

    Raises `LookupError` for a name that is not built in (a module, then).
    """
    name = module.removeprefix("executor-")
    if name == "local":
        _unknown(config, (), field)
        return None
    if name == "thread":
        return ThreadExecutor.from_config(config, field)
    if name == "process":
        return ProcessExecutor.from_config(config, field)
    raise LookupError(module)


def _unknown(config: Mapping[str, Any], known: tuple[str, ...], field: str) -> None:
    for key in config:
        if key not in known:
            accepted = ", ".join(known) or "none"
            msg = f"{field}.config.{key}: unknown key (accepted: {accepted})"
            raise ConfigError(msg)


# -- the worker side ---------------------------------------------------------------------------

_worker_tools: dict[tuple[str, str | None, str], tuple[dict[str, Any], Any]] = {}
_worker_lock = threading.Lock()


async def _mount_tools(
    module: str, source: str | None, config: dict[str, Any]
) -> tuple[dict[str, Any], Any]:
    """The tools one plan entry mounts, and the coordinator that holds its cleanup."""
    from ..kernel._coordinator import ModuleCoordinator  # noqa: PLC0415 - worker side only
    from ..kernel._loader import ModuleLoader  # noqa: PLC0415

    coordinator = ModuleCoordinator()
    loader = ModuleLoader(coordinator=coordinator)
    mount = await loader.load(module, config, source, coordinator)
    coordinator.register_cleanup(await mount(coordinator))
    tools: dict[str, Any] = dict(coordinator.get("tools"))
    return tools, coordinator


def _tools_of(module: str, source: str | None, config_json: str) -> dict[str, Any]:
    """The tools of one plan entry in this worker, mounted on first use (cached)."""
    key = (module, source, config_json)
    with _worker_lock:
        mounted = _worker_tools.get(key)
        if mounted is None:
            mounted = anyio.run(_mount_tools, module, source, json.loads(config_json))
            _worker_tools[key] = mounted
    return mounted[0]


def close_worker_tools() -> list[str]:
    """Run the cleanups of every module this worker mounted (newest first) and forget
    them; the problems, one line each (a failing cleanup does not stop the others)."""
    problems: list[str] = []
    with _worker_lock:
        mounted = list(_worker_tools.items())
        _worker_tools.clear()
    for (module, _, _), (_, coordinator) in reversed(mounted):
        try:
            anyio.run(coordinator.cleanup)
        except Exception as exc:  # noqa: BLE001 - reported to the parent
            problems.append(f"{module}: {type(exc).__name__}: {exc}")
    return problems


def run_tool_in_worker(
    module: str, source: str | None, config_json: str, tool_name: str, tool_input: Any
) -> ToolResult:
    """In a worker (process or cluster): rebuild the tool from its plan entry, run it.

    The module is mounted once per worker for a given module + config (its tools kept in
    a cache); an async tool runs in a fresh event loop (``anyio.run``), a sync one
    directly. The tool's module must not bind event-loop resources at mount time.
    """
    tools = _tools_of(module, source, config_json)
    tool = tools.get(tool_name)
    if tool is None:
        mounted = ", ".join(sorted(tools)) or "none"
        msg = f"module {module!r} mounts no tool {tool_name!r} in the worker (it mounts {mounted})"
        raise WorkerToolError(msg)
    return _run_in_thread(tool, tool_input)


def worker_call(spec: ModuleSpec, call_name: str, tool_input: Any) -> partial[ToolResult]:
    """``run_tool_in_worker`` bound to one call (a picklable callable for a cluster)."""
    return partial(
        run_tool_in_worker,
        spec.module,
        spec.source,
        json.dumps(spec.config, sort_keys=True, default=str),
        call_name,
        tool_input,
    )
