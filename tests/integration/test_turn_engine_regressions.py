"""Regression tests for the ten reported turn-engine bugs (written before the fix).

Each test names its behaviour (``test_bNN_…``) and cites it in its docstring; the numbers
are those of the bug report / rewrite brief:

1. a cancel while the turn is still starting is erased;
2. ``execution:start`` runs outside the turn's cancel scope and deadline;
3. the terminal events share one bound (a hung observer drops the rest);
4. the shielded write of the assistant message has no bound;
5. a failed or too-slow write of tool results leaves orphaned tool calls;
6. a graceful cancel is ignored at the iteration limit / reported after a final answer;
7. ``request_cancel(immediate=True)`` from inside a tool skips the on_cancel callbacks;
8. standalone turns on one orchestrator share a token and a context mount;
9. a synchronous tool is abandoned on an immediate cancel (late side effect);
10. the session has no guarded life cycle.

Clocks: every test runs on asyncio and on trio. A test that takes the ``clock`` fixture
runs trio on a fresh ``MockClock(autojump_threshold=0)``, so its durations are virtual and
exact there; asyncio runs it on the real clock with the durations given by
``clock.pick(virtual=…, real=…)`` and asserts no duration (only outcomes and order). The
other tests run both backends on the real clock and use events, never durations (the
synchronous-tool tests need it: the autojump clock jumps while a task waits on a thread).
"""

from __future__ import annotations

import errno
import logging
import os
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.from_thread
import anyio.lowlevel
import attrs
import pytest
from trio.testing import MockClock

from amplifier_anyio import (
    AmplifierSession,
    CancellationToken,
    ChatRequest,
    ChatResponse,
    HookRegistry,
    HookResult,
    SessionError,
    TextBlock,
    ToolCall,
    ToolResult,
    TurnResult,
    TurnStatus,
)
from amplifier_anyio.kernel import package_name
from amplifier_anyio.models import ToolCallBlock, ToolResultBlock
from amplifier_anyio.orchestrators.loop_basic import LoopBasicOrchestrator
from amplifier_anyio.providers.scripted import ScriptedProvider
from amplifier_anyio.runtime import CANCELLED_MESSAGE
from amplifier_anyio.testing import EventRecorder, MockContextManager

pytestmark = pytest.mark.anyio


# -- backends and clocks ---------------------------------------------------------------------


@pytest.fixture(params=[pytest.param("asyncio", id="asyncio"), pytest.param("trio", id="trio")])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, object]]:
    """asyncio on the real clock; trio on a fresh autojump MockClock if the test takes ``clock``."""
    if request.param == "asyncio":
        return ("asyncio", {"debug": True})
    if "clock" in request.fixturenames:
        return ("trio", {"clock": MockClock(autojump_threshold=0)})
    return ("trio", {})


@attrs.frozen
class Clock:
    """Which clock the test runs on, and the scenario durations that suit it."""

    virtual: bool

    def pick(self, *, virtual: float, real: float) -> float:
        """``virtual`` seconds on the autojump clock, ``real`` seconds on the real one."""
        return virtual if self.virtual else real


@pytest.fixture
def clock(anyio_backend: tuple[str, dict[str, object]]) -> Clock:
    return Clock(virtual="clock" in anyio_backend[1])


# -- plans, replies, tools, contexts ---------------------------------------------------------


def make_plan(**orchestrator_config: Any) -> dict[str, Any]:
    """The brief's plan; ``orchestrator_config`` goes to loop-basic's config."""
    orchestrator: Any = "loop-basic"
    if orchestrator_config:
        orchestrator = {"module": "loop-basic", "config": orchestrator_config}
    return {
        "session": {"orchestrator": orchestrator, "context": "context-simple"},
        "providers": [{"module": "provider-scripted", "config": {}}],
        "tools": [{"module": "tool-demo", "config": {"delay": 0}}],
    }


def calls(*names: str) -> ChatResponse:
    """An assistant reply asking for one call per name (ids ``call-0``, ``call-1``, …)."""
    return ChatResponse(
        content=[TextBlock(text="using tools")],
        tool_calls=[ToolCall(id=f"call-{i}", name=name) for i, name in enumerate(names)],
    )


def answer(text: str = "done") -> ChatResponse:
    return ChatResponse(content=[TextBlock(text=text)])


class GateTool:
    """An async tool: sets ``started``, waits for ``release`` (if given), returns ``output``."""

    def __init__(
        self, name: str, release: anyio.Event | None = None, output: str = "real result"
    ) -> None:
        self.name = name
        self.description = f"test tool {name}"
        self.input_schema: dict[str, Any] = {"type": "object", "properties": {}}
        self.release = release
        self.output = output
        self.started = anyio.Event()
        self.calls = 0

    async def execute(self, input: dict[str, Any]) -> ToolResult:
        self.calls += 1
        self.started.set()
        if self.release is not None:
            await self.release.wait()
        else:
            await anyio.lowlevel.checkpoint()
        return ToolResult(output=self.output)


def _has_tool_calls(messages: list[dict[str, Any]]) -> bool:
    return any(m.get("role") == "assistant" and m.get("tool_calls") for m in messages)


class SlowCallContext(MockContextManager):
    """Writing an assistant message that has tool calls takes ``delay`` seconds."""

    def __init__(self, delay: float) -> None:
        super().__init__()
        self.delay = delay
        self.slow_write_started = False
        self.slow_write_finished = False

    async def _maybe_slow(self, messages: list[dict[str, Any]]) -> None:
        if _has_tool_calls(messages):
            self.slow_write_started = True
            await anyio.sleep(self.delay)
            self.slow_write_finished = True

    async def add_message(self, message: dict[str, Any]) -> None:
        await self._maybe_slow([message])
        await super().add_message(message)

    async def add_messages(self, messages: list[dict[str, Any]]) -> None:
        await self._maybe_slow(messages)
        await super().add_messages(messages)


class ToolWriteTroubleContext(MockContextManager):
    """Writes holding a ``role: tool`` message fail (ENOSPC) or never finish, per ``mode``."""

    def __init__(self, mode: str | None) -> None:
        super().__init__()
        self.mode = mode  # "fail", "hang" or None (healthy)

    async def _trouble(self, messages: list[dict[str, Any]]) -> None:
        if self.mode is None or not any(m.get("role") == "tool" for m in messages):
            return
        if self.mode == "fail":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        await anyio.sleep_forever()

    async def add_message(self, message: dict[str, Any]) -> None:
        await self._trouble([message])
        await super().add_message(message)

    async def add_messages(self, messages: list[dict[str, Any]]) -> None:
        await self._trouble(messages)
        await super().add_messages(messages)


# -- session helpers and checks ---------------------------------------------------------------


async def prepare(
    session: AmplifierSession,
    provider: ScriptedProvider,
    *tools: Any,
    context: Any = None,
) -> EventRecorder:
    """Mount the test's provider (replacing the plan's), tools and context; record events."""
    await session.coordinator.mount("providers", provider, name="scripted")
    for tool in tools:
        await session.coordinator.mount("tools", tool, name=tool.name)
    if context is not None:
        await session.coordinator.mount("context", context)
    recorder = EventRecorder()
    recorder.attach(session.coordinator.hooks)
    return recorder


async def run_into(session: AmplifierSession, prompt: str, results: list[TurnResult]) -> None:
    results.append(await session.run(prompt))


def assert_closed_once(recorder: EventRecorder) -> None:
    """Invariant 1: one orchestrator:complete and one execution:end."""
    names = recorder.names()
    assert names.count("orchestrator:complete") == 1, names
    assert names.count("execution:end") == 1, names


def unanswered_calls(request: ChatRequest) -> list[str]:
    """Ids of assistant tool calls not answered by the ``role: tool`` messages right after."""
    missing: list[str] = []
    messages = request.messages
    for i, message in enumerate(messages):
        if message.role != "assistant":
            continue
        ids = [call.id for call in message.tool_calls or ()]
        if isinstance(message.content, list):
            ids += [b.id for b in message.content if isinstance(b, ToolCallBlock)]
        answered: set[str | None] = set()
        for follower in messages[i + 1 :]:
            if follower.role != "tool":
                break
            answered.add(follower.tool_call_id)
            if isinstance(follower.content, list):
                answered.update(
                    b.tool_call_id for b in follower.content if isinstance(b, ToolResultBlock)
                )
        missing += [call_id for call_id in ids if call_id not in answered]
    return missing


def tool_message(messages: list[dict[str, Any]], call_id: str) -> str:
    (content,) = [m["content"] for m in messages if m.get("tool_call_id") == call_id]
    return str(content)


async def context_messages(session: AmplifierSession) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = await session.coordinator.get("context").get_messages()
    return messages


# -- 1. a cancel while the turn is still starting --------------------------------------------


async def _cancel_during_session_start(immediate: bool) -> None:
    async with AmplifierSession(make_plan()) as session:
        provider = ScriptedProvider([calls("probe"), answer("too late")])
        tool = GateTool("probe")
        recorder = await prepare(session, provider, tool)
        entered, release = anyio.Event(), anyio.Event()

        async def slow_start(event: str, data: dict[str, Any]) -> None:
            entered.set()
            await release.wait()

        session.coordinator.hooks.register("session:start", slow_start, name="slow-start")
        results: list[TurnResult] = []
        async with anyio.create_task_group() as tg:
            tg.start_soon(run_into, session, "hello", results)
            await entered.wait()
            accepted = session.cancel(immediate=immediate)
            release.set()

    (result,) = results
    assert result.status is TurnStatus.CANCELLED, result
    assert provider.requests == []
    assert tool.calls == 0
    assert accepted is True
    assert_closed_once(recorder)


async def test_b01_immediate_cancel_while_the_turn_starts_is_not_erased() -> None:
    """Behaviour 1: ``cancel(immediate=True)`` during a ``session:start`` hook.

    Bug: the orchestrator resets the token, so the turn runs to success, tools included.
    """
    await _cancel_during_session_start(immediate=True)


async def test_b01_graceful_cancel_while_the_turn_starts_is_not_erased() -> None:
    """Behaviour 1: a graceful ``cancel()`` during ``session:start``: no provider call."""
    await _cancel_during_session_start(immediate=False)


async def test_b01_leaving_a_stream_block_at_once_cancels_the_turn() -> None:
    """Behaviour 1: ``async with session.stream(p): pass`` cancels the turn.

    Bug: the stream's cancel lands before the turn started, is erased, and the block waits
    for the whole turn, which reports success.
    """
    async with AmplifierSession(make_plan()) as session:
        tool = GateTool("probe")
        await prepare(session, ScriptedProvider([calls("probe"), answer("finished")]), tool)
        stream = session.stream("hello")
        async with stream:
            pass
    assert stream.result is not None
    assert stream.result.status is TurnStatus.CANCELLED, stream.result


# -- 2. execution:start inside the turn's scope ----------------------------------------------


async def test_b02_turn_timeout_stops_a_hung_execution_start_hook(clock: Clock) -> None:
    """Behaviour 2: a hung ``execution:start`` observer is stopped by ``turn_timeout``.

    Bug: the event is emitted before the turn's cancel scope and deadline exist, so the
    turn hangs (here until the guard's deadline).
    """
    timeout = 1.0
    async with AmplifierSession(make_plan(turn_timeout=timeout)) as session:
        provider = ScriptedProvider([answer("never")])
        recorder = await prepare(session, provider)

        async def hang(event: str, data: dict[str, Any]) -> None:
            await anyio.sleep_forever()

        session.coordinator.hooks.register("execution:start", hang, name="hang")
        start = anyio.current_time()
        with anyio.fail_after(clock.pick(virtual=60, real=15)):
            result = await session.run("hello")
        elapsed = anyio.current_time() - start

    assert result.status is TurnStatus.CANCELLED, result
    assert provider.requests == []
    assert_closed_once(recorder)
    if clock.virtual:
        assert elapsed == pytest.approx(timeout, abs=0.1)


async def test_b02_session_cancel_stops_a_hung_execution_start_hook(clock: Clock) -> None:
    """Behaviour 2: ``session.cancel(immediate=True)`` stops a hung ``execution:start`` hook.

    Bug: the hook runs outside every cancel scope the token can reach: the turn hangs.
    """
    async with AmplifierSession(make_plan()) as session:
        provider = ScriptedProvider([answer("never")])
        await prepare(session, provider)
        entered = anyio.Event()

        async def hang(event: str, data: dict[str, Any]) -> None:
            entered.set()
            await anyio.sleep_forever()

        session.coordinator.hooks.register("execution:start", hang, name="hang")
        results: list[TurnResult] = []
        with anyio.fail_after(clock.pick(virtual=60, real=15)):
            async with anyio.create_task_group() as tg:
                tg.start_soon(run_into, session, "hello", results)
                await entered.wait()
                session.cancel(immediate=True)

    (result,) = results
    assert result.status is TurnStatus.CANCELLED, result
    assert provider.requests == []


# -- 3. one bound per terminal event ---------------------------------------------------------


async def test_b03_a_hung_prompt_complete_observer_does_not_drop_the_terminal_events(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    """Behaviour 3: each terminal event has its own bound (``event_timeout``).

    Bug: the four terminal events share one 30 s bound, so a hung ``prompt:complete``
    observer silently drops ``orchestrator:complete`` and ``execution:end``.
    """
    event_timeout = clock.pick(virtual=5.0, real=1.0)
    async with AmplifierSession(make_plan(event_timeout=event_timeout)) as session:
        recorder = await prepare(session, ScriptedProvider([answer("the answer")]))

        async def hang(event: str, data: dict[str, Any]) -> None:
            await anyio.sleep_forever()

        session.coordinator.hooks.register("prompt:complete", hang, name="hung-observer")
        start = anyio.current_time()
        result = await session.run("hello")
        elapsed = anyio.current_time() - start

    assert_closed_once(recorder)
    assert (result.status, result.text) == (TurnStatus.SUCCESS, "the answer")
    assert any("prompt:complete" in problem for problem in result.problems), result.problems
    assert any(
        r.levelno >= logging.ERROR and "prompt:complete" in r.getMessage() for r in caplog.records
    ), [r.getMessage() for r in caplog.records]
    if clock.virtual:  # one hung observer costs one bound, not more
        assert elapsed < 2 * event_timeout


# -- 4. the assistant message's write is bounded ---------------------------------------------


async def test_b04_a_slow_assistant_write_does_not_hold_up_turn_timeout(clock: Clock) -> None:
    """Behaviour 4: ``write_timeout`` bounds the shielded write of the assistant message.

    Bug: the shield has no bound, so the turn timeout (0.2 s) waits for the 100 s write.
    """
    turn_timeout = clock.pick(virtual=0.2, real=1.0)
    write_timeout = clock.pick(virtual=0.5, real=2.0)
    context = SlowCallContext(delay=clock.pick(virtual=100, real=10))
    plan = make_plan(turn_timeout=turn_timeout, write_timeout=write_timeout)
    async with AmplifierSession(plan) as session:
        await prepare(session, ScriptedProvider([calls("probe"), answer()]), GateTool("probe"))
        await session.coordinator.mount("context", context)
        start = anyio.current_time()
        result = await session.run("hello")
        elapsed = anyio.current_time() - start

    assert context.slow_write_started
    assert not context.slow_write_finished  # the turn returned without waiting for it
    if clock.virtual:
        assert elapsed <= turn_timeout + write_timeout + 0.1
    assert result.status is TurnStatus.CANCELLED, result
    assert result.problems


async def test_b04_a_slow_assistant_write_does_not_hold_up_the_hosts_cancel(clock: Clock) -> None:
    """Behaviour 4, host variant: the host's own deadline is honoured within ``write_timeout``.

    Bug: asked to stop at 0.2 s, the session returned only when the slow write finished.
    """
    host_timeout = clock.pick(virtual=0.2, real=1.0)
    write_timeout = clock.pick(virtual=0.5, real=2.0)
    context = SlowCallContext(delay=clock.pick(virtual=100, real=10))
    async with AmplifierSession(make_plan(write_timeout=write_timeout)) as session:
        await prepare(session, ScriptedProvider([calls("probe"), answer()]), GateTool("probe"))
        await session.coordinator.mount("context", context)
        start = anyio.current_time()
        with anyio.move_on_after(host_timeout):
            await session.run("hello")
        elapsed = anyio.current_time() - start

    assert context.slow_write_started
    assert not context.slow_write_finished
    if clock.virtual:
        assert elapsed <= 0.8


# -- 5. a failed or slow write of tool results -----------------------------------------------


def follow_up_reply(request: ChatRequest) -> ChatResponse:
    """Asks for one tool call on the prompt "first", answers anything else."""
    last = request.messages[-1]
    if last.role == "user" and last.content == "first":
        return calls("probe")
    return answer(f"answer after {last.role}")


async def _tool_results_not_written(mode: str, write_timeout: float) -> None:
    context = ToolWriteTroubleContext(mode)
    provider = ScriptedProvider(follow_up_reply)
    async with AmplifierSession(make_plan(write_timeout=write_timeout)) as session:
        await prepare(session, provider, GateTool("probe"), context=context)
        first = await session.run("first")
        context.mode = None  # the disk has room again
        second = await session.run("second")

    orphaned = [unanswered_calls(request) for request in provider.requests]
    assert orphaned == [[] for _ in provider.requests], "a request carried unanswered calls"
    assert first.status is TurnStatus.ERROR, first
    assert first.problems
    assert second.status is TurnStatus.SUCCESS, second


async def test_b05_failing_tool_result_write_leaves_no_orphaned_calls() -> None:
    """Behaviour 5: the tool results' write raises ENOSPC.

    Bug: the assistant's tool calls stay in the history without results and the next
    turn's request sends them orphaned.
    """
    await _tool_results_not_written("fail", write_timeout=5.0)


async def test_b05_too_slow_tool_result_write_leaves_no_orphaned_calls(clock: Clock) -> None:
    """Behaviour 5: the tool results' write outlasts ``write_timeout``.

    Bug: after the (30 s) bound the turn goes on with the calls unanswered: the next
    request is sent with orphaned calls and the turn even reports success.
    """
    await _tool_results_not_written("hang", write_timeout=clock.pick(virtual=0.5, real=1.0))


# -- 6. graceful cancel at the iteration limit and after the final answer --------------------


async def test_b06_graceful_cancel_in_the_last_allowed_batch_skips_the_wrap_up() -> None:
    """Behaviour 6: a graceful cancel during the batch that reaches ``max_iterations``.

    Bug: the wrap-up call still runs and the turn ends ``incomplete``.
    """
    release = anyio.Event()
    tool = GateTool("slow", release, output="real result")
    provider = ScriptedProvider([calls("slow"), answer("wrap-up")])
    async with AmplifierSession(make_plan(max_iterations=1)) as session:
        recorder = await prepare(session, provider, tool)
        results: list[TurnResult] = []
        async with anyio.create_task_group() as tg:
            tg.start_soon(run_into, session, "hello", results)
            await tool.started.wait()
            session.cancel()
            release.set()
        messages = await context_messages(session)

    (result,) = results
    assert result.status is TurnStatus.CANCELLED, result
    assert len(provider.requests) == 1
    assert tool_message(messages, "call-0") == "real result"
    assert recorder.names().count("cancel:completed") == 1


async def test_b06_graceful_cancel_during_the_final_answer_is_a_success() -> None:
    """Behaviour 6: a graceful cancel while the provider computes the final answer.

    Bug: the turn reports success but also emits ``cancel:completed``: status and events
    disagree. The answer came, so it is a success and nothing was cancelled.
    """
    computing, finish = anyio.Event(), anyio.Event()

    async def reply(request: ChatRequest) -> ChatResponse:
        computing.set()
        await finish.wait()
        return answer("final")

    async with AmplifierSession(make_plan()) as session:
        recorder = await prepare(session, ScriptedProvider(reply))
        results: list[TurnResult] = []
        async with anyio.create_task_group() as tg:
            tg.start_soon(run_into, session, "hello", results)
            await computing.wait()
            session.cancel()
            finish.set()

    (result,) = results
    assert (result.status, result.text) == (TurnStatus.SUCCESS, "final")
    assert "cancel:completed" not in recorder.names()


# -- 7. on_cancel callbacks of an immediate request_cancel from a tool -----------------------


async def test_b07_request_cancel_from_a_tool_runs_the_on_cancel_callbacks() -> None:
    """Behaviour 7: ``await coordinator.request_cancel(immediate=True)`` inside a tool.

    Bug: the turn's scope is cancelled first, so the callbacks' checkpoint raises and
    neither callback runs.
    """
    ran: list[str] = []
    async with AmplifierSession(make_plan()) as session:
        coordinator = session.coordinator

        class StopTool:
            name = "stop"
            description = "stops the turn"
            input_schema: dict[str, Any] = {"type": "object", "properties": {}}  # noqa: RUF012

            async def execute(self, input: dict[str, Any]) -> ToolResult:
                async def async_callback() -> None:
                    await anyio.lowlevel.checkpoint()
                    ran.append("async")

                token = coordinator.cancellation  # the current turn's token
                token.on_cancel(lambda: ran.append("sync"))
                token.on_cancel(async_callback)
                await coordinator.request_cancel(immediate=True)
                return ToolResult(output="stopped")

        await prepare(session, ScriptedProvider([calls("stop"), answer("not reached")]), StopTool())
        result = await session.run("stop yourself")

    assert sorted(ran) == ["async", "sync"]
    assert result.status is TurnStatus.CANCELLED, result


# -- 8. standalone turns on one orchestrator -------------------------------------------------


async def test_b08_standalone_turns_inject_into_their_own_context() -> None:
    """Behaviour 8(a): two concurrent standalone turns, each with its own context.

    Bug: both share the orchestrator's coordinator and its single context mount, so a
    persistent ``prompt:submit`` injection lands in whichever context was mounted last.
    """
    orchestrator = LoopBasicOrchestrator()
    hooks = HookRegistry()
    arrived = 0
    both_submitted = anyio.Event()

    async def note(event: str, data: dict[str, Any]) -> HookResult:
        nonlocal arrived
        arrived += 1
        if arrived == 2:
            both_submitted.set()
        await both_submitted.wait()  # both turns are running before either injects
        return HookResult(action="inject_context", context_injection=f"note for {data['prompt']}")

    hooks.register("prompt:submit", note, name="note")
    provider = ScriptedProvider(lambda request: answer("ok"))
    contexts = {"alpha": MockContextManager(), "beta": MockContextManager()}
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            for prompt, context in contexts.items():
                tg.start_soon(orchestrator.run_turn, prompt, context, {"p": provider}, {}, hooks)

    for prompt, context in contexts.items():
        notes = [m["content"] for m in context.messages if "note for" in str(m["content"])]
        assert notes == [f"note for {prompt}"], (prompt, notes)


async def test_b08_standalone_turns_have_their_own_cancellation_token() -> None:
    """Behaviour 8(b): ``run_turn(..., cancellation=token)``; cancelling one turn only.

    Bug: standalone turns share the orchestrator's one token (cancelling one cancels
    both); ``run_turn`` takes no ``cancellation`` argument yet.
    """
    orchestrator = LoopBasicOrchestrator()
    hooks = HookRegistry()
    t1, t2 = CancellationToken(), CancellationToken()
    never, release_two = anyio.Event(), anyio.Event()
    tool_one, tool_two = GateTool("slow", never), GateTool("slow", release_two)
    results: dict[str, TurnResult] = {}

    async def turn(key: str, token: CancellationToken, tool: GateTool) -> None:
        provider = ScriptedProvider([calls("slow"), answer(f"{key} done")])
        results[key] = await orchestrator.run_turn(
            key, MockContextManager(), {"p": provider}, {"slow": tool}, hooks, cancellation=token
        )

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(turn, "one", t1, tool_one)
            tg.start_soon(turn, "two", t2, tool_two)
            await tool_one.started.wait()
            await tool_two.started.wait()
            t1.request_immediate()
            release_two.set()

    assert results["one"].status is TurnStatus.CANCELLED, results["one"]
    assert results["two"].status is TurnStatus.SUCCESS, results["two"]
    assert results["two"].text == "two done"


# -- 9. synchronous tools are not abandoned by default ---------------------------------------


class BlockingSyncTool:
    """A synchronous tool: signals ``started``, waits for ``release``, then has its effect."""

    name = "blocking"
    description = "a blocking synchronous tool"
    input_schema: dict[str, Any] = {"type": "object", "properties": {}}  # noqa: RUF012

    def __init__(self) -> None:
        self.started = threading.Event()
        self.release = threading.Event()
        self.exited = threading.Event()
        self.effects: list[str] = []

    def execute(self, input: dict[str, Any]) -> str:
        try:
            self.started.set()
            self.release.wait(10)
            self.effects.append("written")
            return "done"
        finally:
            self.exited.set()


class CheckingSyncTool:
    """A synchronous tool that checks for cancellation between steps of a long loop."""

    name = "checking"
    description = "a cooperative synchronous tool"
    input_schema: dict[str, Any] = {"type": "object", "properties": {}}  # noqa: RUF012

    def __init__(self) -> None:
        self.started = threading.Event()
        self.exited = threading.Event()
        self.effects: list[str] = []

    def execute(self, input: dict[str, Any]) -> str:
        try:
            self.started.set()
            for _ in range(200):  # at most 10 s
                anyio.from_thread.check_cancelled()
                time.sleep(0.05)
            self.effects.append("after the loop")
            return "finished"
        finally:
            self.exited.set()


async def finish_thread(tool: Any) -> None:
    """Let a started synchronous tool's thread end before the test does."""
    release = getattr(tool, "release", None)
    if release is not None:
        release.set()
    if tool.started.is_set():
        assert await anyio.to_thread.run_sync(tool.exited.wait, 15), "the tool's thread hangs"


@attrs.define
class Returned:
    """What a background ``session.run`` saw when it returned."""

    done: anyio.Event = attrs.field(factory=anyio.Event)
    results: list[TurnResult] = attrs.field(factory=list)
    effects: list[str] | None = None
    exited: bool | None = None


async def run_sync_tool_turn(
    session: AmplifierSession, tool: Any, returned: Returned, *, release_after: float | None
) -> None:
    """Run a turn, cancel it immediately once ``tool`` started; record the state at return.

    With ``release_after``, a ``BlockingSyncTool`` is released when run() returned or
    after that many seconds, whichever comes first.
    """

    async def run() -> None:
        try:
            returned.results.append(await session.run("go"))
        finally:
            returned.effects = list(tool.effects)
            returned.exited = tool.exited.is_set()
            returned.done.set()

    async def release_later(delay: float) -> None:
        with anyio.move_on_after(delay):
            await returned.done.wait()
        tool.release.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        assert await anyio.to_thread.run_sync(tool.started.wait, 10), "the tool never started"
        session.cancel(immediate=True)
        if release_after is not None:
            tg.start_soon(release_later, release_after)


async def test_b09_a_sync_tool_finishing_after_an_immediate_cancel_keeps_its_result() -> None:
    """Behaviour 9: the turn waits for a synchronous tool's thread (invariant 4).

    Bug: the thread is abandoned: run() returns while the tool still runs, its side
    effect happens afterwards, and the context says the call was cancelled.
    """
    tool = BlockingSyncTool()
    returned = Returned()
    try:
        async with AmplifierSession(make_plan()) as session:
            await prepare(session, ScriptedProvider([calls("blocking"), answer()]), tool)
            await run_sync_tool_turn(session, tool, returned, release_after=0.3)
            messages = await context_messages(session)
    finally:
        await finish_thread(tool)

    assert returned.effects == ["written"], "the side effect happened after run() returned"
    assert tool_message(messages, "call-0") == "done"
    (result,) = returned.results
    assert result.status is TurnStatus.CANCELLED, result


async def test_b09_a_sync_tool_checking_for_cancellation_stops_early() -> None:
    """Behaviour 9: a sync tool calling ``anyio.from_thread.check_cancelled()`` stops early.

    Its message is the cancelled result, its post-loop effect never happens, and its
    thread has ended when run() returns. Bug: the thread is abandoned, still running
    when run() returns.
    """
    tool = CheckingSyncTool()
    returned = Returned()
    try:
        async with AmplifierSession(make_plan()) as session:
            await prepare(session, ScriptedProvider([calls("checking"), answer()]), tool)
            await run_sync_tool_turn(session, tool, returned, release_after=None)
            messages = await context_messages(session)
    finally:
        await finish_thread(tool)

    assert returned.exited, "the tool's thread was still running when run() returned"
    assert returned.effects == []
    assert tool.effects == []
    assert CANCELLED_MESSAGE in tool_message(messages, "call-0")
    (result,) = returned.results
    assert result.status is TurnStatus.CANCELLED, result


async def test_b09_abandon_sync_tools_opts_back_into_abandoning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Behaviour 9: ``abandon_sync_tools: true`` restores abandoning the thread.

    This gives up invariant 4 on purpose: run() returns while the tool's thread still
    runs, and its late side effect is not in the context. Bug: the key is unknown today
    (loop-basic warns and ignores it); abandoning is the unconditional default.
    """
    tool = BlockingSyncTool()
    returned = Returned()
    try:
        async with AmplifierSession(make_plan(abandon_sync_tools=True)) as session:
            unknown = [
                r.getMessage()
                for r in caplog.records
                if "abandon_sync_tools" in r.getMessage() and "unknown" in r.getMessage().lower()
            ]
            assert unknown == [], "loop-basic does not know abandon_sync_tools"
            await prepare(session, ScriptedProvider([calls("blocking"), answer()]), tool)
            await run_sync_tool_turn(session, tool, returned, release_after=None)
            messages = await context_messages(session)
    finally:
        await finish_thread(tool)

    assert returned.effects == []  # returned before the release: the thread was abandoned
    assert not returned.exited
    assert CANCELLED_MESSAGE in tool_message(messages, "call-0")
    assert tool.effects == ["written"]  # the late effect happened anyway, after run()


# -- 10. the session's life cycle -------------------------------------------------------------

COUNTING_MODULE = textwrap.dedent(
    '''
    """A tool module that counts its mounts (tests only)."""

    MOUNTS = []


    class Counted:
        name = "counted"
        description = "does nothing"
        input_schema = {"type": "object", "properties": {}}

        async def execute(self, input):
            return "nothing"


    async def mount(coordinator, config):
        MOUNTS.append(coordinator)
        await coordinator.mount("tools", Counted(), name="counted")
    '''
)


@pytest.fixture
def counting_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A module id whose package ``amplifier_module_<id>`` counts its mounts in ``MOUNTS``."""
    module_id = f"counted-{uuid.uuid4().hex[:12]}"
    package = tmp_path / package_name(module_id)
    package.mkdir()
    (package / "__init__.py").write_text(COUNTING_MODULE, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield module_id
    sys.modules.pop(package_name(module_id), None)


async def test_b10_two_first_runs_of_an_unopened_session_mount_once(counting_module: str) -> None:
    """Behaviour 10(a): two concurrent first ``run()`` calls, no ``async with``.

    Exactly one runs, the other raises ``SessionError`` ("already running"), and every
    module is mounted once. Bug: both initialise concurrently and mount everything twice.
    """
    plan = make_plan()
    plan["providers"] = [
        {
            "module": "provider-scripted",
            "config": {"responses": [{"content": [{"type": "text", "text": "hi"}]}] * 2},
        }
    ]
    plan["tools"].append({"module": counting_module})
    session = AmplifierSession(plan)
    outcomes: list[TurnResult | SessionError] = []

    async def attempt() -> None:
        try:
            outcomes.append(await session.run("hello"))
        except SessionError as exc:
            outcomes.append(exc)

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(attempt)
            tg.start_soon(attempt)

    mounts = sys.modules[package_name(counting_module)].MOUNTS
    assert len(mounts) == 1, f"the tool module was mounted {len(mounts)} times"
    refused = [o for o in outcomes if isinstance(o, SessionError)]
    ran = [o for o in outcomes if isinstance(o, TurnResult)]
    assert len(refused) == 1
    assert "already running" in str(refused[0])
    assert len(ran) == 1
    assert ran[0].status is TurnStatus.SUCCESS, ran[0]


async def test_b10_run_after_close_raises() -> None:
    """Behaviour 10(b): ``run()`` after ``async with`` exited raises ``SessionError``.

    Bug: it silently mounts every module again and runs the turn.
    """
    plan = make_plan()
    plan["providers"][0]["config"]["responses"] = [{"content": [{"type": "text", "text": "hi"}]}]
    session = AmplifierSession(plan)
    async with session:
        await session.run("hello")
    with pytest.raises(SessionError):
        await session.run("hello again")


async def test_b10_a_host_error_leaves_a_stream_block_unwrapped() -> None:
    """Behaviour 10(c): the host's own exception in a stream block reaches it as itself.

    Bug: it arrives wrapped in an ExceptionGroup from the stream's task group.
    """
    async with AmplifierSession(make_plan()) as session:
        await prepare(session, ScriptedProvider([answer("hi")]))
        with pytest.raises(LookupError, match="mine"):
            async with session.stream("hello"):
                raise LookupError("mine")


async def test_b10_a_stream_while_a_turn_runs_raises_session_error_bare() -> None:
    """Behaviour 10(c): entering ``session.stream(p)`` during another turn.

    It raises ``SessionError`` itself (no ExceptionGroup), its block does not run, and
    the turn already running is left alone. Bug: the block runs, the error comes out of
    the stream's task group wrapped, and the stream's exit cancels the *other* turn.
    """
    computing, finish = anyio.Event(), anyio.Event()

    async def reply(request: ChatRequest) -> ChatResponse:
        computing.set()
        await finish.wait()
        return answer("first answer")

    body_ran = False
    async with AmplifierSession(make_plan()) as session:
        await prepare(session, ScriptedProvider(reply))
        results: list[TurnResult] = []
        async with anyio.create_task_group() as tg:
            tg.start_soon(run_into, session, "first", results)
            await computing.wait()
            try:
                with pytest.raises(SessionError, match="already running"):
                    async with session.stream("second"):
                        body_ran = True
            finally:
                finish.set()

    assert not body_ran
    (result,) = results
    assert (result.status, result.text) == (TurnStatus.SUCCESS, "first answer")


async def test_b10_cancel_without_a_turn_returns_false() -> None:
    """Behaviour 10(d): ``session.cancel()`` returns False when no turn is in progress.

    Bug: it returns None (and sets the token of no turn).
    """
    plan = make_plan()
    plan["providers"][0]["config"]["responses"] = [{"content": [{"type": "text", "text": "hi"}]}]
    async with AmplifierSession(plan) as session:
        assert session.cancel() is False
        assert session.cancel(immediate=True) is False
        result = await session.run("hello")
        assert result.status is TurnStatus.SUCCESS  # the refused cancel did not stick
        assert session.cancel(immediate=True) is False


async def test_b10_session_state_moves_unopened_opened_closed() -> None:
    """Behaviour 10(e): ``session.state`` is a ``SessionState``: UNOPENED → OPENED → CLOSED.

    Bug: there is no state (nor ``SessionState``) today.
    """
    from amplifier_anyio import SessionState  # noqa: PLC0415 - the new API under test

    session = AmplifierSession(make_plan())
    assert session.state is SessionState.UNOPENED
    async with session:
        assert session.state is SessionState.OPENED
    assert session.state is SessionState.CLOSED
