"""Sub-agents of durable sessions (DESIGN §14, §17): a ``task`` call runs its child session
as a child workflow ``{parent id}-{call id}``; the same answers, transcripts and events as
in-process; a parent's cancel reaches the child; the budget is carried down; the depth limit
holds; a resumed child continues its history; a worker killed during a child's turn."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import anyio
import pytest
from _temporal_kit import FAST, agent_plan, queue, reply, served
from temporalio.worker import Replayer, UnsandboxedWorkflowRunner
from test_durable_kill import WorkerProcess
from test_durable_kill import _interrupted as interrupted
from test_durable_sessions import calls_answered_in_order, content, in_process, marks_of

from amplifier_anyio import TurnStatus
from amplifier_anyio.errors import DurableSessionError
from amplifier_anyio.temporal import SessionWorker, TemporalSessions
from amplifier_anyio.temporal._workflow import SessionWorkflow

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


def delegate(call_id: str, instruction: str, **extra: Any) -> dict[str, Any]:
    arguments = {"agent": "helper", "instruction": instruction, **extra}
    return reply(calls=[(call_id, "task", arguments)])


def normalised(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages with the child ids of task answers blanked (they name their session)."""
    found = []
    for message in messages:
        kept = message
        if message.get("role") == "tool" and "session_id" in message.get("content", ""):
            data = json.loads(message["content"])
            data["session_id"] = "<child>"
            kept = {**message, "content": json.dumps(data)}
        found.append(kept)
    return found


def events_of(path: Path) -> list[str]:
    lines = path.read_text().splitlines() if path.exists() else []
    return sorted(json.dumps(json.loads(line), sort_keys=True) for line in lines)


async def test_one_agent_same_answer_transcript_and_events_as_in_process(
    temporal_server: str, tmp_path: Path
) -> None:
    scripts = {
        "go": [delegate("t1", "sub job"), reply("parent done")],
        "sub job": [reply(calls=[("h1", "marker", {"delay": 0})]), reply("child answer")],
    }
    local = agent_plan(scripts, tmp_path / "in-marks", events=tmp_path / "in.events")
    expected, transcript = await in_process(local, ["go"])
    plan = agent_plan(scripts, tmp_path / "marks", FAST, events=tmp_path / "durable.events")
    async with served(plan, temporal_server) as sessions:
        session = await sessions.open(plan)
        result = await session.run("go")
        messages = await session.messages()
        child = await sessions.attach(f"{session.id}-t1")
        child_messages = await child.messages()
    want = expected[0]
    assert (result.text, result.status, result.turn_count) == (
        want.text,
        want.status,
        want.turn_count,
    )
    assert (result.text, result.status) == (want.text, TurnStatus.SUCCESS)
    assert result.usage == want.usage  # the child's usage counted in the parent's
    assert result.usage.total_tokens == 4 * 15
    assert normalised(messages) == normalised(transcript)
    answer = content(messages[2])
    assert answer == {"response": "child answer", "session_id": f"{session.id}-t1"}
    assert [m["role"] for m in child_messages] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
    assert content(child_messages[3]) == {"done": "h1"}
    assert (tmp_path / "marks" / "h1").read_text().count("\n") == 1
    assert events_of(tmp_path / "durable.events") == events_of(tmp_path / "in.events")


@pytest.mark.parametrize("how", ["immediate", "graceful"])
async def test_a_parents_cancel_reaches_its_running_child(
    temporal_server: str, tmp_path: Path, how: str
) -> None:
    """Immediate: the child's running call is cancelled, the child ends ``cancelled``, the
    parent answers the task call *cancelled*. Graceful: the child's running batch
    finishes, it makes no new provider call; the task call is answered with the child's
    cancelled turn; neither makes another provider call."""
    delay = 60.0 if how == "immediate" else 1.0
    scripts = {
        "go": [delegate("t1", "sub job"), reply("never")],
        "sub job": [reply(calls=[("h1", "marker", {"delay": delay})]), reply("never")],
    }
    marks = tmp_path / "marks"
    plan = agent_plan(scripts, marks, FAST)
    async with served(plan, temporal_server) as sessions:
        session = await sessions.open(plan)
        outcome: list[Any] = []
        with anyio.fail_after(30):
            async with anyio.create_task_group() as group:

                async def turn() -> None:
                    outcome.append(await session.run("go"))

                group.start_soon(turn)
                await marks_of(marks, "h1")
                await session.cancel(immediate=how == "immediate")
        messages = await session.messages()
        child = await sessions.attach(f"{session.id}-t1")
        child_result = await child.last_result()
        child_messages = await child.messages()
    (result,) = outcome
    assert result.status is TurnStatus.CANCELLED
    assert result.turn_count == 1
    assert child_result is not None
    assert child_result.status is TurnStatus.CANCELLED
    assert child_result.turn_count == 1
    calls_answered_in_order(messages)
    calls_answered_in_order(child_messages)
    answer = content(messages[-1])
    if how == "immediate":
        assert answer["cancelled"] is True
        assert content(child_messages[-1])["cancelled"] is True
    else:
        assert answer["status"] == "cancelled"
        assert answer["session_id"] == f"{session.id}-t1"
        assert content(child_messages[-1]) == {"done": "h1"}
    assert (marks / "h1").read_text().count("\n") == 1


async def test_budget_is_carried_down_and_a_spent_remainder_stops_the_tree(
    temporal_server: str, tmp_path: Path
) -> None:
    """The parent may run 3 tool calls; the task call is one, so its child has 2 left: the
    child's batch of 3 does not start, and, as in-process, that is the parent's budget
    running out: the parent ends ``incomplete`` / ``budget``, the child ``cancelled``."""
    child_calls = [(f"h{i}", "marker", {"delay": 0}) for i in range(3)]
    scripts = {
        "go": [delegate("t1", "sub job"), reply("never")],
        "sub job": [reply(calls=child_calls), reply("never")],
    }
    budget = {"max_tool_calls": 3}
    local = agent_plan(scripts, tmp_path / "in-marks", budget=budget)
    expected, transcript = await in_process(local, ["go"])
    marks = tmp_path / "marks"
    plan = agent_plan(scripts, marks, FAST, budget=budget)
    async with served(plan, temporal_server) as sessions:
        session = await sessions.open(plan)
        result = await session.run("go")
        messages = await session.messages()
        child = await sessions.attach(f"{session.id}-t1")
        child_result = await child.last_result()
        child_messages = await child.messages()
    want = expected[0]
    assert (want.status, want.finish_reason) == (TurnStatus.INCOMPLETE, "budget")
    assert (result.status, result.finish_reason) == (want.status, want.finish_reason)
    assert result.problems == want.problems
    assert normalised(messages) == normalised(transcript)
    assert child_result is not None
    assert child_result.status is TurnStatus.CANCELLED
    calls_answered_in_order(child_messages)
    assert not any((marks / c).exists() for c, _, _ in child_calls)
    assert not any((tmp_path / "in-marks" / c).exists() for c, _, _ in child_calls)


def two_delegations(first: str, second: str) -> dict[str, Any]:
    """One reply with two ``task`` calls, ``t1`` and ``t2``: their children run at once."""
    helper = {"agent": "helper"}
    return reply(
        calls=[
            ("t1", "task", {**helper, "instruction": first}),
            ("t2", "task", {**helper, "instruction": second}),
        ]
    )


async def signals_named(session: Any, name: str) -> int:
    """How many signals ``name`` the session's workflow history holds."""

    async def count() -> int:
        found = 0
        async for event in session._handle.fetch_history_events():
            if event.HasField("workflow_execution_signaled_event_attributes"):
                signal = event.workflow_execution_signaled_event_attributes.signal_name
                found += signal == name
        return found

    counted: int = await session._portal.call(count)
    return counted


async def replay(*sessions: Any) -> None:
    """Replay each session's workflow history from its first event: a change of its
    commands (a nondeterministic workflow, a signal handled differently) fails here."""

    async def check(session: Any) -> None:
        history = await session._handle.fetch_history()
        replayer = Replayer(
            workflows=[SessionWorkflow], workflow_runner=UnsandboxedWorkflowRunner()
        )
        await replayer.replay_workflow(history)

    for session in sessions:
        await session._portal.call(check, session)


async def test_children_running_at_once_share_the_budget_and_a_spent_tree_stops(
    temporal_server: str, tmp_path: Path
) -> None:
    """The parent's remainder after its first reply is 70 tokens; child a spends 60 and
    child b 45, each within it alone, over it together. As in-process, the tree stops the
    moment it runs out: child a's reports reach the parent while child b waits on its first
    call, the parent ends ``incomplete`` / ``budget`` and cancels child b, whose later
    calls never run; every call of every transcript is answered. (Before, each child spent
    from its own copy of the remainder: child b ran on, its call for a minute.)"""
    scripts = {
        "go": [two_delegations("job a", "job b"), reply("never")],
        "job a": [
            *(reply(calls=[(f"a{i}", "marker", {"delay": 0})]) for i in (1, 2, 3)),
            reply("a done"),
        ],
        "job b": [
            reply(calls=[("b1", "marker", {"delay": 60})]),
            reply(calls=[("b2", "marker", {"delay": 0})]),
            reply("b done"),
        ],
    }
    budget = {"max_tokens": 85}
    local = agent_plan(scripts, tmp_path / "in-marks", budget=budget)
    expected, _ = await in_process(local, ["go"])
    marks = tmp_path / "marks"
    plan = agent_plan(scripts, marks, FAST, budget=budget)
    async with served(plan, temporal_server) as sessions:
        session = await sessions.open(plan)
        with anyio.fail_after(30):
            result = await session.run("go")
        messages = await session.messages()
        children = [await sessions.attach(f"{session.id}-{t}") for t in ("t1", "t2")]
        child_messages = [await child.messages() for child in children]
        late = await children[1].last_result()
        reports = await signals_named(session, "charge")
        await replay(session, *children)  # the reports' handling is replay-safe
    want = expected[0]
    assert (want.status, want.finish_reason) == (TurnStatus.INCOMPLETE, "budget")
    assert (result.status, result.finish_reason) == (want.status, want.finish_reason)
    assert result.usage == want.usage
    assert result.usage.total_tokens == 90 <= 85 + 15  # the budget and one call in flight
    assert result.problems == want.problems
    for transcript in (messages, *child_messages):
        calls_answered_in_order(transcript)
    assert late is not None
    assert late.status is TurnStatus.CANCELLED
    assert content(child_messages[1][-1])["cancelled"] is True  # b1, cut by the parent
    assert all((marks / c).read_text().count("\n") == 1 for c in ("a1", "a2", "a3"))
    assert not (marks / "b2").exists()  # b1 ran (or was cut before it started), b2 never
    assert not (tmp_path / "in-marks" / "b2").exists()
    assert reports > 0


async def test_a_grandchilds_refused_batch_is_the_roots_budget_running_out(
    temporal_server: str, tmp_path: Path
) -> None:
    """The root may run 4 tool calls; its task call and its child's are two, so the
    grandchild has 2 left and its batch of 3 does not start. As in-process, that is the
    root's budget running out (the grandchild's refusal is reported up through its parent):
    the root ends ``incomplete`` / ``budget`` with the in-process problems. (Before, the
    refusal stopped only the middle child; the root went on and answered.)"""
    grandchild_calls = [(f"g{i}", "marker", {"delay": 0}) for i in range(3)]
    scripts = {
        "go": [delegate("t1", "sub job"), reply("root done")],
        "sub job": [delegate("d1", "deeper"), reply("child done")],
        "deeper": [reply(calls=grandchild_calls), reply("grandchild done")],
    }
    budget = {"max_tool_calls": 4}
    local = agent_plan(scripts, tmp_path / "in-marks", budget=budget)
    expected, _ = await in_process(local, ["go"])
    marks = tmp_path / "marks"
    plan = agent_plan(scripts, marks, FAST, budget=budget)
    async with served(plan, temporal_server) as sessions:
        session = await sessions.open(plan)
        with anyio.fail_after(30):
            result = await session.run("go")
        messages = await session.messages()
        child = await sessions.attach(f"{session.id}-t1")
        grandchild = await sessions.attach(f"{session.id}-t1-d1")
        transcripts = [messages, await child.messages(), await grandchild.messages()]
    want = expected[0]
    assert (want.status, want.finish_reason) == (TurnStatus.INCOMPLETE, "budget")
    assert (result.status, result.finish_reason) == (want.status, want.finish_reason)
    assert result.problems == want.problems
    for transcript in transcripts:
        calls_answered_in_order(transcript)
    assert not any((marks / c).exists() for c, _, _ in grandchild_calls)


@pytest.mark.parametrize("budget", [None, {"max_tokens": 100}], ids=["unbudgeted", "budgeted"])
async def test_children_at_once_usage_as_in_process_and_reports_only_with_a_budget(
    temporal_server: str, tmp_path: Path, budget: dict[str, Any] | None
) -> None:
    """Two children at once, a tree that does not run out: the parent's usage and answer
    are the in-process ones (90 tokens: a child's reported spending is not charged again
    when it finishes, or the 100-token budget would run out). Only a tree with a budget
    sends ``charge`` reports: without one, the parent's history holds none. A report that
    comes when no turn runs is ignored: the next turn is charged nothing for it."""
    scripts = {
        "go": [two_delegations("job a", "job b"), reply("parent done")],
        "job a": [reply(calls=[("a1", "marker", {"delay": 0})]), reply("a done")],
        "job b": [reply(calls=[("b1", "marker", {"delay": 0})]), reply("b done")],
    }
    local = agent_plan(scripts, tmp_path / "in-marks", budget=budget)
    expected, transcript = await in_process(local, ["go"])
    plan = agent_plan(scripts, tmp_path / "marks", FAST, budget=budget)
    async with served(plan, temporal_server) as sessions:
        session = await sessions.open(plan)
        with anyio.fail_after(30):
            result = await session.run("go")
        messages = await session.messages()
        reports = await signals_named(session, "charge")
        stray = {"key": "gone/t1", "tokens": 10**6, "cost_usd": 1.0, "tool_calls": 50}
        await session._portal.call(session._handle.signal, "charge", {**stray, "refused": 9})
        with anyio.fail_after(30):
            after = await session.run("again")  # answered by the script's last reply
    want = expected[0]
    assert (after.status, after.usage.total_tokens) == (TurnStatus.SUCCESS, 15)
    assert (result.text, result.status) == (want.text, want.status)
    assert (result.text, result.status) == ("parent done", TurnStatus.SUCCESS)
    assert result.usage == want.usage
    assert result.usage.total_tokens == 6 * 15
    assert normalised(messages) == normalised(transcript)
    if budget is None:
        assert reports == 0
    else:
        assert reports > 0


async def test_depth_limit_and_resume(temporal_server: str, tmp_path: Path) -> None:
    """``max_agent_depth: 1``: the helper's own task call is its error result, never a
    hang; a second task call with the first child's ``session_id`` continues its
    history in a new run of the same child workflow."""
    scripts = {
        "go": [
            delegate("t1", "sub job"),
            reply(calls=[("t2", "task", {"session_id": "<child>", "instruction": "more"})]),
            reply("parent done"),
        ],
        "sub job": [delegate("d1", "deeper"), reply("child answer"), reply("resumed answer")],
    }
    plan = agent_plan(scripts, tmp_path / "marks", FAST)
    plan["session"]["max_agent_depth"] = 1
    task_queue = queue()
    session_id = f"parent-{task_queue}"
    child_id = f"{session_id}-t1"
    scripts["go"][1]["tool_calls"][0]["arguments"]["session_id"] = child_id
    plan["providers"][0]["config"]["scripts"] = scripts
    async with (
        SessionWorker(plan, address=temporal_server, task_queue=task_queue),
        TemporalSessions(address=temporal_server, task_queue=task_queue) as sessions,
    ):
        session = await sessions.open(plan, session_id=session_id)
        with anyio.fail_after(60):
            result = await session.run("go")
        messages = await session.messages()
        child_messages = await (await sessions.attach(child_id)).messages()
    assert (result.status, result.text) == (TurnStatus.SUCCESS, "parent done")
    calls_answered_in_order(messages)
    answers = [content(m) for m in messages if m.get("role") == "tool"]
    assert answers[0] == {"response": "child answer", "session_id": child_id}
    assert answers[1] == {"response": "resumed answer", "session_id": child_id}
    deeper = child_messages[3]
    assert deeper["tool_call_id"] == "d1"
    assert "delegation depth limit reached" in deeper["content"]
    assert [m["role"] for m in child_messages].count("user") == 2  # one history, two turns


async def test_kill_9_during_a_childs_turn_it_finishes_on_a_second_worker(
    temporal_server: str, tmp_path: Path, anyio_backend: str
) -> None:
    """The worker dies while the child's calls run: the child workflow (and its parent)
    move to a second worker; no call that may run once ran twice, a lost one is answered
    *interrupted*, the idempotent one is retried; both turns end with their answers."""
    rng = random.Random(f"child-kill-{anyio_backend}")
    child_calls = [
        ("h-a", "marker", {"delay": 1.5}),
        ("h-b", "marker", {"delay": round(rng.uniform(0.2, 1.5), 2)}),
        ("h-c", "again", {"delay": 1.5}),
    ]
    scripts = {
        "go": [delegate("t1", "sub job"), reply("parent done")],
        "sub job": [reply(calls=child_calls), reply("child done")],
    }
    marks = tmp_path / "marks"
    plan = agent_plan(scripts, marks, FAST)
    plan_path = tmp_path / "plan.json"
    plan_path.write_text(json.dumps(plan))
    task_queue = queue()
    session_id = f"parent-{task_queue}"
    first = WorkerProcess(plan_path, temporal_server, task_queue, tmp_path / "first.log")
    second: WorkerProcess | None = None
    outcome: list[Any] = []
    try:
        await first.ready()
        async with TemporalSessions(address=temporal_server, task_queue=task_queue) as sessions:
            session = await sessions.open(plan, session_id=session_id)
            with anyio.fail_after(90):
                async with anyio.create_task_group() as group:

                    async def turn() -> None:
                        outcome.append(await session.run("go"))

                    group.start_soon(turn)
                    await marks_of(marks, "h-a")  # the child's turn is running its calls
                    await anyio.sleep(rng.uniform(0.0, 0.5))
                    first.kill()
                    second = WorkerProcess(
                        plan_path, temporal_server, task_queue, tmp_path / "second.log"
                    )
                    await second.ready()
            messages = await session.messages()
            child_messages = await (await sessions.attach(f"{session_id}-t1")).messages()
    finally:
        first.kill()
        if second is not None:
            second.kill()
    (result,) = outcome
    assert (result.status, result.text) == (TurnStatus.SUCCESS, "parent done")
    calls_answered_in_order(messages)
    assert content(messages[2]) == {"response": "child done", "session_id": f"{session_id}-t1"}
    calls_answered_in_order(child_messages)
    answers = {m["tool_call_id"]: content(m) for m in child_messages if m.get("role") == "tool"}
    assert set(answers) == {"h-a", "h-b", "h-c"}
    for call_id, answer in answers.items():
        runs = (marks / call_id).read_text().splitlines() if (marks / call_id).exists() else []
        assert all(key == f"{session_id}-t1/{call_id}" for key in runs)
        if call_id == "h-c":  # idempotent: retried, never answered interrupted
            assert answer == {"done": call_id}
            assert 1 <= len(runs) <= 2
        else:
            assert len(runs) <= 1, (call_id, runs)  # never ran twice
            assert answer in ({"done": call_id}, interrupted(call_id)), answer


async def test_a_child_never_outlasts_its_parents_deadline(
    temporal_server: str, tmp_path: Path
) -> None:
    """The parent's ``turn_timeout`` (a durable timer) is the child's deadline too: when
    it comes, the child's running call is cancelled and both turns end ``cancelled``."""
    scripts = {
        "go": [delegate("t1", "sub job"), reply("never")],
        "sub job": [reply(calls=[("h1", "marker", {"delay": 60})]), reply("never")],
    }
    marks = tmp_path / "marks"
    plan = agent_plan(scripts, marks, FAST)
    plan["orchestrator"] = {"config": {"turn_timeout": 2}}
    plan["agents"]["helper"]["orchestrator"] = {"config": {"turn_timeout": 600}}
    async with served(plan, temporal_server) as sessions:
        session = await sessions.open(plan)
        with anyio.fail_after(30):
            result = await session.run("go")
        messages = await session.messages()
        child = await sessions.attach(f"{session.id}-t1")
        child_result = await child.last_result()
        child_messages = await child.messages()
    assert result.status is TurnStatus.CANCELLED
    assert child_result is not None
    assert child_result.status is TurnStatus.CANCELLED
    calls_answered_in_order(messages)
    calls_answered_in_order(child_messages)
    assert content(child_messages[-1])["cancelled"] is True
    assert (marks / "h1").read_text().count("\n") == 1


async def test_a_childs_held_call_is_approved_on_the_child_session(
    temporal_server: str, tmp_path: Path
) -> None:
    """A call the child holds for an approval waits in the child workflow: the host
    attaches to the child's id, sees it in ``pending_approvals()`` and decides it there;
    the call runs once and the parent's turn goes on."""
    scripts = {
        "go": [delegate("t1", "sub job"), reply("parent done")],
        "sub job": [reply(calls=[("h1", "guarded", {"delay": 0})]), reply("child answer")],
    }
    marks = tmp_path / "marks"
    plan = agent_plan(scripts, marks, FAST)
    async with served(plan, temporal_server) as sessions:
        session = await sessions.open(plan)
        outcome: list[Any] = []
        with anyio.fail_after(30):
            async with anyio.create_task_group() as group:

                async def turn() -> None:
                    outcome.append(await session.run("go"))

                group.start_soon(turn)
                child = None
                while child is None:
                    try:
                        child = await sessions.attach(f"{session.id}-t1")
                    except DurableSessionError:
                        await anyio.sleep(0.05)  # not started yet
                held = await child.pending_approvals()
                while not held:
                    await anyio.sleep(0.05)
                    held = await child.pending_approvals()
                assert [h["call_id"] for h in held] == ["h1"]
                assert await session.pending_approvals() == []  # the parent holds nothing
                await child.approve({"h1": "allow"})
        messages = await session.messages()
    (result,) = outcome
    assert (result.status, result.text) == (TurnStatus.SUCCESS, "parent done")
    assert content(messages[2]) == {"response": "child answer", "session_id": f"{session.id}-t1"}
    assert (marks / "h1").read_text().count("\n") == 1


async def test_a_child_is_resumed_after_its_parent_continued_as_new(
    temporal_server: str, tmp_path: Path
) -> None:
    """The parent's children (what a resume needs) are carried across continue-as-new."""
    task_queue = queue()
    session_id = f"parent-{task_queue}"
    child_id = f"{session_id}-t1"
    resume = reply(calls=[("t2", "task", {"session_id": child_id, "instruction": "more"})])
    scripts = {
        "go": [delegate("t1", "sub job"), reply("first"), resume, reply("second")],
        "sub job": [reply("child answer"), reply("resumed answer")],
    }
    plan = agent_plan(scripts, tmp_path / "marks", {**FAST, "continue_as_new_after_turns": 1})
    async with (
        SessionWorker(plan, address=temporal_server, task_queue=task_queue),
        TemporalSessions(address=temporal_server, task_queue=task_queue) as sessions,
    ):
        session = await sessions.open(plan, session_id=session_id)
        with anyio.fail_after(60):
            first = await session.run("go")
            second = await session.run("again")
        messages = await session.messages()
    assert (first.text, second.text) == ("first", "second")
    answers = [content(m) for m in messages if m.get("role") == "tool"]
    assert answers == [
        {"response": "child answer", "session_id": child_id},
        {"response": "resumed answer", "session_id": child_id},
    ]
