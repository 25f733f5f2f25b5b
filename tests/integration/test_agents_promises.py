"""Sub-agent defects found by an adversarial round, each pinned: an overlay cannot raise
the root's depth limit; a resumed child is reported under its whole agent name."""

from __future__ import annotations

import json

import anyio
import pytest
from _agents_kit import (
    HANG_GUARD,
    Children,
    answer,
    calls,
    of,
    parent_reply,
    plan,
    task,
    tool_results,
)

from amplifier_anyio import AmplifierSession, ChatRequest, ChatResponse, TurnStatus
from amplifier_anyio.events import TASK_AGENT_COMPLETED, TASK_AGENT_RESUMED, TASK_AGENT_SPAWNED
from amplifier_anyio.kernel._ids import agent_of_child_id, parent_of_child_id
from amplifier_anyio.providers.scripted import ScriptedProvider
from amplifier_anyio.testing import EventRecorder

pytestmark = pytest.mark.anyio


async def test_an_overlay_cannot_raise_the_roots_depth_limit() -> None:
    def recursive(child: AmplifierSession) -> ScriptedProvider:
        def reply(request: ChatRequest) -> ChatResponse:
            results = tool_results(request)
            if not results:
                return calls(task("researcher", "dig deeper"))
            return answer(f"depth {child.depth}: {results[0][:80]}")

        return ScriptedProvider(reply)

    deep = plan(session={"max_agent_depth": 2})
    deep["agents"]["researcher"]["session"] = {"max_agent_depth": 6}
    children = Children({"researcher": recursive})
    parent = ScriptedProvider(parent_reply(calls(task("researcher"))))
    async with AmplifierSession(deep) as session:
        session.child_setup.append(children)
        await session.coordinator.mount("providers", parent, name="scripted")
        with anyio.fail_after(HANG_GUARD):
            result = await session.run("dig")

    assert result.status is TurnStatus.SUCCESS
    assert [c.depth for c in children.sessions] == [1, 2]  # not 6 deep
    assert "Delegation failed: agent 'researcher'" in result.text  # depth 3 was refused


async def test_a_lower_overlay_limit_still_holds_for_its_subtree() -> None:
    def recursive(child: AmplifierSession) -> ScriptedProvider:
        def reply(request: ChatRequest) -> ChatResponse:
            if not tool_results(request):
                return calls(task("researcher", "dig deeper"))
            return answer("done")

        return ScriptedProvider(reply)

    shallow = plan(session={"max_agent_depth": 5})
    shallow["agents"]["researcher"]["session"] = {"max_agent_depth": 2}
    children = Children({"researcher": recursive})
    parent = ScriptedProvider(parent_reply(calls(task("researcher"))))
    async with AmplifierSession(shallow) as session:
        session.child_setup.append(children)
        await session.coordinator.mount("providers", parent, name="scripted")
        with anyio.fail_after(HANG_GUARD):
            await session.run("dig")
    assert [c.depth for c in children.sessions] == [1, 2]


def test_the_agent_of_a_child_id_is_its_whole_name() -> None:
    assert agent_of_child_id("3f2a-0123456789abcdef_code_reviewer") == "code_reviewer"
    grandchild = "r-0123456789abcdef_researcher-fedcba9876543210_fact_checker"
    assert agent_of_child_id(grandchild) == "fact_checker"
    assert agent_of_child_id("no-span-here") is None


def test_the_parent_of_a_child_id_is_the_id_before_its_last_span() -> None:
    assert parent_of_child_id("3f2a-0123456789abcdef_code_reviewer") == "3f2a"
    grandchild = "r-0123456789abcdef_researcher-fedcba9876543210_fact_checker"
    assert parent_of_child_id(grandchild) == "r-0123456789abcdef_researcher"
    assert parent_of_child_id("no-span-here") is None


async def test_a_resumed_child_is_reported_under_its_whole_agent_name() -> None:
    recorder = EventRecorder()
    two_words = plan()
    two_words["agents"] = {"code_reviewer": {"description": "Reviews.", "instruction": "Review."}}
    children = Children({"code_reviewer": lambda child: ScriptedProvider(lambda r: answer("ok"))})
    ids: list[str] = []

    def reply(request: ChatRequest) -> ChatResponse:
        results = tool_results(request)
        if results:
            ids.append(json.loads(results[0])["session_id"])
            return answer(results[0])
        if not ids:
            return calls(task("code_reviewer", "review"))
        return calls(("task", {"session_id": ids[0], "instruction": "again"}), prefix="r")

    async with AmplifierSession(two_words) as session:
        recorder.attach(session.coordinator.hooks)
        session.child_setup.append(children)
        await session.coordinator.mount("providers", ScriptedProvider(reply), name="scripted")
        await session.run("one")
        await session.run("two")

    assert [e["agent"] for e in of(recorder, TASK_AGENT_SPAWNED)] == ["code_reviewer"]
    assert [e["agent"] for e in of(recorder, TASK_AGENT_RESUMED)] == ["code_reviewer"]
    completed = of(recorder, TASK_AGENT_COMPLETED)
    assert [e["agent"] for e in completed] == ["code_reviewer", "code_reviewer"]


async def test_a_cancel_while_an_observer_handles_the_spawn_keeps_agent_completed() -> None:
    completed: list[dict[str, object]] = []
    handling = anyio.Event()

    async def slow_observer(event: str, data: dict[str, object]) -> None:
        handling.set()
        await anyio.sleep_forever()

    async def record(event: str, data: dict[str, object]) -> None:
        completed.append(data)

    children = Children({"researcher": [answer("never")]})
    parent = ScriptedProvider(parent_reply(calls(task("researcher"))))
    async with AmplifierSession(plan()) as session:
        session.coordinator.hooks.register(TASK_AGENT_SPAWNED, slow_observer)
        session.coordinator.hooks.register(TASK_AGENT_COMPLETED, record)
        session.child_setup.append(children)
        await session.coordinator.mount("providers", parent, name="scripted")
        outcome: list[object] = []
        with anyio.fail_after(HANG_GUARD):
            async with anyio.create_task_group() as tg:

                async def run() -> None:
                    outcome.append(await session.run("go"))

                tg.start_soon(run)
                await handling.wait()
                assert session.cancel(immediate=True)

    [result] = outcome
    assert result.status is TurnStatus.CANCELLED  # type: ignore[attr-defined]
    [ended] = completed
    assert ended["status"] == "cancelled"
    assert ended["tool_call_id"] == "c0"
