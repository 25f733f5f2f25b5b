"""The request view: sticky, incremental compaction and the models the turn engine sends.

What a user sees: once a long conversation is compacted, the next requests keep the same
beginning (the same first kept message, so a provider's prompt cache stays warm) and only
grow by what was added; the cut moves, with its events, only when the view outgrows the
threshold again; and what the turn engine sends is what the dict path would send.
"""

from __future__ import annotations

from typing import Any

import pytest

from amplifier_anyio.bench import conversation
from amplifier_anyio.contexts import (
    PersistentContextManager,
    SimpleContextManager,
    compact,
    is_compaction_notice,
)
from amplifier_anyio.models import Message
from amplifier_anyio.runtime import (
    LOST_RESULT,
    answer_orphaned_calls,
    apply_injections,
    build_request,
    inject,
    request_messages,
)
from amplifier_anyio.testing import EventRecorder

pytestmark = pytest.mark.anyio


def _round(index: int) -> list[dict[str, Any]]:
    call_id = f"round_{index}"
    return [
        {"role": "user", "content": f"question {index}: " + "lorem ipsum " * 10},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": call_id, "name": "sleep", "arguments": {"i": index}}],
        },
        {"role": "tool", "tool_call_id": call_id, "name": "sleep", "content": "dolor " * 20},
    ]


async def _dict_path(context: Any, **kwargs: Any) -> tuple[list[Message], list[str]]:
    messages, repaired = answer_orphaned_calls(await context.get_messages_for_request(**kwargs))
    return build_request(messages, None).messages, repaired


def _compactions(recorder: EventRecorder) -> int:
    return sum(1 for event, _ in recorder.events if event == "context:post_compact")


async def _compacted_context(budget: int = 2_000) -> tuple[SimpleContextManager, EventRecorder]:
    recorder = EventRecorder()
    context = SimpleContextManager(max_tokens=budget, hooks=recorder)
    await context.add_messages([{"role": "system", "content": "Be brief."}])
    index = 0
    while context.token_estimate <= context.compaction_threshold * budget:
        await context.add_messages(_round(index))
        index += 1
    return context, recorder


async def test_the_cut_is_sticky_while_the_view_fits() -> None:
    context, recorder = await _compacted_context()
    first = (await context.request_view()).messages
    assert _compactions(recorder) == 1
    assert any(is_compaction_notice_model(m) for m in first)
    for index in range(100, 103):
        await context.add_messages(_round(index))
        view = (await context.request_view()).messages
        # the same beginning, the same objects: only what was added is new
        assert view[: len(first)] == first
        assert all(a is b for a, b in zip(view, first, strict=False))
        assert len(view) == len(first) + 3 * (index - 99)
    assert _compactions(recorder) == 1  # no compaction since the first


async def test_the_cut_moves_only_when_the_view_outgrows_the_threshold() -> None:
    budget = 2_000
    context, recorder = await _compacted_context(budget)
    first = (await context.request_view()).messages
    index = 100
    while _compactions(recorder) == 1:
        await context.add_messages(_round(index))
        index += 1
        view = (await context.request_view()).messages
    post = [data for event, data in recorder.events if event == "context:post_compact"][-1]
    # the second compaction dropped more and brought the view back to the target
    assert post["tokens_after"] <= int(budget * context.target_usage)
    assert len(view) < len(first) + 3 * (index - 100)
    assert view[0].role == "system"  # protected messages stay
    assert view[1].content == first[1].content  # the first user message too


async def test_the_first_compaction_is_what_compact_chooses() -> None:
    context, _ = await _compacted_context()
    history = await context.get_messages()
    expected = compact(history, int(2_000 * context.target_usage), context.estimator)
    assert await context.get_messages_for_request() == expected


async def test_without_compaction_the_view_is_the_whole_history() -> None:
    context = SimpleContextManager()
    history = conversation(40)
    await context.set_messages(history)
    view = await context.request_view()
    assert view.messages == build_request(history, None).messages
    assert view.repaired == ()


async def test_everything_fitting_again_ends_the_compaction() -> None:
    context, _ = await _compacted_context()
    assert len((await context.request_view()).messages) < len(await context.get_messages())
    everything = await context.request_view(token_budget=10**9)
    assert len(everything.messages) == len(await context.get_messages())


async def test_unanswered_calls_are_answered_and_reported_as_the_dict_path_does() -> None:
    context = SimpleContextManager()
    await context.set_messages(
        [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": "", "tool_calls": [{"id": "a", "name": "t"}]},
            {"role": "user", "content": "where is a?"},
            {"role": "assistant", "content": "", "tool_calls": [{"id": "b", "name": "t"}]},
        ]
    )
    view = await context.request_view()
    assert view.repaired == ("a", "b")
    assert [m.content for m in view.messages if m.role == "tool"] == [LOST_RESULT, LOST_RESULT]
    assert (view.messages, list(view.repaired)) == await _dict_path(context)
    # the last call's result arrives: the open run is redone, the closed one is kept
    await context.add_message({"role": "tool", "tool_call_id": "b", "content": "done"})
    view = await context.request_view()
    assert view.repaired == ("a",)
    assert view.messages[-1].content == "done"
    assert (view.messages, list(view.repaired)) == await _dict_path(context)


async def test_a_late_answer_to_a_call_that_was_left_out_is_left_out_too() -> None:
    context, _ = await _compacted_context()
    await context.request_view()
    await context.add_message({"role": "tool", "tool_call_id": "round_0", "content": "late"})
    view = await context.request_view()
    assert "late" not in [m.content for m in view.messages]
    assert (view.messages, list(view.repaired)) == await _dict_path(context)


async def test_injections_on_models_are_those_of_the_dict_path() -> None:
    context = SimpleContextManager()
    await context.set_messages(conversation(7))  # ends with a tool result
    injections = [
        {"role": "system", "content": "appended", "append_to_last_tool_result": True},
        {"role": "user", "content": "a new message"},
    ]
    messages, _ = await request_messages(context)
    dicts = apply_injections(await context.get_messages_for_request(), injections)
    assert inject(messages, injections) == build_request(dicts, None).messages


async def test_a_foreign_context_goes_through_the_dict_path() -> None:
    class Foreign:
        def __init__(self, messages: list[dict[str, Any]]) -> None:
            self.messages = messages

        async def get_messages_for_request(self, **_: Any) -> list[dict[str, Any]]:
            return [dict(m) for m in self.messages]

    history = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "x", "name": "t"}]},
    ]
    messages, repaired = await request_messages(Foreign(history))
    assert repaired == ("x",)
    assert messages[-1] == Message(role="tool", tool_call_id="x", name="t", content=LOST_RESULT)


async def test_context_persistent_keeps_its_view_and_a_reload_starts_afresh(tmp_path: Any) -> None:
    path = tmp_path / "context.jsonl"
    context = PersistentContextManager(path, max_tokens=2_000)
    await context.add_message({"role": "system", "content": "Be brief."})
    for index in range(40):
        await context.add_messages(_round(index))
    first = (await context.request_view()).messages
    await context.add_messages(_round(40))
    second = (await context.request_view()).messages
    assert all(a is b for a, b in zip(first, second, strict=False))
    # a new process (after this one closed) decides afresh, as context-simple does
    await context.aclose()
    reloaded = PersistentContextManager(path, max_tokens=2_000)
    fresh = SimpleContextManager(max_tokens=2_000)
    await fresh.set_messages(await context.get_messages())
    assert (await reloaded.request_view()).messages == (await fresh.request_view()).messages


def is_compaction_notice_model(message: Message) -> bool:
    """Whether a converted message is the compaction notice."""
    return is_compaction_notice({"metadata": message.metadata})
