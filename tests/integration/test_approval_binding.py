"""Approvals bind to the call they were given for, reach the writer through its own
channel, and are used once (DESIGN §15).

The app (``_durable_app.py``) asks, on a prompt starting with ``approve``, for ``append``
(c1-0), ``guarded`` (c1-1, deferred until approved) and ``append`` (c1-2); every real run
of a tool appends its call id to a side-effect file.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from amplifier_anyio import AmplifierSession, ApprovalDeferred, SessionError, TurnStatus
from amplifier_anyio.contexts import PersistentContextManager, approve, pending_approvals
from amplifier_anyio.contexts._messages import calls, result_ids
from amplifier_anyio.contexts.persistent import decisions_path_for, journal_path_for
from amplifier_anyio.events import TOOL_PRE
from amplifier_anyio.hooks.approval import CallbackApprovalSystem
from amplifier_anyio.kernel import current_tool_call
from amplifier_anyio.models import HookResult
from amplifier_anyio.providers.scripted import ScriptedProvider

sys.path.insert(0, str(Path(__file__).parent))

import _durable_app as app
from _fork_lane import Lane

pytestmark = pytest.mark.anyio

WRITER = Path(__file__).with_name("_approval_crash_writer.py")


def runs(side_effects: Path) -> list[str]:
    if not side_effects.exists():
        return []
    return [line.split()[-1] for line in side_effects.read_text("utf-8").splitlines()]


def files(directory: Path) -> tuple[Path, Path]:
    return directory / "context-messages.jsonl", directory / "side-effects.txt"


async def held_turn(transcript: Path, side_effects: Path) -> None:
    """A turn left waiting for c1-1's approval, its session closed."""
    session, _ = await app.open_session(transcript, side_effects)
    async with session:
        held = await session.run("approve the plan")
    assert held.status is TurnStatus.AWAITING_APPROVAL


def changing_hook(new_input: dict[str, Any]) -> Any:
    """A ``tool:pre`` hook that gives c1-1 other arguments (as a hook may on resume)."""

    async def hook(event: str, data: dict[str, Any]) -> HookResult:
        await anyio.lowlevel.checkpoint()
        if data["tool_call_id"] != "c1-1":
            return HookResult()
        return HookResult(action="modify", data={**data, "tool_input": new_input})

    return hook


def edit_arguments(transcript: Path, call_id: str, arguments: dict[str, Any]) -> None:
    """Change a call's own arguments in the transcript (a change no hook made)."""
    lines = transcript.read_text("utf-8").splitlines()
    for number, line in enumerate(lines):
        message = json.loads(line)
        for call in message.get("tool_calls") or ():
            if call.get("id") == call_id:
                call["arguments"] = arguments
                lines[number] = json.dumps(message)
    transcript.write_text("".join(f"{line}\n" for line in lines), "utf-8")


@pytest.mark.parametrize("where", ["in the session", "from outside"])
async def test_an_approved_call_whose_own_arguments_changed_is_denied_not_run(
    tmp_path: Path, where: str
) -> None:
    transcript, side_effects = files(tmp_path)
    await held_turn(transcript, side_effects)
    if where == "from outside":
        await approve(transcript, {"c1-1": "allow"})
    edit_arguments(transcript, "c1-1", {"tag": "other"})
    session, _ = await app.open_session(transcript, side_effects)
    async with session:
        approvals = {"c1-1": "allow"} if where == "in the session" else None
        result = await session.resume(approvals=approvals)
    assert result.status is TurnStatus.SUCCESS
    assert "c1-1" not in runs(side_effects)  # not run with arguments nobody approved
    answers = result.text.removeprefix("answer: ").split(" | ")
    assert answers[1] == (
        "Denied: the arguments of guarded call c1-1 changed after it was approved; it was not run"
    )


def rewriting_hook(session_tag: str) -> Any:
    """A ``tool:pre`` hook that rewrites every input (a sandbox putting a path of its
    session in place): it gives another value in each session."""

    async def hook(event: str, data: dict[str, Any]) -> HookResult:
        await anyio.lowlevel.checkpoint()
        tool_input = {**data["tool_input"], "sandbox": session_tag}
        return HookResult(action="modify", data={**data, "tool_input": tool_input})

    return hook


@pytest.mark.parametrize("where", ["in the session", "from outside"])
@pytest.mark.parametrize("deferred_by", ["the tool", "the approval system"])
async def test_a_call_a_tool_pre_hook_rewrites_runs_once_approved(
    tmp_path: Path, where: str, deferred_by: str
) -> None:
    """Before: the call was held with its input before the hooks ran, the resume compared
    the input after them and answered "arguments changed": it never ran. Now the decision
    binds to the call's own arguments and the hooks' rewrite is applied again on resume."""
    transcript, side_effects = files(tmp_path)
    hooks = None
    if deferred_by == "the approval system":  # hooks-approval defers in tool:pre
        config = {"tools": ["append_once"], "default": "defer"}
        hooks = [{"module": "hooks-approval", "config": config}]
    session, _ = await app.open_session(transcript, side_effects, hooks=hooks)
    async with session:
        session.coordinator.hooks.register(TOOL_PRE, rewriting_hook("first"), priority=-10)
        held = await session.run("approve the plan" if deferred_by == "the tool" else "work")
    assert held.status is TurnStatus.AWAITING_APPROVAL
    call_id = held.pending_approvals[0].call_id
    assert held.pending_approvals[0].input == {"tag": call_id.removeprefix("c")}  # its own
    if where == "from outside":
        await approve(transcript, {call_id: "allow"})
    session, _ = await app.open_session(transcript, side_effects, hooks=hooks)
    async with session:
        session.coordinator.hooks.register(TOOL_PRE, rewriting_hook("second"), priority=-10)
        approvals = {call_id: "allow"} if where == "in the session" else None
        result = await session.resume(approvals=approvals)
    assert result.status is TurnStatus.SUCCESS, result
    assert "changed after it was approved" not in result.text
    assert call_id in runs(side_effects)  # it ran, once
    assert runs(side_effects).count(call_id) == 1


async def test_a_hook_that_rewrites_differently_on_resume_is_not_a_change_of_arguments(
    tmp_path: Path,
) -> None:
    transcript, side_effects = files(tmp_path)
    await held_turn(transcript, side_effects)
    await approve(transcript, {"c1-1": "allow"})
    session, _ = await app.open_session(transcript, side_effects)
    async with session:  # the hooks are the session's own: their rewrite is not a change
        session.coordinator.hooks.register(TOOL_PRE, changing_hook({"tag": "other"}))
        result = await session.resume()
    assert result.text == "answer: ok c1-0 | ok c1-1 | ok c1-2"
    assert sorted(runs(side_effects)) == ["c1-0", "c1-1", "c1-2"]


async def test_the_same_arguments_run_once_approved(tmp_path: Path) -> None:
    transcript, side_effects = files(tmp_path)
    await held_turn(transcript, side_effects)
    await approve(transcript, {"c1-1": "allow"})
    session, _ = await app.open_session(transcript, side_effects)
    async with session:
        # the hook gives the arguments the call already has: nothing changed
        session.coordinator.hooks.register(TOOL_PRE, changing_hook({"tag": "1-1"}))
        result = await session.resume()
    assert result.text == "answer: ok c1-0 | ok c1-1 | ok c1-2"
    assert sorted(runs(side_effects)) == ["c1-0", "c1-1", "c1-2"]


class TwiceGuarded(app.AppendTool):
    """Needs two approvals: it defers again on its first approved run."""

    def __init__(self, name: str, path: Path) -> None:
        super().__init__(name, path)
        self.approved_runs = 0

    async def execute(self, input: dict[str, Any]) -> str:
        call = current_tool_call()
        assert call is not None
        if not call.approved:
            raise ApprovalDeferred("first approval?")
        self.approved_runs += 1
        if self.approved_runs == 1:
            raise ApprovalDeferred("second approval?")
        return await super().execute(input)


async def test_a_decision_answers_one_deferral_only(tmp_path: Path) -> None:
    transcript, side_effects = files(tmp_path)
    session, _ = await app.open_session(transcript, side_effects)
    tool = TwiceGuarded("guarded", side_effects)
    await session.coordinator.mount("tools", tool, name="guarded")  # replaces the app's
    async with session:
        first = await session.run("approve the plan")
        assert [p.prompt for p in first.pending_approvals] == ["first approval?"]
        again = await session.resume(approvals={"c1-1": "allow"})
        assert again.status is TurnStatus.AWAITING_APPROVAL
        assert [p.prompt for p in again.pending_approvals] == ["second approval?"]

        still = await session.resume()  # the first decision does not answer the second
        assert still.status is TurnStatus.AWAITING_APPROVAL
        assert "c1-1" not in runs(side_effects)

        done = await session.resume(approvals={"c1-1": "allow"})
    assert done.status is TurnStatus.SUCCESS
    assert runs(side_effects).count("c1-1") == 1


async def test_an_outside_decision_reaches_the_open_session_without_touching_its_files(
    tmp_path: Path,
) -> None:
    transcript, side_effects = files(tmp_path)
    session, _ = await app.open_session(transcript, side_effects)
    async with session:
        held = await session.run("approve the plan")
        assert held.status is TurnStatus.AWAITING_APPROVAL
        before = transcript.read_bytes(), journal_path_for(transcript).read_bytes()

        waiting = await approve(transcript, {"c1-1": "allow"})  # while the writer is open

        assert waiting == []
        assert await pending_approvals(transcript) == []
        assert (transcript.read_bytes(), journal_path_for(transcript).read_bytes()) == before
        assert decisions_path_for(transcript).read_bytes().count(b"\n") == 1
        result = await session.resume()  # the writer takes the decision now
        assert result.text == "answer: ok c1-0 | ok c1-1 | ok c1-2"
        assert decisions_path_for(transcript).read_bytes() == b""  # taken, once
        again = await session.resume()
    assert again.text == result.text
    assert runs(side_effects).count("c1-1") == 1


async def decision_waits(lock: anyio.Lock) -> None:
    """Until a task waits for ``lock`` (the decision's journal write)."""
    while not lock.statistics().tasks_waiting:
        await anyio.lowlevel.checkpoint()


async def test_a_cancelled_resume_records_its_decisions_never_later(tmp_path: Path) -> None:
    transcript, side_effects = files(tmp_path)
    session, _ = await app.open_session(transcript, side_effects)
    async with session:
        await session.run("approve the plan")
        context = session.coordinator.get("context")
        async with anyio.create_task_group() as group, context._journal_lock:
            # another journal write is under way while the resume decides
            group.start_soon(session.resume, {"c1-1": "allow"})
            await decision_waits(context._journal_lock)
            group.cancel_scope.cancel()
        await context.journal_finished("c1-0", "ok c1-0")  # the next write of the journal
        assert [p.call_id for p in context.pending_approvals()] == ["c1-1"]
        records = journal_path_for(transcript).read_text("utf-8")
        assert '"decided"' not in records
    assert "c1-1" not in runs(side_effects)


# -- a decision is used once, whatever point a SIGKILL hits ----------------------------------

ROUNDS = 16  # x 2 backends


def one_result_per_call(messages: list[dict[str, Any]]) -> None:
    for index, message in enumerate(messages):
        ids = [call_id for call_id, _ in calls(message)]
        following = messages[index + 1 : index + 1 + len(ids)]
        assert [result_ids(m) for m in following] == [[i] for i in ids], messages


@pytest.mark.skipif(not hasattr(os, "fork"), reason="the writers are forked")
@pytest.mark.timeout(120)
async def test_a_decision_is_used_once_across_kills(
    tmp_path: Path, anyio_backend: tuple[str, dict[str, Any]]
) -> None:
    rng = random.Random(28)
    backend = anyio_backend[0]
    pid: int | None = None
    ran_in_killed = 0
    command = [sys.executable, str(WRITER)]
    async with await anyio.open_process(command, stderr=None) as process:
        lane = Lane(process)
        try:
            for round_ in range(ROUNDS):
                directory = tmp_path / f"round{round_}"
                directory.mkdir()
                transcript, side_effects = files(directory)
                await held_turn(transcript, side_effects)
                await approve(transcript, {"c1-1": "allow"})

                await lane.send(f"spawn {backend} {directory}")
                pid = int((await lane.take("forked ")).split()[1])
                if rng.random() < 0.3:
                    await anyio.sleep(rng.uniform(0, 0.02))  # maybe while it loads
                else:
                    await lane.take(f"ready {pid}")
                    await anyio.sleep(rng.uniform(0, 0.05))
                os.kill(pid, signal.SIGKILL)
                await lane.send(f"reap {pid}")
                await lane.take(f"reaped {pid}")
                pid = None
                ran_in_killed += runs(side_effects).count("c1-1")

                session, _ = await app.open_session(transcript, side_effects)
                async with session:
                    result = await session.resume()
                    again = await session.resume()
                    messages = await session.coordinator.get("context").get_messages()
                assert result.status is TurnStatus.SUCCESS, result
                assert again.text == result.text
                assert runs(side_effects).count("c1-1") <= 1, "a decision was used twice"
                one_result_per_call(messages)
                (answer,) = [m for m in messages if m.get("tool_call_id") == "c1-1"]
                if answer["content"] == "ok c1-1":
                    assert runs(side_effects).count("c1-1") == 1
                else:  # killed while it ran: never run again
                    assert "interrupted" in answer["content"], answer
                async with PersistentContextManager(transcript, read_only=True) as stored:
                    assert stored.pending_approvals() == []
        finally:
            if pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
    assert 0 < ran_in_killed < ROUNDS, "the kills never split deciding from running"


# -- hooks-approval can defer --------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "held"),
    [
        ({"tools": ["append_once"], "default": "defer"}, True),
        ({"tools": ["append_once"], "non_interactive": "defer"}, True),
        ({"tools": ["append_once"], "default": "defer", "non_interactive": "deny"}, False),
        ({"tools": ["append_once"]}, False),
    ],
)
async def test_hooks_approval_defers_when_nobody_can_answer(
    tmp_path: Path, config: dict[str, Any], held: bool
) -> None:
    transcript, side_effects = files(tmp_path)
    hooks = [{"module": "hooks-approval", "config": config}]
    session, _ = await app.open_session(transcript, side_effects, hooks=hooks)
    async with session:  # no approval system: nobody is there to ask
        result = await session.run("work")
        if not held:
            assert result.status is TurnStatus.SUCCESS
            assert "Denied by hook: No approval system available" in result.text
            return
        assert result.status is TurnStatus.AWAITING_APPROVAL
        assert [(p.call_id, p.tool) for p in result.pending_approvals] == [("c1-2", "append_once")]
        assert sorted(runs(side_effects)) == ["c1-0", "c1-1"]
    await approve(transcript, {"c1-2": "allow"})
    session, _ = await app.open_session(transcript, side_effects, hooks=hooks)
    async with session:
        done = await session.resume()  # asked again by the hook: allowed already
    assert done.status is TurnStatus.SUCCESS
    assert sorted(runs(side_effects)) == ["c1-0", "c1-1", "c1-2"]


async def test_hooks_approval_defers_at_its_timeout_and_on_a_defer_answer(tmp_path: Path) -> None:
    transcript, side_effects = files(tmp_path)

    async def never(request: Any) -> str:
        await anyio.sleep_forever()
        raise AssertionError

    config = {"tools": ["append_once"], "default": "defer", "timeout": 0.05}
    hooks = [{"module": "hooks-approval", "config": config}]
    system = CallbackApprovalSystem(never)
    session, _ = await app.open_session(
        transcript, side_effects, hooks=hooks, approval_system=system
    )
    async with session:
        timed_out = await session.run("work")
        assert [p.call_id for p in timed_out.pending_approvals] == ["c1-2"]
    other = tmp_path / "other"
    other.mkdir()
    transcript, side_effects = files(other)
    system = CallbackApprovalSystem(lambda request: "Defer")  # what the console's 4 / d gives
    session, _ = await app.open_session(
        transcript, side_effects, hooks=hooks, approval_system=system
    )
    async with session:
        answered = await session.run("work")
    assert [p.call_id for p in answered.pending_approvals] == ["c1-2"]


async def test_a_resume_without_the_held_calls_tool_is_refused_before_deciding(
    tmp_path: Path,
) -> None:
    transcript, side_effects = files(tmp_path)
    await held_turn(transcript, side_effects)
    session = AmplifierSession(app.plan(transcript))  # another plan: no guarded tool
    async with session:
        await session.coordinator.mount("providers", ScriptedProvider(app.brain), name="s")
        with pytest.raises(SessionError, match="held call c1-1 needs the tool 'guarded'"):
            await session.resume(approvals={"c1-1": "allow"})
    assert '"decided"' not in journal_path_for(transcript).read_text("utf-8")
    assert [p.call_id for p in await pending_approvals(transcript)] == ["c1-1"]
    session, _ = await app.open_session(transcript, side_effects)  # its own tools again
    async with session:
        result = await session.resume(approvals={"c1-1": "allow"})
    assert result.text == "answer: ok c1-0 | ok c1-1 | ok c1-2"
