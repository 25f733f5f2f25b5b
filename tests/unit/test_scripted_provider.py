"""ScriptedProvider: replies from a list or a function, errors, latency, requests, mount."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from amplifier_anyio.errors import ConfigError, LLMError, RateLimitError
from amplifier_anyio.models import ChatRequest, ChatResponse, Message, TextBlock, ToolCall
from amplifier_anyio.providers.scripted import ScriptedProvider, ScriptExhaustedError, mount
from amplifier_anyio.testing import MockCoordinator

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend(virtual_backend: tuple[str, dict[str, object]]) -> tuple[str, dict[str, object]]:
    return virtual_backend


def request(text: str = "hi") -> ChatRequest:
    return ChatRequest(messages=[Message(role="user", content=text)])


def reply(text: str) -> ChatResponse:
    return ChatResponse(content=[TextBlock(text=text)])


async def test_a_list_script_answers_in_order_and_records_requests() -> None:
    provider = ScriptedProvider([reply("one"), reply("two")])
    first, second = request("a"), request("b")

    answers = [await provider.complete(first), await provider.complete(second)]

    assert [a.text for a in answers] == ["one", "two"]
    assert provider.requests == [first, second]


async def test_an_exhausted_script_raises_an_llm_error() -> None:
    provider = ScriptedProvider([reply("only")], name="tiny")
    await provider.complete(request())

    with pytest.raises(ScriptExhaustedError, match="exhausted after 1 replies") as raised:
        await provider.complete(request())

    assert isinstance(raised.value, LLMError)
    assert raised.value.provider == "tiny"
    assert len(provider.requests) == 2


async def test_scripted_exceptions_are_raised_in_turn() -> None:
    error = RateLimitError("slow down", status_code=429, retryable=True)
    provider = ScriptedProvider([error, reply("after the error")])

    with pytest.raises(RateLimitError) as raised:
        await provider.complete(request())
    answer = await provider.complete(request())

    assert raised.value is error
    assert answer.text == "after the error"


async def test_a_sync_function_script_sees_each_request() -> None:
    def echo(req: ChatRequest) -> ChatResponse:
        return reply(f"you said {req.messages[-1].content}")

    provider = ScriptedProvider(echo)

    answer = await provider.complete(request("ping"))

    assert answer.text == "you said ping"


async def test_an_async_function_script_is_awaited() -> None:
    async def think(req: ChatRequest) -> ChatResponse:
        await anyio.lowlevel.checkpoint()
        return reply(f"{len(req.messages)} messages")

    provider = ScriptedProvider(think)

    answer = await provider.complete(request())

    assert answer.text == "1 messages"


async def test_a_function_may_answer_with_a_dict() -> None:
    provider = ScriptedProvider(
        lambda req: {
            "content": [{"type": "text", "text": "from a dict"}],
            "tool_calls": [{"id": "a", "name": "t", "arguments": {"x": 1}}],
        }
    )

    answer = await provider.complete(request())

    assert answer.text == "from a dict"
    assert provider.parse_tool_calls(answer) == [ToolCall(id="a", name="t", arguments={"x": 1})]


async def test_a_function_answering_something_else_is_a_type_error() -> None:
    provider = ScriptedProvider(lambda req: "just a string")

    with pytest.raises(TypeError, match="ChatResponse or a dict, not str"):
        await provider.complete(request())


async def test_latency_is_waited_per_call(anyio_backend: tuple[str, Any]) -> None:
    virtual = anyio_backend[0] == "trio"
    scale = 1.0 if virtual else 0.01  # seconds per scripted second on the real clock
    provider = ScriptedProvider([reply(t) for t in "abcd"], latency=[3 * scale, 1 * scale])
    durations = []

    for _ in range(4):
        start = anyio.current_time()
        await provider.complete(request())
        durations.append(anyio.current_time() - start)

    # The list is consumed call by call; its last value repeats.
    if virtual:
        assert durations == pytest.approx([3, 1, 1, 1])
    else:
        # (asyncio may fire a timer up to its clock resolution early)
        assert durations[0] >= 0.99 * 3 * scale
        assert min(durations[1:]) >= 0.99 * scale


async def test_latency_can_be_cancelled() -> None:
    provider = ScriptedProvider([reply("too late")], latency=3600)

    with anyio.move_on_after(0.01) as scope:
        await provider.complete(request())

    assert scope.cancelled_caught
    assert len(provider.requests) == 1


async def test_parse_tool_calls_returns_the_responses_calls() -> None:
    calls = [ToolCall(id="a", name="t"), ToolCall(id="b", name="u", arguments={"k": "v"})]
    provider = ScriptedProvider([])

    assert provider.parse_tool_calls(ChatResponse(tool_calls=calls)) == calls
    assert provider.parse_tool_calls(reply("no calls")) == []


async def test_info_and_models_describe_the_simulated_model() -> None:
    provider = ScriptedProvider([], name="sim", context_window=1000, max_output_tokens=100)

    info = provider.get_info()
    [model] = await provider.list_models()

    assert info.id == "sim"
    assert info.defaults["context_window"] == 1000
    assert info.defaults["max_output_tokens"] == 100
    assert (model.id, model.context_window, model.max_output_tokens) == ("scripted", 1000, 100)


async def test_mount_builds_the_script_from_response_dicts() -> None:
    coordinator = MockCoordinator()
    config = {
        "name": "offline",
        "priority": 3,
        "responses": [
            {"tool_calls": [{"id": "a", "name": "t", "arguments": {}}]},
            {"content": [{"type": "text", "text": "done"}]},
        ],
    }

    await mount(coordinator, config)

    provider = coordinator.get("providers", "offline")
    assert isinstance(provider, ScriptedProvider)
    assert provider.priority == 3
    first = await provider.complete(request())
    second = await provider.complete(request())
    assert provider.parse_tool_calls(first) == [ToolCall(id="a", name="t")]
    assert second.text == "done"


async def test_mount_reports_a_bad_response_as_a_config_error() -> None:
    coordinator = MockCoordinator()

    with pytest.raises(ConfigError, match="responses"):
        await mount(coordinator, {"responses": [{"content": "not a list of blocks", "usage": 5}]})


async def test_mount_with_the_default_name() -> None:
    coordinator = MockCoordinator()

    await mount(coordinator, {"responses": []})

    assert isinstance(coordinator.get("providers", "scripted"), ScriptedProvider)
