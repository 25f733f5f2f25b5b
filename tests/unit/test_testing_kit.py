"""The public test kit behaves like the real parts a module under test talks to."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from amplifier_anyio.errors import MountError
from amplifier_anyio.events import ALL_EVENTS, EXECUTION_END, EXECUTION_START, TOOL_POST, TOOL_PRE
from amplifier_anyio.kernel import HookRegistry, ModuleCoordinator
from amplifier_anyio.models import HookResult, ToolResult
from amplifier_anyio.testing import (
    EventRecorder,
    MockContextManager,
    MockCoordinator,
    MockTool,
    RecordingDisplaySystem,
    ScriptedApprovalSystem,
    ScriptedOrchestrator,
)

pytestmark = pytest.mark.anyio


# -- MockCoordinator -------------------------------------------------------------------------


async def test_mock_coordinator_records_mounts_and_unmounts() -> None:
    coordinator = MockCoordinator()
    tool = MockTool("echo")
    context = MockContextManager()

    await coordinator.mount("tools", tool)
    await coordinator.mount("context", context)
    await coordinator.unmount("tools", "echo")

    assert coordinator.mount_history == [
        {"mount_point": "tools", "module": tool, "name": None},
        {"mount_point": "context", "module": context, "name": None},
    ]
    assert coordinator.unmount_history == [{"mount_point": "tools", "name": "echo"}]
    assert coordinator.get("tools") == {}
    assert coordinator.get("context") is context


async def test_mock_coordinator_keeps_the_real_mount_rules() -> None:
    coordinator = MockCoordinator()

    with pytest.raises(MountError, match="Name required for tools"):
        await coordinator.mount("tools", object())

    # A refused mount is not recorded as if it had happened.
    assert coordinator.mount_history == []
    assert isinstance(coordinator, ModuleCoordinator)


async def test_mock_coordinator_hooks_are_real_and_carry_session_defaults() -> None:
    coordinator = MockCoordinator(session_id="s-42", parent_id="p-1")
    seen: list[dict[str, Any]] = []

    async def handler(event: str, data: dict[str, Any]) -> HookResult:
        seen.append(data)
        return HookResult(action="deny", reason="policy")

    assert isinstance(coordinator.hooks, HookRegistry)
    coordinator.hooks.register(TOOL_PRE, handler)

    result = await coordinator.hooks.emit(TOOL_PRE, {"tool_name": "bash"})

    assert result.action == "deny"
    assert seen[0]["session_id"] == "s-42"
    assert seen[0]["parent_id"] == "p-1"
    assert seen[0]["tool_name"] == "bash"
    assert coordinator.session_id == "s-42"


def test_mock_coordinator_default_session_config() -> None:
    coordinator = MockCoordinator()

    assert coordinator.session_id == "test-session"
    assert coordinator.config == {
        "session": {"orchestrator": "test-orchestrator", "context": "test-context"}
    }


async def test_mock_coordinator_fails_closed_without_an_approval_system() -> None:
    coordinator = MockCoordinator()

    result = await coordinator.process_hook_result(
        HookResult(action="ask_user", approval_prompt="ok?"), TOOL_PRE, "guard"
    )

    assert result.action == "deny"


async def test_mock_coordinator_with_scripted_approvals_and_recorded_messages() -> None:
    approvals = ScriptedApprovalSystem(["Deny"], default_answer="Allow once")
    coordinator = MockCoordinator(approval_system=approvals)
    ask = HookResult(action="ask_user", approval_prompt="Run it?")

    first = await coordinator.process_hook_result(ask, TOOL_PRE, "guard")
    second = await coordinator.process_hook_result(ask, TOOL_PRE, "guard")
    await coordinator.process_hook_result(HookResult(user_message="hi"), TOOL_POST, "greeter")

    assert (first.action, second.action) == ("deny", "continue")
    assert [r["prompt"] for r in approvals.requests] == ["Run it?", "Run it?"]
    assert isinstance(coordinator.display_system, RecordingDisplaySystem)
    assert coordinator.display_system.messages == [("hi", "info", "hook:greeter")]


# -- MockTool --------------------------------------------------------------------------------


async def test_mock_tool_returns_output_and_records_calls() -> None:
    tool = MockTool("echo", {"echoed": True})

    result = await tool.execute({"text": "a"})
    await tool.execute({"text": "b"})

    assert result == ToolResult(success=True, output={"echoed": True})
    assert tool.calls == [{"text": "a"}, {"text": "b"}]
    assert tool.call_count == 2
    assert tool.name == "echo"
    assert tool.description == "Mock tool: echo"
    assert tool.input_schema == {"type": "object", "properties": {}}


async def test_mock_tool_error_is_a_failed_result() -> None:
    tool = MockTool("fail", error="disk full")

    result = await tool.execute({})

    assert result.success is False
    assert result.error == {"message": "disk full"}
    assert result.output == "disk full"
    assert tool.call_count == 1


async def test_mock_tool_delay_is_a_cancellable_sleep() -> None:
    tool = MockTool("slow", delay=3600)

    with anyio.move_on_after(0.05) as scope:
        await tool.execute({"n": 1})

    # The call is recorded even when it never finished.
    assert scope.cancelled_caught
    assert tool.calls == [{"n": 1}]


async def test_mock_tool_delay_lets_other_tasks_run_meanwhile() -> None:
    # The delay is far longer than the test: the other task runs while the tool sleeps
    # (not because a short sleep happened to end after it), then ends the wait.
    tool = MockTool("slow", "done", delay=3600)
    order: list[str] = []

    async def call_tool() -> None:
        result = await tool.execute({})
        order.append(f"tool {result.output}")

    async with anyio.create_task_group() as tg:
        tg.start_soon(call_tool)
        await anyio.lowlevel.checkpoint()
        while tool.call_count == 0:  # started, so now inside its delay
            await anyio.lowlevel.checkpoint()
        order.append("other task")
        tg.cancel_scope.cancel()

    assert order == ["other task"]
    assert tool.calls == [{}]


# -- MockContextManager ----------------------------------------------------------------------


async def test_mock_context_manager_follows_the_protocol() -> None:
    context = MockContextManager([{"role": "system", "content": "be brief"}])
    user = {"role": "user", "content": "hi"}

    await context.add_message(user)
    user["content"] = "mutated by the caller afterwards"
    history = await context.get_messages()
    for_request = await context.get_messages_for_request(token_budget=10, provider=None)

    assert history == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hi"},
    ]
    assert for_request == history
    history.append({"role": "assistant", "content": "not really in the context"})
    assert len(await context.get_messages()) == 2

    await context.set_messages([{"role": "user", "content": "replaced"}])
    assert await context.get_messages() == [{"role": "user", "content": "replaced"}]

    await context.clear()
    assert await context.get_messages() == []
    assert context.messages == []


# -- EventRecorder ---------------------------------------------------------------------------


async def test_event_recorder_attach_records_every_event_in_order() -> None:
    hooks = HookRegistry()
    hooks.set_default_fields(session_id="s-1")
    recorder = EventRecorder()
    recorder.attach(hooks)

    for event in ALL_EVENTS:
        await hooks.emit(event, {"n": event})

    assert recorder.names() == list(ALL_EVENTS)
    assert all(data["session_id"] == "s-1" for _, data in recorder.events)


async def test_event_recorder_sees_final_data_and_never_changes_the_outcome() -> None:
    hooks = HookRegistry()
    recorder = EventRecorder()
    recorder.attach(hooks, events=[TOOL_PRE])

    async def rewrite(event: str, data: dict[str, Any]) -> HookResult:
        return HookResult(action="modify", data={**data, "tool_input": {"safe": True}})

    hooks.register(TOOL_PRE, rewrite, priority=10)

    result = await hooks.emit(TOOL_PRE, {"tool_input": {"safe": False}})

    assert result.action == "modify"
    ((name, data),) = recorder.get_events(TOOL_PRE)
    assert name == TOOL_PRE
    assert data["tool_input"] == {"safe": True}


async def test_event_recorder_filters_copies_and_clears() -> None:
    recorder = EventRecorder()
    payload = {"k": 1}

    await recorder.emit("a", payload)
    await recorder.record("b", {"k": 2})
    await recorder("a", {"k": 3})
    payload["k"] = 99

    assert [data["k"] for _, data in recorder.get_events("a")] == [1, 3]
    assert len(recorder.get_events()) == 3
    recorder.clear()
    assert recorder.events == []


# -- ScriptedOrchestrator --------------------------------------------------------------------


async def test_scripted_orchestrator_answers_then_says_done() -> None:
    coordinator = MockCoordinator()
    context = MockContextManager()
    recorder = EventRecorder()
    recorder.attach(coordinator.hooks, events=[EXECUTION_START, EXECUTION_END])
    orchestrator = ScriptedOrchestrator(["first answer", "second answer"])

    answers = [
        await orchestrator.execute(
            prompt=f"prompt {i}",
            context=context,
            providers={},
            tools={},
            hooks=coordinator.hooks,
            coordinator=coordinator,
        )
        for i in range(3)
    ]

    assert answers == ["first answer", "second answer", "DONE"]
    assert orchestrator.calls == ["prompt 0", "prompt 1", "prompt 2"]
    assert [m["role"] for m in context.messages] == ["user", "assistant"] * 3
    assert context.messages[1]["content"] == "first answer"
    assert recorder.names() == [EXECUTION_START, EXECUTION_END] * 3
    assert recorder.events[-1][1]["response"] == "DONE"
