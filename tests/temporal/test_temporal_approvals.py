"""Durable approvals: a held call waits in the workflow for the update ``approve``; the
decision binds to the call's arguments digest (DESIGN §15, §17)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from _temporal_kit import FAST, marker_plan, queue, reply, served
from test_durable_kill import WorkerProcess
from test_durable_sessions import calls_answered_in_order, content

from amplifier_anyio import TurnStatus
from amplifier_anyio.contexts._journal import call_digest
from amplifier_anyio.errors import DurableSessionError
from amplifier_anyio.temporal import DurableSession, TemporalSessions

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

SCRIPT = [
    reply(calls=[("c1", "marker", {"delay": 0}), ("c2", "guarded", {"delay": 0, "tag": "x"})]),
    reply("done"),
]


async def held(session: DurableSession, within: float = 30.0) -> list[dict[str, Any]]:
    """The held calls, once there are some."""
    with anyio.fail_after(within):
        while True:
            found = await session.pending_approvals()
            if found:
                return found
            await anyio.sleep(0.1)


def runs(marks: Path, call_id: str) -> list[str]:
    path = marks / call_id
    return path.read_text().splitlines() if path.exists() else []


async def test_approval_across_a_worker_restart_runs_the_call_once(
    temporal_server: str, tmp_path: Path
) -> None:
    marks = tmp_path / "marks"
    plan = marker_plan(SCRIPT, marks, FAST)
    plan_path = tmp_path / "plan.json"
    plan_path.write_text(json.dumps(plan))
    task_queue = queue()
    first = WorkerProcess(plan_path, temporal_server, task_queue, tmp_path / "first.log")
    second: WorkerProcess | None = None
    outcome: list[Any] = []
    try:
        await first.ready()
        async with TemporalSessions(address=temporal_server, task_queue=task_queue) as sessions:
            session = await sessions.open(plan)

            async def turn() -> None:
                outcome.append(await session.run("go"))

            with anyio.fail_after(60):
                async with anyio.create_task_group() as group:
                    group.start_soon(turn)
                    pending = await held(session)
                    first.kill()  # the call is held; its worker dies
                    second = WorkerProcess(
                        plan_path, temporal_server, task_queue, tmp_path / "second.log"
                    )
                    await second.ready()
                    assert await session.pending_approvals() == pending
                    assert await session.approve({"c2": "allow"}) == ["c2"]
            messages = await session.messages()
    finally:
        first.kill()
        if second is not None:
            second.kill()
    assert [(p["call_id"], p["tool"], p["input"]) for p in pending] == [
        ("c2", "guarded", {"delay": 0, "tag": "x"})
    ]
    assert pending[0]["digest"] == call_digest("guarded", {"delay": 0, "tag": "x"})
    result = outcome[0]
    assert (result.status, result.text) == (TurnStatus.SUCCESS, "done")
    calls_answered_in_order(messages)
    tools = [content(m) for m in messages if m.get("role") == "tool"]
    assert tools == [{"done": "c1"}, {"done": "c2"}]
    assert len(runs(marks, "c1")) == 1
    assert len(runs(marks, "c2")) == 1  # ran once, after the approval


async def test_unknown_or_decided_ids_are_rejected_and_changed_arguments_denied(
    temporal_server: str, tmp_path: Path
) -> None:
    marks = tmp_path / "marks"
    plan = marker_plan(SCRIPT, marks, FAST)
    outcome: list[Any] = []
    async with served(plan, temporal_server) as sessions:
        session = await sessions.open(plan)

        async def turn() -> None:
            outcome.append(await session.run("go"))

        with anyio.fail_after(60):
            async with anyio.create_task_group() as group:
                group.start_soon(turn)
                pending = await held(session)
                with pytest.raises(DurableSessionError, match="no call 'c9' waits"):
                    await session.approve({"c9": "allow"})
                with pytest.raises(DurableSessionError, match="expected 'allow' or 'deny'"):
                    await session.approve({"c2": "maybe"})
                assert await session.pending_approvals() == pending  # nothing decided
                # the approver decided on other arguments than the call holds
                other = call_digest("guarded", {"delay": 0, "tag": "other"})
                await session.approve({"c2": {"decision": "allow", "digest": other}})
                with pytest.raises(DurableSessionError, match="'c2'"):
                    await session.approve({"c2": "deny"})  # decided already, or gone
        messages = await session.messages()
    result = outcome[0]
    assert (result.status, result.text) == (TurnStatus.SUCCESS, "done")
    calls_answered_in_order(messages)
    answers = [m["content"] for m in messages if m.get("role") == "tool"]
    assert answers[1] == (
        "Denied: the arguments of guarded call c2 changed after it was approved; it was not run"
    )
    assert runs(marks, "c2") == []  # not run with arguments nobody approved


async def test_a_denied_call_is_answered_without_running(
    temporal_server: str, tmp_path: Path
) -> None:
    marks = tmp_path / "marks"
    plan = marker_plan(SCRIPT, marks, FAST)
    async with served(plan, temporal_server) as sessions:
        session = await sessions.open(plan)
        outcome: list[Any] = []

        async def turn() -> None:
            outcome.append(await session.run("go"))

        with anyio.fail_after(60):
            async with anyio.create_task_group() as group:
                group.start_soon(turn)
                await held(session)
                await session.approve({"c2": "deny"})
        messages = await session.messages()
    assert outcome[0].status is TurnStatus.SUCCESS
    answers = [m["content"] for m in messages if m.get("role") == "tool"]
    assert answers[1].startswith("Denied by user: may guarded run with")
    assert runs(marks, "c2") == []
