"""Prompt caching you can see: breakpoints on the wire, cache tokens, ``provider:cache``.

Anthropic request bodies are validated against the ``anthropic`` SDK's params
(``MessageCreateParams``); the ``provider:cache`` report runs through whole sessions whose
history, system prompt and tools change between turns.
"""

from __future__ import annotations

import typing
from typing import Any

import httpx
import pydantic
import pytest
from anthropic.types import message_create_params

from amplifier_anyio import AmplifierSession
from amplifier_anyio.events import PROVIDER_CACHE
from amplifier_anyio.models import (
    ChatRequest,
    ChatResponse,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    ToolCallBlock,
    ToolResult,
    ToolSpec,
    Usage,
)
from amplifier_anyio.providers.anthropic import AnthropicProvider
from amplifier_anyio.providers.scripted import ScriptedProvider
from amplifier_anyio.runtime._prompt_cache import PromptPrefix, changed_parts
from amplifier_anyio.testing import EventRecorder

pytestmark = pytest.mark.anyio

_ANTHROPIC = pydantic.TypeAdapter(message_create_params.MessageCreateParamsNonStreaming)
_TOP_KEYS = set(typing.get_type_hints(message_create_params.MessageCreateParamsNonStreaming))
WEATHER = ToolSpec(name="get_weather", parameters={"type": "object", "properties": {}})


def breakpoints(body: dict[str, Any]) -> list[str]:
    """Where the body carries ``cache_control``: system, tools[i], messages[i].content[j]."""
    found = []
    system = body.get("system")
    if isinstance(system, list):
        found += [f"system[{i}]" for i, b in enumerate(system) if "cache_control" in b]
    found += [f"tools[{i}]" for i, t in enumerate(body.get("tools", [])) if "cache_control" in t]
    for i, message in enumerate(body["messages"]):
        content = message["content"]
        if isinstance(content, list):
            found += [
                f"messages[{i}].content[{j}]" for j, b in enumerate(content) if "cache_control" in b
            ]
    return found


def conversation() -> list[Message]:
    return [
        Message(role="system", content="You are terse."),
        Message(role="user", content="Weather?"),
        Message(
            role="assistant",
            content=[
                ThinkingBlock(thinking="use the tool", signature="sig-1"),
                ToolCallBlock(id="t1", name="get_weather", input={}),
            ],
            tool_calls=[ToolCall(id="t1", name="get_weather", arguments={})],
        ),
        Message(role="tool", tool_call_id="t1", content="sunny"),
    ]


def anthropic(**config: Any) -> AnthropicProvider:
    return AnthropicProvider(
        {"api_key": "k", **config}, transport=httpx.MockTransport(lambda _r: httpx.Response(500))
    )


@pytest.mark.parametrize("thinking", [False, True])
def test_anthropic_breakpoints_are_on_the_wire_as_the_sdk_types_allow(thinking: bool) -> None:
    request = ChatRequest(messages=conversation(), tools=[WEATHER])
    body = anthropic(extended_thinking=thinking, max_tokens=16_000).build_payload(
        request, stream=False
    )
    assert set(body) <= _TOP_KEYS
    _ANTHROPIC.validate_python(body)
    # system, the tools, and the last message: the conversation so far is the next prefix
    assert breakpoints(body) == ["system[0]", "tools[0]", "messages[2].content[0]"]
    assert body["messages"][2]["content"][0]["type"] == "tool_result"
    assert all(b["cache_control"] == {"type": "ephemeral"} for b in _blocks_with_breakpoints(body))


def _blocks_with_breakpoints(body: dict[str, Any]) -> list[dict[str, Any]]:
    blocks = [*body["system"], *body["tools"]]
    for message in body["messages"]:
        blocks += [b for b in message["content"] if "cache_control" in b]
    return [b for b in blocks if "cache_control" in b]


def test_a_thinking_block_never_carries_a_breakpoint() -> None:
    ends_in_thinking = Message(
        role="assistant", content=[ThinkingBlock(thinking="hmm", signature="sig-2")]
    )
    request = ChatRequest(messages=[Message(role="user", content="x"), ends_in_thinking])
    body = anthropic().build_payload(request, stream=False)
    _ANTHROPIC.validate_python(body)
    assert "messages[1].content[0]" not in breakpoints(body)


def test_breakpoints_can_be_turned_off() -> None:
    request = ChatRequest(messages=conversation(), tools=[WEATHER])
    body = anthropic(prompt_caching=False).build_payload(request, stream=False)
    _ANTHROPIC.validate_python(body)
    assert breakpoints(body) == []
    assert body["system"] == "You are terse."


# -- what changed ----------------------------------------------------------------------


def prefix(*messages: Message, tools: list[ToolSpec] | None = None) -> PromptPrefix:
    request = ChatRequest(messages=list(messages), tools=tools)
    return PromptPrefix.of(request, provider="p", model="m")


SYSTEM = Message(role="system", content="rules")
A, B, C, D = (Message(role="user", content=t) for t in "abcd")


@pytest.mark.parametrize(
    ("before", "now", "changed", "first"),
    [
        ((SYSTEM, A, B), (SYSTEM, A, B, C), [], None),
        ((SYSTEM, A, B), (Message(role="system", content="new rules"), A, B, C), ["system"], None),
        ((SYSTEM, A, B, C), (SYSTEM, B, C, D), ["compaction"], 0),
        (
            (SYSTEM, A, B, C),
            (SYSTEM, Message(role="user", content="summary"), C, D),
            ["compaction"],
            0,
        ),
        ((SYSTEM, A, B, C), (SYSTEM, A, Message(role="user", content="B!"), C, D), ["history"], 1),
        ((SYSTEM, A, B, C), (SYSTEM, A, B), ["history"], 2),
    ],
)
def test_the_changed_part_is_named(
    before: tuple[Message, ...], now: tuple[Message, ...], changed: list[str], first: int | None
) -> None:
    assert changed_parts(prefix(*before), prefix(*now)) == (changed, first)


def test_tools_provider_and_model_changes_are_named() -> None:
    before = prefix(SYSTEM, A)
    assert changed_parts(before, prefix(SYSTEM, A, tools=[WEATHER]))[0] == ["tools"]
    other = PromptPrefix.of(ChatRequest(messages=[SYSTEM, A]), provider="q", model="n")
    assert changed_parts(before, other)[0] == ["provider", "model"]


# -- provider:cache in a session -----------------------------------------------------------


def cached_answer(_request: ChatRequest) -> ChatResponse:
    usage = Usage(input_tokens=1200, output_tokens=5, total_tokens=1205, cache_read_tokens=1000)
    return ChatResponse(content=[TextBlock(text="ok")], usage=usage)


class Echo:
    name = "echo"
    description = "echo"
    input_schema: typing.ClassVar[dict[str, Any]] = {"type": "object"}

    async def execute(self, input: dict[str, Any]) -> ToolResult:
        return ToolResult(output="echo")


async def test_the_cache_event_names_what_changed_between_turns() -> None:
    plan = {"session": {"orchestrator": "loop-basic", "context": "context-simple"}}
    async with AmplifierSession(plan) as session:
        coordinator = session.coordinator
        recorder = EventRecorder()
        recorder.attach(coordinator.hooks)
        await coordinator.mount("providers", ScriptedProvider(cached_answer), name="scripted")
        context = coordinator.get("context")
        await context.add_message({"role": "system", "content": "You are terse."})

        await session.run("one")
        await session.run("two")  # the history only grew: nothing to report
        assert recorder.get_events(PROVIDER_CACHE) == []

        messages = await context.get_messages()
        await context.set_messages(
            [{"role": "system", "content": "You are verbose."}, *messages[1:]]
        )
        await session.run("three")
        (event,) = [data for _, data in recorder.get_events(PROVIDER_CACHE)]
        assert event["changed"] == ["system"]
        assert event["first_changed_message"] is None
        assert (event["input_tokens"], event["cache_read_tokens"]) == (1200, 1000)
        assert event["provider"] == "scripted"

        await coordinator.mount("tools", Echo(), name="echo")
        await session.run("four")
        assert recorder.get_events(PROVIDER_CACHE)[-1][1]["changed"] == ["tools"]

        messages = await context.get_messages()
        await context.set_messages([messages[0], *messages[5:]])  # the first turns compacted away
        await session.run("five")
        last = recorder.get_events(PROVIDER_CACHE)[-1][1]
        assert (last["changed"], last["first_changed_message"]) == (["compaction"], 0)


async def test_the_apis_own_explanation_is_passed_on() -> None:
    diagnostics = {"type": "cache_miss", "reason": "tools_changed", "cache_missed_tokens": 900}

    def explained(_request: ChatRequest) -> ChatResponse:
        return ChatResponse(
            content=[TextBlock(text="ok")], metadata={"prompt_cache_diagnostics": diagnostics}
        )

    plan = {"session": {"orchestrator": "loop-basic", "context": "context-simple"}}
    async with AmplifierSession(plan) as session:
        recorder = EventRecorder()
        recorder.attach(session.coordinator.hooks)
        await session.coordinator.mount("providers", ScriptedProvider(explained), name="scripted")
        await session.run("one")
    (event,) = [data for _, data in recorder.get_events(PROVIDER_CACHE)]
    assert event["api_diagnostics"] == diagnostics
    assert event["changed"] == []
