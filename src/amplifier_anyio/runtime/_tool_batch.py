"""Run one assistant message's tool calls as one structured batch.

The calls run in one task group (or one at a time when ``parallel`` is off). Each result
lands in the slot of its call index as it finishes; the batch's ``role: tool`` messages are
written to the context in call order once the group has closed. However the batch ends —
normally, by an immediate cancel, by the host's own cancel scope — the writing happens in
a ``finally`` under a bounded shield: finished calls keep their real result and only the
unfinished ones get [`cancelled_result`][amplifier_anyio.runtime.cancelled_result]. So no call is
left unanswered and no finished result is lost.

Both context writes (the assistant message before the calls, the results after) are
shielded and bounded by ``write_timeout``. A write that fails or gives up is recorded in
[`ToolBatch.problems`][amplifier_anyio.runtime.ToolBatch.problems] (and logged at error level) and
the batch raises [`ContextWriteError`][amplifier_anyio.ContextWriteError] — unless a cancellation is
already on its way out, which it never replaces. When the assistant message could not be written
no tool runs, so no result can land without its call.

A synchronous tool runs in a worker thread that the batch waits for, even on cancel: a
thread cannot be interrupted, and abandoning it would let its side effect happen after
the turn reported the call cancelled. A tool that wants to stop early calls
``anyio.from_thread.check_cancelled()``. ``abandon_sync_tools`` opts back into
abandoning (giving up the guarantee that nothing of the turn runs after it returns).

Durable runs (``docs/durable.md``): when the context offers the
[`ToolJournal`][amplifier_anyio.interfaces.ToolJournal] protocol, each call is journaled as
started right before its tool runs and as finished as soon as its result exists. A call
whose approval is deferred ([`ApprovalDeferred`][amplifier_anyio.ApprovalDeferred], from the
approval system or the tool) is journaled and held: its result is a pending placeholder
and [`ToolBatch.held`][amplifier_anyio.runtime.ToolBatch.held] lists it.
[`ToolBatch.run_held`][amplifier_anyio.runtime.ToolBatch.run_held] runs the calls of a batch already
in the context (after a crash, or once approved) and puts their results in place of the
placeholders.
"""

from __future__ import annotations

import heapq
import inspect
import json
import logging
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

import anyio
import attrs

from ..errors import ApprovalDeferred, ArgumentsChangedError, ContextWriteError, unwrap_group
from ..events import TOOL_ERROR, TOOL_POST, TOOL_PRE
from ..kernel._cancellation import CancellationToken
from ..kernel._coordinator import ModuleCoordinator
from ..kernel._foreign import tool_result_of
from ..kernel._handle import TurnHandle
from ..kernel._tracing import ToolCallContext, _tool_call, current_trace_id, tool_call_scope
from ..kernel._turns import PendingApproval, pending_result
from ..models import INVALID_ARGUMENTS_KEY, HookResult, ToolCall, ToolResult, unstructure
from ..models._validators import number
from ._claims import ClaimTable, claim_table
from ._executors import ToolExecutionContext
from ._requests import pending_injection
from ._writes import bounded_write

if TYPE_CHECKING:
    from ..interfaces import ContextManager, Tool, ToolJournal
    from ..kernel._hooks import HookRegistry

__all__ = ("ToolBatchConfig", "ToolBatch", "cancelled_result", "CANCELLED_MESSAGE")

logger = logging.getLogger(__name__)

CANCELLED_MESSAGE = "Tool execution was cancelled"
"""The ``error`` text of the result given to a call that had not finished."""


def cancelled_result(tool_name: str, resume: Mapping[str, Any] | None = None) -> ToolResult:
    """The result of a call that was cancelled before it finished; ``resume``: what the
    tool noted to pick its work up again (``ToolCallContext.note_resume``), added to the
    output beside ``error`` / ``cancelled`` / ``tool`` (never replacing them)."""
    output: dict[str, Any] = {"error": CANCELLED_MESSAGE, "cancelled": True, "tool": tool_name}
    for key, value in (resume or {}).items():
        output.setdefault(key, value)
    return ToolResult(
        success=False, output=output, error={"message": CANCELLED_MESSAGE, "type": "cancelled"}
    )


@attrs.frozen(kw_only=True)
class ToolBatchConfig:
    """How a batch runs: in parallel or not, how many at once, how long each may take
    (seconds), how long each shielded context write may take, and whether synchronous
    tools are abandoned on cancel (off: the batch waits for their threads)."""

    parallel: bool = True
    max_parallel_tools: int | None = attrs.field(
        default=None, validator=number(minimum=1, exclusive=False, optional=True, integer=True)
    )
    tool_timeout: float | None = attrs.field(default=None, validator=number(optional=True))
    write_timeout: float = attrs.field(default=5.0, validator=number())
    abandon_sync_tools: bool = False


@attrs.define(eq=False)
class ToolBatch:
    """One assistant message's tool calls, their results and the hooks' injections.

    ``pending_injections`` collects ephemeral ``tool:pre`` / ``tool:post`` injections for
    the next request (dicts with ``role``, ``content``, ``append_to_last_tool_result``);
    persistent ones are written to the context after the batch's tool messages.
    """

    calls: Sequence[ToolCall]
    tools: Mapping[str, Tool]
    hooks: HookRegistry
    coordinator: ModuleCoordinator | None = None
    """The coordinator that processes hook results; a fresh one when None."""
    handle: TurnHandle | None = None
    """The turn the batch runs in (its token tracks the running calls); None: the
    coordinator's current turn when the batch is built."""
    config: ToolBatchConfig = attrs.field(factory=ToolBatchConfig)
    parallel_group_id: str = attrs.field(factory=lambda: str(uuid.uuid4()))
    pending_injections: list[dict[str, Any]] = attrs.field(factory=list)
    deferred_messages: list[dict[str, Any]] = attrs.field(factory=list)
    problems: list[str] = attrs.field(factory=list)
    """Context writes that failed or gave up (each also logged at error level)."""
    succeeded: list[bool | None] = attrs.field(init=False)
    """Per call index: whether its result is a success (False for an error result, a
    denial, an unknown tool, bad arguments, a timeout; None while it has no result)."""
    held: dict[int, PendingApproval] = attrs.field(factory=dict)
    """Per call index: the calls whose approval was deferred (their result is a placeholder)."""
    approved: frozenset[str] = frozenset()
    """Call ids someone allowed after a deferral: ``ask_user`` does not ask them again."""
    denied: Mapping[str, str] = attrs.field(factory=dict)
    """Call id → prompt of deferred calls someone denied: answered without running."""
    _journal: ToolJournal | None = attrs.field(init=False, default=None)
    _slots: list[str | None] = attrs.field(init=False)
    _trace_id: str | None = attrs.field(init=False, factory=current_trace_id)
    _token: CancellationToken = attrs.field(init=False)
    _hooks_owner: ModuleCoordinator = attrs.field(init=False)
    _is_async: dict[str, bool] = attrs.field(init=False, factory=dict)
    _executors: Mapping[str, Any] = attrs.field(init=False, factory=dict)
    _fatal: BaseException | None = attrs.field(init=False, default=None)
    """A KeyboardInterrupt / SystemExit a call raised: the batch stops, writes its
    results, then raises it (never from inside a task, where asyncio would stop its loop)."""
    _group: anyio.CancelScope | None = attrs.field(init=False, default=None)
    _finishing: _SameInstant | None = attrs.field(init=False, default=None)
    """Orders the tool:post / tool:error of calls that finish at one instant."""
    _turns: list[anyio.Event] | None = attrs.field(init=False, default=None)
    """Per call index: set once the call before it has emitted ``tool:pre`` (_in_turn)."""
    _claims: ClaimTable | None = attrs.field(init=False, default=None)
    """Who waits for whom, in a parallel batch whose tools declare claims (_claims.py)."""
    _notes: dict[int, dict[str, Any]] = attrs.field(init=False, factory=dict)
    """Per call index: what its tool noted to resume its work (``note_resume``), given
    with the cancelled answer of a call that has no result."""
    _build_context: Callable[..., ToolCallContext] = attrs.field(init=False)
    """``_call_context`` bound once: a call's deferred context holds it without a bound
    method object of its own (64 bytes per in-flight call)."""

    def __attrs_post_init__(self) -> None:
        self._slots = [None] * len(self.calls)
        self.succeeded = [None] * len(self.calls)
        if self.coordinator is None:
            # A batch run on its own gets a coordinator of its own, so hook results take
            # the one path (approval fails closed: it has no approval system).
            self.coordinator = ModuleCoordinator()
        self._hooks_owner = self.coordinator
        if self.handle is None:
            self.handle = self.coordinator.turn
        self._token = self.handle.token
        self._executors = getattr(self.coordinator, "tool_executors", None) or {}
        self._build_context = self._call_context

    @property
    def finished(self) -> int:
        """How many calls have a result so far."""
        return sum(slot is not None for slot in self._slots)

    def contents(self) -> list[str | None]:
        """Per call index: the content of its tool message so far (None: no result yet)."""
        return list(self._slots)

    async def run(self, context: ContextManager, assistant_message: dict[str, Any]) -> None:
        """Add ``assistant_message``, run every call, then add one tool message per call.

        Raises [`ContextWriteError`][amplifier_anyio.ContextWriteError] when a write failed or gave
        up (see the module docstring); the history is then never left with an unanswered call on our
        side.
        """
        self._journal = _journal_of(context)
        # Shielded so that a cancel can never leave the results without their call message.
        failure = await self._write("the assistant message", context.add_message, assistant_message)
        if failure is not None:
            await anyio.lowlevel.checkpoint_if_cancelled()  # a cancel explains it better
            raise failure
        try:
            await self._run_all()
        finally:
            failure = await self._write(
                f"the results of {len(self.calls)} tool calls", self._write_results, context
            )
        if failure is not None:
            await anyio.lowlevel.checkpoint_if_cancelled()  # as for the assistant message
            raise failure

    async def run_held(self, context: ContextManager) -> None:
        """Run calls whose assistant message and placeholder results are in ``context``
        already (resuming a batch), then put their results in place of the placeholders.

        ``context`` must offer ``replace_results`` (context-persistent does).
        """
        self._journal = _journal_of(context)
        try:
            await self._run_all()
        finally:
            failure = await self._write(
                f"the results of {len(self.calls)} resumed tool calls",
                self._replace_results,
                context,
            )
        if failure is not None:
            await anyio.lowlevel.checkpoint_if_cancelled()
            raise failure

    async def _run_all(self) -> None:
        handle = self.handle
        if handle is not None and not handle.budget.charge_tool_calls(len(self.calls)):
            # over the budget (kernel/_budget): the turn that ran out was cancelled just now
            await anyio.lowlevel.checkpoint_if_cancelled()
        if self.config.parallel and len(self.calls) > 1:
            await self._run_parallel()
        else:
            for index, call in enumerate(self.calls):
                await self._execute(index, call)
                if self._fatal is not None:
                    break
        if self._fatal is not None:
            raise self._fatal

    async def _replace_results(self, context: Any) -> None:
        await context.replace_results(self._result_messages())
        if self.deferred_messages:
            await context.add_messages(self.deferred_messages)

    async def _write(
        self, what: str, write: Callable[[Any], Awaitable[None]], arg: Any
    ) -> ContextWriteError | None:
        """One context write under a bounded shield (``_writes``); the error to raise if
        it did not land, recorded in ``problems``."""
        error = await bounded_write(what, write, arg, self.config.write_timeout)
        if error is not None:
            self.problems.append(str(error))
        return error

    async def _run_parallel(self) -> None:
        try:
            await self._spawn_all()
        except BaseExceptionGroup as group:  # only what a call cannot turn into its result
            raise unwrap_group(group) from None

    async def _spawn_all(self) -> None:
        claims = self._claims = claim_table(
            self.calls, self.tools, self.hooks, self.parallel_group_id
        )
        in_order = self.hooks.has_handlers(TOOL_PRE)  # tool:pre in call order: see _in_turn
        if in_order and (claims is not None or self.config.max_parallel_tools is not None):
            self._turns = [anyio.Event() for _ in self.calls]
            self._turns[0].set()
        if self.hooks.has_handlers(TOOL_POST) or self.hooks.has_handlers(TOOL_ERROR):
            self._finishing = _SameInstant()
        async with anyio.create_task_group() as tg:
            self._group = tg.cancel_scope
            if claims is not None:  # calls may wait for earlier ones: see _claims.py
                limit = self.config.max_parallel_tools
                limiter = None if limit is None else anyio.CapacityLimiter(limit)
                for index, call in enumerate(self.calls):
                    self._spawn(tg, index, claims.run, self._execute, index, call, limiter)
                return
            if self.config.max_parallel_tools is None:
                if in_order:  # the k-th task to start runs call k: see _ticketed
                    tickets = iter(range(len(self.calls)))
                    for _ in self.calls:
                        tg.start_soon(self._ticketed, tickets)
                    return
                for index, call in enumerate(self.calls):
                    tg.start_soon(self._execute, index, call)
                return
            limiter = anyio.CapacityLimiter(self.config.max_parallel_tools)
            for index, call in enumerate(self.calls):
                self._spawn(tg, index, self._run_limited, index, call, limiter)

    def _spawn(
        self,
        tg: anyio.abc.TaskGroup,
        index: int,
        run: Callable[..., Coroutine[Any, Any, None]],
        *args: Any,
    ) -> None:
        if self._turns is None:
            tg.start_soon(run, *args)
        else:
            tg.start_soon(self._in_turn, index, run, args)

    async def _ticketed(self, tickets: Iterator[int]) -> None:
        """Run the next call of the batch: the k-th task to start takes call k.

        The scheduler picks the order in which a batch's tasks start (trio runs them in
        spawn order or its reverse, on purpose). A task takes its call when it first
        runs, and a call's ``tool:pre`` emit starts before its first checkpoint, so the
        emits start in call order on every run — in the same scheduling round, with no
        task waiting for another.
        """
        index = next(tickets)
        await self._execute(index, self.calls[index])

    async def _in_turn(
        self, index: int, run: Callable[..., Coroutine[Any, Any, None]], args: tuple[Any, ...]
    ) -> None:
        """Start a call once the call before it has started to emit its ``tool:pre``.

        For a batch whose calls take seats (``max_parallel_tools``) or claims, where a
        task may wait before its ``tool:pre``: waiting here, before any seat or claim is
        taken, makes the emits start in call order on every run, and cannot deadlock (a
        call only ever waits for earlier ones). The wait ends at the earlier call's
        emit, not at its tool: the tools still run in parallel.
        """
        assert self._turns is not None
        await self._turns[index].wait()
        try:
            await run(*args)
        finally:
            # A call that never reached its tool:pre (a subclass answered it first, as
            # loop-events' scheduler stage may) still lets the next one go.
            self._pass_turn(index)

    def _pass_turn(self, index: int) -> None:
        """Let the next call of the batch emit its ``tool:pre`` (idempotent)."""
        turns = self._turns
        if turns is not None and index + 1 < len(turns):
            turns[index + 1].set()

    async def _run_limited(
        self, index: int, call: ToolCall, limiter: anyio.CapacityLimiter
    ) -> None:
        async with limiter:
            await self._execute(index, call)

    def _result_messages(self) -> list[dict[str, Any]]:
        # A cancel may leave thousands of calls without a result: their text is built once
        # per tool name (a JSON encoding), not once per call.
        cancelled: dict[str, str] = {}
        messages: list[dict[str, Any]] = [
            {
                "role": "tool",
                "tool_call_id": call.id,
                "name": call.name,
                "content": slot
                if slot is not None
                else cancelled.get(call.name)
                or cancelled.setdefault(call.name, _cancelled_content(call.name)),
            }
            for call, slot in zip(self.calls, self._slots, strict=True)
        ]
        for index, resume in self._notes.items():
            if self._slots[index] is None:  # cut: the answer says how to pick it up
                name = self.calls[index].name
                messages[index]["content"] = _cancelled_content(name, resume)
        for index in self.held:
            messages[index]["metadata"] = {"pending_approval": True}
        return messages

    async def _write_results(self, context: ContextManager) -> None:
        messages = self._result_messages()
        messages.extend(self.deferred_messages)
        add_many = getattr(context, "add_messages", None)
        if add_many is not None:
            # One call for the whole batch: one loop pass, and one fsync for a file context.
            await add_many(messages)
            return
        for message in messages:
            await context.add_message(message)

    # -- one call --------------------------------------------------------------------------

    def _payload(self, index: int, call: ToolCall, tool_input: Any) -> dict[str, Any]:
        return {
            "tool_name": call.name,
            "tool_call_id": call.id,
            "tool_input": tool_input,
            "parallel_group_id": self.parallel_group_id,
            "index": index,
        }

    async def _emit(
        self, event: str, data: dict[str, Any], name: str, turn: int | None = None
    ) -> HookResult:
        """Emit an event whose handlers exist (callers check, to skip building the payload).

        An injection is held until the batch's results are written: persisted at once it
        would land between the assistant's tool calls and their results, which providers
        reject. The coordinator sees it as ephemeral (its limits and user messages still
        apply) and it is held only once the coordinator accepted it, so an oversized one
        never reaches the context or a request.
        """
        if turn is not None:
            # The next call starts its emit once this one yields: emits start in call
            # order, and a gate hook that awaits does not hold the calls after it.
            self._pass_turn(turn)
        result: HookResult = await self.hooks.emit(event, data)
        if result.action == "ask_user" and data.get("tool_call_id") in self.approved:
            result = attrs.evolve(result, action="continue")  # allowed after its deferral
        injection = result.action == "inject_context" and bool(result.context_injection)
        sent = (
            attrs.evolve(result, ephemeral=True) if injection and not result.ephemeral else result
        )
        processed: HookResult = await self._hooks_owner.process_hook_result(sent, event, name)
        if injection:
            self._hold(result, event, name)
        return processed

    def _hold(self, result: HookResult, event: str, name: str) -> None:
        if result.ephemeral:
            self.pending_injections.append(pending_injection(result))
            return
        self.deferred_messages.append(
            {
                "role": result.context_injection_role,
                "content": result.context_injection,
                "metadata": {"source": "hook", "hook_name": name, "event": event},
            }
        )

    async def _execute(self, index: int, call: ToolCall) -> None:  # noqa: PLR0915 - kept flat
        """Run one call through its hooks, filling its slot as soon as a result exists.

        The slot is written before ``tool:post`` / ``tool:error`` are emitted, so a cancel
        arriving during those hooks keeps the tool's real result. Whatever fails on this
        call's own path (a hook's data of the wrong shape, output that cannot be
        serialised, the approval system, an oversized injection) becomes this call's error
        result: its siblings never see it. This is the per-call hot path: it stays flat
        (few coroutine frames) on purpose.
        """
        self._token.register_tool_start(call.id, call.name)
        tool_input: Any = None
        try:
            if call.id in self.denied:
                self._slots[index] = f"Denied by user: {self.denied[call.id]}"
                self.succeeded[index] = False
                return
            tool_input, problem = _decode_arguments(call.arguments)
            own_input = tool_input  # the call's own arguments: what an approval binds to
            if self.hooks.has_handlers(TOOL_PRE):
                payload = self._payload(index, call, tool_input)
                pre = await self._emit(TOOL_PRE, payload, call.name, index)
                if pre.action == "deny":
                    self._slots[index] = f"Denied by hook: {pre.reason or 'no reason given'}"
                    self.succeeded[index] = False
                    return
                if pre.data is not None:  # applied whatever the action: see HookRegistry.emit
                    changed = _field(pre.data, "tool_input", tool_input)
                    if changed != tool_input:  # unchanged: keep the provider's own reason
                        tool_input, problem = _decode_arguments(changed)
            self._pass_turn(index)
            tool = self.tools.get(call.name)
            if tool is None:
                message = f"Tool '{call.name}' not found"
                result = await self._error(index, call, "ToolNotFoundError", message)
            elif problem is not None:
                result = await self._error(index, call, "InvalidArgumentsError", problem)
            else:
                # no journal, no claims, no extra await: this is the hot path
                if self._claims is not None and index in self._claims.members:
                    # ordered after tool:pre: the claims are those of the input that runs
                    await self._claims.enter(index, call, tool, tool_input)
                key = None
                if self._journal is not None:
                    key = await self._journal_start(call, tool, tool_input, own_input)
                if self.config.tool_timeout is not None or call.name in self._executors:
                    result = await self._invoke(index, call, tool, tool_input, key)
                else:
                    # _invoke inlined for a local call without a timeout (the common case):
                    # one coroutine frame less, and the call's ToolCallContext is built
                    # only if the tool asks for it (current_tool_call).
                    scope = _tool_call.set((self._build_context, index, call, key))
                    try:
                        if self._is_async.get(call.name):
                            value = await tool.execute(tool_input)
                        else:
                            value = await self._start(call.name, tool, tool_input)
                        result = (
                            value if type(value) is ToolResult else _as_result(value, call.name)
                        )
                    except ApprovalDeferred:
                        raise  # the tool asks for an approval: the call is held, not failed
                    except Exception as exc:  # noqa: BLE001 - a failing tool is a result
                        result = await self._error(
                            index, call, type(exc).__name__, str(exc) or repr(exc)
                        )
                    finally:
                        _tool_call.reset(scope)
            content = self._slots[index] = _content_of(result)
            self.succeeded[index] = result.success
            journaled = self._journal is not None and tool is not None and problem is None
            if journaled:
                await self._journal_finish(call, content, result.success)
            replaced = await self._post(index, call, tool_input, result)
            if replaced is not None:
                self._slots[index] = replaced
                if journaled:
                    await self._journal_finish(call, replaced, result.success)
        except ApprovalDeferred as deferral:
            # held with the call's own arguments, whether the approval system deferred it
            # in tool:pre (before the rewrite) or the tool did (after it)
            await self._hold_call(
                index, call, _decode_arguments(call.arguments)[0], deferral.prompt
            )
        except ArgumentsChangedError as changed:  # an approval binds to the call it was given for
            self._slots[index] = f"Denied: {changed}"
            self.succeeded[index] = False
        except (KeyboardInterrupt, SystemExit) as exc:
            self._stop(index, exc)
        except Exception as exc:  # noqa: BLE001 - one call's failure is that call's result
            logger.warning("tool call %s (%s) failed: %r", call.id, call.name, exc)
            await self._error(index, call, type(exc).__name__, str(exc) or repr(exc))
        finally:
            self._pass_turn(index)
            self._token.register_tool_complete(call.id)

    async def _invoke(
        self, index: int, call: ToolCall, tool: Any, tool_input: Any, key: str | None = None
    ) -> ToolResult:
        """Execute the tool under its timeout, with its call context visible to it."""
        context = self._call_context(index, call, key)
        timeout = self.config.tool_timeout
        with tool_call_scope(context):
            try:
                if self._executors and call.name in self._executors:  # not local: an executor
                    work = self._elsewhere(call, tool, tool_input, context)
                else:
                    work = self._start(call.name, tool, tool_input)
                if timeout is None:  # no cancel scope at all: one per call is measurable
                    return _as_result(await work, call.name)
                with anyio.move_on_after(timeout):
                    return _as_result(await work, call.name)
            except ApprovalDeferred:
                raise  # the tool asks for an approval: the call is held, not failed
            except Exception as exc:  # noqa: BLE001 - a failing tool is a result, not a crash
                return await self._error(index, call, type(exc).__name__, str(exc) or repr(exc))
        return await self._error(index, call, "TimeoutError", f"timed out after {timeout} s")

    def _call_context(self, index: int, call: ToolCall, key: str | None) -> ToolCallContext:
        return ToolCallContext(
            tool_call_id=call.id,
            tool_name=call.name,
            parallel_group_id=self.parallel_group_id,
            index=index,
            trace_id=self._trace_id,
            idempotency_key=key,
            approved=call.id in self.approved,
            batch=self.calls,
            on_note=partial(self._note, index),
        )

    async def _note(self, index: int, fields: Mapping[str, Any]) -> None:
        """Keep what call ``index`` noted to resume its work (``note_resume``): for the
        batch's cancelled answer, and in the journal (``journal_noted``, when the context
        offers it) for the interrupted answer after a crash; a journal write that fails
        or gives up is a problem of the batch (the cancel path still has the note)."""
        self._notes.setdefault(index, {}).update(fields)
        note = getattr(self._journal, "journal_noted", None)
        if note is None:
            await anyio.lowlevel.checkpoint()
            return
        call, timeout = self.calls[index], self.config.write_timeout
        with anyio.CancelScope(shield=True), anyio.move_on_after(timeout) as bound:
            try:
                await note(call.id, dict(fields))
            except Exception as exc:  # noqa: BLE001 - reported; the cancel path has it
                self._problem(f"journaling the note of {call.id} failed: {exc}")
        if bound.cancelled_caught:
            self._problem(f"journaling the note of {call.id} gave up after {timeout} s")
        await anyio.lowlevel.checkpoint_if_cancelled()

    def _elsewhere(
        self, call: ToolCall, tool: Any, tool_input: Any, context: ToolCallContext
    ) -> Awaitable[ToolResult]:
        """The call on its executor (DESIGN §11), with what it needs to run it elsewhere."""
        coordinator = self._hooks_owner
        ctx = ToolExecutionContext(
            call=context,
            spec=coordinator.tool_specs.get(call.name),
            session_id=coordinator.session_id,
        )
        result: Awaitable[ToolResult] = self._executors[call.name].run(call, tool, tool_input, ctx)
        return result

    def _start(self, name: str, tool: Any, tool_input: dict[str, Any]) -> Awaitable[Any]:
        """The awaitable that runs the tool: its own coroutine when async (no extra frame)."""
        execute = tool.execute
        is_async = self._is_async.get(name)
        if is_async is None:
            # inspect costs microseconds: once per tool per batch, not once per call.
            is_async = self._is_async[name] = inspect.iscoroutinefunction(execute)
        if is_async:
            result: Awaitable[Any] = execute(tool_input)
            return result
        return _in_thread(execute, tool_input, abandon=self.config.abandon_sync_tools)

    # -- the journal (only with a context that offers it) -----------------------------------

    async def _journal_start(
        self, call: ToolCall, tool: Any, tool_input: Any, own_input: Any = None
    ) -> str | None:
        """Record the call as started (fsynced) before it runs; its idempotency key.

        An approved call is recorded with its own arguments (``own_input``, before the
        ``tool:pre`` rewrite): the decision binds to them, and the hooks' rewrite, applied
        again on resume, is not a change of arguments. (A call held by an earlier version
        with the rewritten input still matches that.) Raises (the call's error result, the
        tool not run) when the record cannot be written: running it unrecorded could run
        it twice after a crash."""
        if self._journal is None:
            return None
        idempotent = getattr(tool, "idempotent", False) is True
        journal = self._journal
        with anyio.CancelScope(shield=True), anyio.move_on_after(self.config.write_timeout):
            if call.id in self.approved and own_input is not None and own_input != tool_input:
                try:
                    return await journal.journal_started(
                        call.id, call.name, own_input, idempotent=idempotent
                    )
                except ArgumentsChangedError:
                    pass  # nothing was recorded: try the rewritten input it may be held with
            return await journal.journal_started(
                call.id, call.name, tool_input, idempotent=idempotent
            )
        msg = f"journaling the call gave up after {self.config.write_timeout} s; not run"
        raise ContextWriteError(msg)

    async def _journal_finish(self, call: ToolCall, content: str, success: bool) -> None:
        """Record the call's result as soon as it exists; a failure is a problem of the
        batch (the result still reaches the context with the batch's messages)."""
        if self._journal is None:
            return
        timeout = self.config.write_timeout
        with anyio.CancelScope(shield=True), anyio.move_on_after(timeout) as bound:
            try:
                await self._journal.journal_finished(call.id, content, success=success)
            except Exception as exc:  # noqa: BLE001 - reported, the result is kept
                self._problem(f"journaling the result of {call.id} failed: {exc}")
        if bound.cancelled_caught:
            self._problem(f"journaling the result of {call.id} gave up after {timeout} s")

    async def _hold_call(self, index: int, call: ToolCall, tool_input: Any, prompt: str) -> None:
        """Hold a call whose approval was deferred; without a journal, deny it."""
        if self._journal is None:
            self._slots[index] = (
                "Denied: the approval was deferred, but the context cannot hold the call"
            )
            self.succeeded[index] = False
            return
        problem = f"holding the call gave up after {self.config.write_timeout} s"
        with anyio.CancelScope(shield=True), anyio.move_on_after(self.config.write_timeout):
            try:
                await self._journal.journal_deferred(call.id, call.name, tool_input, prompt)
            except Exception as exc:  # noqa: BLE001 - this call's error result
                problem = f"holding the call failed: {type(exc).__name__}: {exc}"
            else:
                self._slots[index] = pending_result(call.id, call.name, prompt)["content"]
                self.succeeded[index] = False
                self.held[index] = PendingApproval(
                    call_id=call.id, tool=call.name, input=tool_input, prompt=prompt
                )
                return
        await self._error(index, call, "ContextWriteError", problem)

    def _stop(self, index: int, exc: BaseException) -> None:
        """A call raised KeyboardInterrupt / SystemExit: it gets an error result, the
        batch's other calls are cancelled, and the batch raises ``exc`` once its results
        are written (the one ExceptionGroup policy: it propagates, unwrapped)."""
        kind = type(exc).__name__
        self._slots[index] = _content_of(
            ToolResult(success=False, error={"message": f"stopped by {kind}", "type": kind})
        )
        self.succeeded[index] = False
        if self._fatal is None:
            self._fatal = exc
        if self._group is not None:
            self._group.cancel(f"tool batch: a call was stopped by {kind}")

    def _problem(self, problem: str) -> None:
        logger.error("%s", problem)
        self.problems.append(problem)

    async def _error(self, index: int, call: ToolCall, kind: str, message: str) -> ToolResult:
        result = ToolResult(success=False, error={"message": message, "type": kind})
        self._slots[index] = _content_of(result)
        self.succeeded[index] = False
        if self.hooks.has_handlers(TOOL_ERROR):
            if self._finishing is not None:
                await self._finishing.in_call_order(index)
            data = self._payload(index, call, None)
            del data["tool_input"]
            await self.hooks.emit(TOOL_ERROR, {**data, "error": {"type": kind, "msg": message}})
        return result

    async def _post(
        self, index: int, call: ToolCall, tool_input: Any, result: ToolResult
    ) -> str | None:
        """Emit ``tool:post``; the replacement content if a hook changed the result."""
        if not self.hooks.has_handlers(TOOL_POST):
            return None
        output = result.output
        if type(output) is str and result.success and result.error is None:
            sent: Any = {"output": output}  # what unstructure gives, without the converter
        else:
            sent = unstructure(result)
        payload = self._payload(index, call, tool_input)
        payload["result"] = sent
        if self._finishing is not None:
            await self._finishing.in_call_order(index)
        post = await self._emit(TOOL_POST, payload, call.name)
        if post.action == "deny" or post.data is None:
            return None
        replaced = _field(post.data, "result", sent)
        if replaced is sent or replaced == sent:
            return None
        if isinstance(replaced, str):
            return replaced
        try:
            return json.dumps(replaced)
        except (TypeError, ValueError) as exc:
            msg = f"a tool:post hook gave a result that is not JSON: {exc}"
            raise TypeError(msg) from exc


class _SameInstant:
    """Calls of a batch emit in the order they finished, and in call order within an instant.

    Calls that finish at one instant of the clock (tools that sleep alike under a virtual
    clock, or answer at once) are woken together, and the scheduler runs them in any
    order (trio shuffles on purpose). Each finished call notes its instant and yields
    once, so that every call finishing in that instant joins that instant's queue; then
    the queue goes by call index, and each call, as it goes, wakes the next one only.

    Only calls of one instant wait for each other: under a real clock two calls rarely
    share an instant, so a call pays one yield and no wait. Across instants the order is
    the clock's: under a virtual clock time cannot move on while an instant's queue has a
    runnable head. A call never waits for one that has not finished.
    """

    def __init__(self) -> None:
        self._queues: dict[float, list[int]] = {}  # per instant, a heap of call indexes
        self._waiting: dict[int, anyio.Event] = {}

    async def in_call_order(self, index: int) -> None:
        instant = anyio.current_time()
        queue = self._queues.setdefault(instant, [])
        heapq.heappush(queue, index)
        try:
            await anyio.lowlevel.checkpoint()  # the others of this instant join the queue
            while queue[0] != index:
                wake = self._waiting[index] = anyio.Event()
                await wake.wait()
        finally:
            # Whether it goes on or was cancelled, it leaves the queue; the next may go.
            self._waiting.pop(index, None)
            if queue[0] == index:
                heapq.heappop(queue)
            else:
                queue.remove(index)
                heapq.heapify(queue)
            if not queue:
                del self._queues[instant]
            elif (head := self._waiting.get(queue[0])) is not None:
                head.set()


def _journal_of(context: Any) -> ToolJournal | None:
    journal: ToolJournal | None = context if hasattr(context, "journal_started") else None
    return journal


def _field(data: Any, key: str, default: Any) -> Any:
    """``data[key]`` of a hook's data, which must be a dict."""
    if not isinstance(data, dict):
        msg = f"a hook gave data of type {type(data).__name__}, not a dict"
        raise TypeError(msg)
    return data.get(key, default)


def _cancelled_content(tool_name: str, resume: Mapping[str, Any] | None = None) -> str:
    return cancelled_result(tool_name, resume).get_serialized_output()


def _content_of(result: ToolResult) -> str:
    if not result.success and isinstance(result.output, str):
        return f"Error: {result.output}"
    try:
        return result.get_serialized_output()
    except (TypeError, ValueError) as exc:
        msg = f"the tool's output cannot be serialised: {exc}"
        raise TypeError(msg) from exc


def _decode_arguments(arguments: Any) -> tuple[Any, str | None]:
    """The call's input as a dict, or the problem that stops it from being one."""
    if isinstance(arguments, dict):
        marker = arguments.get(INVALID_ARGUMENTS_KEY)
        if isinstance(marker, dict):
            return marker.get(
                "raw"
            ), f"arguments are not a valid JSON object: {marker.get('error')}"
        return arguments, None
    if isinstance(arguments, str | bytes):
        try:
            decoded = json.loads(arguments or "{}")
        except ValueError as exc:
            return arguments, f"arguments are not valid JSON: {exc}"
        if isinstance(decoded, dict):
            return decoded, None
        return arguments, f"arguments must be a JSON object, not {type(decoded).__name__}"
    return arguments, f"arguments must be a JSON object, not {type(arguments).__name__}"


async def _in_thread(execute: Any, tool_input: dict[str, Any], *, abandon: bool) -> Any:
    # Not abandoned (the default): a cancel or timeout waits for the thread, and a result
    # that arrives is the call's real result, since its side effect has happened.
    result = await anyio.to_thread.run_sync(partial(execute, tool_input), abandon_on_cancel=abandon)
    if inspect.isawaitable(result):
        result = await result
    return result


def _as_result(value: Any, name: str) -> ToolResult:
    # An amplifier-core ToolResult keeps its success, output and error (kernel/_foreign).
    if isinstance(value, ToolResult):
        return value
    return tool_result_of(value, origin=f"tool {name!r}")
