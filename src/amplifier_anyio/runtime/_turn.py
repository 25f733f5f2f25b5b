"""The turn engine: one [`Turn`][amplifier_anyio.runtime.Turn] that every orchestrator drives.

A turn owns its cancel scope (``turn_timeout`` is its deadline, the turn's token cancels
it), and that scope encloses every event of the turn from ``execution:start`` on. Inside
it: ``prompt:submit``, the user message, then provider calls until the model answers,
the iteration limit is reached, a hook denies, or a graceful cancel stops the turn before
its next provider call. How the tool calls of one response run is the orchestrator's
policy (a [`ToolRunner`][amplifier_anyio.runtime.ToolRunner]);
[`Turn.run_batch`][amplifier_anyio.runtime.Turn.run_batch] is the structured parallel batch.

However the turn ends — answer, error, iteration limit, either cancel, the host's own
cancel scope, the deadline — it closes with its terminal events, exactly once, under a
shield: ``cancel:completed`` (only when the status is ``cancelled``), ``prompt:complete``
(only with an answer), ``orchestrator:complete`` and ``execution:end``. Each event has
its own bound, so one hung observer cannot drop the others; an expired bound is logged
at error level and recorded in `TurnResult.problems`. A host cancel is re-raised
after the terminal events; every other ending is a [`TurnResult`][amplifier_anyio.TurnResult].

A turn also ends when a tool batch holds a call for an approval that outlives it
(status ``awaiting_approval``, the held calls in ``TurnResult.pending_approvals``). A
*resuming* turn (``session.resume()``) skips the prompt: it runs what the last batch left
to do (idempotent calls a crash interrupted, calls since allowed or denied) and goes on
with the provider from there — or ends at once when the history already ends with the
answer. See ``docs/durable.md``.

Every context write of the turn — the prompt, an assistant message, the answer, a batch's
results — runs under a shield bounded by ``write_timeout`` (``runtime/_writes``): a cancel
waits for the write (so the history in memory and a persistent file never part), and a
write that fails or gives up ends the turn with status ``error``, recorded in
`TurnResult.problems`.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import anyio
import attrs

from ..events import (
    CANCEL_COMPLETED,
    EXECUTION_END,
    EXECUTION_START,
    ORCHESTRATOR_COMPLETE,
    PROMPT_COMPLETE,
    PROMPT_SUBMIT,
)
from ..kernel._budget import BUDGET_FINISH_REASON
from ..kernel._handle import turn_scope
from ..kernel._tracing import trace_scope
from ..kernel._turns import PendingApproval, TurnResult, TurnStatus
from ..models import ChatResponse, HookResult, ToolCall, Usage
from ..models._validators import number
from ._policy import (
    INCOMPLETE_FINISH_REASONS,
    PAUSE_TURN,
    Step,
    answer_status,
    denial,
    execution_status,
    halted_status,
    next_step,
    watch_progress,
    within_limit,
)
from ._progress import DEFAULT_REPEATS, NO_PROGRESS_FINISH_REASON, ProgressWatch
from ._provider_call import call_provider
from ._requests import (
    assistant_message,
    ephemeral_injection,
    select_provider,
    tool_calls_of,
)
from ._tool_batch import ToolBatch, ToolBatchConfig
from ._writes import bounded_write

if TYPE_CHECKING:
    from ..interfaces import ContextManager, Provider, Tool
    from ..kernel._cancellation import CancellationToken
    from ..kernel._coordinator import ModuleCoordinator
    from ..kernel._handle import TurnHandle
    from ..kernel._hooks import HookRegistry

__all__ = ("Turn", "TurnConfig", "ToolRunner", "INCOMPLETE_FINISH_REASONS", "PAUSE_TURN")

logger = logging.getLogger(__name__)

ToolRunner = Callable[["Turn", ChatResponse, list[ToolCall]], Awaitable[None]]
"""An orchestrator's tool policy: run one response's calls and write the results.

It must leave every call answered in the context (the default,
[`Turn.run_batch`][amplifier_anyio.runtime.Turn.run_batch], does so on every path)."""


@attrs.frozen(kw_only=True)
class TurnConfig:
    """The engine's settings (``-1`` iterations: unlimited; times in seconds).

    ``event_timeout`` bounds each terminal event's observers; ``write_timeout`` (in the
    tool batch's config) each shielded context write.
    """

    max_iterations: int = attrs.field(
        default=-1, validator=number(minimum=-1, exclusive=False, integer=True)
    )
    turn_timeout: float | None = attrs.field(default=None, validator=number(optional=True))
    event_timeout: float = attrs.field(default=5.0, validator=number())
    extended_thinking: bool = False
    reasoning_effort: str | None = None
    default_provider: str | None = None
    no_progress: int | None = attrs.field(
        default=DEFAULT_REPEATS, validator=number(optional=True, integer=True)
    )
    """Same failing tool calls in a row before a reminder; the turn stops at twice as many
    (``runtime/_progress``). None: off."""


@attrs.define(eq=False)
class Turn:
    """One turn's state and its run. Never shared: every turn builds its own."""

    prompt: str
    context: ContextManager
    providers: dict[str, Provider]
    tools: dict[str, Tool]
    hooks: HookRegistry
    coordinator: ModuleCoordinator
    handle: TurnHandle
    """The turn's handle: its token, deadline and pending cancel (never "the current one")."""
    config: TurnConfig = attrs.field(factory=TurnConfig)
    batch: ToolBatchConfig = attrs.field(factory=ToolBatchConfig)
    orchestrator: str = "loop-basic"
    streaming: bool = False
    run_tools: ToolRunner | None = None
    """The orchestrator's tool policy; None runs
    [`run_batch`][amplifier_anyio.runtime.Turn.run_batch]."""
    trace_id: str = attrs.field(factory=lambda: uuid.uuid4().hex)
    iterations: int = 0
    usage: Usage = attrs.field(factory=Usage)
    text: str = ""
    status: TurnStatus = TurnStatus.SUCCESS
    error: BaseException | None = None
    finish_reason: str | None = None
    injections: list[dict[str, Any]] = attrs.field(factory=list)
    """Ephemeral injections waiting for the next request."""
    problems: list[str] = attrs.field(factory=list)
    provider_name: str = ""
    resuming: bool = False
    """Continue the turn the history ends in instead of starting one (``session.resume``)."""
    pending_approvals: tuple[PendingApproval, ...] = ()
    progress: ProgressWatch | None = attrs.field(
        default=attrs.Factory(
            lambda self: (
                None if self.config.no_progress is None else ProgressWatch(self.config.no_progress)
            ),
            takes_self=True,
        )
    )
    """The no-progress watch over the turn's finished tool calls (None: off)."""
    halted: str | None = None
    """The finish reason of a turn its engine stopped (``no_progress``), or None."""

    @property
    def token(self) -> CancellationToken:
        """The turn's cancellation token (its handle's)."""
        return self.handle.token

    def result(self) -> TurnResult:
        """How the turn ended (or stands)."""
        return TurnResult(
            text=self.text,
            status=self.status,
            turn_count=self.iterations,
            usage=self.usage + self.handle.budget.below,  # with what sub-agents spent
            error=self.error,
            trace_id=self.trace_id,
            finish_reason=self.finish_reason,
            problems=(*self.handle.problems, *self.problems),
            pending_approvals=self.pending_approvals,
        )

    async def run(self) -> TurnResult:
        """Run the turn to its end; the host's own cancellation propagates (after the
        terminal events), every other ending is in the result."""
        deadline = self.handle.start(self.config.turn_timeout)
        self.handle.partial = self.result  # a cut turn still tells what it spent
        with trace_scope(self.trace_id), turn_scope(self.handle):
            try:
                with anyio.CancelScope(deadline=deadline) as scope, self.bind_scope(scope):
                    start: dict[str, Any] = {"prompt": self.prompt}
                    if self.resuming:
                        start["resumed"] = True
                    await self.hooks.emit(EXECUTION_START, start)
                    await self.body()
            except Exception as exc:  # noqa: BLE001 - any failure ends the turn with status error
                self.status, self.error = TurnStatus.ERROR, exc
            except BaseException:
                # The host cancelled (or the process is stopping): close the turn, re-raise.
                self.status = TurnStatus.CANCELLED
                await self._finish()  # shielded inside, each terminal event under its bound
                raise
            else:
                if scope.cancelled_caught:
                    self.status = TurnStatus.CANCELLED
            if self.status is TurnStatus.CANCELLED and self.handle.budget.exhausted is not None:
                # this turn's own budget ran out (_budget): not a cancel someone asked for
                self.status, self.finish_reason = TurnStatus.INCOMPLETE, BUDGET_FINISH_REASON
                self.problems.append(f"budget: {self.handle.budget.report()}")
            else:
                self.status, self.finish_reason = halted_status(
                    self.status, self.halted, self.finish_reason
                )
            await self._finish()
        return self.result()

    def bind_scope(self, scope: anyio.CancelScope) -> AbstractContextManager[Any]:
        """Let an immediate cancel of the turn's token cancel the turn's scope (an
        orchestrator that carries immediate cancels itself, as loop-lifecycle does while
        its orchestration runs, binds something of its own)."""
        return self.handle.bind_scope(scope)

    # -- the loop --------------------------------------------------------------------------

    async def body(self) -> None:
        """The turn's work inside its scope (an orchestrator with another loop, such as
        loop-lifecycle, overrides this and keeps everything else)."""
        provider = await (self._resume() if self.resuming else self._begin())
        if provider is None:
            return
        limit = self.config.max_iterations
        pauses = 0
        while within_limit(self.iterations, limit):
            if self._stopped():
                return
            response = await self.call_provider(provider, with_tools=True)
            if response is None:
                return
            calls = tool_calls_of(provider, response)
            step = next_step(len(calls), response.finish_reason, pauses)
            if step is Step.PAUSE:
                # The server paused its own long turn: send what it said back, go on.
                pauses += 1
                if response.content:
                    await self.write("the assistant message", assistant_message(response, ()))
                continue
            pauses = 0
            if step is Step.ANSWER:
                await self.answer(response)
                return
            await (self.run_tools or Turn.run_batch)(self, response, calls)
            if self._held():
                return
        if not self._stopped():
            await self._wrap_up(provider)

    async def _begin(self) -> Provider | None:
        """``prompt:submit`` and the user message; the provider, or None when denied."""
        submitted = await self.hook(PROMPT_SUBMIT, {"prompt": self.prompt})
        if submitted.action == "deny":
            self.deny(submitted)
            return None
        self.queue_ephemeral(submitted)
        # Chosen before the prompt is stored: a plan without a usable provider must not
        # leave a user message that the next turn would send twice.
        provider: Provider
        self.provider_name, provider = select_provider(self.providers, self.config.default_provider)
        await self.write("the prompt", {"role": "user", "content": self.prompt})
        return provider

    async def write(self, what: str, message: dict[str, Any]) -> None:
        """Add ``message`` to the context under a shield bounded by ``write_timeout``
        (``runtime/_writes``): a cancel waits for the write, so memory and file never
        part. A write that fails or gives up is a problem of the turn, raised as
        [`ContextWriteError`][amplifier_anyio.ContextWriteError] (the turn ends ``error``) —
        unless a cancellation is on its way out, which it never replaces."""
        failure = await bounded_write(
            what, self.context.add_message, message, self.batch.write_timeout
        )
        if failure is not None:
            self.problems.append(str(failure))
            await anyio.lowlevel.checkpoint_if_cancelled()  # a cancel explains it better
            raise failure

    async def _resume(self) -> Provider | None:
        """Finish the last batch's held calls; the provider to go on with, or None when
        the turn ends here (still awaiting an approval, or already answered)."""
        provider: Provider
        self.provider_name, provider = select_provider(self.providers, self.config.default_provider)
        work_of = getattr(self.context, "resume_work", None)
        if work_of is not None:
            work = await work_of()
            held = [*work.run, *work.denied]
            if work.assistant is not None and held:
                batch = self.new_batch(
                    [c for c in _calls_of(work.assistant) if c.id in held],
                    approved=work.approved,
                    denied=work.denied,
                )
                await self.run_tool_batch(batch, None)
            if self._held():
                return None
        messages = await self.context.get_messages()
        own = [m for m in messages if (m.get("metadata") or {}).get("source") != "hook"]
        last = own[-1] if own else None
        if last is None or (last.get("role") == "assistant" and not last.get("tool_calls")):
            self.text = _text_of(last) if last is not None else ""
            return None  # nothing left to do: the history ends with the answer
        return provider

    def _held(self) -> bool:
        """Whether the last batch holds calls for an approval (the turn then ends)."""
        pending_of = getattr(self.context, "pending_approvals", None)
        pending = tuple(pending_of()) if pending_of is not None else ()
        if not pending:
            return False
        self.status, self.pending_approvals = TurnStatus.AWAITING_APPROVAL, pending
        return True

    def _stopped(self) -> bool:
        """A graceful cancel (or the no-progress watch) stops the turn before its next
        provider call."""
        if self.halted is not None:
            return True
        if self.token.is_cancelled:
            self.status = TurnStatus.CANCELLED
            return True
        return False

    async def run_batch(self, response: ChatResponse, calls: list[ToolCall]) -> None:
        """The default tool policy: one structured batch (parallel unless configured not)."""
        await self.run_tool_batch(self.new_batch(calls), assistant_message(response, calls))

    def new_batch(
        self, calls: list[ToolCall], kind: type[ToolBatch] = ToolBatch, **options: Any
    ) -> ToolBatch:
        """A batch of ``kind`` for ``calls`` in this turn (its tools, hooks and handle)."""
        return kind(
            calls=calls,
            tools=self.tools,
            hooks=self.hooks,
            coordinator=self.coordinator,
            handle=self.handle,
            config=self.batch,
            **options,
        )

    async def run_tool_batch(self, batch: ToolBatch, message: dict[str, Any] | None) -> None:
        """Run ``batch`` after writing ``message`` (None: the calls are in the context
        already, held by an earlier batch), then take its injections and problems into
        the turn, however it ended. Every tool policy runs its batches through here."""
        try:
            if message is None:
                await batch.run_held(self.context)
            else:
                await batch.run(self.context, message)
        finally:
            self.injections.extend(batch.pending_injections)
            self.problems.extend(batch.problems)
        self.watch(batch)

    def watch(self, batch: ToolBatch) -> None:
        """Feed the batch's finished calls to the no-progress watch, in call order: a
        reminder for the next request, or the turn halted (``runtime/_progress``)."""
        if self.progress is None:  # no_progress: off
            return
        outcomes = [
            (call.name, call.arguments, ok, content)
            for call, ok, content in zip(
                batch.calls, batch.succeeded, batch.contents(), strict=True
            )
        ]
        step = watch_progress(self.progress, outcomes)
        self.injections.extend(step.injections)
        if step.problem is not None and self.halted is None:
            self.halted = NO_PROGRESS_FINISH_REASON
            logger.warning(step.problem)
            self.problems.append(step.problem)

    async def call_provider(
        self, provider: Provider, *, with_tools: bool, reminder: bool = False
    ) -> ChatResponse | None:
        """One provider call with its events; None when it did not start (a spent budget,
        a hook's deny). The whole path, request to response, is ``runtime/_provider_call``."""
        return await call_provider(self, provider, with_tools=with_tools, reminder=reminder)

    async def answer(self, response: ChatResponse) -> None:
        """End the turn with ``response`` as the answer (stored, and its text returned)."""
        if response.content:
            await self.write("the answer", assistant_message(response, ()))
        self.text = response.text
        # cut, refused, filtered, or paused more often than we go on: incomplete (_policy)
        self.status = answer_status(response.finish_reason)

    async def _wrap_up(self, provider: Provider) -> None:
        """The iteration limit: one last call without tools; its text is the answer."""
        response = await self.call_provider(provider, with_tools=False, reminder=True)
        if response is None:
            return
        await self.answer(response)
        self.status = answer_status(response.finish_reason, at_limit=True)

    # -- hooks -----------------------------------------------------------------------------

    async def hook(self, event: str, data: dict[str, Any]) -> HookResult:
        """Emit ``event`` and carry out the result through the coordinator."""
        result = await self.hooks.emit(event, data)
        return await self.coordinator.process_hook_result(result, event, self.orchestrator)

    def queue_ephemeral(self, result: HookResult) -> None:
        """Keep an ephemeral injection for the next request only."""
        injection = ephemeral_injection(result)
        if injection is not None:
            self.injections.append(injection)

    def deny(self, result: HookResult) -> None:
        """End the turn as a hook's deny (status ``incomplete``, the reason as text)."""
        self.text, self.status = denial(result)

    # -- the end ---------------------------------------------------------------------------

    async def _finish(self) -> None:
        """The terminal events, exactly once, shielded, each under its own bound."""
        with anyio.CancelScope(shield=True):
            if self.handle.cancel_flush_due():
                await self.bounded("cancel:requested", self.handle.flush_cancel())
            if self.status is TurnStatus.CANCELLED:
                await self._terminal(
                    CANCEL_COMPLETED,
                    {
                        "orchestrator": self.orchestrator,
                        "was_immediate": self.token.is_immediate,
                        "turn_count": self.iterations,
                    },
                )
            if self.status in (TurnStatus.SUCCESS, TurnStatus.INCOMPLETE):
                await self._terminal(
                    PROMPT_COMPLETE, {"response_preview": self.text[:200], "length": len(self.text)}
                )
            await self._terminal(
                ORCHESTRATOR_COMPLETE,
                {
                    "orchestrator": self.orchestrator,
                    "turn_count": self.iterations,
                    "status": str(self.status),
                },
            )
            end: dict[str, Any] = {"response": self.text, "status": execution_status(self.status)}
            if self.status is TurnStatus.ERROR and self.error is not None:
                end["error"] = {"type": type(self.error).__name__, "msg": str(self.error)}
            await self._terminal(EXECUTION_END, end)

    async def _terminal(self, event: str, data: dict[str, Any]) -> None:
        if self.hooks.has_handlers(event):
            await self.bounded(event, self.hooks.emit(event, data))
        else:  # nothing runs: the emit returns at once, there is nothing to bound
            await self.hooks.emit(event, data)

    async def bounded(self, what: str, work: Awaitable[Any]) -> None:
        """Await ``work`` for at most ``event_timeout``; an expired bound is a problem."""
        timeout = self.config.event_timeout
        with anyio.move_on_after(timeout) as bound:
            await work
        if bound.cancelled_caught:
            problem = f"{what}: its hooks did not finish within {timeout} s and were stopped"
            logger.error(problem)
            self.problems.append(problem)


def _calls_of(message: dict[str, Any]) -> list[ToolCall]:
    """The tool calls of a stored assistant message."""
    found = []
    for item in message.get("tool_calls") or ():
        arguments = item.get("arguments")
        found.append(
            ToolCall(id=str(item["id"]), name=str(item["name"]), arguments=arguments or {})
        )
    return found


def _text_of(message: dict[str, Any]) -> str:
    """The text of a stored assistant message."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(block.get("text", ""))
            for block in content
            if isinstance(block, dict) and block.get("type") == "text"
        )
    return ""
