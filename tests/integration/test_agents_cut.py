"""A sub-agent cut by an immediate cancel: its ``task:agent_completed`` says what it spent
and how many calls it made, the parent's answer to the cut ``task`` call names the child's
``session_id``, and the model resumes it with that id — with context-simple too (its
history kept in memory), as with context-persistent."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from _agents_kit import HANG_GUARD, Children, answer, calls, plan, task, tool_results

from amplifier_anyio import AmplifierSession, ChatRequest, ChatResponse, TurnStatus
from amplifier_anyio.events import TASK_AGENT_COMPLETED, TASK_AGENT_SPAWNED
from amplifier_anyio.providers.scripted import ScriptedProvider
from amplifier_anyio.testing import EventRecorder

pytestmark = pytest.mark.anyio

CRASH_PARENT = Path(__file__).with_name("_agents_crash_parent.py")


@pytest.mark.parametrize("context", ["context-simple", "context-persistent"])
async def test_a_child_cut_by_an_immediate_cancel_reports_its_spend_and_resumes(
    context: str, tmp_path: Any
) -> None:
    context_table: Any = context
    if context == "context-persistent":
        context_table = {"module": context, "config": {"path": str(tmp_path / "root.jsonl")}}
    probing = anyio.Event()
    seen: list[int] = []  # how many messages the resumed child's request carried

    async def hang() -> str:
        probing.set()
        await anyio.sleep_forever()
        return "never"  # pragma: no cover

    def researcher(child: AmplifierSession) -> ScriptedProvider:
        if not child.is_resumed:
            return ScriptedProvider([calls(("probe", {}), prefix="p", tokens=40)])

        def reply(request: ChatRequest) -> ChatResponse:
            seen.append(len(request.messages))
            return answer("picked up where I was", tokens=5)

        return ScriptedProvider(reply)

    children = Children({"researcher": researcher}, probe=lambda child: hang)
    cut_answers: list[dict[str, Any]] = []  # what the model read for the cut call

    def parent(request: ChatRequest) -> ChatResponse:
        results = tool_results(request)
        if results:
            return answer(results[0])
        cut = [m.content for m in request.messages if m.role == "tool" and m.tool_call_id == "c0"]
        if not cut:
            return calls(task("researcher", "dig"))
        cut_answers.append(json.loads(str(cut[0])))
        # the model resumes the child with the id the cut answer gave it
        resume = {"session_id": cut_answers[0].get("session_id"), "instruction": "go on"}
        return calls(("task", resume), prefix="r")

    recorder = EventRecorder()
    async with AmplifierSession(plan(context=context_table)) as session:
        recorder.attach(session.coordinator.hooks)
        session.child_setup.append(children)
        await session.coordinator.mount("providers", ScriptedProvider(parent), name="scripted")
        outcome: list[Any] = []
        with anyio.fail_after(HANG_GUARD):
            async with anyio.create_task_group() as tg:

                async def run() -> None:
                    outcome.append(await session.run("go"))

                tg.start_soon(run)
                await probing.wait()
                assert session.cancel(immediate=True)
        ids = [data["sub_session_id"] for _, data in recorder.get_events(TASK_AGENT_SPAWNED)]
        context: Any = session.coordinator.get("context")
        [kept] = [m for m in await context.get_messages() if m.get("tool_call_id") == "c0"]
        with anyio.fail_after(HANG_GUARD):
            again = await session.run("carry on")

    assert outcome[0].status is TurnStatus.CANCELLED
    # the parent's transcript answers the cut call "cancelled", naming the child
    assert json.loads(kept["content"]) == {
        "error": "Tool execution was cancelled",
        "cancelled": True,
        "tool": "task",
        "session_id": ids[0],
    }
    assert cut_answers == [json.loads(kept["content"])]
    cut, resumed = [data for _, data in recorder.get_events(TASK_AGENT_COMPLETED)]
    assert cut["status"] == "cancelled"
    assert cut["turn_count"] == 1  # one provider call before the cut
    assert cut["usage"]["total_tokens"] == 40
    assert resumed["status"] == "success", resumed
    assert resumed["sub_session_id"] == ids[0]
    assert again.status is TurnStatus.SUCCESS
    assert '"response": "picked up where I was"' in again.text
    # the cut turn's history came back: system, user, the probe call and its answer, and
    # the new instruction
    assert seen == [5]


async def test_a_child_cut_by_a_crash_is_named_by_the_interrupted_answer(
    tmp_path: Path, anyio_backend_name: str
) -> None:
    """The process dies (SIGKILL) while the child runs: on load, the parent's transcript
    answers the task call "interrupted" with the child's session_id (the journal's
    ``noted`` record), and the model resumes the child with it."""
    transcript = tmp_path / "root.jsonl"
    process = await anyio.open_process(
        [sys.executable, str(CRASH_PARENT), str(transcript), anyio_backend_name]
    )
    try:
        assert process.stdout is not None
        with anyio.fail_after(HANG_GUARD):
            seen = b""
            async for chunk in process.stdout:
                seen += chunk
                if b"probing\n" in seen:
                    break
        os.kill(process.pid, signal.SIGKILL)
        with anyio.fail_after(HANG_GUARD):
            await process.wait()
    finally:
        if process.returncode is None:  # pragma: no cover - only on a failure above
            process.kill()
            with anyio.CancelScope(shield=True), anyio.move_on_after(HANG_GUARD):
                await process.wait()
        await process.aclose()

    read: list[dict[str, Any]] = []

    def parent(request: ChatRequest) -> ChatResponse:
        results = tool_results(request)
        if results:
            return answer(results[0])
        [cut] = [m.content for m in request.messages if m.tool_call_id == "c0"]
        read.append(json.loads(str(cut)))
        return calls(("task", {"session_id": read[0].get("session_id"), "instruction": "go on"}))

    def researcher(child: AmplifierSession) -> ScriptedProvider:
        return ScriptedProvider([answer("picked up after the crash")])

    context = {"module": "context-persistent", "config": {"path": str(transcript)}}
    async with AmplifierSession(plan(context=context), session_id="root") as session:
        session.child_setup.append(Children({"researcher": researcher}))
        await session.coordinator.mount("providers", ScriptedProvider(parent), name="scripted")
        with anyio.fail_after(HANG_GUARD):
            again = await session.run("carry on")

    [interrupted] = read
    child_id = interrupted.get("session_id")
    assert interrupted == {
        "error": "Tool execution was interrupted",
        "interrupted": True,
        "tool": "task",
        "session_id": child_id,
    }
    assert str(child_id).startswith("root-")
    assert str(child_id).endswith("_researcher")
    assert again.status is TurnStatus.SUCCESS
    assert '"response": "picked up after the crash"' in again.text
