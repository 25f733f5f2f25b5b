"""A sub-agent cut by an immediate cancel: its ``task:agent_completed`` says what it spent
and how many calls it made, and it can be resumed with context-simple too (its history
kept in memory), as with context-persistent."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from _agents_kit import HANG_GUARD, Children, answer, calls, plan, task, tool_results

from amplifier_anyio import AmplifierSession, ChatRequest, ChatResponse, TurnStatus
from amplifier_anyio.events import TASK_AGENT_COMPLETED, TASK_AGENT_SPAWNED
from amplifier_anyio.providers.scripted import ScriptedProvider
from amplifier_anyio.testing import EventRecorder

pytestmark = pytest.mark.anyio


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
    ids: list[str] = []

    def parent(request: ChatRequest) -> ChatResponse:
        results = tool_results(request)
        if results:
            return answer(results[0])
        if not ids:
            return calls(task("researcher", "dig"))
        return calls(("task", {"session_id": ids[0], "instruction": "go on"}), prefix="r")

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
        ids.extend(data["sub_session_id"] for _, data in recorder.get_events(TASK_AGENT_SPAWNED))
        with anyio.fail_after(HANG_GUARD):
            again = await session.run("carry on")

    assert outcome[0].status is TurnStatus.CANCELLED
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
