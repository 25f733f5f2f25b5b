"""A child's deferred approval: the child's turn ends ``awaiting_approval`` (its parent's
``task`` answer says so, with the child's ``session_id``); once the call is approved in
the child's transcript, resuming the child runs the held call exactly once, and its
result reaches the child's transcript and the parent's answer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from _agents_kit import HANG_GUARD, Children, answer, calls, plan, task, tool_results

from amplifier_anyio import (
    AmplifierSession,
    ApprovalDeferred,
    ChatRequest,
    ChatResponse,
    TurnStatus,
    current_tool_call,
)
from amplifier_anyio.contexts import approve, pending_approvals
from amplifier_anyio.providers.scripted import ScriptedProvider
from amplifier_anyio.session._agents import child_transcript_path

pytestmark = pytest.mark.anyio


async def run_held_child(
    tmp_path: Path, decision: str | None
) -> tuple[list[bool], list[dict[str, Any]], list[Any], Path, list[str]]:
    """The parent delegates; the child's probe call is deferred; ``decision`` (or none) is
    recorded in the child's transcript from outside; the parent's model then resumes the
    child with the session_id the task answer gave. (probe runs, task answers, turn
    results, the child's transcript, and what the child's transcript answers p0 with.)"""
    runs: list[bool] = []  # each run of the probe's body: whether it was approved

    async def guarded() -> str:
        call = current_tool_call()
        assert call is not None
        runs.append(call.approved)
        if not call.approved:
            raise ApprovalDeferred("Probe the archive?")
        await anyio.lowlevel.checkpoint()
        return "the archive says 42"

    def researcher(child: AmplifierSession) -> ScriptedProvider:
        def reply(request: ChatRequest) -> ChatResponse:
            results = tool_results(request)
            if results:
                return answer(f"found: {results[0]}")
            known = [m.content for m in request.messages if m.tool_call_id == "p0"]
            if known and "awaiting_approval" not in str(known[-1]):
                return answer(f"as found: {known[-1]}")  # the next instruction's turn
            return calls(("probe", {}), prefix="p")

        return ScriptedProvider(reply)

    children = Children({"researcher": researcher}, probe=lambda child: guarded)
    answers: list[dict[str, Any]] = []  # the task answers the parent's model read

    def parent(request: ChatRequest) -> ChatResponse:
        results = tool_results(request)
        if results:
            answers.append(json.loads(results[0]))
            return answer(results[0])
        if not answers:
            return calls(task("researcher", "dig"))
        resume = {"session_id": answers[0]["session_id"], "instruction": "go on"}
        return calls(("task", resume), prefix="r")

    context = {"module": "context-persistent", "config": {"path": str(tmp_path / "root.jsonl")}}
    async with AmplifierSession(plan(context=context)) as session:
        session.child_setup.append(children)
        await session.coordinator.mount("providers", ScriptedProvider(parent), name="scripted")
        with anyio.fail_after(HANG_GUARD):
            first = await session.run("dig")
        transcript = child_transcript_path(session.config, answers[0]["session_id"])
        assert transcript is not None
        [held] = await pending_approvals(transcript)
        assert (held.call_id, held.tool) == ("p0", "probe")
        if decision is not None:
            await approve(transcript, {"p0": decision})
        with anyio.fail_after(HANG_GUARD):
            second = await session.run("go on")
    messages = [json.loads(line) for line in transcript.read_text("utf-8").splitlines()]
    p0 = [m["content"] for m in messages if m.get("tool_call_id") == "p0"]
    return runs, answers, [first, second], transcript, p0


async def test_an_approved_deferred_call_of_a_child_runs_once_when_the_child_resumes(
    tmp_path: Path,
) -> None:
    runs, answers, turns, transcript, p0 = await run_held_child(tmp_path, "allow")

    assert [turn.status for turn in turns] == [TurnStatus.SUCCESS, TurnStatus.SUCCESS]
    child_id = answers[0]["session_id"]
    assert answers[0]["status"] == "awaiting_approval"
    assert runs == [False, True]  # held once, then run once, approved
    # the held turn went on to its answer, then the new instruction ran as the next turn
    assert answers[1] == {"response": "as found: the archive says 42", "session_id": child_id}
    assert await pending_approvals(transcript) == []
    assert p0 == ["the archive says 42"]  # in place of the placeholder


async def test_a_denied_deferred_call_of_a_child_is_answered_denied_when_it_resumes(
    tmp_path: Path,
) -> None:
    runs, answers, _, transcript, p0 = await run_held_child(tmp_path, "deny")

    assert runs == [False]  # never run
    assert answers[1]["response"] == "as found: Denied by user: Probe the archive?"
    assert await pending_approvals(transcript) == []
    assert p0 == ["Denied by user: Probe the archive?"]


async def test_an_undecided_call_of_a_child_still_waits_when_it_resumes(tmp_path: Path) -> None:
    runs, answers, _, transcript, p0 = await run_held_child(tmp_path, None)

    assert runs == [False]
    assert answers[1]["status"] == "awaiting_approval"  # the instruction did not bury it
    [still] = await pending_approvals(transcript)
    assert still.call_id == "p0"
    assert len(p0) == 1
