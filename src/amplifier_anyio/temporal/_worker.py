"""``SessionWorker``: runs the session workflow and its activities for one or more plans.

Each plan is mounted once per process (an ``AmplifierSession`` opened for the worker's
lifetime: its providers, tools and hooks serve every session's activities). The Temporal
worker is asyncio: it runs, with the mounted modules, on an asyncio loop of its own thread
(``_portal``), whatever the host's backend; ``serve()`` runs it on the caller's asyncio
loop instead (the ``amplifier-anyio temporal worker`` command).
"""

from __future__ import annotations

import concurrent.futures
import logging
from collections.abc import Callable, Mapping
from contextlib import AsyncExitStack
from datetime import timedelta
from typing import Any

import anyio
import anyio.to_thread
from temporalio.client import Client
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from ..errors import ConfigError, DurableSessionError
from ..kernel._mount_plan import MountPlan
from ..runtime._tool_batch import ToolBatchConfig
from ..runtime._turn import TurnConfig
from . import _outlet
from ._activities import Mounted, SessionActivities
from ._plans import PlanLike, durable_of, load_plan, plan_key, plan_tree
from ._portal import AsyncioPortal, LoopInbox
from ._spans import turn_context
from ._workflow import SessionWorkflow

__all__ = ("SessionWorker", "PlanLike", "load_plan", "plan_key", "durable_of", "connect")

DEFAULT_ADDRESS = "127.0.0.1:7233"

logger = logging.getLogger(__name__)


async def connect(address: str, namespace: str, timeout: float) -> Client:
    """A Temporal client, or a one-line DurableSessionError within ``timeout`` seconds."""
    try:
        with anyio.fail_after(timeout):
            return await Client.connect(address, namespace=namespace)
    except TimeoutError:
        msg = f"cannot reach the Temporal server at {address}: no answer within {timeout} s"
        raise DurableSessionError(msg) from None
    except RuntimeError as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        msg = f"cannot reach the Temporal server at {address}: {first}"
        raise DurableSessionError(msg) from exc


class SessionWorker:
    """Runs durable sessions' workflow and activities (``async with``; any backend).

    ``plans`` is a plan, or a mapping of names to plans, or a list. Address, namespace,
    task queue and sticky timeout default to the first plan's ``session.durable``.
    ``heartbeat_every`` is how often a running activity heartbeats (seconds).
    ``tracer_provider`` is the OpenTelemetry tracer provider of the span each activity
    makes in its turn's trace (None: the global one; no span without opentelemetry).
    """

    def __init__(
        self,
        plans: PlanLike | Mapping[str, PlanLike] | list[PlanLike],
        *,
        address: str | None = None,
        namespace: str | None = None,
        task_queue: str | None = None,
        sticky_timeout: float | None = None,
        heartbeat_every: float = 0.5,
        connect_timeout: float = 10.0,
        tracer_provider: Any = None,
    ) -> None:
        if isinstance(plans, list):
            parsed = [load_plan(p) for p in plans]
        elif isinstance(plans, Mapping) and not _looks_like_plan(plans):
            parsed = [load_plan(p) for p in plans.values()]
        else:
            parsed = [load_plan(plans)]
        if not parsed:
            msg = "SessionWorker: no plan given"
            raise ConfigError(msg)
        self.plans: dict[str, MountPlan] = {}
        """Every plan this worker runs, by key: the plans given and their agents' plans."""
        for plan in parsed:
            self.plans.update(plan_tree(plan))
        spec = durable_of(parsed[0])
        self.address = address or spec.address
        self.namespace = namespace or spec.namespace
        self.task_queue = task_queue or spec.task_queue
        self.sticky_timeout = spec.sticky_timeout if sticky_timeout is None else sticky_timeout
        self.heartbeat_every = heartbeat_every
        self.connect_timeout = connect_timeout
        self.tracer_provider = tracer_provider
        self._portal: AsyncioPortal | None = None
        self._future: concurrent.futures.Future[None] | None = None
        self._stop: anyio.Event | None = None  # made on the worker's loop (_serve)

    async def __aenter__(self) -> SessionWorker:
        portal = AsyncioPortal(thread=True)
        await portal.__aenter__()
        self._portal = portal
        ready: concurrent.futures.Future[None] = concurrent.futures.Future()

        self._future = portal.submit(self._serve, lambda: ready.set_result(None))

        def settle(done: concurrent.futures.Future[None]) -> None:
            if not ready.done():
                ready.set_exception(_failure(done))

        self._future.add_done_callback(settle)
        try:
            await anyio.to_thread.run_sync(ready.result, abandon_on_cancel=True)
        except BaseException:
            # Not ready (it failed, or a cancel came while it connects): nothing will ever
            # settle ``ready``, so it is not waited for; the worker's own task is.
            ready.cancel()  # frees the thread still waiting on it
            with anyio.CancelScope(shield=True):
                await self._close(started=False)
            raise
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        with anyio.CancelScope(shield=True):
            await self._close()

    async def _close(self, *, started: bool = True) -> None:
        """Stop the worker (a started one drains its events and shuts Temporal's worker
        down; one still starting is cancelled), wait for it (at most ``STOP_TIMEOUT``
        seconds), close its loop."""
        portal, future = self._portal, self._future
        if portal is None:
            return
        if future is not None:
            if started:
                portal.call_soon(self._request_stop)
            else:
                future.cancel()  # its task is cancelled on its loop: a connect ends
            with anyio.move_on_after(STOP_TIMEOUT) as bound:
                await anyio.to_thread.run_sync(
                    concurrent.futures.wait, [future], abandon_on_cancel=True
                )
            if bound.cancelled_caught:
                logger.warning(
                    "the worker did not stop within %s s; its loop is closed", STOP_TIMEOUT
                )
        await portal.__aexit__(None, None, None)
        self._portal = self._future = None

    async def serve(self, ready: Callable[[], None] | None = None) -> None:
        """Run on the caller's asyncio loop until cancelled (the CLI's worker)."""
        await self._serve(ready or (lambda: None))

    def _request_stop(self) -> None:
        """Stop a ready ``_serve`` (called on the worker's loop, where its event lives)."""
        if self._stop is not None:
            self._stop.set()

    async def _serve(self, ready: Callable[[], None]) -> None:
        self._stop = anyio.Event()  # on this loop; ready() is called once it exists
        client = await connect(self.address, self.namespace, self.connect_timeout)
        async with AsyncExitStack() as stack:
            mounted = {}
            for key, plan in self.plans.items():
                mounted[key] = await _mount(stack, plan)
            activities = SessionActivities(
                mounted, heartbeat_every=self.heartbeat_every, tracer_provider=self.tracer_provider
            )
            restrictions = SandboxRestrictions.default.with_passthrough_modules(
                "amplifier_anyio", "attrs", "cattrs", "anyio", "httpx", "yaml"
            )
            worker = Worker(
                client,
                task_queue=self.task_queue,
                workflows=[SessionWorkflow],
                activities=[
                    activities.provider_call,
                    activities.tool_call,
                    activities.task_start,
                ],
                workflow_runner=SandboxedWorkflowRunner(restrictions=restrictions),
                sticky_queue_schedule_to_start_timeout=timedelta(seconds=self.sticky_timeout),
                max_heartbeat_throttle_interval=timedelta(seconds=self.heartbeat_every),
                default_heartbeat_throttle_interval=timedelta(seconds=self.heartbeat_every),
                graceful_shutdown_timeout=timedelta(seconds=5),
            )
            async with worker:
                await _deliver_events(self.task_queue, mounted, ready, self._stop)


STOP_TIMEOUT = 30.0
"""How long closing a worker waits for it: Temporal's graceful shutdown (5 s) and the
event drain (``EVENT_DRAIN``) fit well inside."""

EVENT_DRAIN = 5.0
"""How long a stopping worker may take to deliver the session events still queued."""


async def _deliver_events(
    task_queue: str,
    mounted: Mapping[str, Mounted],
    ready: Callable[[], None],
    stop: anyio.Event,
) -> None:
    """Until ``stop``: deliver the session-level events the workflows post (``_outlet``,
    from the workflow threads) to each plan's hooks, in the order posted; then what is
    still queued, for at most ``EVENT_DRAIN`` seconds."""
    inbox: LoopInbox[tuple[Mounted, str, dict[str, Any], str | None] | None] = LoopInbox()

    def sink_of(plan: Mounted) -> _outlet.Post:
        def sink(event: str, data: dict[str, Any], root: str | None) -> None:
            inbox.put((plan, event, data, root))

        return sink

    sinks = {_outlet.outlet_key(task_queue, key): sink_of(plan) for key, plan in mounted.items()}
    drained = anyio.Event()

    async def deliver() -> None:
        while (item := await inbox.get()) is not None:
            plan, event, data, root = item
            try:
                with turn_context(data.get("trace_id"), root):  # hooks-otel: the turn's trace
                    await plan.coordinator.hooks.emit(event, data)
            except Exception:  # an observer's failure is logged, the session goes on
                logger.exception("delivering %s failed", event)
        drained.set()

    for key, sink in sinks.items():
        _outlet.register(key, sink)
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(deliver)
            ready()
            await stop.wait()
            for key, sink in sinks.items():
                _outlet.unregister(key, sink)
            inbox.put(None)
            with anyio.move_on_after(EVENT_DRAIN):
                await drained.wait()
            group.cancel_scope.cancel("the worker stops: events still queued are dropped")
    finally:
        for key, sink in sinks.items():
            _outlet.unregister(key, sink)


async def _mount(stack: AsyncExitStack, plan: MountPlan) -> Mounted:
    from ..session._session import AmplifierSession  # noqa: PLC0415 - the kernel's heavy part

    session = AmplifierSession(plan)
    await stack.enter_async_context(session)
    orchestrator = session.coordinator.get("orchestrator")
    config = getattr(orchestrator, "config", None)
    turn_of = getattr(config, "turn_config", None)
    batch_of = getattr(config, "batch_config", None)
    return Mounted(
        coordinator=session.coordinator,
        turn_config=turn_of() if turn_of is not None else TurnConfig(),
        batch_config=batch_of() if batch_of is not None else ToolBatchConfig(),
        orchestrator=str(getattr(orchestrator, "name", "loop-basic")),
        plan=plan,
    )


def _looks_like_plan(value: Mapping[str, Any]) -> bool:
    return "session" in value


def _failure(done: concurrent.futures.Future[None]) -> BaseException:
    error = done.exception() if not done.cancelled() else None
    return error or DurableSessionError("the worker stopped before it was ready")
