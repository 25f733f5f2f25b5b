"""Our providers called the upstream way: amplifier-core's pydantic requests in, answers
upstream's loops can read out, our errors as upstream's error classes.

The requests are built with amplifier-core 2.0.2's own models, as upstream's loops build
them from their context's dicts; our providers never import amplifier-core.
"""

from __future__ import annotations

import json
import sys
from decimal import Decimal
from typing import Any

import httpx
import pytest

from amplifier_anyio.errors import (
    ForeignModuleError,
    LLMError,
    MalformedResponseError,
    RateLimitError,
)
from amplifier_anyio.kernel._foreign import chat_request_of, watch_provider_calls
from amplifier_anyio.models import (
    ChatRequest,
    ChatResponse,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    ToolCallBlock,
    ToolResultBlock,
    Usage,
)
from amplifier_anyio.providers._upstream import UpstreamView, unwrap, upstream_error
from amplifier_anyio.providers.anthropic import AnthropicProvider
from amplifier_anyio.providers.openai import OpenAIChatProvider
from amplifier_anyio.providers.scripted import ScriptedProvider
from tiers import needs, optional

core = optional("amplifier_core")
models = optional("amplifier_core.message_models")
llm_errors = optional("amplifier_core.llm_errors")

pytestmark = [pytest.mark.anyio, *needs("amplifier_core")]

CALL = {"id": "c1", "name": "get_weather", "arguments": {"city": "Paris", "unit": None}}


def upstream_request() -> Any:
    """A second request of upstream loop-basic: its context's dicts as ``Message(**m)``,
    the assistant's blocks as it dumped them, calls as ``{id, tool, arguments}``."""
    history = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "weather?"},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "hmm", "signature": "sig", "visibility": None},
                {
                    "type": "tool_call",
                    "id": "c1",
                    "name": "get_weather",
                    "input": CALL["arguments"],
                },
            ],
            "tool_calls": [{"id": "c1", "tool": "get_weather", "arguments": CALL["arguments"]}],
            "thinking_block": {"type": "thinking", "thinking": "hmm"},  # loop-streaming's extra
        },
        {"role": "tool", "tool_call_id": "c1", "name": "get_weather", "content": "sunny"},
        {"role": "function", "tool_call_id": "c0", "content": "old style"},
    ]
    tool = models.ToolSpec(name="get_weather", parameters={"type": "object"}, description="d")
    return models.ChatRequest(
        messages=[models.Message(**m) for m in history],
        tools=[tool],
        reasoning_effort="low",
        max_output_tokens=300,
    )


def test_an_upstream_request_becomes_ours() -> None:
    request = chat_request_of(upstream_request(), origin="provider 'x'")

    system, user, assistant, tool, function = request.messages
    assert (system.role, system.content, user.content) == ("system", "be brief", "weather?")
    assert assistant.content == [
        ThinkingBlock(thinking="hmm", signature="sig"),
        ToolCallBlock(id="c1", name="get_weather", input=CALL["arguments"]),
    ]
    assert assistant.tool_calls == [ToolCall(**CALL)]  # "tool" is our "name"; None kept
    assert (tool.role, tool.tool_call_id, tool.content) == ("tool", "c1", "sunny")
    assert (function.role, function.tool_call_id) == ("tool", "c0")
    assert [t.name for t in request.tools or ()] == ["get_weather"]
    assert (request.reasoning_effort, request.max_output_tokens, request.stream) == (
        "low",
        300,
        False,
    )


def test_a_dict_request_of_upstreams_shape_is_accepted_too() -> None:
    request = chat_request_of(
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]},
        origin="provider 'x'",
    )
    assert request.messages == [Message(role="user", content=[TextBlock(text="hi")])]


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (42, "42, not a chat request"),
        ({"model": "x"}, "(no messages)"),
        ({"messages": [{"role": "robot", "content": "hi"}]}, "role: must be one of"),
    ],
)
def test_what_is_no_request_is_an_error_naming_the_provider(value: Any, problem: str) -> None:
    with pytest.raises(ForeignModuleError, match="provider 'x'") as caught:
        chat_request_of(value, origin="provider 'x'")
    assert problem in str(caught.value)


def answered(body: dict[str, Any], bodies: list[dict[str, Any]]) -> OpenAIChatProvider:
    """An OpenAI provider whose server answers ``body`` and records what it was sent."""

    def server(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        return httpx.Response(200, json=body)

    return OpenAIChatProvider(
        {"api_key": "sk-test", "model": "gpt-4o", "max_retries": 0},
        transport=httpx.MockTransport(server),
    )


TOOL_ANSWER = {
    "id": "chatcmpl-1",
    "model": "gpt-4o",
    "choices": [
        {
            "index": 0,
            "finish_reason": "tool_calls",
            "message": {
                "role": "assistant",
                "content": "checking",
                "tool_calls": [
                    {
                        "id": "c2",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
                    }
                ],
            },
        }
    ],
    "usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10},
}


async def test_the_openai_provider_answers_an_upstream_request_in_upstreams_shape() -> None:
    bodies: list[dict[str, Any]] = []
    provider = answered(TOOL_ANSWER, bodies)
    try:
        response = await provider.complete(upstream_request(), extended_thinking=True)
    finally:
        await provider.http.aclose()

    wire = bodies[0]
    assert [m["role"] for m in wire["messages"]] == ["system", "user", "assistant", "tool", "tool"]
    assert wire["messages"][2]["tool_calls"][0]["function"]["name"] == "get_weather"
    # read as upstream's loops read a pydantic ChatResponse
    assert isinstance(response, UpstreamView)
    assert [b.type for b in response.content] == ["text", "tool_call"]
    assert response.content[0].text == "checking"
    assert [(c.id, c.name, c.arguments) for c in response.tool_calls] == [
        ("c2", "get_weather", {"city": "Oslo"})
    ]
    assert response.usage.model_dump()["total_tokens"] == 10
    assert response.metadata["response_id"] == "chatcmpl-1"
    assert response.degradation is None
    assert getattr(response, "content_blocks", None) is None
    assert provider.parse_tool_calls(response)[0].name == "get_weather"
    # amplifier-core's own model accepts what it dumps
    upstream = models.ChatResponse.model_validate(response.model_dump())
    assert upstream.content[1].input == {"city": "Oslo"}
    assert upstream.usage.input_tokens == 7


async def test_our_request_still_gets_our_response() -> None:
    provider = answered(TOOL_ANSWER, [])
    try:
        response = await provider.complete(
            ChatRequest(messages=[Message(role="user", content="x")])
        )
    finally:
        await provider.http.aclose()
    assert type(response) is ChatResponse


def test_our_providers_have_no_stream_attribute() -> None:
    """Upstream loop-streaming takes its path that never runs tool calls when a provider
    has ``stream``: ours stream through ``open_stream`` only."""
    openai = OpenAIChatProvider({"api_key": "sk-test"})
    anthropic = AnthropicProvider({"api_key": "sk-test"})
    for provider in (openai, anthropic, ScriptedProvider([])):
        assert not hasattr(provider, "stream")
    assert callable(openai.open_stream)
    assert callable(anthropic.open_stream)


async def test_a_view_dumps_every_field_like_pydantic() -> None:
    response = ChatResponse(
        content=[ThinkingBlock(thinking="t", signature="s"), TextBlock(text="hi")],
        usage=Usage(input_tokens=1, cost_usd=Decimal("0.25")),
        finish_reason="stop",
    )
    view = UpstreamView(response)

    assert view.model_dump()["usage"] == {
        "input_tokens": 1,
        "output_tokens": 0,
        "total_tokens": 0,
        "reasoning_tokens": None,
        "cache_read_tokens": None,
        "cache_write_tokens": None,
        "cost_usd": Decimal("0.25"),
    }
    assert view.model_dump(mode="json")["usage"]["cost_usd"] == "0.25"  # pydantic's JSON form
    upstream = models.ChatResponse.model_validate(view.model_dump())
    assert upstream.usage.cost_usd == Decimal("0.25")
    assert view.content[0].model_dump(exclude_none=True) == {
        "type": "thinking",
        "thinking": "t",
        "signature": "s",
    }
    dumped = json.loads(view.model_dump_json(exclude_none=True))
    assert (dumped["finish_reason"], dumped["usage"]["cost_usd"]) == ("stop", "0.25")
    assert view.text == "hi"  # thinking never in the text
    assert unwrap(view) is response
    assert view == UpstreamView(response)
    with pytest.raises(AttributeError, match="read-only"):
        view.finish_reason = "x"


async def test_the_scripted_provider_records_the_request_converted() -> None:
    reply = ChatResponse(content=[ToolResultBlock(tool_call_id="c1", output="x")])
    provider = ScriptedProvider([reply])
    response = await provider.complete(upstream_request())

    assert isinstance(provider.requests[0], ChatRequest)
    assert provider.requests[0].messages[2].tool_calls == [ToolCall(**CALL)]
    assert unwrap(response) is reply


async def test_an_error_for_an_upstream_caller_is_upstreams_class_too() -> None:
    failure = RateLimitError("slow down", provider="scripted", status_code=429, retryable=True)
    provider = ScriptedProvider([failure])

    with watch_provider_calls() as calls, pytest.raises(LLMError) as caught:
        await provider.complete(upstream_request())

    error = caught.value
    assert isinstance(error, RateLimitError)
    assert isinstance(error, llm_errors.RateLimitError)
    assert (error.status_code, error.retryable, error.delay_multiplier) == (429, True, 1.0)
    assert str(error) == "slow down"
    assert error.__cause__ is failure
    assert calls.failure is failure  # the session sees the provider's own error


async def test_our_caller_gets_our_error_unchanged() -> None:
    failure = RateLimitError("slow down", provider="scripted")
    provider = ScriptedProvider([failure])
    with pytest.raises(RateLimitError) as caught:
        await provider.complete(ChatRequest(messages=[Message(role="user", content="x")]))
    assert caught.value is failure


def test_without_amplifier_core_loaded_the_error_is_ours(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "amplifier_core.llm_errors", raising=False)
    failure = RateLimitError("slow down")
    assert upstream_error(failure) is failure


def test_an_error_of_ours_only_becomes_upstreams_base_class() -> None:
    error = upstream_error(MalformedResponseError("not JSON", provider="p"))
    assert isinstance(error, MalformedResponseError)
    assert isinstance(error, llm_errors.LLMError)
    assert type(error).__name__ == "MalformedResponseError"
