"""The structured tool batch: one assistant message's calls, their hooks and their results."""

from __future__ import annotations

import json
import threading
from typing import Any

import anyio
import pytest

from amplifier_anyio.errors import ConfigError
from amplifier_anyio.events import TOOL_ERROR, TOOL_POST, TOOL_PRE
from amplifier_anyio.kernel import ToolCallContext, current_tool_call, trace_scope
from amplifier_anyio.models import ChatResponse, HookResult, TextBlock, ToolCall, ToolResult
from amplifier_anyio.orchestrators import LoopBasicOrchestrator
from amplifier_anyio.providers.scripted import ScriptedProvider
from amplifier_anyio.runtime import ToolBatch, ToolBatchConfig
from amplifier_anyio.testing import EventRecorder, MockContextManager, MockCoordinator, MockTool

pytestmark = pytest.mark.anyio

CANCELLED = {"error": "Tool execution was cancelled", "cancelled": True}


class RecordingTool:
    """Answers with its input; records starts, finishes and the most calls in flight."""

    def __init__(self, name: str = "rec", *, delay: float = 0.0) -> None:
        self.name = name
        self.delay = delay
        self.started: list[Any] = []
        self.finished: list[Any] = []
        self.in_flight = 0
        self.max_in_flight = 0

    async def execute(self, tool_input: dict[str, Any]) -> ToolResult:
        self.started.append(tool_input.get("n"))
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await anyio.sleep(self.delay)
        finally:
            self.in_flight -= 1
        self.finished.append(tool_input.get("n"))
        return ToolResult(output={"got": tool_input})


def calls_to(name: str, count: int) -> list[ToolCall]:
    return [ToolCall(id=f"c{i}", name=name, arguments={"n": i}) for i in range(count)]


def assistant(calls: list[ToolCall]) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in calls],
    }


async def run_batch(
    calls: list[ToolCall],
    tools: dict[str, Any],
    *,
    coordinator: MockCoordinator | None = None,
    config: ToolBatchConfig | None = None,
) -> tuple[ToolBatch, MockContextManager]:
    coordinator = coordinator or MockCoordinator()
    context = MockContextManager()
    await coordinator.mount("context", context)
    batch = ToolBatch(
        calls=calls,
        tools=tools,
        hooks=coordinator.hooks,
        coordinator=coordinator,
        config=config or ToolBatchConfig(),
    )
    await batch.run(context, assistant(calls))
    return batch, context


def tool_contents(context: MockContextManager) -> list[str]:
    return [m["content"] for m in context.messages if m["role"] == "tool"]


def recorder_on(coordinator: MockCoordinator) -> EventRecorder:
    recorder = EventRecorder()
    recorder.attach(coordinator.hooks)
    return recorder


# -- ordering --------------------------------------------------------------------------------


class ReverseOrderTool:
    """The last call finishes first, then releases the one before it, and so on."""

    name = "gated"

    def __init__(self, count: int) -> None:
        self.gates = [anyio.Event() for _ in range(count)]
        self.gates[-1].set()
        self.finish_order: list[int] = []

    async def execute(self, tool_input: dict[str, Any]) -> str:
        n = tool_input["n"]
        await self.gates[n].wait()
        self.finish_order.append(n)
        if n > 0:
            self.gates[n - 1].set()
        return f"result {n}"


async def test_results_are_written_in_call_order_whatever_the_finish_order() -> None:
    tool = ReverseOrderTool(5)
    coordinator = MockCoordinator()
    recorder = recorder_on(coordinator)

    _, context = await run_batch(calls_to("gated", 5), {"gated": tool}, coordinator=coordinator)

    assert tool.finish_order == [4, 3, 2, 1, 0]
    assert [m["role"] for m in context.messages] == ["assistant"] + ["tool"] * 5
    assert [m["tool_call_id"] for m in context.messages[1:]] == ["c0", "c1", "c2", "c3", "c4"]
    assert tool_contents(context) == [f"result {n}" for n in range(5)]
    # Events come in completion order, each naming its call and index.
    posts = recorder.get_events(TOOL_POST)
    assert [(d["tool_call_id"], d["index"]) for _, d in posts] == [
        (f"c{n}", n) for n in (4, 3, 2, 1, 0)
    ]


async def test_one_parallel_group_id_per_batch_shared_by_its_calls() -> None:
    coordinator = MockCoordinator()
    recorder = recorder_on(coordinator)
    tool = RecordingTool()

    first, _ = await run_batch(calls_to("rec", 3), {"rec": tool}, coordinator=coordinator)
    second, _ = await run_batch(calls_to("rec", 2), {"rec": tool}, coordinator=coordinator)

    groups = [d["parallel_group_id"] for e, d in recorder.events if e in (TOOL_PRE, TOOL_POST)]
    assert groups == [first.parallel_group_id] * 6 + [second.parallel_group_id] * 4
    assert first.parallel_group_id != second.parallel_group_id


async def test_tool_events_carry_the_documented_payload() -> None:
    coordinator = MockCoordinator()
    recorder = recorder_on(coordinator)
    calls = [ToolCall(id="a", name="rec", arguments={"n": 7}), ToolCall(id="b", name="nope")]

    batch, _ = await run_batch(calls, {"rec": RecordingTool()}, coordinator=coordinator)

    base = {"parallel_group_id": batch.parallel_group_id}
    pre = sorted((d for _, d in recorder.get_events(TOOL_PRE)), key=lambda d: d["index"])
    assert pre[0] | base == pre[0]
    assert {k: pre[0][k] for k in ("tool_name", "tool_call_id", "tool_input", "index")} == {
        "tool_name": "rec",
        "tool_call_id": "a",
        "tool_input": {"n": 7},
        "index": 0,
    }
    [post] = [d for _, d in recorder.get_events(TOOL_POST) if d["tool_call_id"] == "a"]
    assert post["result"]["output"] == {"got": {"n": 7}}
    (_, error), *_ = recorder.get_events(TOOL_ERROR)
    assert {k: error[k] for k in ("tool_name", "tool_call_id", "index", "parallel_group_id")} == {
        "tool_name": "nope",
        "tool_call_id": "b",
        "index": 1,
        "parallel_group_id": batch.parallel_group_id,
    }
    assert "tool_input" not in error


# -- failures --------------------------------------------------------------------------------


async def test_unknown_tool_gives_an_error_result_and_tool_error() -> None:
    coordinator = MockCoordinator()
    recorder = recorder_on(coordinator)

    _, context = await run_batch([ToolCall(id="x", name="nope")], {}, coordinator=coordinator)

    assert tool_contents(context) == ["Error: Tool 'nope' not found"]
    [(_, data)] = recorder.get_events(TOOL_ERROR)
    assert data["error"] == {"type": "ToolNotFoundError", "msg": "Tool 'nope' not found"}


async def test_arguments_given_as_a_json_string_are_decoded() -> None:
    tool = MockTool("t")
    call = ToolCall(id="a", name="t", arguments='{"path": "a.txt", "n": 2}')  # type: ignore[arg-type]

    _, context = await run_batch([call], {"t": tool})

    assert tool.calls == [{"path": "a.txt", "n": 2}]
    assert tool_contents(context) == ["Success"]


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ('{"path": ', "arguments are not valid JSON"),
        ("[1, 2]", "arguments must be a JSON object, not list"),
        ('"text"', "arguments must be a JSON object, not str"),
        (42, "arguments must be a JSON object, not int"),
    ],
)
async def test_bad_arguments_give_an_error_naming_the_problem(arguments: Any, problem: str) -> None:
    tool = MockTool("t")
    coordinator = MockCoordinator()
    recorder = recorder_on(coordinator)

    _, context = await run_batch(
        [ToolCall(id="a", name="t", arguments=arguments)], {"t": tool}, coordinator=coordinator
    )

    [content] = tool_contents(context)
    assert content.startswith(f"Error: {problem}")
    assert tool.call_count == 0
    [(_, data)] = recorder.get_events(TOOL_ERROR)
    assert data["error"]["type"] == "InvalidArgumentsError"


class RaisingTool:
    name = "boom"

    async def execute(self, tool_input: dict[str, Any]) -> ToolResult:
        await anyio.lowlevel.checkpoint()
        raise ValueError("the disk is on fire")


async def test_a_raising_tool_gives_an_error_result_and_tool_error() -> None:
    coordinator = MockCoordinator()
    recorder = recorder_on(coordinator)
    calls = [ToolCall(id="a", name="boom"), ToolCall(id="b", name="rec", arguments={"n": 1})]

    _, context = await run_batch(
        calls, {"boom": RaisingTool(), "rec": RecordingTool()}, coordinator=coordinator
    )

    assert tool_contents(context) == [
        "Error: the disk is on fire",
        json.dumps({"got": {"n": 1}}),
    ]
    [(_, data)] = recorder.get_events(TOOL_ERROR)
    assert data["tool_call_id"] == "a"
    assert data["error"] == {"type": "ValueError", "msg": "the disk is on fire"}


async def test_an_error_result_is_shown_as_an_error() -> None:
    tool = MockTool("t", error="no such file")

    _, context = await run_batch([ToolCall(id="a", name="t")], {"t": tool})

    assert tool_contents(context) == ["Error: no such file"]


async def test_a_plain_return_value_becomes_the_output() -> None:
    class Plain:
        async def execute(self, tool_input: dict[str, Any]) -> Any:
            await anyio.lowlevel.checkpoint()
            return {"rows": [1, 2]}

    _, context = await run_batch([ToolCall(id="a", name="p")], {"p": Plain()})

    assert tool_contents(context) == ['{"rows": [1, 2]}']


# -- synchronous tools -----------------------------------------------------------------------


async def test_a_sync_tool_runs_in_a_worker_thread_while_the_loop_goes_on() -> None:
    released = threading.Event()
    loop_thread = threading.get_ident()

    class Blocking:
        def execute(self, tool_input: dict[str, Any]) -> ToolResult:
            # Blocks until another task, on the event loop, sets the event.
            ok = released.wait(timeout=10)
            return ToolResult(output={"released": ok, "thread": threading.get_ident()})

    async def release_soon() -> None:
        await anyio.sleep(0.01)
        released.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(release_soon)
        _, context = await run_batch([ToolCall(id="a", name="b")], {"b": Blocking()})

    output = json.loads(tool_contents(context)[0])
    assert output["released"] is True
    assert output["thread"] != loop_thread


# -- hooks -----------------------------------------------------------------------------------


async def test_tool_pre_deny_answers_without_running_the_tool() -> None:
    coordinator = MockCoordinator()
    tool = MockTool("t")

    async def deny(event: str, data: dict[str, Any]) -> HookResult:
        await anyio.lowlevel.checkpoint()
        return HookResult(action="deny", reason="writes are off today")

    coordinator.hooks.register(TOOL_PRE, deny)

    _, context = await run_batch([ToolCall(id="a", name="t")], {"t": tool}, coordinator=coordinator)

    assert tool_contents(context) == ["Denied by hook: writes are off today"]
    assert tool.call_count == 0


async def test_tool_pre_deny_is_honoured_without_a_coordinator() -> None:
    coordinator = MockCoordinator()
    tool = MockTool("t")
    coordinator.hooks.register(TOOL_PRE, lambda e, d: HookResult(action="deny", reason="no"))
    context = MockContextManager()
    call = ToolCall(id="a", name="t")

    await ToolBatch(calls=[call], tools={"t": tool}, hooks=coordinator.hooks).run(
        context, assistant([call])
    )

    assert tool_contents(context) == ["Denied by hook: no"]
    assert tool.call_count == 0


async def test_tool_pre_modify_changes_the_input_the_tool_receives() -> None:
    coordinator = MockCoordinator()
    tool = MockTool("t")

    def sandbox(event: str, data: dict[str, Any]) -> HookResult:
        fixed = {**data["tool_input"], "path": "/sandbox/" + data["tool_input"]["path"]}
        return HookResult(action="modify", data={**data, "tool_input": fixed})

    coordinator.hooks.register(TOOL_PRE, sandbox)

    await run_batch(
        [ToolCall(id="a", name="t", arguments={"path": "x.txt"})],
        {"t": tool},
        coordinator=coordinator,
    )

    assert tool.calls == [{"path": "/sandbox/x.txt"}]


@pytest.mark.parametrize(
    ("replacement", "content"),
    [
        ({"redacted": True}, '{"redacted": true}'),
        ("[output withheld]", "[output withheld]"),
    ],
)
async def test_tool_post_modify_replaces_the_result(replacement: Any, content: str) -> None:
    coordinator = MockCoordinator()

    def redact(event: str, data: dict[str, Any]) -> HookResult:
        return HookResult(action="modify", data={**data, "result": replacement})

    coordinator.hooks.register(TOOL_POST, redact)

    _, context = await run_batch(
        [ToolCall(id="a", name="t")], {"t": MockTool("t", "secret")}, coordinator=coordinator
    )

    assert tool_contents(context) == [content]


async def test_tool_post_without_modify_keeps_the_serialized_output() -> None:
    coordinator = MockCoordinator()
    coordinator.hooks.register(TOOL_POST, lambda e, d: HookResult(action="continue", data=d))

    _, context = await run_batch(
        [ToolCall(id="a", name="t")], {"t": MockTool("t", {"k": [1]})}, coordinator=coordinator
    )

    assert tool_contents(context) == ['{"k": [1]}']


async def test_persistent_injections_land_after_the_batch_results() -> None:
    coordinator = MockCoordinator()

    def note(event: str, data: dict[str, Any]) -> HookResult:
        return HookResult(
            action="inject_context",
            context_injection=f"{event} {data['tool_call_id']}",
            context_injection_role="user",
        )

    coordinator.hooks.register(TOOL_PRE, note)
    coordinator.hooks.register(TOOL_POST, note)
    tool = RecordingTool()

    _, context = await run_batch(calls_to("rec", 2), {"rec": tool}, coordinator=coordinator)

    roles = [m["role"] for m in context.messages]
    assert roles == ["assistant", "tool", "tool", "user", "user", "user", "user"]
    injected = sorted(m["content"] for m in context.messages[3:])
    assert injected == ["tool:post c0", "tool:post c1", "tool:pre c0", "tool:pre c1"]


async def test_ephemeral_tool_post_injection_reaches_the_next_request_only() -> None:
    coordinator = MockCoordinator()
    context = MockContextManager()
    await coordinator.mount("context", context)

    def remind(event: str, data: dict[str, Any]) -> HookResult:
        return HookResult(
            action="inject_context",
            context_injection="check the output",
            ephemeral=True,
            append_to_last_tool_result=data["tool_call_id"] == "b",
        )

    coordinator.hooks.register(TOOL_POST, remind)
    provider = ScriptedProvider(
        [
            ChatResponse(tool_calls=[ToolCall(id="a", name="t")]),
            ChatResponse(tool_calls=[ToolCall(id="b", name="t")]),
            ChatResponse(content=[TextBlock(text="done")]),
        ]
    )

    await LoopBasicOrchestrator().execute(
        "go", context, {"p": provider}, {"t": MockTool("t")}, coordinator.hooks,
        coordinator=coordinator,
    )  # fmt: skip

    first, second, third = ([m.content for m in r.messages] for r in provider.requests)
    assert "check the output" not in str(first)
    # After batch a: a separate system message at the end of that request.
    assert [m.role for m in provider.requests[1].messages][-2:] == ["tool", "system"]
    assert second[-1] == "check the output"
    # After batch b: appended to the last tool result instead.
    assert provider.requests[2].messages[-1].role == "tool"
    assert third[-1] == "Success\n\ncheck the output"
    assert "check the output" not in str(third[:-1])
    # Never stored.
    assert all("check the output" not in str(m["content"]) for m in context.messages)


# -- the ContextVar --------------------------------------------------------------------------


async def test_tool_code_sees_its_own_call_even_when_calls_overlap() -> None:
    seen: dict[str, ToolCallContext | None] = {}
    everyone_in = anyio.Event()

    class Introspect:
        async def execute(self, tool_input: dict[str, Any]) -> str:
            call = current_tool_call()
            assert call is not None
            seen[call.tool_call_id] = None
            if len(seen) == 3:
                everyone_in.set()
            await everyone_in.wait()  # all three calls are paused here together
            seen[call.tool_call_id] = current_tool_call()
            return "ok"

    with trace_scope("trace-123"):
        batch, _ = await run_batch(calls_to("i", 3), {"i": Introspect()})

    assert seen == {
        f"c{n}": ToolCallContext(
            tool_call_id=f"c{n}",
            tool_name="i",
            parallel_group_id=batch.parallel_group_id,
            index=n,
            trace_id="trace-123",
        )
        for n in range(3)
    }
    assert current_tool_call() is None


async def test_tool_code_sees_the_turn_trace_id() -> None:
    seen: list[ToolCallContext | None] = []

    class Introspect:
        async def execute(self, tool_input: dict[str, Any]) -> str:
            await anyio.lowlevel.checkpoint()
            seen.append(current_tool_call())
            return "ok"

    provider = ScriptedProvider(
        [ChatResponse(tool_calls=[ToolCall(id="a", name="i")]), ChatResponse()]
    )
    result = await LoopBasicOrchestrator().run_turn(
        "go", MockContextManager(), {"p": provider}, {"i": Introspect()}, MockCoordinator().hooks
    )

    [call] = seen
    assert call is not None
    assert call.trace_id == result.trace_id is not None


# -- concurrency limits ----------------------------------------------------------------------


async def test_max_parallel_tools_bounds_the_calls_in_flight() -> None:
    tool = RecordingTool(delay=0.005)

    await run_batch(
        calls_to("rec", 12), {"rec": tool}, config=ToolBatchConfig(max_parallel_tools=3)
    )

    assert tool.max_in_flight == 3
    assert sorted(tool.finished) == list(range(12))


async def test_unbounded_batches_run_every_call_at_once() -> None:
    tool = RecordingTool(delay=0.005)

    await run_batch(calls_to("rec", 12), {"rec": tool})

    assert tool.max_in_flight == 12


async def test_sequential_batches_run_one_call_at_a_time_in_call_order() -> None:
    tool = RecordingTool(delay=0.001)

    _, context = await run_batch(
        calls_to("rec", 6), {"rec": tool}, config=ToolBatchConfig(parallel=False)
    )

    assert tool.max_in_flight == 1
    assert tool.started == tool.finished == list(range(6))
    assert [m["tool_call_id"] for m in context.messages[1:]] == [f"c{n}" for n in range(6)]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_parallel_tools": 0}, "max_parallel_tools: expected an integer >= 1, got 0"),
        ({"max_parallel_tools": True}, "max_parallel_tools: expected an integer"),
        ({"tool_timeout": 0}, "tool_timeout: expected a finite number > 0, got 0"),
        ({"tool_timeout": -1.5}, "tool_timeout: expected a finite number > 0"),
        ({"tool_timeout": float("nan")}, "tool_timeout: expected a finite number > 0, got nan"),
        ({"write_timeout": float("inf")}, "write_timeout: expected a finite number > 0"),
    ],
)
def test_batch_config_rejects_impossible_values(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        ToolBatchConfig(**options)


# -- cancellation ----------------------------------------------------------------------------


async def test_a_cancelled_batch_keeps_finished_results_and_answers_the_rest() -> None:
    class Fast:
        async def execute(self, tool_input: dict[str, Any]) -> str:
            await anyio.lowlevel.checkpoint()
            return "fast result"

    class Stuck:
        async def execute(self, tool_input: dict[str, Any]) -> str:
            await anyio.sleep_forever()
            raise AssertionError

    calls = [ToolCall(id="s", name="stuck"), ToolCall(id="f", name="fast")]
    context = MockContextManager()
    batch = ToolBatch(
        calls=calls, tools={"stuck": Stuck(), "fast": Fast()}, hooks=MockCoordinator().hooks
    )

    with anyio.CancelScope() as scope:

        async def cancel_when_fast_is_done() -> None:
            await anyio.wait_all_tasks_blocked()
            assert batch.finished == 1
            scope.cancel()

        async with anyio.create_task_group() as tg:
            tg.start_soon(cancel_when_fast_is_done)
            await batch.run(context, assistant(calls))

    assert scope.cancelled_caught
    stuck, fast = tool_contents(context)
    assert json.loads(stuck) == {**CANCELLED, "tool": "stuck"}
    assert fast == "fast result"
    assert [m["tool_call_id"] for m in context.messages[1:]] == ["s", "f"]


async def test_a_cut_call_answers_with_what_its_tool_noted_to_resume_it() -> None:
    """``ToolCallContext.note_resume``: the cancelled answer of a call cut before it
    answered carries the noted fields (never replacing its own keys); a call that
    answers keeps its own result."""

    class Job:
        def __init__(self, name: str, *, hang: bool) -> None:
            self.name, self.hang = name, hang

        async def execute(self, tool_input: dict[str, Any]) -> str:
            call = current_tool_call()
            assert call is not None
            await call.note_resume(job_id=f"job-{call.tool_call_id}", cancelled="no")
            await call.note_resume(attempt=2)
            if self.hang:
                await anyio.sleep_forever()
            return "done"

    calls = [ToolCall(id="s", name="slow"), ToolCall(id="q", name="quick")]
    context = MockContextManager()
    tools = {"slow": Job("slow", hang=True), "quick": Job("quick", hang=False)}
    batch = ToolBatch(calls=calls, tools=tools, hooks=MockCoordinator().hooks)
    with anyio.CancelScope() as scope:

        async def cancel_when_quick_is_done() -> None:
            await anyio.wait_all_tasks_blocked()
            scope.cancel()

        async with anyio.create_task_group() as tg:
            tg.start_soon(cancel_when_quick_is_done)
            await batch.run(context, assistant(calls))

    slow, quick = tool_contents(context)
    assert json.loads(slow) == {**CANCELLED, "tool": "slow", "job_id": "job-s", "attempt": 2}
    assert quick == "done"


async def test_a_note_outside_a_batch_is_dropped() -> None:
    call = ToolCallContext(
        tool_call_id="x", tool_name="t", parallel_group_id="g", index=0, trace_id=None
    )
    await call.note_resume(session_id="kept nowhere")  # no batch: nothing to keep it
