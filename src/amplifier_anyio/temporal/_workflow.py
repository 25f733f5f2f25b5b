"""The session workflow: the turn loop in Temporal's deterministic workflow code.

A session is one workflow (its id is the session id); a turn is the update ``run(prompt)``
returning the turn's result as plain data; ``messages``, ``pending_approvals`` and
``last_result`` are queries; ``cancel(immediate)`` is a signal, and so is ``charge`` (a
child session's running totals, reported to its parent in a tree with a budget). The loop
asks the shared turn policy (``runtime/_policy.py``) every decision the in-process engine
asks it, so the two drivers cannot drift. Each provider call and each tool call is one activity
(``_activities.py``); all calls of a reply start at once and their results are appended in
call order. A call without a result is answered *cancelled* when a cancel stopped it and
*interrupted* when its attempt was lost (its worker died and the call may not run twice).

This module runs in Temporal's asyncio-based deterministic loop: it uses ``asyncio`` for
its tasks and cancellation (ruff's banned-api has a marked exception for it) and never
anyio, a clock, randomness or I/O. Our modules are imported through the sandbox
(``imports_passed_through``): they are deterministic data and pure functions here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    CancelledError,
    ChildWorkflowError,
    FailureError,
)

with workflow.unsafe.imports_passed_through():
    from ..events import (
        CANCEL_COMPLETED,
        EXECUTION_END,
        EXECUTION_START,
        ORCHESTRATOR_COMPLETE,
        PROMPT_COMPLETE,
        TASK_AGENT_COMPLETED,
        TASK_AGENT_RESUMED,
        TASK_AGENT_SPAWNED,
    )
    from ..kernel._budget import BUDGET_FINISH_REASON, Budget, BudgetMeter
    from ..kernel._turns import TurnStatus
    from ..models import ToolResult, Usage, structure, unstructure
    from ..runtime import _policy as policy
    from ..runtime._progress import DEFAULT_REPEATS, NO_PROGRESS_FINISH_REASON, ProgressWatch
    from ..tools.task import answer_succeeded, task_answer
    from . import _outlet

__all__ = (
    "SessionWorkflow",
    "WORKFLOW_NAME",
    "PROVIDER_ACTIVITY",
    "TOOL_ACTIVITY",
    "TASK_START_ACTIVITY",
)

WORKFLOW_NAME = "amplifier-session"
PROVIDER_ACTIVITY = "amplifier-provider-call"
TOOL_ACTIVITY = "amplifier-tool-call"
TASK_START_ACTIVITY = "amplifier-task-start"


def _options(spec: dict[str, Any], attempts: int) -> dict[str, Any]:
    return {
        "start_to_close_timeout": timedelta(seconds=float(spec["start_to_close_timeout"])),
        "heartbeat_timeout": timedelta(seconds=float(spec["heartbeat_timeout"])),
        "retry_policy": RetryPolicy(
            maximum_attempts=attempts,
            initial_interval=timedelta(milliseconds=200),
            maximum_interval=timedelta(seconds=5),
        ),
        "cancellation_type": workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
    }


def _budget(limits: dict[str, Any] | None) -> Budget:
    """Budget limits from plain data (None: no limit)."""
    limits = limits or {}
    return Budget(
        max_tokens=limits.get("max_tokens"),
        max_cost_usd=limits.get("max_cost_usd"),
        max_tool_calls=limits.get("max_tool_calls"),
    )


_SPENT = ("tokens", "cost_usd", "tool_calls", "refused")
"""What a turn reports it has spent (``_TurnState.spent``), every count only growing."""


def _charge_spent(turn: _TurnState, key: str | None, spent: dict[str, Any]) -> bool:
    """Charge ``turn`` with what its child ``key`` has spent so far (``spent``: the
    child's running totals, ``_SPENT``) beyond what was already charged for it, as
    in-process the child's spending is charged up the tree as it happens: tokens and
    dollars, tool calls, and the calls its remainder refused (this turn's limit, if this
    turn's chain could not take them either). Totals that arrive late or out of order
    charge nothing twice. Whether anything was charged; nothing for a ``key`` this turn
    does not run (a report that came after its child was settled)."""
    if key is None:
        charged = dict.fromkeys(_SPENT, 0)  # a tree without a budget: charged once, at the end
    elif key in turn.charged:
        charged = turn.charged[key]
    else:
        return False
    more = {k: max(0, spent.get(k) or 0) - charged[k] for k in _SPENT}
    if all(value <= 0 for value in more.values()):
        return False
    for k in _SPENT:
        charged[k] = max(charged[k], spent.get(k) or 0)
    calls, tokens, cost = int(more["tool_calls"]), int(more["tokens"]), float(more["cost_usd"])
    if calls > 0:  # they ran under the child's check of this turn's remainder
        for meter in turn.meter.chain():
            meter.tool_calls += calls
    if tokens > 0 or cost > 0:
        turn.meter.charge_usage(Usage(total_tokens=max(tokens, 0)), max(cost, 0.0))
    refused = int(more["refused"])
    if refused > 0:
        room = turn.meter.remaining().max_tool_calls
        if turn.meter.over is not None or (room is not None and refused > room):
            turn.meter.charge_tool_calls(refused)  # refused here too: the highest limit runs out
            turn.refused += refused
    return True


def _charge(
    turn: _TurnState, key: str | None, result: dict[str, Any], spent: dict[str, Any]
) -> bool:
    """A finished child's result charged to its parent's turn: its usage counted in the
    turn's, and what it spent that its reports had not charged yet. Whether anything was."""
    turn.usage = _add_usage(turn.usage, result["usage"])
    charged = _charge_spent(turn, key, spent)
    if key is not None:
        turn.charged.pop(key, None)  # settled: a report still on its way charges nothing
    return charged


async def _settled(turn: _TurnState, handles: list[asyncio.Future[Any]]) -> bool:
    """Wait for every call of a round; whether a cancel came meanwhile. On a cancel the
    turn is marked cut first (its children see it), then each call is cancelled and still
    awaited: with WAIT_CANCELLATION_COMPLETED each settles as what really happened to it,
    and a second cancel (a deadline and the parent's cancel at once) changes nothing."""
    try:
        await asyncio.wait(handles)
    except asyncio.CancelledError:
        turn.cut = True
        for handle in handles:
            handle.cancel()
        while True:
            try:
                await asyncio.wait(handles)
                break
            except asyncio.CancelledError:
                continue  # the caller re-raises once every call is answered
        return True
    return False


def _add_usage(total: dict[str, Any], usage: dict[str, Any] | None) -> dict[str, Any]:
    if not usage:
        return total
    summed = structure(total, Usage) + structure(usage, Usage)
    added: dict[str, Any] = unstructure(summed)
    return added


@workflow.defn(name=WORKFLOW_NAME)
class SessionWorkflow:
    """One durable session: its messages, its turns one at a time, its cancel."""

    @workflow.init
    def __init__(self, start: dict[str, Any]) -> None:
        self._settings: dict[str, Any] = dict(start["settings"])
        self._messages: list[dict[str, Any]] = list(start.get("messages") or [])
        self._turns = 0
        self._busy = False
        self._closing = False
        self._graceful = False
        self._turn_task: asyncio.Task[dict[str, Any]] | None = None
        self._running_turn: str | None = None
        """The update id of the running turn (its ``run``), or None."""
        self._queued: set[str] = set()
        """The update ids of the turns waiting for the running one to end."""
        self._dropped: set[str] = set()
        """Queued turns cancelled before they started: they never run."""
        self._last: dict[str, Any] | None = start.get("last")
        self._pending: dict[str, dict[str, Any]] = {}
        """Call id → the held call (tool, input, prompt, digest), in call order."""
        self._decisions: dict[str, dict[str, Any]] = {}
        """Call id → its decision (``decision``, the ``digest`` it binds to, ``prompt``)."""
        self._rounds = 0
        self._children: dict[str, dict[str, Any]] = dict(start.get("children") or {})
        """Child session id → what a resume needs: ``agent``, ``settings``, ``messages``,
        its own ``children``."""
        self._running: dict[str, workflow.ChildWorkflowHandle[Any, Any]] = {}
        self._noted: dict[str, dict[str, Any]] = {}  # per task call: what resumes its child
        self._signals: set[asyncio.Task[None]] = set()
        self._state: _TurnState | None = None
        """The running turn (what a child's ``charge`` report is charged to), or None."""
        self._upward: dict[str, str] | None = None
        """A child session in a tree with a budget: its ``parent`` workflow id and the
        ``key`` its ``charge`` reports carry; None: it reports nothing."""
        self._reporting = False
        self._unreported = False
        self._trace: str | None = None
        """The running turn's trace id (its events carry it)."""
        self._trace_root: str | None = None
        """The trace id of the running turn's OpenTelemetry trace: its root turn's."""

    @workflow.run
    async def run(self, start: dict[str, Any]) -> dict[str, Any]:
        """Serve turns until closed; continue as new after the configured turns. A child
        session (a ``task`` call's) runs its one turn and returns it."""
        task = start.get("task")
        if task is not None:
            return await self._task_turn(task)
        limit = int(self._settings["continue_as_new_after_turns"])
        await workflow.wait_condition(
            lambda: self._closing or (self._turns >= limit and not self._busy)
        )
        await workflow.wait_condition(workflow.all_handlers_finished)
        if not self._closing:
            timeout = float(self._settings.get("workflow_task_timeout", 10.0))
            workflow.continue_as_new(
                {
                    "settings": self._settings,
                    "messages": self._messages,
                    "last": self._last,
                    "children": self._children,
                },
                task_timeout=timedelta(seconds=timeout),
            )
        return {"messages": len(self._messages)}

    # -- queries and signals -----------------------------------------------------------

    @workflow.query(name="messages")
    def messages(self) -> list[dict[str, Any]]:
        """The session's messages."""
        return self._messages

    @workflow.query(name="pending_approvals")
    def pending_approvals(self) -> list[dict[str, Any]]:
        """The held calls still waiting for a decision: ``call_id``, ``tool``, ``input``
        (the call's own arguments), ``prompt`` and ``digest`` (what a decision binds to)."""
        return [dict(c) for i, c in self._pending.items() if i not in self._decisions]

    @workflow.update(name="approve")
    def approve(self, decisions: dict[str, Any]) -> list[str]:
        """Decide held calls: ``{call_id: "allow" | "deny"}``, or ``{call_id: {"decision":
        ..., "digest": ...}}`` to bind the decision to the arguments the approver saw. A
        plain decision binds to the digest of the call as it is held. The ids decided."""
        self._rounds += 1
        for call_id, value in decisions.items():
            decision, digest = _decision_of(call_id, value)
            held = self._pending[call_id]
            self._decisions[call_id] = {
                "decision": decision,
                "digest": digest or held["digest"],
                "prompt": held["prompt"],
                "round": self._rounds,
            }
        return list(decisions)

    @approve.validator
    def _check_approve(self, decisions: dict[str, Any]) -> None:
        if not isinstance(decisions, dict) or not decisions:
            msg = "approve: expected {call_id: 'allow' | 'deny'}, got no decision"
            raise ApplicationError(msg, non_retryable=True)
        for call_id, value in decisions.items():
            if call_id not in self._pending:
                waiting = ", ".join(self._pending) or "none"
                msg = f"approve: no call {call_id!r} waits for an approval (waiting: {waiting})"
                raise ApplicationError(msg, non_retryable=True)
            if call_id in self._decisions:
                msg = f"approve: call {call_id!r} is already decided"
                raise ApplicationError(msg, non_retryable=True)
            _decision_of(call_id, value)

    @workflow.query(name="last_result")
    def last_result(self) -> dict[str, Any] | None:
        """The last turn's result, or None before the first."""
        return self._last

    @workflow.signal(name="cancel")
    def cancel(self, immediate: bool, turn: str | None = None) -> None:
        """Cancel the running turn: graceful (no new provider call) or immediate. ``turn``
        (a ``run`` update's id) cancels only that turn: one still waiting for the running
        turn never runs, one already ended is left alone, and the running one is
        cancelled only if it is that turn."""
        if turn is not None:
            if turn in self._queued:
                self._dropped.add(turn)
                return
            if turn != self._running_turn:
                return  # that turn ended: the one running now is someone else's
        if not self._busy:
            return
        self._graceful = True
        if immediate and self._turn_task is not None:
            self._turn_task.cancel()  # the running children are cancelled with their calls
        elif not immediate:
            for handle in self._running.values():
                self._forward(handle)

    def _forward(self, handle: workflow.ChildWorkflowHandle[Any, Any]) -> None:
        """Pass a graceful cancel on to a running child session."""
        sent = asyncio.create_task(handle.signal("cancel", False))
        self._signals.add(sent)
        sent.add_done_callback(self._signals.discard)

    @workflow.signal(name="charge")
    def charge(self, report: dict[str, Any]) -> None:
        """What a running child session has spent so far (its running totals and the
        ``key`` of its task call), sent only in a tree with a budget: charged to the
        running turn's meter at once, so the tree's budget running out stops the turn
        (and every child) while its children still run. Ignored after the turn."""
        turn = self._state
        if turn is None or not isinstance(report, dict):
            return
        if _charge_spent(turn, str(report.get("key")), report):
            self._report(turn)  # up the tree: a grandchild's spending reaches the root

    def _report(self, turn: _TurnState) -> None:
        """Report the turn's running totals to the parent session (a child in a tree with
        a budget; else nothing): one ``charge`` signal at a time, the latest totals once
        the one on its way is delivered (totals, so a skipped one loses nothing)."""
        if self._upward is None:
            return
        self._unreported = True
        if not self._reporting:
            self._reporting = True
            sent = asyncio.create_task(self._send_reports(turn, self._upward))
            self._signals.add(sent)
            sent.add_done_callback(self._signals.discard)

    async def _send_reports(self, turn: _TurnState, upward: dict[str, str]) -> None:
        parent = workflow.get_external_workflow_handle(upward["parent"])
        try:
            while self._unreported:
                self._unreported = False
                await parent.signal("charge", {"key": upward["key"], **turn.spent()})
        except FailureError:
            pass  # the parent is gone (any failure of the signal): the result carries them
        finally:
            self._reporting = False

    @workflow.signal(name="close")
    def close(self) -> None:
        """End the session's workflow once no turn runs."""
        self._closing = True

    # -- a turn ------------------------------------------------------------------------

    @workflow.update(name="run")
    async def run_turn(self, prompt: str, trace_root: str | None = None) -> dict[str, Any]:
        """Run one turn (after any turn still running) and return its result; its spans
        in the trace ``trace_root`` (``TRACE/SPAN``: the caller's turn span, `_spans`)."""
        info = workflow.current_update_info()
        turn_id = info.id if info is not None else ""
        self._queued.add(turn_id)
        try:
            await workflow.wait_condition(lambda: not self._busy or turn_id in self._dropped)
        finally:
            self._queued.discard(turn_id)
        if turn_id in self._dropped:  # its caller cancelled it while it waited its turn
            self._dropped.discard(turn_id)
            return _never_ran()
        self._running_turn = turn_id
        try:
            return await self._one_turn(self._turn(prompt, trace_root=trace_root))
        finally:
            self._running_turn = None

    async def _one_turn(self, turn: Coroutine[Any, Any, dict[str, Any]]) -> dict[str, Any]:
        """Run ``turn`` as the session's one running turn (a cancel reaches it through
        ``_turn_task``); its result, kept as the last."""
        self._busy, self._graceful = True, False
        try:
            self._turn_task = asyncio.create_task(turn)
            result = await self._turn_task
        finally:
            self._turn_task = None
            self._busy = False
            self._turns += 1
        self._last = result
        return result

    async def _task_turn(self, task: dict[str, Any]) -> dict[str, Any]:
        """A child session's one turn, under its parent's remaining ``budget``: its result,
        its messages and children (for a resume) and what it ``spent``. A cancel of this
        workflow (its parent's) is an immediate cancel of the turn."""
        parent = workflow.info().parent
        if task.get("charges") is not None and parent is not None:
            self._upward = {"parent": parent.workflow_id, "key": str(task["charges"])}
        turn = self._turn(
            task["prompt"], task.get("budget"), task.get("deadline"), task.get("trace_root")
        )
        result = await self._one_turn(turn)
        spent = result.pop("spent")
        return {
            "result": result,
            "messages": self._messages,
            "children": self._children,
            "spent": spent,
        }

    @run_turn.validator
    def _check_turn(self, prompt: str, trace_root: str | None = None) -> None:
        if self._closing:
            msg = "run: the session is closed"
            raise RuntimeError(msg)

    def _event(self, event: str, data: dict[str, Any]) -> None:
        """A session-level event for the worker's hooks, only when not replaying (a replay
        re-runs this code for events that were delivered when it first ran)."""
        if workflow.unsafe.is_replaying():
            return
        if self._trace is not None and "trace_id" not in data:
            data = {**data, "trace_id": self._trace}  # as the in-process hooks add it
        key = _outlet.outlet_key(workflow.info().task_queue, str(self._settings["plan"]))
        _outlet.post(key, event, data, self._trace_root)

    def _closing_events(self, turn: _TurnState) -> None:
        """The turn's terminal events, as the in-process turn emits them."""
        orchestrator = str(self._settings.get("orchestrator", "loop-basic"))
        if turn.status is TurnStatus.CANCELLED:
            data = {
                "orchestrator": orchestrator,
                "was_immediate": turn.immediate,
                "turn_count": turn.iterations,
            }
            self._event(CANCEL_COMPLETED, data)
        if turn.status in (TurnStatus.SUCCESS, TurnStatus.INCOMPLETE):
            self._event(
                PROMPT_COMPLETE, {"response_preview": turn.text[:200], "length": len(turn.text)}
            )
        self._event(
            ORCHESTRATOR_COMPLETE,
            {
                "orchestrator": orchestrator,
                "turn_count": turn.iterations,
                "status": str(turn.status),
            },
        )
        end: dict[str, Any] = {
            "response": turn.text,
            "status": policy.execution_status(turn.status),
        }
        if turn.status is TurnStatus.ERROR and turn.error is not None:
            end["error"] = dict(turn.error)
        self._event(EXECUTION_END, end)

    async def _turn(
        self,
        prompt: str,
        carried: dict[str, Any] | None = None,
        deadline: float | None = None,
        trace_root: str | None = None,
    ) -> dict[str, Any]:
        repeats = self._settings.get("no_progress", DEFAULT_REPEATS)
        turn = _TurnState(
            trace_id=workflow.uuid4().hex,
            progress=None if repeats is None else ProgressWatch(int(repeats)),
        )
        self._trace = turn.trace_id
        self._trace_root = turn.trace_root = trace_root or turn.trace_id
        # a child's meter has its parent's remainder above it, as in-process it has its
        # parent's meter: what runs out first stops the turn; the parent's remainder
        # running out is the parent's budget running out (see _run_child)
        above = None
        if carried is not None:
            above = BudgetMeter(limits=_budget(carried), on_exhausted=self._budget_spent)
        turn.meter = BudgetMeter(
            limits=_budget(self._settings.get("budget")),
            parent=above,
            on_exhausted=self._budget_spent,
        )
        now = workflow.now().timestamp()
        timeout = self._settings.get("turn_timeout")
        ends = [d for d in (deadline, None if timeout is None else now + timeout) if d is not None]
        turn.deadline = min(ends) if ends else None
        timer = None
        if turn.deadline is not None:  # a durable timer: it holds across workers
            timer = asyncio.create_task(self._expire(turn.deadline - now))
        self._event(EXECUTION_START, {"prompt": prompt})
        self._messages.append({"role": "user", "content": prompt})
        turn.submit = prompt
        self._state = turn
        try:
            await self._loop(turn)
        except asyncio.CancelledError:
            turn.status = TurnStatus.CANCELLED  # an immediate cancel: every call is answered
            turn.immediate = True
        except ActivityError as exc:
            turn.status = TurnStatus.ERROR
            cause = exc.cause if exc.cause is not None else exc
            turn.error = {"type": type(cause).__name__, "msg": str(cause)}
        finally:
            self._state = None
        if timer is not None:
            timer.cancel()
        if turn.status is TurnStatus.CANCELLED and turn.meter.exhausted is not None:
            # this turn's own budget ran out: not a cancel someone asked for
            turn.status, turn.finish_reason = TurnStatus.INCOMPLETE, BUDGET_FINISH_REASON
            turn.problems.append(f"budget: {turn.meter.report()}")
        else:
            turn.status, turn.finish_reason = policy.halted_status(
                turn.status, turn.halted, turn.finish_reason
            )
        self._closing_events(turn)
        return turn.result()

    async def _expire(self, delay: float) -> None:
        """The turn's deadline: cancel it (immediately) when it comes."""
        await workflow.sleep(max(delay, 0.001))
        if self._turn_task is not None:
            self._turn_task.cancel()

    def _budget_spent(self) -> None:
        """A limit of the turn's budget was reached: cancel the turn at once (from its own
        task, the step that charged raises instead)."""
        task = self._turn_task
        if task is not None and asyncio.current_task() is not task:
            task.cancel()

    async def _loop(self, turn: _TurnState) -> None:
        limit = int(self._settings["max_iterations"])
        pauses = 0
        while policy.within_limit(turn.iterations, limit):
            if turn.halted is not None:
                return  # the no-progress watch stopped the turn
            if self._graceful:
                turn.status = TurnStatus.CANCELLED
                return
            reply = await self._call_provider(turn, with_tools=True, reminder=False)
            if reply is None:
                return
            calls = reply["calls"]
            step = policy.next_step(len(calls), reply["finish_reason"], pauses)
            if step is policy.Step.PAUSE:
                pauses += 1
                if reply["has_content"]:
                    self._messages.append(reply["assistant"])
                continue
            pauses = 0
            if step is policy.Step.ANSWER:
                self._answer(turn, reply, at_limit=False)
                return
            self._messages.append(reply["assistant"])
            await self._batch(turn, calls)
        if turn.halted is not None:
            return
        if self._graceful:
            turn.status = TurnStatus.CANCELLED
            return
        reply = await self._call_provider(turn, with_tools=False, reminder=True)
        if reply is not None:
            self._answer(turn, reply, at_limit=True)

    def _answer(self, turn: _TurnState, reply: dict[str, Any], *, at_limit: bool) -> None:
        if reply["has_content"]:
            self._messages.append(reply["assistant"])
        turn.text = reply["text"]
        turn.status = policy.answer_status(reply["finish_reason"], at_limit=at_limit)

    async def _call_provider(
        self, turn: _TurnState, *, with_tools: bool, reminder: bool
    ) -> dict[str, Any] | None:
        spec = self._settings["provider"]
        if turn.meter.over is not None:
            raise asyncio.CancelledError  # a spent budget: no call starts
        reply: dict[str, Any] = await workflow.execute_activity(
            PROVIDER_ACTIVITY,
            {
                "plan": self._settings["plan"],
                "session_id": workflow.info().workflow_id,
                "trace_id": turn.trace_id,
                "trace_root": turn.trace_root,
                "iteration": turn.iterations,
                "messages": self._messages,
                "with_tools": with_tools,
                "reminder": reminder,
                "injections": turn.take_injections(),
                "submit": turn.take_submit(),
            },
            **_options(spec, int(spec["maximum_attempts"])),
        )
        if reply.get("denied") is not None:  # a hook denied it: no provider call was made
            if reply.get("submit_denied"):
                self._messages.pop()  # prompt:submit denied: the prompt is not stored
            turn.text = reply["denied"]
            turn.status = TurnStatus.INCOMPLETE
            return None
        turn.iterations += 1
        turn.usage = _add_usage(turn.usage, reply.get("usage"))
        turn.finish_reason = reply["finish_reason"]
        if reply.get("usage"):
            usage = structure(reply["usage"], Usage)
            within = turn.meter.charge_usage(usage, float(usage.cost_usd or 0))
            self._report(turn)
            if not within:
                raise asyncio.CancelledError  # the budget ran out: the turn stops here
        return reply

    async def _batch(self, turn: _TurnState, calls: list[dict[str, Any]]) -> None:
        """Start every call at once; append one result per call, in call order.

        A call whose approval is deferred is held: it waits here for the update
        ``approve`` (the batch's other calls keep their results meanwhile), then runs again
        allowed (bound to the decided digest) or is answered denied. A cancel answers the
        calls still held *cancelled*."""
        group = workflow.uuid4().hex
        results: dict[str, dict[str, Any]] = {}
        unfinished: dict[str, str] = {}
        round_: list[tuple[int, dict[str, Any], dict[str, Any] | None]] = [
            (index, call, None) for index, call in enumerate(calls)
        ]
        cancelled = False
        if not turn.meter.charge_tool_calls(len(calls)):  # over the budget: none starts
            turn.refused += len(calls)
            round_, cancelled = [], True
            unfinished.update({str(call["id"]): "cancelled" for call in calls})
        self._report(turn)
        try:
            while round_:
                cancelled = await self._run_calls(turn, round_, group, results, unfinished)
                if cancelled or not self._pending:
                    break
                await workflow.wait_condition(
                    lambda: self._graceful or all(c in self._decisions for c in self._pending)
                )
                if self._graceful:
                    break
                round_ = [
                    (index, call, self._decisions.pop(str(call["id"])))
                    for index, call in enumerate(calls)
                    if str(call["id"]) in self._pending
                ]
                self._pending.clear()
        except asyncio.CancelledError:
            cancelled = True
        for call_id in self._pending:
            unfinished[call_id] = "cancelled"  # held, never decided: a cancel ended the wait
        self._pending.clear()
        self._decisions.clear()
        self._record(turn, calls, results, unfinished)
        if cancelled:
            raise asyncio.CancelledError

    def _record(
        self,
        turn: _TurnState,
        calls: list[dict[str, Any]],
        results: dict[str, dict[str, Any]],
        unfinished: dict[str, str],
    ) -> None:
        """Append the batch's results in call order (an unfinished call answered cancelled
        or interrupted, with what its tool noted), the hooks' injections, and feed the
        no-progress watch."""

        def answer(call_id: str, name: str) -> dict[str, Any]:
            noted = self._noted.pop(call_id, None)  # a cut child: its id, to resume it
            if unfinished.get(call_id) == "cancelled":
                return policy.cancelled_message(call_id, name, noted)
            return policy.interrupted_message(call_id, name, noted)

        extras = {
            i: (m.pop("success", None), m.pop("injections", []), m.pop("after", []))
            for i, m in results.items()
        }
        self._messages.extend(policy.ordered_results(calls, results, answer))
        self._noted.clear()
        found = [extras.get(str(call["id"])) for call in calls]
        for extra in found:
            if extra is not None:
                turn.injections.extend(extra[1])
                self._messages.extend(extra[2])  # the hooks' persistent injections
        step = policy.watch_progress(
            turn.progress,
            [
                (
                    str(call["name"]),
                    call["arguments"],
                    extra[0] if extra is not None else None,
                    results[str(call["id"])]["content"] if extra is not None else None,
                )
                for call, extra in zip(calls, found, strict=True)
            ],
        )
        turn.injections.extend(step.injections)
        if step.problem is not None and turn.halted is None:
            turn.halted = NO_PROGRESS_FINISH_REASON
            turn.problems.append(step.problem)

    async def _run_calls(
        self,
        turn: _TurnState,
        calls: list[tuple[int, dict[str, Any], dict[str, Any] | None]],
        group: str,
        results: dict[str, dict[str, Any]],
        unfinished: dict[str, str],
    ) -> bool:
        """Run ``calls`` (index, call, decision) at once, each its own activity; their
        results, the unfinished and the held go where they belong. Whether a cancel came."""
        spec = self._settings["tools"]
        handles: list[asyncio.Future[Any]] = []
        for index, call, decision in calls:
            if call.get("delegate"):  # a task call: gated, then a child workflow
                delegated = self._delegate(turn, index, call, group, decision)
                handles.append(asyncio.create_task(delegated))
                continue
            attempts = int(spec["maximum_attempts"]) if call.get("idempotent") else 1
            request = self._tool_request(turn, index, call, group)
            attempt = ""
            if decision is not None:
                request["decision"] = decision
                attempt = f"-{decision['round']}"
            handles.append(
                workflow.start_activity(
                    TOOL_ACTIVITY,
                    request,
                    activity_id=f"tool-{call['id']}{attempt}",
                    **_options(spec, attempts),
                )
            )
        cancelled = await _settled(turn, handles)
        for (_, call, _), handle in zip(calls, handles, strict=True):
            call_id = str(call["id"])
            error = None if handle.cancelled() else handle.exception()
            if not handle.cancelled() and error is None:
                message = dict(handle.result())
                held = message.pop("held", None)
                if held is not None and not cancelled:
                    self._pending[call_id] = held
                elif held is not None:
                    unfinished[call_id] = "cancelled"
                else:
                    results[call_id] = message
            elif handle.cancelled() or _cancelled(error):
                unfinished[call_id] = "cancelled"
            else:
                unfinished[call_id] = "interrupted"
        return cancelled

    # -- sub-agents --------------------------------------------------------------------

    def _tool_request(
        self, turn: _TurnState, index: int, call: dict[str, Any], group: str
    ) -> dict[str, Any]:
        session_id = workflow.info().workflow_id
        return {
            "plan": self._settings["plan"],
            "session_id": session_id,
            "trace_id": turn.trace_id,
            "trace_root": turn.trace_root,
            "call": {k: call[k] for k in ("id", "name", "arguments")},
            "index": index,
            "group": group,
            "key": f"{session_id}/{call['id']}",
        }

    async def _delegate(
        self,
        turn: _TurnState,
        index: int,
        call: dict[str, Any],
        group: str,
        decision: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """A ``task`` call: gate it (an activity: its ``tool:pre`` and approval, with
        ``decision`` once it was held), run its child session as a child workflow, then
        answer the call through the tool batch (an activity: the answer, ``tool:post``),
        as the in-process tool-task answers it. A held call comes back ``{"held": ...}``;
        a denied one with its answer and no child."""
        spec = self._settings["tools"]
        options = _options(spec, int(spec["maximum_attempts"]))  # neither runs a tool
        request = self._tool_request(turn, index, call, group)
        gate = {**request, "messages": self._messages, "depth": self._settings.get("depth", 0)}
        attempt = ""
        if decision is not None:
            gate["decision"] = decision
            attempt = f"-{decision['round']}"
        plan: dict[str, Any] = await workflow.execute_activity(
            TASK_START_ACTIVITY, gate, activity_id=f"task-{call['id']}{attempt}", **options
        )
        if "held" in plan:
            return {"held": plan["held"]}
        if "message" in plan:  # answered at its gate: no child runs
            denied: dict[str, Any] = plan["message"]
            return denied
        answer = plan.get("answer")
        if answer is None:
            answer = await self._run_child(turn, str(call["id"]), plan)
        result: dict[str, Any] = await workflow.execute_activity(
            TOOL_ACTIVITY,
            {**request, "answer": answer, "input": plan["input"]},
            activity_id=f"tool-{call['id']}{attempt}",
            **options,
        )
        # the gate's injections (tool:pre's) come before the answer's (tool:post's)
        result["injections"] = [*plan["injections"], *result["injections"]]
        result["after"] = [*plan["after"], *result["after"]]
        return result

    async def _run_child(
        self, turn: _TurnState, call_id: str, plan: dict[str, Any]
    ) -> dict[str, Any]:
        """Run the child session ``plan`` names (new, or resumed by its id) and return the
        call's answer; its usage is the turn's and its spending is charged to the turn's
        budget. An immediate cancel of this turn cancels the child (its calls answered,
        its turn ``cancelled``) and then this call."""
        parent_id = workflow.info().workflow_id
        resumed = plan.get("resume")
        child_id = str(resumed) if resumed is not None else f"{parent_id}-{call_id}"
        known = self._children.get(child_id) if resumed is not None else None
        agent = known["agent"] if known is not None else plan.get("agent")
        if resumed is None and "child" in plan:
            agent = plan["child"]["agent"]
        started: dict[str, Any] = {
            "agent": agent,
            "sub_session_id": child_id,
            "parent_session_id": parent_id,
            "tool_call_id": call_id,
        }
        if resumed is not None:
            self._event(TASK_AGENT_RESUMED, {**started, "session_id": child_id})
        else:
            self._event(TASK_AGENT_SPAWNED, started)
        ended: dict[str, Any] = {**started, "success": False, "status": "cancelled"}
        failed = plan.get("failed")
        if resumed is not None and known is None:
            failed = f"no sub-session {child_id!r} of {parent_id!r}"
        if failed is not None:
            return self._failed(ended, str(failed))
        self._noted[call_id] = {"session_id": child_id}  # as tool-task's note_resume
        start = _child_start(plan, known)
        remaining = turn.meter.remaining()
        start["task"]["budget"] = unstructure(remaining)
        key = None
        if not remaining.unlimited:  # the child reports its spending as it goes
            key = f"{turn.trace_id}/{call_id}"
            turn.charged[key] = dict.fromkeys(_SPENT, 0)
            start["task"]["charges"] = key
        start["task"]["deadline"] = turn.deadline  # a child never outlasts its parent
        start["task"]["trace_root"] = turn.trace_root  # its spans: in the parent's trace
        try:
            handle = await workflow.start_child_workflow(
                WORKFLOW_NAME,
                start,
                id=child_id,
                task_queue=workflow.info().task_queue,
                cancellation_type=workflow.ChildWorkflowCancellationType.WAIT_CANCELLATION_COMPLETED,
                task_timeout=timedelta(seconds=float(self._settings["workflow_task_timeout"])),
            )
            self._running[child_id] = handle
            if self._graceful:
                self._forward(handle)  # a graceful cancel came while the call started
            outcome: dict[str, Any] = await handle
        except asyncio.CancelledError:
            turn.charged.pop(key or "", None)  # what it reported stays charged
            self._event(TASK_AGENT_COMPLETED, ended)
            raise
        except ChildWorkflowError as exc:
            turn.charged.pop(key or "", None)
            cause = exc.cause if exc.cause is not None else exc
            return self._failed(ended, str(getattr(cause, "message", None) or cause))
        finally:
            self._running.pop(child_id, None)
        result, spent = outcome["result"], outcome["spent"]
        self._children[child_id] = {
            "agent": agent,
            "settings": start["settings"],
            "messages": outcome["messages"],
            "children": outcome["children"],
        }
        if _charge(turn, key, result, spent):
            self._report(turn)
        return self._answer_of(turn, ended, child_id, result, spent)

    def _answer_of(
        self,
        turn: _TurnState,
        ended: dict[str, Any],
        child_id: str,
        result: dict[str, Any],
        spent: dict[str, Any],
    ) -> dict[str, Any]:
        """The call's answer for its child's result, and ``task:agent_completed``."""
        answer = {
            "output": result["text"],
            "session_id": child_id,
            "status": result["status"],
            "turn_count": result["turn_count"],
            "usage": result["usage"],
            "cost_usd": spent["cost_usd"],
            "finish_reason": result["finish_reason"],
        }
        ended.update(
            success=answer_succeeded(answer),
            status=answer["status"],
            turn_count=answer["turn_count"],
            usage=answer["usage"],
            cost_usd=answer["cost_usd"],
            finish_reason=answer["finish_reason"],
        )
        if result.get("error"):
            return self._failed(ended, str(result["error"]["msg"]))
        self._event(TASK_AGENT_COMPLETED, ended)
        if turn.cut and result["status"] == str(TurnStatus.CANCELLED):
            raise asyncio.CancelledError  # cancelled with this turn: the call is too
        answered: dict[str, Any] = unstructure(task_answer(answer, child_id))
        return answered

    def _failed(self, ended: dict[str, Any], why: str) -> dict[str, Any]:
        """A delegation that failed: ``task:agent_completed`` and the call's error."""
        message = f"Delegation failed: {why}"
        self._event(
            TASK_AGENT_COMPLETED, {**ended, "success": False, "status": "error", "error": message}
        )
        failure = ToolResult(success=False, error={"message": message, "type": "DelegationError"})
        found: dict[str, Any] = unstructure(failure)
        return found


def _never_ran() -> dict[str, Any]:
    """The result of a turn cancelled before it started: nothing ran, nothing was kept."""
    return {
        "text": "",
        "status": str(TurnStatus.CANCELLED),
        "turn_count": 0,
        "usage": {},
        "trace_id": None,
        "finish_reason": None,
        "error": None,
        "problems": [],
    }


def _child_start(plan: dict[str, Any], known: dict[str, Any] | None) -> dict[str, Any]:
    """A child workflow's start: a new child's (``plan["child"]``), or a resumed one's
    (``known``: its settings, messages and children), with its ``task``."""
    if known is not None:
        start = {
            "settings": known["settings"],
            "messages": known["messages"],
            "children": known["children"],
        }
        instruction = plan["instruction"]
    else:
        child = plan["child"]
        start = {"settings": child["settings"], "messages": child["messages"]}
        instruction = child["instruction"]
    start["task"] = {"prompt": instruction}
    return start


def _decision_of(call_id: str, value: Any) -> tuple[str, str | None]:
    """``(decision, digest or None)`` of one entry of ``approve``; ApplicationError if bad."""
    if isinstance(value, dict):
        decision, digest = value.get("decision"), value.get("digest")
    else:
        decision, digest = value, None
    if decision not in ("allow", "deny") or not (digest is None or isinstance(digest, str)):
        msg = f"approve: {call_id!r}: expected 'allow' or 'deny' (and a digest), got {value!r}"
        raise ApplicationError(msg, non_retryable=True)
    return str(decision), digest


def _cancelled(error: BaseException | None) -> bool:
    if isinstance(error, ActivityError):
        return isinstance(error.cause, CancelledError)
    return isinstance(error, CancelledError | asyncio.CancelledError)


class _TurnState:
    """What one turn has done so far (plain data)."""

    def __init__(self, *, trace_id: str, progress: ProgressWatch | None = None) -> None:
        self.trace_id = trace_id
        self.progress = progress
        self.halted: str | None = None
        self.problems: list[str] = []
        self.injections: list[dict[str, Any]] = []
        """Ephemeral injections for the next provider call."""
        self.submit: str | None = None
        """The prompt, until the first provider call emits ``prompt:submit`` for it."""
        self.immediate = False
        self.iterations = 0
        self.text = ""
        self.status = TurnStatus.SUCCESS
        self.usage: dict[str, Any] = {}
        self.finish_reason: str | None = None
        self.error: dict[str, Any] | None = None
        self.meter = BudgetMeter()
        """What the turn and its children spent, against its budget."""
        self.cut = False
        """Whether an immediate cancel is stopping the running calls."""
        self.refused = 0
        """Tool calls the budget kept from starting (this turn's, and its children's that
        this turn's budget could not take either)."""
        self.charged: dict[str, dict[str, Any]] = {}
        """Per running child (the key its reports carry): what was charged for it so far."""
        self.trace_root = trace_id
        """The trace id of the turn's OpenTelemetry trace (a child's: its root turn's)."""
        self.deadline: float | None = None
        """When the turn is cancelled (a POSIX time of the workflow's clock), or None."""

    def spent(self) -> dict[str, Any]:
        """What the turn and its children spent so far (``_SPENT``), and the calls its
        budget refused."""
        return {
            "tokens": self.meter.tokens,
            "cost_usd": self.meter.cost_usd,
            "tool_calls": self.meter.tool_calls,
            "refused": self.refused,
        }

    def result(self) -> dict[str, Any]:
        return {
            "spent": self.spent(),
            "text": self.text,
            "status": str(self.status),
            "turn_count": self.iterations,
            "usage": self.usage,
            "trace_id": self.trace_id,
            "finish_reason": self.finish_reason,
            "error": self.error,
            "problems": list(self.problems),
        }

    def take_submit(self) -> str | None:
        """The prompt whose ``prompt:submit`` the next provider call emits (once)."""
        found, self.submit = self.submit, None
        return found

    def take_injections(self) -> list[dict[str, Any]]:
        """The ephemeral injections for the provider call about to start (then none)."""
        found, self.injections = self.injections, []
        return found
