"""AnthropicProvider against a MockTransport serving Messages API payloads."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import anyio
import anyio.lowlevel
import httpx
import pytest

from amplifier_anyio.errors import (
    AuthenticationError,
    ContextLengthError,
    LLMError,
    ProviderUnavailableError,
)
from amplifier_anyio.models import (
    ChatRequest,
    Message,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    ToolCallBlock,
    ToolSpec,
    Usage,
)
from amplifier_anyio.providers.anthropic import AnthropicProvider, mount
from amplifier_anyio.testing import EventRecorder, MockCoordinator

pytestmark = pytest.mark.anyio

KEY = "sk-ant-api03-TESTKEY-abcdefghijklmnop"
BASE = "https://anthropic.example"
MODEL = "claude-sonnet-4-5-20250929"
SIGNATURE = "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds6fl"
WEATHER = ToolSpec(
    name="get_weather",
    description="Current weather for a city",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)


# -- wire payloads as the Messages API reference shows them ---------------------------


def message(content: list[dict[str, Any]], stop_reason: str, **usage: int) -> dict[str, Any]:
    return {
        "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {
            "input_tokens": usage.get("input_tokens", 12),
            "cache_creation_input_tokens": usage.get("cache_creation_input_tokens", 0),
            "cache_read_input_tokens": usage.get("cache_read_input_tokens", 0),
            "output_tokens": usage.get("output_tokens", 6),
            "service_tier": "standard",
        },
    }


def tool_use(tid: str, city: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": tid, "name": "get_weather", "input": {"city": city}}


def sse(*events: dict[str, Any]) -> bytes:
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events).encode()


def block_start(index: int, block: dict[str, Any]) -> dict[str, Any]:
    return {"type": "content_block_start", "index": index, "content_block": block}


def block_delta(index: int, delta: dict[str, Any]) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": index, "delta": delta}


def block_stop(index: int) -> dict[str, Any]:
    return {"type": "content_block_stop", "index": index}


MESSAGE_START = {
    "type": "message_start",
    "message": {
        "id": "msg_01Stream",
        "type": "message",
        "role": "assistant",
        "content": [],
        "model": MODEL,
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {
            "input_tokens": 472,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 2048,
            "output_tokens": 2,
        },
    },
}


class Body(httpx.AsyncByteStream):
    """A response body sent in small pieces; can hang after them; records closing."""

    def __init__(self, data: bytes, *, piece: int = 11, hang: bool = False) -> None:
        self.pieces = [data[i : i + piece] for i in range(0, len(data), piece)]
        self.hang = hang
        self.closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for piece in self.pieces:
            await anyio.lowlevel.checkpoint()
            yield piece
        if self.hang:
            await anyio.sleep_forever()

    async def aclose(self) -> None:
        self.closed = True


class Server:
    """A MockTransport handler: answers in order, records requests and their JSON bodies."""

    def __init__(self, *answers: httpx.Response) -> None:
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []

    @property
    def bodies(self) -> list[Any]:
        return [json.loads(r.content) if r.content else None for r in self.requests]

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return self.answers.pop(0)


def provider(server: Server, hooks: Any = None, **config: Any) -> AnthropicProvider:
    async def no_wait(delay: float) -> None:
        await anyio.lowlevel.checkpoint()

    cfg = {"api_key": KEY, "base_url": BASE, "model": MODEL, **config}
    return AnthropicProvider(cfg, hooks=hooks, transport=httpx.MockTransport(server), sleep=no_wait)


def api_error(status: int, kind: str, text: str) -> httpx.Response:
    return httpx.Response(status, json={"type": "error", "error": {"type": kind, "message": text}})


def user(text: str) -> Message:
    return Message(role="user", content=text)


async def drain(p: AnthropicProvider, request: ChatRequest) -> list[dict[str, Any]]:
    async with p.open_stream(request) as events:
        return [e async for e in events]


# -- complete() -----------------------------------------------------------------------


async def test_plain_answer_request_and_response() -> None:
    answer = message(
        [{"type": "text", "text": "Hello!"}],
        "end_turn",
        input_tokens=12,
        cache_creation_input_tokens=100,
        cache_read_input_tokens=2000,
        output_tokens=6,
    )
    server = Server(httpx.Response(200, json=answer))
    p = provider(server, temperature=0.3, max_tokens=1024)
    request = ChatRequest(
        messages=[
            Message(role="system", content="Be brief."),
            Message(role="developer", content="Answer in English."),
            user("Hi"),
        ]
    )
    response = await p.complete(request)

    sent = server.requests[0]
    assert str(sent.url) == f"{BASE}/v1/messages"
    assert sent.headers["x-api-key"] == KEY
    assert sent.headers["anthropic-version"] == "2023-06-01"
    assert server.bodies[0] == {
        "model": MODEL,
        "max_tokens": 1024,
        "system": [
            {
                "type": "text",
                "text": "Be brief.\n\nAnswer in English.",
                "cache_control": {"type": "ephemeral"},
            }
        ],
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": "Hi", "cache_control": {"type": "ephemeral"}}],
            }
        ],
        "temperature": 0.3,
    }
    assert response.content == [TextBlock(text="Hello!")]
    assert response.finish_reason == "end_turn"
    assert response.usage == Usage(
        input_tokens=2112,
        output_tokens=6,
        total_tokens=2118,
        cache_read_tokens=2000,
        cache_write_tokens=100,
    )
    assert response.metadata == {"model": MODEL, "response_id": "msg_01XFDUDYJgAACzvnptvVoYEL"}
    await p.http.aclose()


async def test_two_round_exchange_keeps_signed_thinking_and_groups_results() -> None:
    round1 = message(
        [
            {"type": "thinking", "thinking": "I need both cities.", "signature": SIGNATURE},
            {"type": "text", "text": "I'll check both."},
            tool_use("toolu_01A", "Paris"),
            tool_use("toolu_01B", "Oslo"),
        ],
        "tool_use",
    )
    server = Server(
        httpx.Response(200, json=round1),
        httpx.Response(
            200, json=message([{"type": "text", "text": "Paris 18C, Oslo 9C."}], "end_turn")
        ),
    )
    p = provider(
        server,
        extended_thinking=True,
        thinking_budget_tokens=2048,
        max_tokens=4000,
        prompt_caching=False,
    )
    history = [Message(role="system", content="Weather bot."), user("Paris and Oslo?")]
    first = await p.complete(ChatRequest(messages=history, tools=[WEATHER], temperature=0.5))
    assert first.content[0] == ThinkingBlock(
        thinking="I need both cities.", signature=SIGNATURE, visibility="internal"
    )
    assert first.text == "I'll check both."
    assert p.parse_tool_calls(first) == [
        ToolCall(id="toolu_01A", name="get_weather", arguments={"city": "Paris"}),
        ToolCall(id="toolu_01B", name="get_weather", arguments={"city": "Oslo"}),
    ]
    assert server.bodies[0]["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert server.bodies[0]["max_tokens"] == 4000  # the configured limit, never raised
    assert "temperature" not in server.bodies[0]  # rejected together with thinking

    history += [
        Message(role="assistant", content=first.content, tool_calls=first.tool_calls),
        Message(role="tool", tool_call_id="toolu_01A", content='{"temp_c": 18}'),
        Message(role="tool", tool_call_id="toolu_01B", content='{"temp_c": 9}'),
    ]
    second = await p.complete(ChatRequest(messages=history, tools=[WEATHER]))
    assert second.text == "Paris 18C, Oslo 9C."
    body = server.bodies[1]
    assert body["system"] == "Weather bot."
    assert body["tools"] == [
        {
            "name": "get_weather",
            "input_schema": WEATHER.parameters,
            "description": "Current weather for a city",
        }
    ]
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Paris and Oslo?"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "I need both cities.", "signature": SIGNATURE},
                {"type": "text", "text": "I'll check both."},
                {
                    "type": "tool_use",
                    "id": "toolu_01A",
                    "name": "get_weather",
                    "input": {"city": "Paris"},
                },
                {
                    "type": "tool_use",
                    "id": "toolu_01B",
                    "name": "get_weather",
                    "input": {"city": "Oslo"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_01A", "content": '{"temp_c": 18}'},
                {"type": "tool_result", "tool_use_id": "toolu_01B", "content": '{"temp_c": 9}'},
            ],
        },
    ]
    await p.http.aclose()


async def test_redacted_thinking_travels_back_as_is() -> None:
    redacted = {
        "type": "redacted_thinking",
        "data": "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIw",
    }
    server = Server(
        httpx.Response(
            200, json=message([redacted, {"type": "text", "text": "Done."}], "end_turn")
        ),
        httpx.Response(200, json=message([{"type": "text", "text": "ok"}], "end_turn")),
    )
    p = provider(server)
    first = await p.complete(ChatRequest(messages=[user("x")]))
    assert first.content[0] == RedactedThinkingBlock(data=redacted["data"], visibility="internal")
    history = [user("x"), Message(role="assistant", content=first.content), user("y")]
    await p.complete(ChatRequest(messages=history))
    assert server.bodies[1]["messages"][1] == {
        "role": "assistant",
        "content": [redacted, {"type": "text", "text": "Done."}],
    }
    await p.http.aclose()


async def test_tool_choice_and_cached_tool_definitions() -> None:
    server = Server(httpx.Response(200, json=message([tool_use("toolu_1", "Rome")], "tool_use")))
    p = provider(server)
    await p.complete(ChatRequest(messages=[user("Rome?")], tools=[WEATHER], tool_choice="required"))
    body = server.bodies[0]
    assert body["tool_choice"] == {"type": "any"}
    assert body["tools"][-1]["cache_control"] == {"type": "ephemeral"}
    await p.http.aclose()


# -- errors ---------------------------------------------------------------------------


async def test_overloaded_is_retried_then_answers() -> None:
    server = Server(
        api_error(529, "overloaded_error", "Overloaded"),
        httpx.Response(200, json=message([{"type": "text", "text": "hi"}], "end_turn")),
    )
    hooks = EventRecorder()
    p = provider(server, hooks, retry_jitter=0.0)
    response = await p.complete(ChatRequest(messages=[user("x")]))
    assert response.text == "hi"
    [(_, retry)] = hooks.get_events("provider:retry")
    assert (retry["provider"], retry["attempt"], retry["delay"], retry["status_code"]) == (
        "anthropic",
        1,
        1.0,
        529,
    )
    assert retry["error"]["type"] == "ProviderUnavailableError"
    await p.http.aclose()


async def test_prompt_too_long_is_a_context_length_error() -> None:
    server = Server(
        api_error(
            400, "invalid_request_error", "prompt is too long: 208310 tokens > 200000 maximum"
        )
    )
    p = provider(server)
    with pytest.raises(ContextLengthError):
        await p.complete(ChatRequest(messages=[user("x")]))
    await p.http.aclose()


async def test_auth_error_never_shows_the_key() -> None:
    server = Server(api_error(401, "authentication_error", f"invalid x-api-key {KEY}"))
    p = provider(server)
    with pytest.raises(AuthenticationError) as info:
        await p.complete(ChatRequest(messages=[user("x")]))
    for text in (str(info.value), repr(info.value), repr(info.value.body), repr(p), repr(p.http)):
        assert KEY not in text
    assert info.value.status_code == 401
    await p.http.aclose()


# -- streaming ------------------------------------------------------------------------


def streamed_answer() -> bytes:
    return sse(
        MESSAGE_START,
        block_start(0, {"type": "thinking", "thinking": "", "signature": ""}),
        block_delta(0, {"type": "thinking_delta", "thinking": "Two cities, "}),
        block_delta(0, {"type": "thinking_delta", "thinking": "two calls."}),
        block_delta(0, {"type": "signature_delta", "signature": SIGNATURE}),
        block_stop(0),
        {"type": "ping"},
        block_start(1, {"type": "text", "text": ""}),
        block_delta(1, {"type": "text_delta", "text": "Checking "}),
        block_delta(1, {"type": "text_delta", "text": "both."}),
        block_stop(1),
        block_start(2, {"type": "tool_use", "id": "toolu_01A", "name": "get_weather", "input": {}}),
        block_delta(2, {"type": "input_json_delta", "partial_json": ""}),
        block_delta(2, {"type": "input_json_delta", "partial_json": '{"city": "Pa'}),
        block_delta(2, {"type": "input_json_delta", "partial_json": 'ris"}'}),
        block_stop(2),
        block_start(3, {"type": "tool_use", "id": "toolu_01B", "name": "get_weather", "input": {}}),
        block_delta(3, {"type": "input_json_delta", "partial_json": '{"ci'}),
        block_delta(3, {"type": "input_json_delta", "partial_json": 'ty": "Oslo"}'}),
        block_stop(3),
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use", "stop_sequence": None},
            "usage": {"output_tokens": 89},
        },
        {"type": "message_stop"},
    )


async def test_stream_assembles_thinking_text_and_split_tool_input() -> None:
    body = Body(streamed_answer())
    server = Server(httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=body))
    p = provider(server)
    received = await drain(p, ChatRequest(messages=[user("Paris and Oslo?")], tools=[WEATHER]))
    assert server.bodies[0]["stream"] is True

    starts = [(e["index"], e["block_type"]) for e in received if e["type"] == "content_block:start"]
    assert starts == [(0, "thinking"), (1, "text"), (2, "tool_call"), (3, "tool_call")]
    thinking = "".join(e["delta"] for e in received if e["type"] == "thinking:delta")
    assert thinking == "Two cities, two calls."
    text = "".join(
        e["delta"] for e in received if e["type"] == "content_block:delta" and e["index"] == 1
    )
    assert text == "Checking both."
    ends = {e["index"]: e["block"] for e in received if e["type"] == "content_block:end"}
    assert ends[0] == ThinkingBlock(
        thinking="Two cities, two calls.", signature=SIGNATURE, visibility="internal"
    )
    assert ends[3] == ToolCallBlock(id="toolu_01B", name="get_weather", input={"city": "Oslo"})

    assert received[-1]["type"] == "response"
    response = received[-1]["response"]
    assert response.text == "Checking both."
    assert response.tool_calls == [
        ToolCall(id="toolu_01A", name="get_weather", arguments={"city": "Paris"}),
        ToolCall(id="toolu_01B", name="get_weather", arguments={"city": "Oslo"}),
    ]
    assert response.finish_reason == "tool_use"
    assert response.usage == Usage(
        input_tokens=472 + 2048,
        output_tokens=89,
        total_tokens=472 + 2048 + 89,
        cache_read_tokens=2048,
        cache_write_tokens=0,
    )
    assert body.closed
    await p.http.aclose()


async def test_stream_error_event_raises_mapped_error() -> None:
    data = sse(
        MESSAGE_START,
        block_start(0, {"type": "text", "text": ""}),
        block_delta(0, {"type": "text_delta", "text": "Par"}),
        {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
    )
    server = Server(httpx.Response(200, stream=Body(data)))
    p = provider(server)
    with pytest.raises(ProviderUnavailableError, match="Overloaded"):
        await drain(p, ChatRequest(messages=[user("x")]))
    await p.http.aclose()


async def test_stream_cancelled_mid_response_closes_it_and_propagates() -> None:
    data = sse(
        MESSAGE_START,
        block_start(0, {"type": "text", "text": ""}),
        block_delta(0, {"type": "text_delta", "text": "Hel"}),
    )
    body = Body(data, hang=True)
    server = Server(httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=body))
    p = provider(server)
    streaming = anyio.Event()

    async def consume() -> None:
        async with p.open_stream(ChatRequest(messages=[user("hi")])) as events:
            async for event in events:
                if event["type"] == "content_block:delta":
                    streaming.set()
        raise AssertionError("the stream should hang")  # pragma: no cover

    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as tg:
            tg.start_soon(consume)
            await streaming.wait()
            scope.cancel()  # the consumer is blocked reading the hanging body
    assert scope.cancelled_caught
    assert body.closed
    await p.http.aclose()


# -- models, info, mount --------------------------------------------------------------


async def test_list_models_follows_pages_and_info() -> None:
    def page(ids: list[str], more: bool) -> httpx.Response:
        data = [
            {
                "type": "model",
                "id": i,
                "display_name": i.title(),
                "created_at": "2025-02-19T00:00:00Z",
            }
            for i in ids
        ]
        return httpx.Response(
            200, json={"data": data, "has_more": more, "first_id": ids[0], "last_id": ids[-1]}
        )

    server = Server(
        page(["claude-opus-4-1", "claude-sonnet-4-5"], True), page(["claude-haiku-4-5"], False)
    )
    p = provider(server, context_window=100_000, max_tokens=4096)
    models = await p.list_models()
    assert [m.id for m in models] == ["claude-opus-4-1", "claude-sonnet-4-5", "claude-haiku-4-5"]
    assert models[0].display_name == "Claude-Opus-4-1"
    assert server.requests[1].url.params["after_id"] == "claude-sonnet-4-5"
    info = p.get_info()
    assert info.id == "anthropic"
    assert info.credential_env_vars == ("ANTHROPIC_API_KEY",)
    assert info.defaults == {"model": MODEL, "context_window": 100_000, "max_output_tokens": 4096}
    await p.http.aclose()


async def test_mount_without_key_mounts_nothing(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    coordinator = MockCoordinator()
    with caplog.at_level(logging.WARNING):
        assert await mount(coordinator, {}) is None
    assert coordinator.mount_history == []
    assert "no API key" in caplog.text


async def test_mount_with_env_key_mounts_and_cleanup_closes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    coordinator = MockCoordinator()
    cleanup = await mount(coordinator, {})
    assert cleanup is not None
    [entry] = coordinator.mount_history
    assert (entry["mount_point"], entry["name"]) == ("providers", "anthropic")
    mounted = entry["module"]
    assert isinstance(mounted, AnthropicProvider)
    assert KEY not in repr(mounted)
    await cleanup()
    assert mounted.http.is_closed


# -- the base URL ---------------------------------------------------------------------------


@pytest.mark.parametrize("given", [f"{BASE}/v1", f"{BASE}/v1/"])
async def test_a_base_url_ending_in_v1_is_cut_back_to_the_api_root_with_a_warning(
    given: str, caplog: pytest.LogCaptureFixture
) -> None:
    server = Server(httpx.Response(200, json=message([{"type": "text", "text": "Hi"}], "end_turn")))
    with caplog.at_level(logging.WARNING, logger="amplifier_anyio.providers.anthropic"):
        p = provider(server, base_url=given)

    await p.complete(ChatRequest(messages=[user("Hi")]))

    assert str(server.requests[0].url) == f"{BASE}/v1/messages"  # not …/v1/v1/messages
    assert p.base_url == BASE
    [warning] = [r.getMessage() for r in caplog.records]
    assert warning == (
        f"provider-anthropic: base_url {BASE}/v1 ends in /v1; Anthropic's base URL is the "
        f"API root without it: using {BASE} (requests go to {BASE}/v1/messages)"
    )
    await p.http.aclose()


async def test_a_404_names_the_url_it_called() -> None:
    server = Server(api_error(404, "not_found_error", "model: claude-nope"))
    p = provider(server, max_retries=0)

    with pytest.raises(LLMError) as info:
        await p.complete(ChatRequest(messages=[user("Hi")]))

    assert str(info.value) == (
        f"anthropic returned HTTP 404: model: claude-nope (POST {BASE}/v1/messages)"
    )
    await p.http.aclose()
