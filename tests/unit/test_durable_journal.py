"""The tool-call journal of context-persistent, and how the tool batch feeds it.

Crashes are simulated the honest way for a single process: a manager writes records and
messages, is dropped without writing the batch's results (what a SIGKILL leaves), and a
new manager loads the same files. The subprocess SIGKILL test is
``tests/integration/test_durable_crash.py``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from amplifier_anyio import ApprovalDeferred
from amplifier_anyio.contexts import (
    PersistentContextManager,
    SimpleContextManager,
    _jsonl,
    persistent,
)
from amplifier_anyio.contexts.persistent import journal_path_for
from amplifier_anyio.hooks.approval import CallbackApprovalSystem
from amplifier_anyio.kernel import (
    HookRegistry,
    ModuleCoordinator,
    ToolCallContext,
    current_tool_call,
)
from amplifier_anyio.models import HookResult, ToolCall
from amplifier_anyio.runtime import ToolBatch

pytestmark = pytest.mark.anyio

USER = {"role": "user", "content": "go"}


def assistant(*ids: str) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": i, "name": "work", "arguments": {"n": i}} for i in ids],
    }


async def crashed_batch(path: Path, *ids: str) -> PersistentContextManager:
    manager = PersistentContextManager(path)
    await manager.add_message(USER)
    await manager.add_message(assistant(*ids))
    return manager


async def reloaded(path: Path) -> tuple[PersistentContextManager, list[dict[str, Any]]]:
    manager = PersistentContextManager(path)
    await manager.load()
    return manager, await manager.get_messages()


async def test_a_finished_call_keeps_its_result_and_a_running_one_is_interrupted(
    tmp_path: Path,
) -> None:
    path = tmp_path / "t.jsonl"
    writer = await crashed_batch(path, "a", "b")
    await writer.journal_started("a", "work", {"n": "a"})
    await writer.journal_finished("a", "the result of a")
    await writer.journal_started("b", "work", {"n": "b"})
    await writer.aclose()  # killed before the batch's results were written

    manager, messages = await reloaded(path)

    a, b = messages[2], messages[3]
    assert (a["tool_call_id"], a["content"]) == ("a", "the result of a")
    assert a["metadata"] == {"recovered": True}
    assert b["tool_call_id"] == "b"
    assert json.loads(b["content"])["interrupted"] is True
    assert manager.interrupted_calls_closed == 2
    assert (await manager.resume_work()).run == ()  # nothing runs again
    assert not journal_path_for(path).exists()  # nothing left to remember: compacted away


async def test_an_idempotent_call_that_was_running_is_left_for_resume(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    writer = await crashed_batch(path, "a", "b")
    await writer.journal_started("a", "work", {"n": "a"}, idempotent=True)
    await writer.aclose()  # killed

    manager, messages = await reloaded(path)

    assert messages[2]["metadata"] == {"interrupted": True, "resumable": True}
    assert json.loads(messages[2]["content"])["interrupted"] is True  # as a model would see it
    assert messages[3]["metadata"] == {"interrupted": True}  # never started: not run later
    assert (await manager.resume_work()).run == ("a",)
    assert journal_path_for(path).exists()  # still needed by the resume

    # the resume runs it again and finishes it; a crash before the results land loses nothing
    await manager.journal_started("a", "work", {"n": "a"}, idempotent=True)
    await manager.journal_finished("a", "done at last")
    await manager.aclose()
    _, messages = await reloaded(path)
    assert messages[2]["content"] == "done at last"


async def test_the_idempotency_key_is_the_same_for_every_run_of_a_call(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    writer = await crashed_batch(path, "a", "b")
    first = await writer.journal_started("a", "work", {"n": "a"}, idempotent=True)
    other = await writer.journal_started("b", "work", {"n": "b"}, idempotent=True)
    await writer.aclose()  # killed
    manager, _ = await reloaded(path)
    again = await manager.journal_started("a", "work", {"n": "a"}, idempotent=True)
    assert first == again
    assert first != other
    assert len(first) == 32


async def test_records_written_at_the_same_time_share_one_fsync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "t.jsonl"
    ids = [f"c{i}" for i in range(12)]
    manager = await crashed_batch(path, *ids)
    appends: list[bytes] = []
    append = _jsonl.append_line

    def counting(target: Path, data: bytes, undo_to: int | None = None) -> None:
        appends.append(data)
        append(target, data, undo_to)

    monkeypatch.setattr(_jsonl, "append_line", counting)
    async with anyio.create_task_group() as tg:
        for call_id in ids:
            tg.start_soon(manager.journal_started, call_id, "work", {})
    assert sum(data.count(b"\n") for data in appends) == len(ids)
    assert len(appends) <= 2  # the first alone, every later one in the next write


async def test_clear_and_set_messages_forget_the_journal(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    manager = await crashed_batch(path, "a")
    await manager.journal_started("a", "work", {})
    assert journal_path_for(path).exists()
    await manager.clear()
    assert not journal_path_for(path).exists()
    await manager.add_message(USER)
    await manager.add_message(assistant("a"))  # the same position and id as before
    del manager
    _, messages = await reloaded(path)
    assert json.loads(messages[2]["content"])["interrupted"] is True  # no stale record used


async def test_the_batch_journals_every_call_and_gives_the_tool_its_key(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    context = PersistentContextManager(path)
    seen: list[ToolCallContext] = []

    class Work:
        name = "work"

        async def execute(self, tool_input: dict[str, Any]) -> str:
            call = current_tool_call()
            assert call is not None
            seen.append(call)
            if tool_input["n"] == "bad":
                raise RuntimeError("no")
            return f"did {tool_input['n']}"

    calls = [ToolCall(id=i, name="work", arguments={"n": i}) for i in ("a", "bad")]
    await context.add_message(USER)
    batch = ToolBatch(calls=calls, tools={"work": Work()}, hooks=HookRegistry())
    await batch.run(context, assistant("a", "bad"))

    records = [json.loads(line) for line in journal_path_for(path).read_text().splitlines()]
    kinds = sorted((r["call_id"], r["type"]) for r in records)
    assert kinds == [("a", "finished"), ("a", "started"), ("bad", "finished"), ("bad", "started")]
    finished = {r["call_id"]: r for r in records if r["type"] == "finished"}
    assert finished["a"]["content"] == "did a"
    assert finished["bad"]["success"] is False
    keys = {call.tool_call_id: call.idempotency_key for call in seen}
    started = {r["call_id"]: r["key"] for r in records if r["type"] == "started"}
    assert keys == started


async def test_a_call_is_not_run_when_its_start_cannot_be_journaled(tmp_path: Path) -> None:
    ran: list[str] = []

    class Broken(PersistentContextManager):
        async def journal_started(self, *args: Any, **kwargs: Any) -> str:
            raise OSError("disk full")

    class Work:
        name = "work"

        async def execute(self, tool_input: dict[str, Any]) -> str:
            ran.append(tool_input["n"])
            return "ok"

    context = Broken(tmp_path / "t.jsonl")
    await context.add_message(USER)
    batch = ToolBatch(
        calls=[ToolCall(id="a", name="work", arguments={"n": "a"})],
        tools={"work": Work()},
        hooks=HookRegistry(),
    )
    await batch.run(context, assistant("a"))
    assert ran == []
    assert batch.succeeded == [False]
    assert "disk full" in (batch.contents()[0] or "")


async def test_a_context_without_a_journal_gives_no_key() -> None:
    seen: list[ToolCallContext | None] = []

    class Work:
        name = "work"

        async def execute(self, tool_input: dict[str, Any]) -> str:
            seen.append(current_tool_call())
            return "ok"

    batch = ToolBatch(
        calls=[ToolCall(id="a", name="work", arguments={})],
        tools={"work": Work()},
        hooks=HookRegistry(),
    )
    await batch.run(SimpleContextManager(), assistant("a"))
    assert seen[0] is not None
    assert seen[0].idempotency_key is None


async def test_a_transcript_without_tool_calls_gets_no_journal_file(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    manager = PersistentContextManager(path)
    await manager.add_message(USER)
    await manager.aclose()
    _, messages = await reloaded(path)
    assert messages == [USER]
    names = sorted([entry.name async for entry in anyio.Path(tmp_path).iterdir()])
    assert names == ["t.jsonl", "t.jsonl.lock"]


async def test_a_deferral_that_cannot_be_journaled_is_that_calls_error(tmp_path: Path) -> None:
    class Broken(PersistentContextManager):
        async def journal_deferred(self, *args: Any, **kwargs: Any) -> None:
            raise OSError("disk full")

    class Guarded:
        name = "guarded"

        async def execute(self, tool_input: dict[str, Any]) -> str:
            raise ApprovalDeferred("may I?")

    class Work:
        name = "work"

        async def execute(self, tool_input: dict[str, Any]) -> str:
            await anyio.lowlevel.checkpoint()
            return "worked"

    context = Broken(tmp_path / "t.jsonl")
    await context.add_message(USER)
    calls = [ToolCall(id="a", name="guarded"), ToolCall(id="b", name="work")]
    batch = ToolBatch(
        calls=calls, tools={"guarded": Guarded(), "work": Work()}, hooks=HookRegistry()
    )
    await batch.run(context, assistant("a", "b"))
    contents = batch.contents()
    assert "holding the call failed: OSError: disk full" in (contents[0] or "")
    assert contents[1] == "worked"  # the sibling is untouched
    assert batch.held == {}
    assert context.pending_approvals() == []


async def test_a_long_lived_writer_keeps_its_journal_small(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(persistent, "JOURNAL_COMPACT_AT", 4)
    path = tmp_path / "t.jsonl"
    manager = PersistentContextManager(path)
    sizes = []
    for turn in range(5):
        ids = [f"t{turn}-{j}" for j in range(3)]
        await manager.add_message(USER)
        await manager.add_message(assistant(*ids))
        for call_id in ids:
            await manager.journal_started(call_id, "work", {})
            await manager.journal_finished(call_id, f"done {call_id}")
        results = [{"role": "tool", "tool_call_id": i, "content": f"done {i}"} for i in ids]
        await manager.add_messages(results)
        sizes.append(journal_path_for(path).exists())
    assert sizes == [False] * 5  # six records each batch: dropped once its results landed
    await manager.aclose()
    _, messages = await reloaded(path)
    assert len(messages) == 25


async def test_defer_holds_only_a_tool_call_elsewhere_it_denies() -> None:
    coordinator = ModuleCoordinator(approval_system=CallbackApprovalSystem(lambda _: "defer"))
    ask = HookResult(action="ask_user", approval_prompt="may I?")
    with pytest.raises(ApprovalDeferred) as raised:
        await coordinator.process_hook_result(ask, "tool:pre", "hooks-approval")
    assert raised.value.prompt == "may I?"
    answer = await coordinator.process_hook_result(ask, "provider:request", "h")
    assert answer.action == "deny"
