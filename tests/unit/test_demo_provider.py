"""The demo model of the offline plan: it only asks for tools it is offered, and answers."""

from __future__ import annotations

import json
from typing import Any

import pytest

from amplifier_anyio import AmplifierSession, TurnStatus
from amplifier_anyio.models import ChatRequest, Message, ToolSpec
from amplifier_anyio.providers.demo import demo_reply

pytestmark = pytest.mark.anyio

BOTH = [ToolSpec(name="word_count"), ToolSpec(name="reverse_words")]


def asked(tools: list[ToolSpec] | None, *results: tuple[str, Any]) -> ChatRequest:
    messages = [Message(role="user", content="count these four words")]
    messages += [
        Message(
            role="tool",
            name=name,
            tool_call_id=name,
            content=content if isinstance(content, str) else json.dumps(content),
        )
        for name, content in results
    ]
    return ChatRequest(messages=messages, tools=tools)


def test_with_both_tools_it_calls_both_on_the_prompt() -> None:
    reply = demo_reply(asked(BOTH))

    assert [(c.name, c.arguments) for c in reply.tool_calls or []] == [
        ("word_count", {"text": "count these four words"}),
        ("reverse_words", {"text": "count these four words"}),
    ]


@pytest.mark.parametrize("tools", [None, [], [ToolSpec(name="shout")]])
def test_without_its_tools_it_answers_instead_of_asking_again(
    tools: list[ToolSpec] | None,
) -> None:
    reply = demo_reply(asked(tools))

    assert not reply.tool_calls
    assert reply.finish_reason == "stop"
    assert "word_count" in reply.text  # it says which tools it would have needed


def test_it_only_asks_for_the_tools_offered() -> None:
    reply = demo_reply(asked([ToolSpec(name="reverse_words"), ToolSpec(name="shout")]))

    assert [c.name for c in reply.tool_calls or []] == ["reverse_words"]


def test_it_answers_from_whatever_results_came_back() -> None:
    reply = demo_reply(asked(BOTH, ("reverse_words", "words four these count")))

    assert not reply.tool_calls
    assert "'words four these count'" in reply.text
    assert "words and" not in reply.text  # no count came back: none is made up


@pytest.mark.parametrize(
    "content", [{"error": "boom"}, "not an object", [1, 2], None, {"words": "many"}]
)
def test_an_odd_tool_result_is_still_answered(content: Any) -> None:
    reply = demo_reply(asked(BOTH, ("word_count", content)))

    assert not reply.tool_calls
    assert reply.text


async def test_a_misspelt_tool_module_ends_the_turn_with_an_answer() -> None:
    plan = {
        "session": {"orchestrator": "loop-basic", "context": "context-simple"},
        # Before the fix the demo asked for its tools again and again; bounded here so
        # that a regression fails instead of filling the memory.
        "orchestrator": {"config": {"max_iterations": 5}},
        "providers": [{"module": "provider-scripted", "config": {"demo": True}}],
        "tools": [{"module": "tool-dmeo", "optional": True}],
    }
    failed: list[str] = []
    session = AmplifierSession(plan)
    session.coordinator.hooks.register(
        "module:load_failed", lambda event, data: failed.append(data["module_id"])
    )

    async with session:
        result = await session.run("count these four words")

    assert failed == ["tool-dmeo"]
    assert result.status is TurnStatus.SUCCESS
    assert result.turn_count == 1
    assert "word_count" in result.text
