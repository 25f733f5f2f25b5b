"""Approvals that outlive the turn: defer, awaiting_approval, session.resume(approvals=...).

The app (``_durable_app.py``) asks, on a prompt starting with ``approve``, for three calls:
``append`` (c1-0), ``guarded`` (c1-1, which defers until approved) and ``append`` (c1-2).
Each real run of a tool appends its call id to a side-effect file, so the tests count
what ran. The model answers with the results it was given.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest

from amplifier_anyio import SessionError, TurnStatus
from amplifier_anyio.contexts import PersistentContextManager, approve, pending_approvals
from amplifier_anyio.contexts.persistent import journal_path_for
from amplifier_anyio.hooks.approval import ApprovalRequest, CallbackApprovalSystem

sys.path.insert(0, str(Path(__file__).parent))

import _durable_app as app

pytestmark = pytest.mark.anyio

APP = Path(__file__).with_name("_durable_app.py")


def runs(side_effects: Path) -> list[str]:
    """The call id of every real run (the idempotent tool's lines are ``key <key> <id>``)."""
    if not side_effects.exists():
        return []
    return [line.split()[-1] for line in side_effects.read_text("utf-8").splitlines()]


def files(tmp_path: Path) -> tuple[Path, Path]:
    return tmp_path / "context-messages.jsonl", tmp_path / "side-effects.txt"


@pytest.mark.parametrize("orchestrator", ["loop-basic", "loop-streaming", "loop-events"])
async def test_a_deferred_call_pauses_the_turn_and_an_allow_runs_it_once(
    tmp_path: Path, orchestrator: str
) -> None:
    transcript, side_effects = files(tmp_path)
    session, provider = await app.open_session(transcript, side_effects, orchestrator=orchestrator)
    async with session:
        held = await session.run("approve the plan")
        assert held.status is TurnStatus.AWAITING_APPROVAL
        assert [(p.call_id, p.tool, p.input) for p in held.pending_approvals] == [
            ("c1-1", "guarded", {"tag": "1-1"})
        ]
        assert held.pending_approvals[0].prompt == "Let c1-1 append 1-1?"
        assert held.text == ""
        assert sorted(runs(side_effects)) == ["c1-0", "c1-2"]  # the batch's other calls ran
        calls_before = len(provider.requests)

        result = await session.resume(approvals={"c1-1": "allow"})

        assert result.status is TurnStatus.SUCCESS
        assert result.text == "answer: ok c1-0 | ok c1-1 | ok c1-2"
        assert result.pending_approvals == ()
        assert len(provider.requests) == calls_before + 1
        assert sorted(runs(side_effects)) == ["c1-0", "c1-1", "c1-2"]

        again = await session.resume()  # nothing left: the answer, no provider call, no run
        assert (again.status, again.text) == (TurnStatus.SUCCESS, result.text)
        assert len(provider.requests) == calls_before + 1
        assert sorted(runs(side_effects)) == ["c1-0", "c1-1", "c1-2"]

        after = await session.run("hello")  # the session goes on as usual
        assert after.status is TurnStatus.SUCCESS
        messages = await session.coordinator.get("context").get_messages()
    results = [m for m in messages if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in results] == ["c1-0", "c1-1", "c1-2", "c2-0", "c2-1", "c2-2"]


async def test_a_denied_call_is_answered_as_denied_and_the_model_sees_it(tmp_path: Path) -> None:
    transcript, side_effects = files(tmp_path)
    session, _ = await app.open_session(transcript, side_effects)
    async with session:
        held = await session.run("approve the plan")
        assert held.status is TurnStatus.AWAITING_APPROVAL
        result = await session.resume(approvals={"c1-1": "deny"})
    assert result.status is TurnStatus.SUCCESS
    assert result.text == "answer: ok c1-0 | Denied by user: Let c1-1 append 1-1? | ok c1-2"
    assert "c1-1" not in runs(side_effects)


async def test_resume_in_a_fresh_process_gives_the_same_conversation(
    tmp_path: Path, anyio_backend: tuple[str, dict[str, Any]]
) -> None:
    here, there = tmp_path / "here", tmp_path / "there"
    here.mkdir()
    transcript, side_effects = files(here)
    session, _ = await app.open_session(transcript, side_effects)
    async with session:
        held = await session.run("approve the plan")
        assert held.status is TurnStatus.AWAITING_APPROVAL
        await anyio.to_thread.run_sync(shutil.copytree, here, there)
        result = await session.resume(approvals={"c1-1": "allow"})
        messages = await session.coordinator.get("context").get_messages()
    in_process = app.describe(result, messages)

    other_transcript, other_effects = files(there)
    completed = await anyio.run_process(
        [sys.executable, str(APP), str(other_transcript), str(other_effects), "allow"],
        env={**os.environ, "BACKEND": anyio_backend[0]},
    )
    fresh = json.loads(completed.stdout.decode().splitlines()[-1])

    assert fresh == in_process
    assert fresh["status"] == "success"
    assert sorted(runs(other_effects)) == ["c1-0", "c1-1", "c1-2"]


async def test_approve_records_a_decision_out_of_process_and_resume_acts_on_it(
    tmp_path: Path,
) -> None:
    transcript, side_effects = files(tmp_path)
    session, _ = await app.open_session(transcript, side_effects)
    async with session:
        await session.run("approve the plan")
    assert [p.call_id for p in await pending_approvals(transcript)] == ["c1-1"]
    with pytest.raises(SessionError, match="c9-9"):
        await approve(transcript, {"c9-9": "allow"})
    with pytest.raises(SessionError, match="expected 'allow' or 'deny'"):
        await approve(transcript, {"c1-1": "maybe"})

    assert await approve(transcript, {"c1-1": "allow"}) == []
    assert await pending_approvals(transcript) == []
    assert "c1-1" not in runs(side_effects)  # recording runs nothing

    later, _ = await app.open_session(transcript, side_effects, is_resumed=True)
    async with later:
        result = await later.resume()
    assert result.text == "answer: ok c1-0 | ok c1-1 | ok c1-2"
    assert sorted(runs(side_effects)) == ["c1-0", "c1-1", "c1-2"]


async def test_an_approval_system_answering_defer_holds_the_call_and_is_not_asked_again(
    tmp_path: Path,
) -> None:
    transcript, side_effects = files(tmp_path)
    asked: list[ApprovalRequest] = []

    def defer(request: ApprovalRequest) -> str:
        asked.append(request)
        return "defer"

    hooks = [{"module": "hooks-approval", "config": {"tools": ["append_once"]}}]
    session, _ = await app.open_session(
        transcript, side_effects, hooks=hooks, approval_system=CallbackApprovalSystem(defer)
    )
    async with session:
        held = await session.run("hello")  # append, append, append_once (asks)
        assert held.status is TurnStatus.AWAITING_APPROVAL
        assert [p.call_id for p in held.pending_approvals] == ["c1-2"]
        assert held.pending_approvals[0].prompt == "Allow the tool 'append_once'?"
        assert len(asked) == 1
        result = await session.resume(approvals={"c1-2": "allow"})
    assert len(asked) == 1
    assert result.status is TurnStatus.SUCCESS
    assert sorted(runs(side_effects)) == ["c1-0", "c1-1", "c1-2"]
    assert result.text.startswith("answer: ok c1-0 | ok c1-1 | ok c1-2 ")


async def test_resume_refuses_a_call_that_is_not_pending(tmp_path: Path) -> None:
    transcript, side_effects = files(tmp_path)
    session, _ = await app.open_session(transcript, side_effects)
    async with session:
        await session.run("hello")
        with pytest.raises(SessionError, match="no call with this id waits"):
            await session.resume(approvals={"c1-0": "allow"})
        held = await session.run("approve now")
        assert held.status is TurnStatus.AWAITING_APPROVAL
        still = await session.resume()  # no decision: still waiting, nothing ran
        assert still.status is TurnStatus.AWAITING_APPROVAL
        assert [p.call_id for p in still.pending_approvals] == ["c2-1"]
    assert "c2-1" not in runs(side_effects)
    assert journal_path_for(transcript).exists()


async def test_without_a_journaling_context_a_deferral_is_a_denial(tmp_path: Path) -> None:
    transcript, side_effects = files(tmp_path)
    session, _ = await app.open_session(transcript, side_effects, context="context-simple")
    async with session:
        result = await session.run("approve the plan")
    assert result.status is TurnStatus.SUCCESS
    assert "the context cannot hold the call" in result.text
    assert "c1-1" not in runs(side_effects)


async def test_resume_continues_a_turn_a_crash_left_in_its_tool_batch(tmp_path: Path) -> None:
    """The transcript a process killed mid-batch leaves: c1-0 finished (its result only in
    the journal), c1-1 running, c1-2 (idempotent) running."""
    transcript, side_effects = files(tmp_path)
    crashed = PersistentContextManager(transcript)
    await crashed.add_message({"role": "user", "content": "hello"})
    calls = [
        {"id": f"c1-{j}", "name": name, "arguments": {"tag": f"1-{j}"}}
        for j, name in enumerate(["append", "append", "append_once"])
    ]
    await crashed.add_message({"role": "assistant", "content": "", "tool_calls": calls})
    await crashed.journal_started("c1-0", "append", {"tag": "1-0"})
    await crashed.journal_finished("c1-0", "ok c1-0")
    await crashed.journal_started("c1-1", "append", {"tag": "1-1"})
    await crashed.journal_started("c1-2", "append_once", {"tag": "1-2"}, idempotent=True)
    del crashed

    session, provider = await app.open_session(transcript, side_effects, is_resumed=True)
    async with session:
        result = await session.resume()
    assert result.status is TurnStatus.SUCCESS
    assert len(provider.requests) == 1
    first, second, third = result.text.removeprefix("answer: ").split(" | ")
    assert first == "ok c1-0"  # from the journal: not run again
    assert json.loads(second)["interrupted"] is True  # was running, not idempotent: not again
    assert third.startswith("ok c1-2 ")  # idempotent: run again by the resume
    assert runs(side_effects) == ["c1-2"]
