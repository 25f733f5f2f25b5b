"""The turn handle and the engine's edges (issue: every cancel, gate and callback bound
to the turn it belongs to). Each test failed on the code before the turn handle.

Real clock on both backends where a thread is involved (trio's autojump clock jumps while
a task waits on a worker thread); every assertion is about outcome and order, and the
durations only bound a wait generously (a loaded machine passes).
"""

from __future__ import annotations

import json
import math
import os
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest

from amplifier_anyio import (
    AmplifierSession,
    ChatResponse,
    ConfigError,
    HookResult,
    Message,
    SessionError,
    TextBlock,
    ToolCall,
    ToolResult,
    TurnStatus,
    ValidationError,
)
from amplifier_anyio.events import CANCEL_REQUESTED, SESSION_END, SESSION_START
from amplifier_anyio.hooks.approval import ApprovalRequest, CallbackApprovalSystem
from amplifier_anyio.providers.scripted import ScriptedProvider
from amplifier_anyio.testing import EventRecorder

pytestmark = pytest.mark.anyio


def plan(context: Any = "context-simple", **loop: Any) -> dict[str, Any]:
    orchestrator: Any = {"module": "loop-basic", "config": loop} if loop else "loop-basic"
    return {
        "session": {"orchestrator": orchestrator, "context": context},
        "providers": [{"module": "provider-scripted", "config": {}}],
    }


def answer(text: str = "done") -> ChatResponse:
    return ChatResponse(content=[TextBlock(text=text)])


def calls(*names: str, prefix: str = "call") -> ChatResponse:
    return ChatResponse(
        content=[TextBlock(text="using tools")],
        tool_calls=[ToolCall(id=f"{prefix}-{i}", name=n) for i, n in enumerate(names)],
    )


class Tool:
    """An async tool; ``body`` is what it does (default: return ``ok``)."""

    def __init__(self, name: str, body: Any = None) -> None:
        self.name = name
        self.description = f"test tool {name}"
        self.input_schema: dict[str, Any] = {"type": "object", "properties": {}}
        self.body = body
        self.ran = 0

    async def execute(self, input: dict[str, Any]) -> ToolResult:
        self.ran += 1
        if self.body is not None:
            return await self.body()  # type: ignore[no-any-return]
        await anyio.lowlevel.checkpoint()
        return ToolResult(output="ok")


async def mount(session: AmplifierSession, provider: ScriptedProvider, *tools: Tool) -> None:
    await session.coordinator.mount("providers", provider, name="scripted")
    for tool in tools:
        await session.coordinator.mount("tools", tool, name=tool.name)


# -- a cancel asked during turn N never reaches turn N+1 ---------------------------------


@pytest.mark.parametrize("immediate", [False, True], ids=["graceful", "immediate"])
async def test_a_cancel_during_turn_1_with_slow_hooks_never_reaches_turn_2(
    immediate: bool,
) -> None:
    """Before the handle, ``request_cancel`` looked the turn up after awaiting the slow
    ``cancel:requested`` hooks, by which time turn 2 was current: turn 1 returned success
    and turn 2, which nobody cancelled, came back cancelled."""
    hooks_started, release_hooks = anyio.Event(), anyio.Event()
    in_tool = [anyio.Event(), anyio.Event()]
    release_tool = [anyio.Event(), anyio.Event()]
    turn = 0

    async def blocked() -> ToolResult:
        in_tool[turn].set()
        await release_tool[turn].wait()
        return ToolResult(output=f"tool of turn {turn + 1}")

    async def slow_observer(event: str, data: dict[str, Any]) -> None:
        hooks_started.set()
        await release_hooks.wait()

    script = [calls("block"), answer("one"), calls("block", prefix="second"), answer("two")]
    results: list[Any] = []
    async with AmplifierSession(plan()) as session:
        await mount(session, ScriptedProvider(script), Tool("block", blocked))
        session.coordinator.hooks.register(CANCEL_REQUESTED, slow_observer)

        first_done = anyio.Event()

        async def run(prompt: str) -> None:
            results.append(await session.run(prompt))
            first_done.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(run, "first")
            await in_tool[0].wait()
            tg.start_soon(session.coordinator.request_cancel, immediate)
            await hooks_started.wait()
            release_tool[0].set()  # turn 1 ends while its cancel's hooks still run
            await first_done.wait()
            turn = 1
            tg.start_soon(run, "second")
            await in_tool[1].wait()
            release_hooks.set()  # the cancel asked during turn 1 is carried out now
            await anyio.sleep(0.05)
            release_tool[1].set()
    assert results[0].status is TurnStatus.SUCCESS, results[0]
    assert results[1].status is TurnStatus.SUCCESS, results[1]
    assert results[1].text == "two"


@pytest.mark.parametrize("immediate", [False, True], ids=["graceful", "immediate"])
async def test_session_cancel_binds_to_the_running_turn_only(immediate: bool) -> None:
    """``session.cancel()`` during turn 1's slow ``cancel:requested`` hook: turn 1 ends
    cancelled, turn 2 runs untouched, and cancel() says False once nothing runs."""
    entered = anyio.Event()
    release = anyio.Event()

    async def blocked() -> ToolResult:
        entered.set()
        await release.wait()
        return ToolResult(output="finished")

    async def slow_observer(event: str, data: dict[str, Any]) -> None:
        await anyio.sleep(0.05)

    async with AmplifierSession(plan()) as session:
        script = [calls("block"), answer("two"), answer("two")]  # graceful: one unused
        await mount(session, ScriptedProvider(script), Tool("block", blocked))
        session.coordinator.hooks.register(CANCEL_REQUESTED, slow_observer)
        results: list[Any] = []
        async with anyio.create_task_group() as tg:

            async def turn_1() -> None:
                results.append(await session.run("first"))

            tg.start_soon(turn_1)
            await entered.wait()
            assert session.cancel(immediate) is True
            release.set()
        assert results[0].status is TurnStatus.CANCELLED
        assert session.cancel(immediate) is False  # no turn is running
        second = await session.run("second")
        assert second.status is TurnStatus.SUCCESS, second
        assert second.text == "two"


# -- session:start reaches every handler before session:end ------------------------------


@pytest.mark.parametrize("how", ["graceful", "immediate", "host"])
async def test_session_start_reaches_every_handler_whatever_cancels_turn_1(how: str) -> None:
    """Before: a cancel while the first ``session:start`` handler ran stopped the emit, so
    the later handlers saw ``session:end`` without a start."""
    seen: list[tuple[str, str]] = []
    in_first = anyio.Event()

    async def first(event: str, data: dict[str, Any]) -> None:
        seen.append(("first", event))
        in_first.set()
        await anyio.sleep(0.2)

    async def second(event: str, data: dict[str, Any]) -> None:
        seen.append(("second", event))

    session = AmplifierSession(plan())
    async with session:
        await mount(session, ScriptedProvider([answer()]))
        hooks = session.coordinator.hooks
        hooks.register(SESSION_START, first, priority=0)
        hooks.register(SESSION_START, second, priority=1)
        hooks.register(SESSION_END, first, priority=0)
        hooks.register(SESSION_END, second, priority=1)
        results: list[Any] = []
        with anyio.CancelScope() as host:

            async def run() -> None:
                results.append(await session.run("hi"))

            async with anyio.create_task_group() as tg:
                tg.start_soon(run)
                await in_first.wait()
                if how == "host":
                    host.cancel()
                else:
                    session.cancel(immediate=how == "immediate")
        if how == "host":
            assert host.cancelled_caught
        else:
            assert results[0].status is TurnStatus.CANCELLED
    assert [e for e in seen if e[0] == "second"] == [
        ("second", SESSION_START),
        ("second", SESSION_END),
    ]


# -- a sync approval callback slower than its timeout is denied, the loop keeps going -----


async def test_a_blocking_sync_approval_callback_is_denied_at_its_timeout() -> None:
    """Before: the sync callback ran on the loop, froze it for 3 s, the 1 s timeout never
    fired, and the call was *allowed* (approval failed open)."""
    unblock = threading.Event()
    asked = threading.Event()

    def callback(request: ApprovalRequest) -> str:
        asked.set()
        unblock.wait(30)
        return "Allow once"

    plan_ = plan()
    plan_["hooks"] = [
        {"module": "hooks-approval", "config": {"tools": ["guarded"], "timeout": 0.5}}
    ]
    tool = Tool("guarded")
    ticks = 0
    async with AmplifierSession(plan_, approval_system=CallbackApprovalSystem(callback)) as s:
        await mount(s, ScriptedProvider([calls("guarded"), answer()]), tool)

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await anyio.sleep(0.01)

        async with anyio.create_task_group() as tg:
            tg.start_soon(ticker)
            result = await s.run("go")
            ticks_during = ticks
            tg.cancel_scope.cancel()
        unblock.set()
        messages = await s.coordinator.get("context").get_messages()
    assert asked.is_set()
    assert tool.ran == 0  # denied: the default of the request (deny) applied
    assert result.status is TurnStatus.SUCCESS
    tool_message = next(m for m in messages if m.get("role") == "tool")
    assert "Approval timeout - denied by default" in tool_message["content"]
    assert ticks_during >= 10  # the loop kept serving the ticker meanwhile


# -- a gate fails closed ------------------------------------------------------------------


async def test_a_raising_tool_pre_handler_denies_and_a_raising_post_is_skipped() -> None:
    async def crash(event: str, data: dict[str, Any]) -> HookResult:
        msg = f"guard broken on {event}"
        raise RuntimeError(msg)

    guarded = Tool("guarded")
    observed = Tool("observed")
    async with AmplifierSession(plan()) as s:
        script = [calls("guarded"), answer(), calls("observed"), answer()]
        await mount(s, ScriptedProvider(script))
        await s.coordinator.mount("tools", guarded, name="guarded")
        await s.coordinator.mount("tools", observed, name="observed")
        unregister = s.coordinator.hooks.register("tool:pre", crash, name="guard")
        first = await s.run("guarded")
        messages = await s.coordinator.get("context").get_messages()
        assert guarded.ran == 0
        assert first.status is TurnStatus.SUCCESS
        denied = next(m for m in messages if m.get("role") == "tool")["content"]
        assert "Denied by hook" in denied
        assert "'guard'" in denied
        unregister()
        s.coordinator.hooks.register("tool:post", crash, name="observer")
        await s.run("observed")
        messages = await s.coordinator.get("context").get_messages()
    assert observed.ran == 1
    assert [m for m in messages if m.get("role") == "tool"][-1]["content"] == "ok"


# -- KeyboardInterrupt / SystemExit from a tool ------------------------------------------


@pytest.mark.parametrize("fatal", [KeyboardInterrupt, SystemExit])
async def test_a_fatal_exception_from_a_tool_closes_the_turn_then_propagates(
    fatal: type[BaseException],
) -> None:
    """Before, on asyncio: the exception left a task of the batch's group, and asyncio
    stopped the loop at once: no results, no terminal events."""

    async def boom() -> ToolResult:
        await anyio.lowlevel.checkpoint()
        raise fatal

    async def slow() -> ToolResult:
        await anyio.sleep(30)
        return ToolResult(output="never")

    recorder = EventRecorder()
    async with AmplifierSession(plan()) as s:
        await mount(
            s,
            ScriptedProvider([calls("boom", "slow"), answer()]),
            Tool("boom", boom),
            Tool("slow", slow),
        )
        recorder.attach(s.coordinator.hooks)
        with pytest.raises(fatal):
            await s.run("go")
        messages = await s.coordinator.get("context").get_messages()
    names = recorder.names()
    assert names.count("orchestrator:complete") == 1
    assert names.count("execution:end") == 1
    results = [m for m in messages if m.get("role") == "tool"]
    assert [m["tool_call_id"] for m in results] == ["call-0", "call-1"]
    assert "cancelled" in results[1]["content"]


# -- resume on a context that cannot resume -----------------------------------------------


async def test_resume_on_a_context_that_cannot_resume_raises_session_error() -> None:
    async with AmplifierSession(plan()) as s:
        await mount(s, ScriptedProvider([answer(), answer("again")]))
        await s.run("hi")
        with pytest.raises(SessionError, match="cannot resume"):
            await s.resume()
        # and the session is usable afterwards
        assert (await s.run("again")).text == "again"


# -- every bad number is a ConfigError -----------------------------------------------------


@pytest.mark.parametrize("key", ["turn_timeout", "tool_timeout", "write_timeout"])
@pytest.mark.parametrize("value", [math.inf, math.nan, -1.0, 0.0, "soon"])
async def test_a_bad_timeout_is_a_config_error_naming_the_key(key: str, value: Any) -> None:
    with pytest.raises(ConfigError, match=key):
        async with AmplifierSession(plan(**{key: value})):
            pass


# -- values that cannot reach a request are refused when built -----------------------------


def test_a_message_without_content_is_refused() -> None:
    with pytest.raises((ValidationError, TypeError, ValueError), match="content"):
        Message(role="user", content=None)  # type: ignore[arg-type]


# -- a stuck fsync is bounded by write_timeout ---------------------------------------------


@pytest.fixture
def stuck_fsync(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """``os.fsync`` blocks (up to 20 s) once ``stuck`` is set, until it is cleared again."""
    real = os.fsync
    stuck = threading.Event()
    free = threading.Event()

    def fsync(fd: int) -> None:
        if stuck.is_set():
            free.wait(20)
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    yield stuck
    free.set()


@pytest.mark.parametrize("where", ["assistant message", "results"])
async def test_a_stuck_fsync_is_bounded_and_reported(
    tmp_path: Path, stuck_fsync: threading.Event, where: str
) -> None:
    """Before: the shielded write waited for the thread (not abandonable), so a stuck
    fsync held run() for as long as it was stuck, with status success and no problem."""
    replies = iter([calls("work"), answer()])

    def reply(request: Any) -> ChatResponse:
        if where == "assistant message":
            stuck_fsync.set()  # the next fsync is the assistant message's
        return next(replies)

    async def tool_body() -> ToolResult:
        stuck_fsync.set()  # the next fsync is the batch's results
        await anyio.lowlevel.checkpoint()
        return ToolResult(output="ok")

    context = {"module": "context-persistent", "config": {"path": str(tmp_path / "s.jsonl")}}
    tool = Tool("work", tool_body)
    async with AmplifierSession(plan(context, write_timeout=0.5)) as s:
        await mount(s, ScriptedProvider(reply), tool)
        with anyio.fail_after(10):  # generous: the bound is 0.5 s; a stuck fsync is 20 s
            result = await s.run("go")
        stuck_fsync.clear()
        messages = await s.coordinator.get("context").get_messages()
    assert any("gave up after 0.5 s" in p for p in result.problems), result.problems
    assert result.status is TurnStatus.ERROR
    if where == "assistant message":
        assert tool.ran == 0  # no call runs without its message, which was withdrawn
        assert [m["role"] for m in messages] == ["user"]
    else:
        assert tool.ran == 1
        assert [m["role"] for m in messages] == ["user", "assistant", "tool"]  # answered


async def test_a_host_cancel_arrives_within_the_write_bound(
    tmp_path: Path, stuck_fsync: threading.Event
) -> None:
    context = {"module": "context-persistent", "config": {"path": str(tmp_path / "s.jsonl")}}
    async with AmplifierSession(plan(context, write_timeout=0.5)) as s:
        await mount(s, ScriptedProvider([answer(), calls("work"), answer()]), Tool("work"))
        await s.run("warm up")
        stuck_fsync.set()
        with anyio.fail_after(10):
            with anyio.move_on_after(0.2) as host:
                await s.run("go")
        stuck_fsync.clear()
    assert host.cancelled_caught


class HeldFsync:
    """``os.fsync`` held at will: while held, each fsync sets ``entered`` and waits (up to
    20 s) for ``release()``."""

    def __init__(self) -> None:
        self.holding = threading.Event()
        self.free = threading.Event()
        self.entered = threading.Event()

    def hold(self) -> None:
        self.free.clear()
        self.holding.set()

    def release(self) -> None:
        self.holding.clear()
        self.free.set()


@pytest.fixture
def held_fsync(monkeypatch: pytest.MonkeyPatch) -> Any:
    real = os.fsync
    held = HeldFsync()

    def fsync(fd: int) -> None:
        if held.holding.is_set():
            held.entered.set()
            held.free.wait(20)
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    yield held
    held.release()


async def roles_in_memory_and_file(context: Any) -> tuple[list[str], list[str]]:
    """The roles of the history and of the file, once no write of the file is under way."""
    with anyio.fail_after(10):
        await context._file_lane.run(int)  # a no-op after the write under way
    memory = [m["role"] for m in await context.get_messages()]
    lines = context.path.read_text().splitlines()
    return memory, [json.loads(line)["role"] for line in lines]


async def test_a_stuck_prompt_write_is_bounded_and_withdrawn(
    tmp_path: Path, held_fsync: HeldFsync
) -> None:
    """Before: the prompt was written outside the bound: a stuck fsync held the turn until
    its ``turn_timeout`` (status cancelled, no problem), and the prompt stayed in the file
    when it landed, not in memory."""
    context = {"module": "context-persistent", "config": {"path": str(tmp_path / "s.jsonl")}}
    async with AmplifierSession(plan(context, write_timeout=0.5, turn_timeout=30)) as s:
        await mount(s, ScriptedProvider([answer("again")]))
        ctx = s.coordinator.get("context")
        await ctx.add_message({"role": "system", "content": "be brief"})
        held_fsync.hold()
        with anyio.fail_after(10):  # generous: the bound is 0.5 s; the turn's is 30 s
            result = await s.run("go")
        assert result.status is TurnStatus.ERROR
        assert result.problems == ("writing the prompt gave up after 0.5 s",)
        held_fsync.release()  # the stuck write lands now: its line is cut off again
        assert await roles_in_memory_and_file(ctx) == (["system"], ["system"])
        # the session goes on, memory and file alike
        assert (await s.run("again")).text == "again"
        expected = ["system", "user", "assistant"]
        assert await roles_in_memory_and_file(ctx) == (expected, expected)


@pytest.mark.parametrize("cancel", ["immediate", "host", "deadline"])
async def test_a_cancel_during_the_prompt_write_keeps_memory_and_file_equal(
    tmp_path: Path, held_fsync: HeldFsync, cancel: str
) -> None:
    """Before: the cancel stopped the prompt's write half way: the prompt landed in the
    file but not in memory (memory [system], file [system, user]). Now the write finishes
    under its shield and the cancel takes effect after it: both have the prompt."""
    context = {"module": "context-persistent", "config": {"path": str(tmp_path / "s.jsonl")}}
    timeout = 0.1 if cancel == "deadline" else 30
    async with AmplifierSession(plan(context, write_timeout=5, turn_timeout=timeout)) as s:
        await mount(s, ScriptedProvider([answer()]))
        ctx = s.coordinator.get("context")
        await ctx.add_message({"role": "system", "content": "be brief"})
        held_fsync.hold()
        result = None
        with anyio.fail_after(10):
            async with anyio.create_task_group() as group:
                with anyio.CancelScope() as host:

                    async def cancel_during_the_write() -> None:
                        await anyio.to_thread.run_sync(held_fsync.entered.wait, 10)
                        if cancel == "immediate":
                            await s.coordinator.request_cancel(immediate=True)
                        elif cancel == "host":
                            host.cancel()
                        await anyio.sleep(0.3)  # the cancel (or deadline) has come by now
                        held_fsync.release()

                    group.start_soon(cancel_during_the_write)
                    result = await s.run("go")
        assert (result is None) == (cancel == "host")
        if result is not None:
            assert result.status is TurnStatus.CANCELLED, result
            assert result.problems == ()
        expected = ["system", "user"]
        assert await roles_in_memory_and_file(ctx) == (expected, expected)


# -- one cancel:requested per escalation, never downgraded --------------------------------


@pytest.mark.parametrize("between", [False, True], ids=["at-once", "after-a-checkpoint"])
async def test_a_graceful_cancel_then_an_immediate_one_are_announced_in_that_order(
    between: bool,
) -> None:
    """Before: ``session.cancel()`` then ``await coordinator.request_cancel(immediate=True)``
    emitted ``cancel:requested`` as immediate, then again as graceful (the pending
    graceful one flushed last)."""
    entered = anyio.Event()
    levels: list[str] = []

    async def blocked() -> ToolResult:
        entered.set()
        await anyio.sleep_forever()
        raise AssertionError  # pragma: no cover

    def observe(event: str, data: dict[str, Any]) -> None:
        levels.append(data["level"])

    async with AmplifierSession(plan()) as session:
        await mount(session, ScriptedProvider([calls("block"), answer()]), Tool("block", blocked))
        session.coordinator.hooks.register(CANCEL_REQUESTED, observe)
        results: list[Any] = []
        async with anyio.create_task_group() as tg:

            async def turn() -> None:
                results.append(await session.run("go"))

            tg.start_soon(turn)
            await entered.wait()
            assert session.cancel() is True
            if between:
                await anyio.lowlevel.checkpoint()
            await session.coordinator.request_cancel(immediate=True)
            await session.coordinator.request_cancel(immediate=True)  # no change: no event
    assert results[0].status is TurnStatus.CANCELLED
    assert levels == ["graceful", "immediate"]
