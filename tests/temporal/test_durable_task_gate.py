"""A durable ``task`` call goes through ``tool:pre`` and its approval *before* its child runs,
as in-process (DESIGN §14, §15, §17): a hook's deny runs no child, a hook's rewrite is
what the child runs, a deferral holds the call in the workflow until ``approve`` (allowed:
the child runs once; denied: no child), and the call fires one ``tool:pre`` and one
``tool:post``. Each durable run is compared with the same plan run in-process."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from _temporal_kit import FAST, MODULES, agent_plan, reply, served
from test_durable_agents import delegate, normalised
from test_durable_sessions import calls_answered_in_order, content, in_process
from test_temporal_approvals import held

from amplifier_anyio import AmplifierSession, TurnStatus
from amplifier_anyio.contexts._journal import call_digest
from amplifier_anyio.errors import DurableSessionError
from amplifier_anyio.temporal import TemporalSessions

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

SCRIPTS = {
    "go": [delegate("t1", "sub job"), reply("parent done")],
    "sub job": [reply(calls=[("h1", "marker", {"delay": 0})]), reply("child answer")],
    "other job": [reply(calls=[("h2", "marker", {"delay": 0})]), reply("other answer")],
}
"""The parent delegates "sub job" (its child calls ``marker`` h1); "other job" is what a
rewrite makes of it (its child calls h2)."""

EVENTS = ["tool:pre", "tool:post", "task:agent_spawned", "task:agent_completed"]


def gated_plan(
    tmp_path: Path,
    tag: str,
    *,
    approval: dict[str, Any] | None = None,
    rewrite: dict[str, Any] | None = None,
    durable: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """`agent_plan` with hooks-approval (``approval``), the events recorded with their
    inputs (and ``rewrite`` applied in ``tool:pre``), and the model's requests recorded:
    ``{tag}.events``, ``{tag}.sent``, marks in ``{tag}-marks``."""
    plan = agent_plan(SCRIPTS, tmp_path / f"{tag}-marks", durable)
    plan["providers"][0]["config"]["record"] = str(tmp_path / f"{tag}.sent")
    hooks: list[dict[str, Any]] = []
    if approval is not None:
        hooks.append({"module": "hooks-approval", "config": approval})
    config: dict[str, Any] = {
        "path": str(tmp_path / f"{tag}.events"),
        "events": EVENTS,
        "inputs": True,
    }
    if rewrite is not None:
        config["rewrite"] = rewrite
    hooks.append({"module": "hooks-record", "source": str(MODULES), "config": config})
    plan["hooks"] = hooks
    return plan


def records(tmp_path: Path, tag: str) -> list[dict[str, Any]]:
    path = tmp_path / f"{tag}.events"
    lines = path.read_text().splitlines() if path.exists() else []
    return [json.loads(line) for line in lines]


def same_events(tmp_path: Path) -> list[dict[str, Any]]:
    """The durable run's events (nothing twice, nothing missing against in-process)."""
    got, want = records(tmp_path, "durable"), records(tmp_path, "in")

    def key(record: dict[str, Any]) -> str:
        return json.dumps(record, sort_keys=True)

    assert sorted(map(key, got)) == sorted(map(key, want))
    return got


def of_call(found: list[dict[str, Any]], call_id: str) -> list[str]:
    """The ``tool:*`` events of one call."""
    return [
        r["event"]
        for r in found
        if r.get("tool_call_id") == call_id and r["event"].startswith("tool:")
    ]


def instructions(tmp_path: Path, tag: str) -> list[str]:
    """The instructions the children's first requests carried (what the model was sent)."""
    path = tmp_path / f"{tag}.sent"
    sent = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    return [s for s in sent if s in SCRIPTS and s != "go"]


async def child_started(sessions: TemporalSessions, session_id: str) -> bool:
    try:
        await sessions.attach(f"{session_id}-t1")
    except DurableSessionError:
        return False
    return True


async def test_a_hook_denying_a_task_call_runs_no_child(
    temporal_server: str, tmp_path: Path
) -> None:
    approval = {"deny": ["task"]}
    expected, transcript = await in_process(gated_plan(tmp_path, "in", approval=approval), ["go"])
    plan = gated_plan(tmp_path, "durable", approval=approval, durable=FAST)
    async with served(plan, temporal_server) as sessions:
        session = await sessions.open(plan)
        with anyio.fail_after(60):
            result = await session.run("go")
        messages = await session.messages()
        started = await child_started(sessions, session.id)
    want = expected[0]
    assert (want.text, want.status) == ("parent done", TurnStatus.SUCCESS)
    assert (result.text, result.status, result.turn_count) == (
        want.text,
        want.status,
        want.turn_count,
    )
    assert messages == transcript
    assert messages[2]["content"] == "Denied by hook: task: denied by rule task"
    assert not started  # no child workflow
    assert instructions(tmp_path, "durable") == instructions(tmp_path, "in") == []
    assert not (tmp_path / "durable-marks" / "h1").exists()
    found = same_events(tmp_path)
    assert "task:agent_spawned" not in [r["event"] for r in found]
    assert "tool:post" not in of_call(found, "t1")  # a denied call: no tool:post, as in-process


async def test_a_hook_rewriting_a_task_call_runs_the_child_on_the_rewritten_input(
    temporal_server: str, tmp_path: Path
) -> None:
    """The child runs the rewritten instruction; the call fires one ``tool:pre`` (with its
    own input) and one ``tool:post`` (with the rewritten one), around its child's events."""
    rewrite = {"task": {"instruction": "other job"}}
    expected, transcript = await in_process(gated_plan(tmp_path, "in", rewrite=rewrite), ["go"])
    plan = gated_plan(tmp_path, "durable", rewrite=rewrite, durable=FAST)
    async with served(plan, temporal_server) as sessions:
        session = await sessions.open(plan)
        with anyio.fail_after(60):
            result = await session.run("go")
        messages = await session.messages()
    want = expected[0]
    assert (result.text, result.status, result.usage) == (want.text, want.status, want.usage)
    assert normalised(messages) == normalised(transcript)
    assert content(messages[2]) == {"response": "other answer", "session_id": f"{session.id}-t1"}
    assert instructions(tmp_path, "durable") == instructions(tmp_path, "in") == ["other job"]
    assert (tmp_path / "durable-marks" / "h2").read_text().count("\n") == 1
    assert not (tmp_path / "durable-marks" / "h1").exists()
    found = same_events(tmp_path)
    assert sorted(of_call(found, "t1")) == ["tool:post", "tool:pre"]  # one each
    inputs = {r["event"]: r.get("tool_input") for r in found if r.get("tool_call_id") == "t1"}
    assert inputs["tool:pre"] == {"agent": "helper", "instruction": "sub job"}
    assert inputs["tool:post"] == {"agent": "helper", "instruction": "other job"}
    events = [r["event"] for r in found]
    assert events.count("task:agent_spawned") == events.count("task:agent_completed") == 1


async def deferred_in_process(tmp_path: Path, decision: str) -> tuple[Any, Any, list[Any]]:
    """The deferral in-process (context-persistent holds the call): the turn that ends
    ``awaiting_approval``, the turn ``resume`` with ``decision`` gives, and the messages."""
    plan = gated_plan(tmp_path, "in", approval={"tools": ["task"], "default": "defer"})
    context = {"module": "context-persistent", "config": {"path": str(tmp_path / "in.jsonl")}}
    plan["session"]["context"] = context
    async with AmplifierSession(plan) as session:
        with anyio.fail_after(60):
            first = await session.run("go")
            second = await session.resume(approvals={"t1": decision})
        messages = await session.coordinator.get("context").get_messages()
    return first, second, messages


@pytest.mark.parametrize("decision", ["allow", "deny"])
async def test_a_deferred_task_call_is_held_before_its_child_runs(
    temporal_server: str, tmp_path: Path, decision: str
) -> None:
    """The approval system defers the ``task`` call: it waits in the workflow, listed by
    ``pending_approvals()``, and no child has started. Allowed, the child runs once and the
    call is answered with its output; denied, ``Denied by user``, and no child runs."""
    first, second, transcript = await deferred_in_process(tmp_path, decision)
    assert first.status is TurnStatus.AWAITING_APPROVAL
    [pending_in] = first.pending_approvals
    plan = gated_plan(
        tmp_path, "durable", approval={"tools": ["task"], "default": "defer"}, durable=FAST
    )
    outcome: list[Any] = []
    async with served(plan, temporal_server) as sessions:
        session = await sessions.open(plan)

        async def turn() -> None:
            outcome.append(await session.run("go"))

        with anyio.fail_after(60):
            async with anyio.create_task_group() as group:
                group.start_soon(turn)
                pending = await held(session)
                started = await child_started(sessions, session.id)
                waiting = (started, instructions(tmp_path, "durable"))
                before = records(tmp_path, "durable")
                await session.approve({"t1": decision})
        messages = await session.messages()
        started = await child_started(sessions, session.id)
    arguments = {"agent": "helper", "instruction": "sub job"}
    assert [(p["call_id"], p["tool"], p["input"], p["prompt"]) for p in pending] == [
        (pending_in.call_id, pending_in.tool, pending_in.input, pending_in.prompt)
    ]
    assert (pending[0]["call_id"], pending[0]["input"]) == ("t1", arguments)
    assert pending[0]["digest"] == call_digest("task", arguments)
    assert waiting == (False, [])  # held: no child workflow, no child request
    assert [r["event"] for r in before] == ["tool:pre"]
    (result,) = outcome
    assert (result.text, result.status) == (second.text, second.status)
    assert (result.text, result.status) == ("parent done", TurnStatus.SUCCESS)
    calls_answered_in_order(messages)
    answer = [m for m in messages if m.get("tool_call_id") == "t1"]
    answer_in = [m for m in transcript if m.get("tool_call_id") == "t1"]
    assert [m["content"] for m in normalised(answer)] == [
        m["content"] for m in normalised(answer_in)
    ]
    found = same_events(tmp_path)
    if decision == "allow":
        assert content(answer[0]) == {"response": "child answer", "session_id": f"{session.id}-t1"}
        assert started
        assert instructions(tmp_path, "durable") == ["sub job"]  # the child ran once
        assert (tmp_path / "durable-marks" / "h1").read_text().count("\n") == 1
        assert sorted(of_call(found, "t1")) == ["tool:post", "tool:pre", "tool:pre"]
    else:
        assert answer[0]["content"] == "Denied by user: Allow the tool 'task'?"
        assert not started
        assert instructions(tmp_path, "durable") == []
        assert not (tmp_path / "durable-marks" / "h1").exists()
        assert of_call(found, "t1") == ["tool:pre"]


async def test_a_task_call_allowed_on_other_arguments_is_denied_before_its_child(
    temporal_server: str, tmp_path: Path
) -> None:
    """An ``allow`` bound to other arguments than the held ``task`` call's: the call is
    answered denied at its gate, and no child runs (DESIGN §15)."""
    plan = gated_plan(
        tmp_path, "durable", approval={"tools": ["task"], "default": "defer"}, durable=FAST
    )
    outcome: list[Any] = []
    async with served(plan, temporal_server) as sessions:
        session = await sessions.open(plan)

        async def turn() -> None:
            outcome.append(await session.run("go"))

        with anyio.fail_after(60):
            async with anyio.create_task_group() as group:
                group.start_soon(turn)
                await held(session)
                other = call_digest("task", {"agent": "helper", "instruction": "other job"})
                await session.approve({"t1": {"decision": "allow", "digest": other}})
        messages = await session.messages()
        started = await child_started(sessions, session.id)
    (result,) = outcome
    assert (result.text, result.status) == ("parent done", TurnStatus.SUCCESS)
    assert messages[2]["content"] == (
        "Denied: the arguments of task call t1 changed after it was approved; it was not run"
    )
    assert not started
    assert instructions(tmp_path, "durable") == []
    assert of_call(records(tmp_path, "durable"), "t1") == ["tool:pre", "tool:pre"]
