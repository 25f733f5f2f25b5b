"""provider-openai with ``api: responses``: the Responses API against SDK-written shapes.

Request bodies are validated against ``openai.types.responses`` params; response bodies and
stream events are written through the SDK's own models (``tests/_responses_wire.py``), and
every stream is also run through the SDK's accumulator, whose text, reasoning and tool
calls ours must equal.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import httpx
import pytest

from _responses_wire import (
    function_call,
    message,
    reasoning,
    response_body,
    sdk_calls,
    sdk_final,
    sdk_reasoning,
    sse,
    stream_events,
    validate_request,
)
from amplifier_anyio.errors import (
    ConfigError,
    InvalidRequestError,
    ProviderUnavailableError,
    RateLimitError,
    StreamError,
)
from amplifier_anyio.models import (
    ChatRequest,
    ImageBlock,
    Message,
    ReasoningBlock,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    ToolCallBlock,
    ToolSpec,
    structure,
    unstructure,
)
from amplifier_anyio.providers._http import INVALID_ARGUMENTS_KEY
from amplifier_anyio.providers.openai import OpenAIChatProvider
from amplifier_anyio.runtime import assistant_message

pytestmark = pytest.mark.anyio

KEY = "sk-proj-RESPONSES-abcdefghijklmnop"
BASE = "https://llm.example/v1"
WEATHER = ToolSpec(
    name="get_weather",
    description="Current weather for a city",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)


class Server:
    """A MockTransport handler: answers in order, records the JSON bodies."""

    def __init__(self, *answers: httpx.Response) -> None:
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []

    @property
    def bodies(self) -> list[Any]:
        return [json.loads(r.content) for r in self.requests]

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return self.answers.pop(0)


def provider(server: Server, **config: Any) -> OpenAIChatProvider:
    cfg = {"api_key": KEY, "base_url": BASE, "model": "gpt-5", "api": "responses"}
    return OpenAIChatProvider(
        {**cfg, "max_retries": 0, **config}, transport=httpx.MockTransport(server)
    )


def streamed(events: list[dict[str, Any]]) -> httpx.Response:
    return httpx.Response(200, content=sse(events), headers={"content-type": "text/event-stream"})


async def run_stream(p: OpenAIChatProvider, request: ChatRequest) -> list[dict[str, Any]]:
    async with p.open_stream(request) as events:
        return [e async for e in events]


def history() -> list[Message]:
    """A conversation with every kind of block the mapping has to carry."""
    return [
        Message(role="system", content="You are terse."),
        Message(
            role="user",
            content=[
                TextBlock(text="Weather in Paris? See the photo."),
                ImageBlock(source={"type": "url", "url": "https://example.com/paris.png"}),
            ],
        ),
        Message(
            role="assistant",
            content=[
                ReasoningBlock(
                    id="rs_7",
                    summary=[{"type": "summary_text", "text": "Need the weather tool."}],
                    encrypted_content="gAAAA-secret",
                ),
                ThinkingBlock(thinking="another provider's thinking", signature="sig"),
                TextBlock(text="Checking."),
                ToolCallBlock(id="call_1", name="get_weather", input={"city": "Paris"}),
            ],
            tool_calls=[ToolCall(id="call_1", name="get_weather", arguments={"city": "Paris"})],
        ),
        Message(role="tool", tool_call_id="call_1", content='{"temp": 18}'),
        Message(role="user", content="Thanks. And tomorrow?"),
    ]


# -- requests --------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_request_bodies_validate_against_the_sdk_params(stream: bool) -> None:
    p = provider(Server())
    request = ChatRequest(
        messages=history(),
        tools=[WEATHER],
        tool_choice="get_weather",
        max_output_tokens=500,
        reasoning_effort="low",
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "w", "schema": {"type": "object"}, "strict": True},
        },
    )
    body = p.build_payload(request, stream=stream)
    validate_request(body)
    assert body["instructions"] == "You are terse."
    assert body["store"] is False
    assert body["include"] == ["reasoning.encrypted_content"]
    assert body["reasoning"] == {"effort": "low", "summary": "auto"}
    assert body["tool_choice"] == {"type": "function", "name": "get_weather"}
    assert body["text"]["format"]["type"] == "json_schema"
    kinds = [item["type"] for item in body["input"]]
    # reasoning goes back first and unchanged, before the call it led to; thinking never
    assert kinds == [
        "message",
        "reasoning",
        "message",
        "function_call",
        "function_call_output",
        "message",
    ]
    assert body["input"][1] == {
        "type": "reasoning",
        "id": "rs_7",
        "summary": [{"type": "summary_text", "text": "Need the weather tool."}],
        "encrypted_content": "gAAAA-secret",
    }
    assert body["input"][3] == {
        "type": "function_call",
        "call_id": "call_1",
        "name": "get_weather",
        "arguments": '{"city": "Paris"}',
    }
    assert body["input"][0]["content"][1]["type"] == "input_image"


def test_reasoning_without_encrypted_content_is_not_sent_to_a_stateless_server() -> None:
    # store: false — the server kept nothing, an id alone would be a 404
    stored_only = Message(
        role="assistant",
        content=[ReasoningBlock(id="rs_1", summary=[]), TextBlock(text="ok")],
    )
    request = ChatRequest(messages=[Message(role="user", content="hi"), stored_only])
    stateless = provider(Server()).build_payload(request, stream=False)
    assert [i["type"] for i in stateless["input"]] == ["message", "message"]
    stored = provider(Server(), store=True).build_payload(request, stream=False)
    validate_request(stored)
    assert stored["input"][1] == {"type": "reasoning", "id": "rs_1", "summary": []}
    assert "include" not in stored


def test_a_call_with_unusable_arguments_goes_back_as_the_model_wrote_it() -> None:
    bad = {INVALID_ARGUMENTS_KEY: {"raw": '{"city": "Par', "error": "invalid JSON"}}
    call = Message(role="assistant", content=[ToolCallBlock(id="c", name="get_weather", input=bad)])
    request = ChatRequest(messages=[Message(role="user", content="x"), call])
    body = provider(Server()).build_payload(request, stream=False)
    validate_request(body)
    assert body["input"][1]["arguments"] == '{"city": "Par'


def test_an_unknown_api_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="api: expected one of chat, responses"):
        provider(Server(), api="assistants")


# -- complete() ------------------------------------------------------------------------


async def test_complete_parses_reasoning_text_calls_and_usage() -> None:
    body = response_body(
        [
            reasoning("Look it up."),
            message("Let me check."),
            function_call("call_9", "get_weather", '{"city":"Oslo"}'),
        ]
    )
    server = Server(httpx.Response(200, json=body))
    p = provider(server, pricing={"gpt-5": {"input_per_mtok": 1.25, "output_per_mtok": 10}})
    response = await p.complete(ChatRequest(messages=[Message(role="user", content="Oslo?")]))
    assert server.requests[0].url.path == "/v1/responses"
    validate_request(server.bodies[0])
    first = response.content[0]
    assert isinstance(first, ReasoningBlock)
    assert (first.id, first.encrypted_content) == ("rs_1", "gAAAA-enc")
    assert first.summary == [{"type": "summary_text", "text": "Look it up."}]
    assert response.text == "Let me check."
    assert response.tool_calls == [
        ToolCall(id="call_9", name="get_weather", arguments={"city": "Oslo"})
    ]
    assert response.finish_reason == "tool_calls"
    usage = response.usage
    assert usage is not None
    assert (usage.input_tokens, usage.output_tokens, usage.total_tokens) == (120, 30, 150)
    assert (usage.cache_read_tokens, usage.cache_write_tokens, usage.reasoning_tokens) == (
        100,
        0,
        12,
    )
    # 20 fresh input tokens and 100 cached ones at the input price, 30 output tokens
    assert usage.cost_usd == Decimal("0.00045")
    assert response.metadata == {"response_id": "resp_1", "model": "gpt-5-2026-06-01"}


async def test_the_next_request_carries_the_answer_back_unchanged() -> None:
    first = response_body(
        [reasoning("Plan."), function_call("call_2", "get_weather", '{"city":"Rome"}')]
    )
    server = Server(
        httpx.Response(200, json=first),
        httpx.Response(200, json=response_body([message("Sunny.")])),
    )
    p = provider(server)
    user = Message(role="user", content="Rome?")
    response = await p.complete(ChatRequest(messages=[user]))
    stored = assistant_message(response, response.tool_calls or [])
    result = Message(role="tool", tool_call_id="call_2", content="sunny")
    again = await p.complete(ChatRequest(messages=[user, structure(stored, Message), result]))
    assert again.text == "Sunny."
    sent = server.bodies[1]["input"]
    validate_request(server.bodies[1])
    assert sent[1] == {
        "type": "reasoning",
        "id": "rs_1",
        "summary": [{"type": "summary_text", "text": "Plan."}],
        "encrypted_content": "gAAAA-enc",
    }
    assert sent[2]["call_id"] == "call_2"
    assert sent[3]["type"] == "function_call_output"


@pytest.mark.parametrize(
    ("status", "details", "finish"),
    [
        ("incomplete", {"reason": "max_output_tokens"}, "length"),
        ("incomplete", {"reason": "content_filter"}, "content_filter"),
    ],
)
async def test_incomplete_answers_say_why(
    status: str, details: dict[str, str], finish: str
) -> None:
    body = response_body([message("Partial")], status=status, incomplete_details=details)
    p = provider(Server(httpx.Response(200, json=body)))
    response = await p.complete(ChatRequest(messages=[Message(role="user", content="x")]))
    assert response.finish_reason == finish
    assert response.text == "Partial"


async def test_a_call_cut_by_the_token_limit_is_marked_not_run() -> None:
    cut = function_call("call_c", "get_weather", '{"city": "Li')
    body = response_body(
        [cut], status="incomplete", incomplete_details={"reason": "max_output_tokens"}
    )
    p = provider(Server(httpx.Response(200, json=body)))
    response = await p.complete(ChatRequest(messages=[Message(role="user", content="x")]))
    (call,) = response.tool_calls or []
    assert INVALID_ARGUMENTS_KEY in call.arguments
    assert "output token limit" in call.arguments[INVALID_ARGUMENTS_KEY]["error"]


async def test_a_refusal_is_text_with_finish_reason_refusal() -> None:
    refusal = {
        "type": "message",
        "id": "msg_r",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "refusal", "refusal": "I can't help with that."}],
    }
    p = provider(Server(httpx.Response(200, json=response_body([refusal]))))
    response = await p.complete(ChatRequest(messages=[Message(role="user", content="x")]))
    assert (response.text, response.finish_reason) == ("I can't help with that.", "refusal")


async def test_a_failed_response_raises_its_mapped_error() -> None:
    body = response_body(
        [], status="failed", error={"code": "server_error", "message": "The server had an error"}
    )
    p = provider(Server(httpx.Response(200, json=body)))
    with pytest.raises(ProviderUnavailableError, match="The server had an error"):
        await p.complete(ChatRequest(messages=[Message(role="user", content="x")]))


async def test_http_errors_map_as_for_chat() -> None:
    limited = httpx.Response(
        429, json={"error": {"message": "Rate limit reached", "type": "requests"}}
    )
    p = provider(Server(limited))
    with pytest.raises(RateLimitError):
        await p.complete(ChatRequest(messages=[Message(role="user", content="x")]))
    bad = httpx.Response(
        400, json={"error": {"message": "Unknown parameter", "type": "invalid_request_error"}}
    )
    with pytest.raises(InvalidRequestError):
        await provider(Server(bad)).complete(
            ChatRequest(messages=[Message(role="user", content="x")])
        )


async def test_built_in_tool_items_are_kept_and_sent_back_verbatim() -> None:
    search = {
        "type": "web_search_call",
        "id": "ws_1",
        "status": "completed",
        "action": {"type": "search", "query": "paris"},
    }
    first = response_body([search, message("Found it.")])
    server = Server(
        httpx.Response(200, json=first), httpx.Response(200, json=response_body([message("ok")]))
    )
    p = provider(server)
    user = Message(role="user", content="search")
    response = await p.complete(ChatRequest(messages=[user]))
    stored = Message(role="assistant", content=response.content)
    await p.complete(ChatRequest(messages=[user, stored, Message(role="user", content="more")]))
    validate_request(server.bodies[1])
    assert server.bodies[1]["input"][1]["type"] == "web_search_call"
    assert server.bodies[1]["input"][1]["id"] == "ws_1"


# -- previous_response_id ----------------------------------------------------------------


async def test_previous_response_id_sends_only_what_follows_the_last_answer() -> None:
    answered = Message(role="assistant", content="Hello.", metadata={"response_id": "resp_41"})
    messages = [
        Message(role="system", content="Be brief."),
        Message(role="user", content="Hi"),
        answered,
        Message(role="user", content="Again"),
    ]
    server = Server(httpx.Response(200, json=response_body([message("Hi again.")])))
    p = provider(server, previous_response_id=True)
    await p.complete(ChatRequest(messages=messages))
    body = server.bodies[0]
    validate_request(body)
    assert body["previous_response_id"] == "resp_41"
    assert body["store"] is True
    assert body["instructions"] == "Be brief."  # instructions are never carried over
    assert body["input"] == [{"type": "message", "role": "user", "content": "Again"}]


async def test_an_expired_previous_response_id_falls_back_to_the_history_once() -> None:
    answered = Message(role="assistant", content="Hello.", metadata={"response_id": "resp_old"})
    gone = httpx.Response(
        404,
        json={"error": {"message": "Previous response not found", "type": "invalid_request_error"}},
    )
    server = Server(gone, httpx.Response(200, json=response_body([message("ok")])))
    p = provider(server, previous_response_id=True)
    messages = [Message(role="user", content="Hi"), answered, Message(role="user", content="?")]
    response = await p.complete(ChatRequest(messages=messages))
    assert response.text == "ok"
    assert "previous_response_id" not in server.bodies[1]
    assert len(server.bodies[1]["input"]) == 3


# -- streaming ---------------------------------------------------------------------------


STREAM_CASES = {
    "text": [message("The weather in Paris is sunny and 18 degrees.")],
    "reasoning and parallel calls": [
        reasoning("Two cities: call the tool twice."),
        function_call("call_a", "get_weather", '{"city": "Paris", "unit": "celsius"}'),
        function_call("call_b", "get_weather", '{"city": "Rome", "unit": "celsius"}'),
    ],
    "text then a call": [
        message("Let me look that up for you."),
        function_call("call_c", "get_weather", '{"city": "Zürich \\u2028 Mitte"}'),
    ],
}


@pytest.mark.parametrize("final_output", [True, False], ids=["final-output", "no-final-output"])
@pytest.mark.parametrize("case", sorted(STREAM_CASES))
async def test_streams_parse_to_what_the_sdk_accumulates(case: str, final_output: bool) -> None:
    body = response_body(STREAM_CASES[case])
    expected = sdk_final(stream_events(body))
    events = stream_events(body, final_output=final_output)
    p = provider(Server(streamed(events)))
    ours = await run_stream(p, ChatRequest(messages=[Message(role="user", content="x")]))
    response = ours[-1]["response"]
    assert response.text == expected.output_text
    reasoning_texts = [
        part["text"]
        for b in response.content
        if isinstance(b, ReasoningBlock)
        for part in b.summary
    ]
    assert reasoning_texts == sdk_reasoning(expected)
    calls = [(c.id, c.name, c.arguments) for c in response.tool_calls or []]
    assert calls == sdk_calls(expected)
    assert response.usage is not None
    assert response.usage.cache_read_tokens == 100


async def test_a_stream_relays_tool_arguments_as_they_form() -> None:
    arguments = '{"city": "Paris", "unit": "celsius"}'
    events = stream_events(
        response_body([function_call("call_a", "get_weather", arguments)]), piece=5
    )
    p = provider(Server(streamed(events)))
    ours = await run_stream(p, ChatRequest(messages=[Message(role="user", content="x")]))
    start = next(e for e in ours if e["type"] == "content_block:start")
    assert (start["block_type"], start["id"], start["name"]) == (
        "tool_call",
        "call_a",
        "get_weather",
    )
    deltas = [e["delta"] for e in ours if e["type"] == "content_block:delta"]
    assert len(deltas) > 3
    assert "".join(deltas) == arguments
    assert all(e["block_type"] == "tool_call" for e in ours if e["type"] == "content_block:delta")
    end = next(e for e in ours if e["type"] == "content_block:end")
    assert unstructure(end["block"])["input"] == {"city": "Paris", "unit": "celsius"}


async def test_reasoning_summaries_stream_as_thinking_deltas() -> None:
    events = stream_events(response_body([reasoning("Think it through."), message("Done.")]))
    ours = await run_stream(
        provider(Server(streamed(events))),
        ChatRequest(messages=[Message(role="user", content="x")]),
    )
    thinking = "".join(e["delta"] for e in ours if e["type"] == "thinking:delta")
    assert thinking == "Think it through."
    kinds = [e["block_type"] for e in ours if e["type"] == "content_block:start"]
    assert kinds == ["thinking", "text"]


async def test_a_failed_stream_raises_its_error() -> None:
    body = response_body([message("Hel")])
    events = stream_events(body)[:4]
    failed = response_body(
        [], status="failed", error={"code": "rate_limit_exceeded", "message": "Slow down"}
    )
    events.append({"type": "response.failed", "sequence_number": 99, "response": failed})
    p = provider(Server(streamed(events)))
    with pytest.raises(RateLimitError, match="Slow down"):
        await run_stream(p, ChatRequest(messages=[Message(role="user", content="x")]))


async def test_an_error_event_raises_its_error() -> None:
    events = [
        *stream_events(response_body([message("x")]))[:2],
        {"type": "error", "sequence_number": 2, "code": "server_error", "message": "boom"},
    ]
    p = provider(Server(streamed(events)))
    with pytest.raises(ProviderUnavailableError, match="boom"):
        await run_stream(p, ChatRequest(messages=[Message(role="user", content="x")]))


async def test_a_stream_cut_before_completion_is_an_error() -> None:
    events = stream_events(response_body([message("Hello there")]))[:-1]
    p = provider(Server(streamed(events)))
    with pytest.raises(StreamError, match=r"before response\.completed"):
        await run_stream(p, ChatRequest(messages=[Message(role="user", content="x")]))


async def test_prompt_cache_diagnostics_are_asked_for_and_kept() -> None:
    diagnostics = {"type": "cache_miss", "reason": "tools_changed", "cache_missed_tokens": 900}
    body = response_body([message("ok")], prompt_cache_diagnostics=diagnostics)
    server = Server(httpx.Response(200, json=body))
    p = provider(server, prompt_cache_diagnostics=True, prompt_cache_key="agent-7")
    answered = Message(role="assistant", content="before", metadata={"response_id": "resp_9"})
    request = ChatRequest(
        messages=[Message(role="user", content="a"), answered, Message(role="user", content="b")]
    )
    response = await p.complete(request)
    validate_request(server.bodies[0])
    assert server.bodies[0]["prompt_cache_options"] == {"comparison_response_id": "resp_9"}
    assert server.bodies[0]["prompt_cache_key"] == "agent-7"
    assert (response.metadata or {})["prompt_cache_diagnostics"]["reason"] == "tools_changed"
