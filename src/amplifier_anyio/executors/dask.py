"""``executor-dask``: tool calls run on a Dask ``distributed`` cluster (extra ``[dask]``).

Plan:

```yaml
session:
  executor:
    module: executor-dask
    config: {address: "tcp://scheduler:8786"}   # a running scheduler, or
    # config: {local: {n_workers: 2, processes: true}}  # a LocalCluster of our own
```

How a call goes:

1. the session starts the executor as a module service: the ``Client`` (and, with
   ``local``, a ``LocalCluster``) is created in a worker thread, and closed the same way
   at cleanup;
2. each call is submitted with the synchronous ``Client.submit`` (``pure=False``, a key
   naming the session, the turn's trace id and the call id) as
   [`run_tool_in_worker`][amplifier_anyio.runtime.run_tool_in_worker] bound to the tool's plan entry
   (module id + config): the worker rebuilds the tool once per module + config and runs
   it (an async tool in a fresh event loop on the worker thread);
3. the future's done-callback (on Dask's callback thread) fetches the outcome and wakes
   the waiting task with ``anyio.from_thread.run_sync(event.set, token=<the loop's
   token>)`` (anyio >= 4.11, which the extra requires). No thread is held per pending
   call, and ``Client(asynchronous=True)`` — asyncio-only, it fails under trio — is never
   used: this runs on trio and asyncio alike.

Cancel and timeout: the waiting task is cancelled; the executor calls ``future.cancel()``
(in a worker thread, shielded, bounded by ``cancel_timeout``) and the call gets the
batch's cancelled (or timed-out) result. **A Python function already running on a worker
is abandoned, not killed**: Dask cannot interrupt a thread, so it runs to its end there and
its result is dropped. Keep side-effecting tools local, or make them idempotent.

A worker that dies under a call: with a ``local`` cluster the scheduler is configured not
to re-run the task (``allowed-failures: 0``), so the call gets an error result naming the
lost worker — or is submitted once more when the tool declares ``idempotent = True``.
With ``address``, how often the scheduler itself re-runs a task whose worker died is the
cluster's ``distributed.scheduler.allowed-failures``: set it to 0 for at-most-once calls.

The tool's module must be importable on the workers (an installed package).
"""

from __future__ import annotations

import logging
import math
import uuid
from collections.abc import Mapping
from functools import partial
from typing import TYPE_CHECKING, Any

import anyio
import attrs

from ..config_schema import ConfigSchema, Setting
from ..errors import ConfigError
from ..models import ToolCall, ToolResult
from ..runtime._executors import ToolExecutionContext, WorkerToolError, as_result, worker_call

if TYPE_CHECKING:
    from ..interfaces import Tool

__all__ = ("DaskExecutor", "DaskExecutorConfig", "WorkerLostError", "mount")

logger = logging.getLogger(__name__)


class WorkerLostError(RuntimeError):
    """The worker running a call died (or the cluster lost the call's task)."""


def _positive_int(value: Any, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"executor-dask.{key}: expected an integer >= 1, got {value!r}")
    return value


def _seconds(value: Any, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"executor-dask.{key}: expected seconds > 0, got {value!r}")
    if not (math.isfinite(value) and value > 0):
        raise ConfigError(f"executor-dask.{key}: expected seconds > 0, got {value!r}")
    return float(value)


@attrs.frozen(kw_only=True)
class DaskExecutorConfig:
    """Where the cluster is: ``address`` of a running scheduler, or a ``LocalCluster`` of
    ``n_workers`` workers (``processes``: worker processes, else threads of this process;
    ``threads_per_worker``). ``connect_timeout`` bounds connecting; ``cancel_timeout``
    each ``future.cancel()`` of a cancelled call."""

    address: str | None = None
    n_workers: int = 2
    processes: bool = True
    threads_per_worker: int = 1
    connect_timeout: float = 30.0
    cancel_timeout: float = 5.0

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> DaskExecutorConfig:
        """Validate a plan's config table; a bad value is a ConfigError naming the key."""
        for key in config:
            if key not in ("address", "local", "connect_timeout", "cancel_timeout"):
                msg = (
                    f"executor-dask.{key}: unknown key "
                    "(accepted: address, local, connect_timeout, cancel_timeout)"
                )
                raise ConfigError(msg)
        address, local = config.get("address"), config.get("local")
        if (address is None) == (local is None):
            msg = "executor-dask.address: give either address (a running scheduler) or local"
            raise ConfigError(msg)
        values: dict[str, Any] = {}
        if address is not None:
            if not isinstance(address, str) or not address:
                msg = f"executor-dask.address: expected a scheduler address, got {address!r}"
                raise ConfigError(msg)
            values["address"] = address
        else:
            if not isinstance(local, Mapping):
                msg = f"executor-dask.local: expected a table, got {type(local).__name__}"
                raise ConfigError(msg)
            for key, value in local.items():
                if key in ("n_workers", "threads_per_worker"):
                    values[key] = _positive_int(value, f"local.{key}")
                elif key == "processes":
                    if not isinstance(value, bool):
                        msg = (
                            f"executor-dask.local.processes: expected true or false, got {value!r}"
                        )
                        raise ConfigError(msg)
                    values[key] = value
                else:
                    msg = (
                        f"executor-dask.local.{key}: unknown key "
                        "(accepted: n_workers, processes, threads_per_worker)"
                    )
                    raise ConfigError(msg)
        for key in ("connect_timeout", "cancel_timeout"):
            if key in config:
                values[key] = _seconds(config[key], key)
        return cls(**values)


@attrs.define(eq=False)
class _Waiter:
    """One pending call: its outcome, set from Dask's callback thread via the portal."""

    event: anyio.Event = attrs.field(factory=anyio.Event)
    ok: bool = False
    value: Any = None


def _deliver(waiter: _Waiter, ok: bool, value: Any) -> None:
    waiter.ok, waiter.value = ok, value
    waiter.event.set()


def _outcome(future: Any) -> tuple[bool, Any] | None:
    """On Dask's callback thread: (True, result) or (False, exception); None if cancelled."""
    status = future.status
    if status == "cancelled":
        return None
    if status == "finished":
        try:
            return True, future.result()
        except BaseException as exc:  # noqa: BLE001 - lost between done and fetch
            return False, exc
    try:
        return False, future.exception()
    except BaseException as exc:  # noqa: BLE001 - reported to the call, not this thread
        return False, exc


class DaskExecutor:
    """Runs tool calls on a Dask cluster (see the module docstring for the bridge).

    ``pending`` maps each call's task key to its Dask future while the call waits.
    """

    name = "executor-dask"
    needs_service = True

    def __init__(self, config: DaskExecutorConfig) -> None:
        self.config = config
        self.client: Any = None
        self.cluster: Any = None
        self.pending: dict[str, Any] = {}
        self._token: Any = None

    async def start(self) -> None:
        """Create the cluster (``local``) and the client, in worker threads."""
        self._token = anyio.lowlevel.current_token()
        try:
            if self.config.address is None:
                self.cluster = await anyio.to_thread.run_sync(self._local_cluster)
                address = self.cluster
            else:
                address = self.config.address
            self.client = await anyio.to_thread.run_sync(self._connect, address)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self.stop()
            raise

    def _local_cluster(self) -> Any:
        import dask  # noqa: PLC0415 - the [dask] extra, imported when used
        from distributed import LocalCluster  # noqa: PLC0415

        # At most once: a task whose worker died is not re-run behind the call's back.
        # Worker processes talk over loopback TCP (threads: in-process transport).
        where = {"host": "127.0.0.1"} if self.config.processes else {}
        with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
            return LocalCluster(  # type: ignore[no-untyped-call]
                n_workers=self.config.n_workers,
                processes=self.config.processes,
                threads_per_worker=self.config.threads_per_worker,
                # Loopback, any free port: the scheduler's HTTP server always starts (None
                # would mean 8787, taken by any other cluster on the machine).
                dashboard_address="127.0.0.1:0",
                **where,
            )

    def _connect(self, address: Any) -> Any:
        from distributed import Client  # noqa: PLC0415 - the [dask] extra

        timeout = self.config.connect_timeout
        return Client(address, set_as_default=False, timeout=timeout)  # type: ignore[no-untyped-call]

    async def stop(self) -> None:
        """Close the client, then the cluster (if ours), in worker threads."""
        client, self.client = self.client, None
        cluster, self.cluster = self.cluster, None
        if client is not None:
            await anyio.to_thread.run_sync(client.close, abandon_on_cancel=True)
        if cluster is not None:
            await anyio.to_thread.run_sync(cluster.close, abandon_on_cancel=True)

    async def run(
        self, call: ToolCall, tool: Tool, tool_input: Any, ctx: ToolExecutionContext
    ) -> ToolResult:
        """Submit the call, wait for its outcome; one retry for an idempotent tool whose
        worker died."""
        if ctx.spec is None:
            msg = f"tool {call.name!r} has no plan entry to rebuild it from on a Dask worker"
            raise WorkerToolError(msg)
        fn = worker_call(ctx.spec, call.name, tool_input)
        key = _key(ctx, call)
        attempts = 2 if getattr(tool, "idempotent", False) is True else 1
        for attempt in range(attempts):
            try:
                return await self._once(fn, key if attempt == 0 else f"{key}-retry{attempt}")
            except WorkerLostError:
                if attempt + 1 == attempts:
                    raise
                logger.warning("call %s lost its worker; running it once more", call.id)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _once(self, fn: Any, key: str) -> ToolResult:
        client, token = self.client, self._token
        if client is None:
            msg = "the Dask executor is not running (the session has not started it)"
            raise RuntimeError(msg)
        waiter = _Waiter()
        future = client.submit(fn, key=key, pure=False, retries=0)
        self.pending[key] = future
        try:
            future.add_done_callback(partial(_on_done, token, waiter))
            await waiter.event.wait()
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True), anyio.move_on_after(self.config.cancel_timeout):
                await anyio.to_thread.run_sync(future.cancel, abandon_on_cancel=True)
            raise
        finally:
            del self.pending[key]
        if waiter.ok:
            return as_result(waiter.value)
        raise _as_call_error(waiter.value)


def _key(ctx: ToolExecutionContext, call: ToolCall) -> str:
    """A task key naming session, turn and call (unique: a call id may come back)."""
    session = ctx.session_id or "nosession"
    turn = ctx.call.trace_id or "noturn"
    return f"amplifier-{session}-{turn}-{call.id}-{uuid.uuid4().hex[:8]}"


def _on_done(token: Any, waiter: _Waiter, future: Any) -> None:
    """Dask's callback thread: fetch the outcome, hand it to the event loop."""
    outcome = _outcome(future)
    if outcome is None:
        return  # cancelled: the waiting task was cancelled first and is gone
    try:
        anyio.from_thread.run_sync(_deliver, waiter, *outcome, token=token)
    except Exception:  # noqa: BLE001 - the loop has ended: nobody waits for this result
        logger.debug("a Dask result arrived after its event loop ended")


def _as_call_error(exc: Any) -> BaseException:
    """The call's exception: the tool's own, or WorkerLostError for a dead worker."""
    if not isinstance(exc, BaseException):
        return RuntimeError(f"the Dask task failed: {exc!r}")
    if type(exc).__name__ == "KilledWorker":
        lost = WorkerLostError(f"the worker running the call died ({exc})")
        lost.__cause__ = exc
        return lost
    return exc


async def mount(coordinator: Any, config: dict[str, Any] | None = None) -> DaskExecutor:
    """Validate the config and return the executor (the session starts it as a service)."""
    settings = DaskExecutorConfig.from_config(config or {})
    try:
        import distributed  # noqa: F401, PLC0415 - fail at mount, not at the first call
    except ImportError as exc:
        msg = "executor-dask needs the dask extra: pip install 'amplifier-anyio[dask]'"
        raise ConfigError(msg) from exc
    return DaskExecutor(settings)


CONFIG_SCHEMA = ConfigSchema(
    "executor-dask",
    {
        "address": Setting((str,), "a running scheduler's address"),
        "local": Setting((dict,), "{n_workers, processes, threads_per_worker}: a LocalCluster"),
        "connect_timeout": Setting((float,), "seconds connecting to the scheduler may take"),
        "cancel_timeout": Setting((float,), "seconds each future.cancel() may take"),
    },
)
