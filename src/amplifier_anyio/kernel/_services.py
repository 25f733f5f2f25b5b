"""Module services: long-lived tasks that live in the session's task group.

A module that needs a task for as long as the session lives (a log writer, an MCP
connection, an executor client) starts it with ``await coordinator.start_service(fn,
name=...)``. ``fn(task_status=...)`` runs in the session's task group through
``tg.start``: the call returns the value ``fn`` passes to ``task_status.started()``, so the
task that opens a resource is the task that closes it.

Failure policy:

- ``fn`` raising before ``started()`` raises out of ``start_service`` (the module's
  ``mount`` fails, and with it the session start, naming the module);
- ``fn`` raising after ``started()`` is logged at error level and recorded in the
  service's statistics (state ``failed``); it does not cancel the session or the other
  services — a background task of one module never tears down the host's code;
- ``fn`` returning on its own is state ``stopped``.

Each service runs in its own cancel scope, shielded from cancellation outside it: a
service lives exactly as long as the session, and only the session stops it. When the
host cancels (its own scope around ``async with``), the session's shielded, bounded
cleanup still emits ``session:end`` to running services (a log writer records the end of
a cancelled session) and then stops them. The shield is bounded by that cleanup: it runs
on every way out of ``async with`` and stops every service under a bound.

At cleanup, services are stopped in the reverse order of their start (interleaved with the
modules' own cleanups, as an exit stack would): the scope is cancelled and the stop waits,
bounded, for the task to end. A service that
has not ended when the bound expires is logged at error level; the session's task group
still waits for it when the session exits, since nothing can force a task that shields
itself.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import attrs
from anyio.abc import TaskGroup, TaskStatus

__all__ = ("ServiceGroup", "ServiceState", "ServiceStatistics", "ServiceFunction")

logger = logging.getLogger(__name__)

ServiceFunction = Callable[..., Awaitable[Any]]
"""``async def fn(*, task_status) -> None``: call ``task_status.started(value)`` once ready."""


class ServiceState(enum.Enum):
    """Where a module service is in its life."""

    STARTING = "starting"
    """Started, ``task_status.started()`` not called yet."""
    RUNNING = "running"
    """Ready; running until the session stops it."""
    STOPPING = "stopping"
    """Its cancel scope was cancelled; waiting for the task to end."""
    STOPPED = "stopped"
    """Ended: stopped by the session, or returned on its own."""
    FAILED = "failed"
    """Raised an exception (see `ServiceStatistics.error`)."""


@attrs.frozen(kw_only=True)
class ServiceStatistics:
    """A snapshot of one service: its name, state and, if it failed, the error's line."""

    name: str
    state: ServiceState
    error: str | None = None


@attrs.define(eq=False)
class _Service:
    name: str
    # Shielded: only the session stops a service (see the module docstring).
    scope: anyio.CancelScope = attrs.field(factory=lambda: anyio.CancelScope(shield=True))
    done: anyio.Event = attrs.field(factory=anyio.Event)
    state: ServiceState = ServiceState.STARTING
    error: str | None = None

    def statistics(self) -> ServiceStatistics:
        return ServiceStatistics(name=self.name, state=self.state, error=self.error)


class _ReadyStatus(TaskStatus[Any]):
    """Forwards ``started()`` and marks the service running."""

    def __init__(self, service: _Service, status: TaskStatus[Any]) -> None:
        self._service = service
        self._status = status

    def started(self, value: Any = None) -> None:
        self._status.started(value)
        self._service.state = ServiceState.RUNNING


class ServiceGroup:
    """The services of one session, over the task group its ``async with`` owns.

    ``stop_timeout`` bounds how long stopping one service may wait for its task.
    """

    def __init__(self, task_group: TaskGroup, *, stop_timeout: float = 5.0) -> None:
        self._task_group = task_group
        self._services: list[_Service] = []
        self.stop_timeout = stop_timeout
        self.closed = False

    async def start(self, fn: ServiceFunction, *, name: str) -> tuple[Any, _Service]:
        """Run ``fn(task_status=...)`` in the group; its ``started()`` value and handle."""
        service = _Service(name)
        self._services.append(service)
        value = await self._task_group.start(self._run, fn, service, name=f"service:{name}")
        return value, service

    async def _run(
        self, fn: ServiceFunction, service: _Service, *, task_status: TaskStatus[Any]
    ) -> None:
        status = _ReadyStatus(service, task_status)
        try:
            with service.scope:
                await fn(task_status=status)
        except Exception as exc:
            service.error = f"{type(exc).__name__}: {exc}"
            if service.state is ServiceState.STARTING:
                service.state = ServiceState.FAILED
                raise  # tg.start raises it to start_service's caller
            service.state = ServiceState.FAILED
            logger.exception("module service %r failed", service.name)
        else:
            if service.state is ServiceState.STARTING:
                # Returned without ever calling started(): tg.start raises RuntimeError.
                service.state = ServiceState.FAILED
                service.error = "returned without calling task_status.started()"
        finally:
            if service.state in (ServiceState.RUNNING, ServiceState.STOPPING):
                service.state = ServiceState.STOPPED
            service.done.set()

    async def stop(self, service: _Service) -> None:
        """Cancel one service and wait, bounded, for its task to end."""
        if not service.done.is_set():
            service.state = ServiceState.STOPPING
            service.scope.cancel(f"module service {service.name!r} stopped")
        with anyio.move_on_after(self.stop_timeout) as bound:
            await service.done.wait()
        if bound.cancelled_caught:
            logger.error(
                "module service %r did not stop within %ss; the session's exit waits for it",
                service.name,
                self.stop_timeout,
            )

    def statistics(self) -> tuple[ServiceStatistics, ...]:
        """Every service started so far, in start order."""
        return tuple(service.statistics() for service in self._services)
