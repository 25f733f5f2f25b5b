"""``TemporalSessions`` and ``DurableSession``: the host's side of a durable session.

Usable from asyncio and trio: the Temporal client is asyncio, so under trio every call
goes through an asyncio loop on a thread of its own (``_portal``); under asyncio it runs
on the host's loop. A cancel around ``run()`` (a trio cancel scope, an anyio deadline, an
asyncio task cancel) cancels the turn on the server — immediately: every call is answered,
the turn ends ``cancelled`` — waits (bounded) for the turn to close, and propagates.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import anyio
import attrs
from temporalio.client import (
    Client,
    WorkflowHandle,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
    WorkflowUpdateStage,
)
from temporalio.service import RPCError

from ..errors import DurableSessionError
from ..kernel._turns import TurnResult, TurnStatus
from ..models import Usage, structure
from ._plans import PlanLike, settings_of
from ._portal import AsyncioPortal, asyncio_checkpoint
from ._spans import client_turn_span
from ._worker import DEFAULT_ADDRESS, connect
from ._workflow import WORKFLOW_NAME

__all__ = ("TemporalSessions", "DurableSession", "turn_result", "settings_of")

CANCEL_WAIT = 30.0
"""How long a cancelled ``run()`` waits for its turn to close before it propagates."""


def turn_result(data: Mapping[str, Any]) -> TurnResult:
    """A TurnResult from the workflow's plain data."""
    error = data.get("error")
    return TurnResult(
        text=str(data.get("text", "")),
        status=TurnStatus(data["status"]),
        turn_count=int(data.get("turn_count", 0)),
        usage=structure(data.get("usage") or {}, Usage),
        error=DurableSessionError(f"{error['type']}: {error['msg']}") if error else None,
        trace_id=data.get("trace_id"),
        finish_reason=data.get("finish_reason"),
        problems=tuple(data.get("problems") or ()),
    )


class TemporalSessions:
    """A client of durable sessions (``async with``; asyncio or trio).

    ``connect_timeout`` bounds reaching the server: an unreachable server is a
    [`DurableSessionError`][amplifier_anyio.DurableSessionError] within it.
    ``tracer_provider`` exports each turn's ``amplifier-turn`` span (with the ``[otel]``
    extra; None: the global provider): the turn's activity spans are its children, and it
    is a child of the caller's current span.
    """

    def __init__(
        self,
        *,
        address: str = DEFAULT_ADDRESS,
        namespace: str = "default",
        task_queue: str = "amplifier",
        connect_timeout: float = 10.0,
        tracer_provider: Any = None,
    ) -> None:
        self.address = address
        self.tracer_provider = tracer_provider
        self.namespace = namespace
        self.task_queue = task_queue
        self.connect_timeout = connect_timeout
        self._portal: AsyncioPortal | None = None
        self._client: Client | None = None

    async def __aenter__(self) -> TemporalSessions:
        portal = AsyncioPortal()
        await portal.__aenter__()
        try:
            self._client = await portal.call(
                connect, self.address, self.namespace, self.connect_timeout
            )
        except BaseException:
            with anyio.CancelScope(shield=True):
                await portal.__aexit__(None, None, None)
            raise
        self._portal = portal
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        portal, self._portal, self._client = self._portal, None, None
        if portal is not None:
            await portal.__aexit__(None, None, None)

    def _open(self) -> tuple[AsyncioPortal, Client]:
        if self._portal is None or self._client is None:
            msg = "TemporalSessions is not open: use `async with TemporalSessions(...)`"
            raise DurableSessionError(msg)
        return self._portal, self._client

    async def open(
        self,
        plan: PlanLike,
        session_id: str | None = None,
        *,
        messages: list[dict[str, Any]] | None = None,
    ) -> DurableSession:
        """Start a new durable session for ``plan`` (a worker on the task queue must have
        the same plan mounted); ``messages`` seed its history."""
        portal, client = self._open()
        settings = await anyio.to_thread.run_sync(settings_of, plan)
        session_id = session_id or str(uuid.uuid4())
        start = {"settings": settings, "messages": list(messages or [])}

        async def begin() -> WorkflowHandle[Any, Any]:
            return await client.start_workflow(
                WORKFLOW_NAME,
                start,
                id=session_id,
                task_queue=self.task_queue,
                task_timeout=timedelta(seconds=float(settings["workflow_task_timeout"])),
            )

        try:
            await portal.call(begin)
        except RPCError as exc:
            msg = f"cannot start durable session {session_id!r}: {exc}"
            raise DurableSessionError(msg) from exc
        # no run id: the handle follows the session across continue-as-new
        return DurableSession(
            session_id, client.get_workflow_handle(session_id), portal, self.tracer_provider
        )

    async def attach(self, session_id: str) -> DurableSession:
        """The running durable session ``session_id`` (from any process)."""
        portal, client = self._open()
        handle = client.get_workflow_handle(session_id)
        try:
            await portal.call(handle.describe)
        except RPCError as exc:
            msg = f"no durable session {session_id!r}: {exc}"
            raise DurableSessionError(msg) from exc
        return DurableSession(session_id, handle, portal, self.tracer_provider)


@attrs.define(eq=False)
class DurableSession:
    """One durable session: turns, cancels, its messages (any process may hold one)."""

    id: str
    _handle: WorkflowHandle[Any, Any]
    _portal: AsyncioPortal
    _tracer_provider: Any = None

    async def run(self, prompt: str) -> TurnResult:
        """Run one turn on the session's workers and return its result. A cancel here
        cancels the turn there (immediately), waits for it to close, and propagates.
        With OpenTelemetry, the turn is the span ``amplifier-turn`` (`TemporalSessions`)."""
        with client_turn_span(self.id, self._tracer_provider) as span:
            result = await self._run(prompt, span.root)
            span.finished(str(result.status), result.trace_id)
        return result

    async def _run(self, prompt: str, trace_root: str | None) -> TurnResult:
        update_id = uuid.uuid4().hex
        args = [prompt] if trace_root is None else [prompt, trace_root]

        async def start() -> Any:
            return await self._handle.start_update(
                "run", args=args, id=update_id, wait_for_stage=WorkflowUpdateStage.ACCEPTED
            )

        async def outcome() -> Any:
            while True:
                try:
                    return await self._handle.get_update_handle(update_id).result()
                except WorkflowUpdateRPCTimeoutOrCancelledError as exc:
                    # the client's own cancel turned into this: let it be the cancel it is
                    await asyncio_checkpoint(exc)

        try:
            await self._portal.call(start)
            data = await self._portal.call(outcome)
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True), anyio.move_on_after(CANCEL_WAIT):
                await self._portal.call(self._cancel_turn, update_id)
                await self._portal.call(outcome)
            raise
        return turn_result(data)

    async def _cancel_turn(self, update_id: str) -> None:
        """Cancel this caller's own turn (immediately): the running one if it is this, a
        queued one before it starts, never another caller's."""
        await self._handle.signal("cancel", args=[True, update_id])

    async def cancel(self, immediate: bool = False) -> None:
        """Cancel the running turn: graceful (the running batch finishes, no new provider
        call) or immediate (running calls cancelled, each answered)."""
        await self._portal.call(self._handle.signal, "cancel", immediate)

    async def messages(self) -> list[dict[str, Any]]:
        """The session's messages."""
        found: list[dict[str, Any]] = await self._portal.call(self._handle.query, "messages")
        return found

    async def approve(self, decisions: Mapping[str, Any]) -> list[str]:
        """Decide held calls: ``{call_id: "allow" | "deny"}`` (bound to the call as it is
        held), or ``{call_id: {"decision": "allow", "digest": d}}`` with the ``digest`` of
        ``pending_approvals()`` the approver saw: an allowed call runs only with the
        arguments of that digest, else it is denied and not run. An unknown or already
        decided id, or a bad value, is a
        [`DurableSessionError`][amplifier_anyio.DurableSessionError] and decides nothing.
        Returns the ids decided."""

        async def send() -> list[str]:
            found: list[str] = await self._handle.execute_update("approve", dict(decisions))
            return found

        try:
            return await self._portal.call(send)
        except WorkflowUpdateFailedError as exc:
            cause = exc.cause if exc.cause is not None else exc
            raise DurableSessionError(str(getattr(cause, "message", cause))) from exc

    async def pending_approvals(self) -> list[dict[str, Any]]:
        """The held calls that wait for a decision: ``call_id``, ``tool``, ``input`` (the
        call's own arguments), ``prompt`` and ``digest`` (what a decision binds to)."""
        found: list[dict[str, Any]] = await self._portal.call(
            self._handle.query, "pending_approvals"
        )
        return found

    async def last_result(self) -> TurnResult | None:
        """The last turn's result, or None before the first."""
        data = await self._portal.call(self._handle.query, "last_result")
        return None if data is None else turn_result(data)

    async def close(self) -> None:
        """End the session's workflow (after a running turn)."""
        await self._portal.call(self._handle.signal, "close")
