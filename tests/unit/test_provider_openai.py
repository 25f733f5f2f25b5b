"""OpenAIChatProvider against a MockTransport serving Chat Completions payloads."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import anyio.lowlevel
import httpx
import pytest

from amplifier_anyio.errors import (
    AuthenticationError,
    ContextLengthError,
    InvalidRequestError,
    MountError,
    ProviderUnavailableError,
    RateLimitError,
)
from amplifier_anyio.models import (
    ChatRequest,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    ToolCallBlock,
    ToolSpec,
    Usage,
)
from amplifier_anyio.providers._http import INVALID_ARGUMENTS_KEY, invalid_tool_call
from amplifier_anyio.providers.openai import OpenAIChatProvider, mount
from amplifier_anyio.testing import EventRecorder, MockCoordinator

pytestmark = pytest.mark.anyio

KEY = "sk-proj-TESTKEY-abcdefghijklmnop"
BASE = "https://llm.example/v1"
WEATHER = ToolSpec(
    name="get_weather",
    description="Current weather for a city",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)


# -- wire payloads as the Chat Completions reference shows them -----------------------


def completion(
    message: dict[str, Any], finish_reason: str, usage: dict[str, Any] | None = None
) -> dict[str, Any]:
    return {
        "id": "chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT",
        "object": "chat.completion",
        "created": 1741569952,
        "model": "gpt-4o-2024-08-06",
        "choices": [
            {"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason}
        ],
        "usage": usage
        or {
            "prompt_tokens": 19,
            "completion_tokens": 10,
            "total_tokens": 29,
            "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
            "completion_tokens_details": {
                "reasoning_tokens": 0,
                "audio_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0,
            },
        },
        "service_tier": "default",
        "system_fingerprint": "fp_fc9f1d7035",
    }


def assistant_text(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text, "refusal": None, "annotations": []}


def assistant_calls(*calls: tuple[str, str, str]) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "refusal": None,
        "annotations": [],
        "tool_calls": [
            {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}
            for cid, name, args in calls
        ],
    }


def chunk(
    delta: dict[str, Any] | None, finish_reason: str | None = None, **extra: Any
) -> dict[str, Any]:
    choices = (
        []
        if delta is None
        else [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}]
    )
    return {
        "id": "chatcmpl-stream-1",
        "object": "chat.completion.chunk",
        "created": 1741569952,
        "model": "gpt-4o-2024-08-06",
        "system_fingerprint": "fp_fc9f1d7035",
        "choices": choices,
        "usage": None,
        **extra,
    }


def sse(*chunks: dict[str, Any], done: bool = True) -> bytes:
    text = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks)
    return (text + ("data: [DONE]\n\n" if done else "")).encode()


class Body(httpx.AsyncByteStream):
    """A response body sent in small pieces; can hang after them; records closing."""

    def __init__(self, data: bytes, *, piece: int = 7, hang: bool = False) -> None:
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

    def __init__(self, *answers: httpx.Response | Callable[[], httpx.Response]) -> None:
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []

    @property
    def bodies(self) -> list[Any]:
        return [json.loads(r.content) if r.content else None for r in self.requests]

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.answers.pop(0)
        return answer() if callable(answer) else answer


def provider(server: Server, hooks: Any = None, **config: Any) -> OpenAIChatProvider:
    async def no_wait(delay: float) -> None:
        await anyio.lowlevel.checkpoint()

    cfg = {"api_key": KEY, "base_url": BASE, "model": "gpt-4o", **config}
    return OpenAIChatProvider(
        cfg, hooks=hooks, transport=httpx.MockTransport(server), sleep=no_wait
    )


async def drain(p: OpenAIChatProvider, request: ChatRequest) -> list[dict[str, Any]]:
    async with p.open_stream(request) as events:
        return [e async for e in events]


def user(text: str) -> Message:
    return Message(role="user", content=text)


# -- complete() -----------------------------------------------------------------------


async def test_plain_answer_request_and_response() -> None:
    server = Server(
        httpx.Response(200, json=completion(assistant_text("Hello! How can I help?"), "stop"))
    )
    p = provider(server, temperature=0.2)
    request = ChatRequest(
        messages=[Message(role="system", content="Be brief."), user("Hi")], max_output_tokens=256
    )
    response = await p.complete(request)

    sent = server.requests[0]
    assert sent.method == "POST"
    assert str(sent.url) == f"{BASE}/chat/completions"
    assert sent.headers["authorization"] == f"Bearer {KEY}"
    assert server.bodies[0] == {
        "model": "gpt-4o",
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
        "max_completion_tokens": 256,
        "temperature": 0.2,
    }
    assert response.text == "Hello! How can I help?"
    assert response.content == [TextBlock(text="Hello! How can I help?")]
    assert response.tool_calls is None
    assert response.finish_reason == "stop"
    assert response.usage == Usage(
        input_tokens=19, output_tokens=10, total_tokens=29, reasoning_tokens=0, cache_read_tokens=0
    )
    assert response.metadata == {
        "response_id": "chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT",
        "model": "gpt-4o-2024-08-06",
    }
    await p.http.aclose()


async def test_request_options_reach_the_wire() -> None:
    server = Server(httpx.Response(200, json=completion(assistant_text("ok"), "stop")))
    p = provider(server, max_tokens_field="max_tokens")
    request = ChatRequest(
        messages=[Message(role="developer", content="Use tools."), user("Weather in Paris?")],
        tools=[WEATHER],
        tool_choice="get_weather",
        reasoning_effort="low",
        max_output_tokens=100,
        model="o4-mini",
        stop=["END"],
    )
    await p.complete(request)
    assert server.bodies[0] == {
        "model": "o4-mini",
        "messages": [
            {"role": "developer", "content": "Use tools."},
            {"role": "user", "content": "Weather in Paris?"},
        ],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "parameters": WEATHER.parameters,
                    "description": "Current weather for a city",
                },
            }
        ],
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        "max_tokens": 100,
        "reasoning_effort": "low",
        "stop": ["END"],
    }
    await p.http.aclose()


async def test_one_tool_call() -> None:
    message = assistant_calls(("call_Ez7", "get_weather", '{"city":"Paris"}'))
    server = Server(httpx.Response(200, json=completion(message, "tool_calls")))
    p = provider(server)
    response = await p.complete(ChatRequest(messages=[user("Weather?")], tools=[WEATHER]))
    assert p.parse_tool_calls(response) == [
        ToolCall(id="call_Ez7", name="get_weather", arguments={"city": "Paris"})
    ]
    assert response.content == [
        ToolCallBlock(id="call_Ez7", name="get_weather", input={"city": "Paris"})
    ]
    assert response.finish_reason == "tool_calls"
    assert response.text == ""
    await p.http.aclose()


async def test_malformed_arguments_mark_only_that_call() -> None:
    message = assistant_calls(
        ("call_1", "get_weather", '{"city": "Paris"'),
        ("call_2", "get_weather", '{"city": "Oslo"}'),
    )
    server = Server(httpx.Response(200, json=completion(message, "tool_calls")))
    p = provider(server)
    response = await p.complete(ChatRequest(messages=[user("Weather?")], tools=[WEATHER]))
    bad, good = p.parse_tool_calls(response)
    assert good.arguments == {"city": "Oslo"}
    assert bad.arguments[INVALID_ARGUMENTS_KEY]["raw"] == '{"city": "Paris"'
    err = invalid_tool_call(bad, provider=p.name)
    assert err is not None
    assert "call_1" in str(err)
    assert err.raw_arguments == '{"city": "Paris"'
    assert invalid_tool_call(good) is None
    await p.http.aclose()


async def test_two_round_exchange_with_parallel_tool_calls() -> None:
    round1 = assistant_calls(
        ("call_A", "get_weather", '{"city":"Paris"}'),
        ("call_B", "get_weather", '{"city":"Oslo"}'),
    )
    round1["content"] = "Checking both."
    server = Server(
        httpx.Response(200, json=completion(round1, "tool_calls")),
        httpx.Response(200, json=completion(assistant_text("Paris 18C, Oslo 9C."), "stop")),
    )
    p = provider(server)
    history = [Message(role="system", content="You are a weather bot."), user("Paris and Oslo?")]
    first = await p.complete(ChatRequest(messages=history, tools=[WEATHER]))
    calls = p.parse_tool_calls(first)
    assert [c.id for c in calls] == ["call_A", "call_B"]

    # what an orchestrator adds: the assistant message, then one result per call in order
    history += [
        Message(role="assistant", content=first.content, tool_calls=first.tool_calls),
        Message(role="tool", tool_call_id="call_A", content='{"temp_c": 18}'),
        Message(role="tool", tool_call_id="call_B", content='{"temp_c": 9}'),
    ]
    second = await p.complete(ChatRequest(messages=history, tools=[WEATHER]))
    assert second.text == "Paris 18C, Oslo 9C."
    assert server.bodies[1]["messages"] == [
        {"role": "system", "content": "You are a weather bot."},
        {"role": "user", "content": "Paris and Oslo?"},
        {
            "role": "assistant",
            "content": "Checking both.",
            "tool_calls": [
                {
                    "id": "call_A",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                },
                {
                    "id": "call_B",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_A", "content": '{"temp_c": 18}'},
        {"role": "tool", "tool_call_id": "call_B", "content": '{"temp_c": 9}'},
    ]
    await p.http.aclose()


async def test_thinking_is_never_sent_and_reasoning_content_is_read() -> None:
    message = {**assistant_text("42"), "reasoning_content": "6 times 7"}
    server = Server(
        httpx.Response(200, json=completion(message, "stop")),
        httpx.Response(200, json=completion(assistant_text("ok"), "stop")),
    )
    p = provider(server)
    first = await p.complete(ChatRequest(messages=[user("6*7?")]))
    assert first.content == [
        ThinkingBlock(thinking="6 times 7", visibility="internal"),
        TextBlock(text="42"),
    ]
    assert first.text == "42"
    history = [user("6*7?"), Message(role="assistant", content=first.content), user("thanks")]
    await p.complete(ChatRequest(messages=history))
    assert server.bodies[1]["messages"][1] == {"role": "assistant", "content": "42"}
    await p.http.aclose()


async def test_plain_dict_messages_are_accepted() -> None:
    server = Server(httpx.Response(200, json=completion(assistant_text("ok"), "stop")))
    p = provider(server)
    await p.complete(ChatRequest(messages=[{"role": "user", "content": "hi"}]))  # type: ignore[list-item]
    assert server.bodies[0]["messages"] == [{"role": "user", "content": "hi"}]
    await p.http.aclose()


# -- errors ---------------------------------------------------------------------------


def api_error(
    status: int, message: str, kind: str, code: str | None = None, **headers: str
) -> httpx.Response:
    return httpx.Response(
        status,
        json={"error": {"message": message, "type": kind, "param": None, "code": code}},
        headers=headers,
    )


async def test_context_length_error() -> None:
    msg = (
        "This model's maximum context length is 128000 tokens. "
        "However, your messages resulted in 130000 tokens."
    )
    server = Server(api_error(400, msg, "invalid_request_error", "context_length_exceeded"))
    p = provider(server)
    with pytest.raises(ContextLengthError) as info:
        await p.complete(ChatRequest(messages=[user("long")]))
    assert info.value.status_code == 400
    assert not info.value.retryable
    assert info.value.model == "gpt-4o"
    await p.http.aclose()


async def test_bad_request_is_invalid_request() -> None:
    server = Server(api_error(400, "Invalid value for 'tool_choice'", "invalid_request_error"))
    p = provider(server)
    with pytest.raises(InvalidRequestError):
        await p.complete(ChatRequest(messages=[user("x")]))
    assert len(server.requests) == 1
    await p.http.aclose()


async def test_auth_error_never_shows_the_key() -> None:
    msg = f"Incorrect API key provided: {KEY}. You can find your API key at https://platform.openai.com."
    server = Server(api_error(401, msg, "invalid_request_error", "invalid_api_key"))
    hooks = EventRecorder()
    p = provider(server, hooks)
    with pytest.raises(AuthenticationError) as info:
        await p.complete(ChatRequest(messages=[user("x")]))
    for text in (
        str(info.value),
        repr(info.value),
        repr(info.value.body),
        repr(p),
        repr(hooks.events),
    ):
        assert KEY not in text
    await p.http.aclose()


async def test_rate_limit_is_retried_then_answers() -> None:
    server = Server(
        api_error(
            429,
            "Rate limit reached for gpt-4o",
            "requests",
            "rate_limit_exceeded",
            **{"retry-after": "2"},
        ),
        api_error(500, "The server had an error", "server_error"),
        httpx.Response(200, json=completion(assistant_text("done"), "stop")),
    )
    hooks = EventRecorder()
    p = provider(server, hooks, retry_jitter=0.0, retry_initial_delay=0.5)
    response = await p.complete(ChatRequest(messages=[user("x")]))
    assert response.text == "done"
    retries = hooks.get_events("provider:retry")
    assert [(d["attempt"], d["delay"], d["status_code"]) for _, d in retries] == [
        (1, 2.0, 429),
        (2, 1.0, 500),
    ]
    assert all(d["provider"] == "openai" and d["model"] == "gpt-4o" for _, d in retries)
    await p.http.aclose()


async def test_rate_limit_exhausted_raises_with_retry_after() -> None:
    def answer() -> httpx.Response:
        return api_error(
            429, "Rate limit", "requests", "rate_limit_exceeded", **{"retry-after": "1"}
        )

    server = Server(*[answer] * 3)
    p = provider(server, max_retries=2)
    with pytest.raises(RateLimitError) as info:
        await p.complete(ChatRequest(messages=[user("x")]))
    assert info.value.retry_after == 1.0
    assert info.value.retryable
    assert len(server.requests) == 3
    await p.http.aclose()


# -- streaming ------------------------------------------------------------------------


def streamed_tool_answer() -> bytes:
    return sse(
        chunk({"role": "assistant", "content": "", "refusal": None}),
        chunk({"content": "Let me "}),
        chunk({"content": "check."}),
        chunk(
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "call_A",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": ""},
                    }
                ]
            }
        ),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"ci'}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": 'ty": "Pa'}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": 'ris"}'}}]}),
        chunk(
            {
                "tool_calls": [
                    {
                        "index": 1,
                        "id": "call_B",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": ""},
                    }
                ]
            }
        ),
        chunk({"tool_calls": [{"index": 1, "function": {"arguments": '{"city":'}}]}),
        chunk({"tool_calls": [{"index": 1, "function": {"arguments": ' "Oslo"}'}}]}),
        chunk({}, "tool_calls"),
        chunk(
            None,
            usage={
                "prompt_tokens": 40,
                "completion_tokens": 30,
                "total_tokens": 70,
                "prompt_tokens_details": {"cached_tokens": 8},
                "completion_tokens_details": {"reasoning_tokens": 0},
            },
        ),
    )


async def test_stream_assembles_text_and_split_tool_arguments() -> None:
    body = Body(streamed_tool_answer())
    server = Server(httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=body))
    p = provider(server)
    async with p.open_stream(
        ChatRequest(messages=[user("Paris and Oslo?")], tools=[WEATHER])
    ) as events:
        received = [e async for e in events]
    assert server.bodies[0]["stream"] is True
    assert server.bodies[0]["stream_options"] == {"include_usage": True}

    starts = [(e["index"], e["block_type"]) for e in received if e["type"] == "content_block:start"]
    assert starts == [(0, "text"), (1, "tool_call"), (2, "tool_call")]
    text = "".join(
        e["delta"] for e in received if e["type"] == "content_block:delta" and e["index"] == 0
    )
    assert text == "Let me check."
    args = "".join(
        e["delta"] for e in received if e["type"] == "content_block:delta" and e["index"] == 1
    )
    assert args == '{"city": "Paris"}'
    ends = {e["index"]: e["block"] for e in received if e["type"] == "content_block:end"}
    assert ends[2] == ToolCallBlock(id="call_B", name="get_weather", input={"city": "Oslo"})

    assert received[-1]["type"] == "response"
    response = received[-1]["response"]
    assert response.text == "Let me check."
    assert response.tool_calls == [
        ToolCall(id="call_A", name="get_weather", arguments={"city": "Paris"}),
        ToolCall(id="call_B", name="get_weather", arguments={"city": "Oslo"}),
    ]
    assert response.finish_reason == "tool_calls"
    assert response.usage == Usage(
        input_tokens=40, output_tokens=30, total_tokens=70, reasoning_tokens=0, cache_read_tokens=8
    )
    assert body.closed
    await p.http.aclose()


async def test_stream_cancelled_mid_response_closes_it_and_propagates() -> None:
    body = Body(sse(chunk({"role": "assistant", "content": "Hel"}), done=False), hang=True)
    server = Server(httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=body))
    p = provider(server)
    got: list[dict[str, Any]] = []
    with anyio.CancelScope() as scope:
        async with p.open_stream(ChatRequest(messages=[user("hi")])) as events:
            async for event in events:
                got.append(event)
                if event["type"] == "content_block:delta":
                    scope.cancel()
        raise AssertionError("cancellation did not propagate")  # pragma: no cover
    assert scope.cancelled_caught
    assert [e["type"] for e in got] == ["content_block:start", "content_block:delta"]
    assert body.closed
    await p.http.aclose()


async def test_stream_blocked_on_the_network_is_cancelled_and_closed() -> None:
    body = Body(sse(chunk({"role": "assistant", "content": "Hel"}), done=False), hang=True)
    server = Server(httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=body))
    p = provider(server)
    streaming = anyio.Event()

    async def consume() -> None:
        async with p.open_stream(ChatRequest(messages=[user("hi")])) as events:
            async for event in events:
                if event["type"] == "content_block:delta":
                    streaming.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(consume)
        await streaming.wait()
        tg.cancel_scope.cancel()  # the consumer is now blocked reading the hanging body
    assert body.closed
    await p.http.aclose()


async def test_stream_retries_before_the_body_then_streams() -> None:
    answer = sse(chunk({"content": "hi"}), chunk({}, "stop"))
    server = Server(
        api_error(503, "Service Unavailable", "server_error"),
        httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=Body(answer)),
    )
    hooks = EventRecorder()
    p = provider(server, hooks)
    async with p.open_stream(ChatRequest(messages=[user("hi")])) as events:
        received = [e async for e in events]
    assert received[-1]["response"].text == "hi"
    assert received[-1]["response"].usage is None
    assert len(hooks.get_events("provider:retry")) == 1
    await p.http.aclose()


async def test_stream_error_chunk_raises_mapped_error() -> None:
    answer = sse(
        chunk({"content": "par"}),
        {"error": {"message": "The server had an error", "type": "server_error"}},
    )
    server = Server(httpx.Response(200, stream=Body(answer)))
    p = provider(server)
    with pytest.raises(ProviderUnavailableError):
        await drain(p, ChatRequest(messages=[user("hi")]))
    await p.http.aclose()


async def test_stream_cut_short_raises() -> None:
    server = Server(httpx.Response(200, stream=Body(sse(chunk({"content": "par"}), done=False))))
    p = provider(server)
    with pytest.raises(Exception, match="ended before"):
        await drain(p, ChatRequest(messages=[user("hi")]))
    await p.http.aclose()


async def test_a_stream_without_any_choice_is_an_error_not_an_empty_answer() -> None:
    # Chunks that never carry a choice (not a chat completion stream): before, the turn
    # ended `success` with empty text.
    body = sse({"id": "x", "object": "something.else"}, {"id": "x", "usage": None})
    server = Server(httpx.Response(200, stream=Body(body)))
    p = provider(server)
    with pytest.raises(Exception, match="no choices"):
        await drain(p, ChatRequest(messages=[user("hi")]))
    await p.http.aclose()


async def test_a_usage_only_last_chunk_is_still_fine() -> None:
    body = sse(chunk({"content": "hi"}, finish_reason="stop"), {"id": "x", "choices": []})
    server = Server(httpx.Response(200, stream=Body(body)))
    p = provider(server)
    events = await drain(p, ChatRequest(messages=[user("hi")]))
    assert any(e.get("delta") == "hi" for e in events)
    await p.http.aclose()


# -- models, info, mount --------------------------------------------------------------


async def test_list_models_and_info() -> None:
    listing = {
        "object": "list",
        "data": [
            {"id": "gpt-4o", "object": "model", "created": 1715367049, "owned_by": "system"},
            {"id": "o4-mini", "object": "model", "created": 1744225351, "owned_by": "system"},
        ],
    }
    server = Server(httpx.Response(200, json=listing))
    p = provider(server, context_window=64000, max_output_tokens=4096)
    models = await p.list_models()
    assert str(server.requests[0].url) == f"{BASE}/models"
    assert [(m.id, m.context_window, m.max_output_tokens) for m in models] == [
        ("gpt-4o", 64000, 4096),
        ("o4-mini", 64000, 4096),
    ]
    info = p.get_info()
    assert info.id == "openai"
    assert info.credential_env_vars == ("OPENAI_API_KEY",)
    assert info.defaults == {"model": "gpt-4o", "context_window": 64000, "max_output_tokens": 4096}
    await p.http.aclose()


async def test_env_vars_are_the_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("OPENAI_BASE_URL", "http://localhost:8000/v1")
    server = Server(httpx.Response(200, json=completion(assistant_text("ok"), "stop")))
    p = OpenAIChatProvider({}, transport=httpx.MockTransport(server))
    await p.complete(ChatRequest(messages=[user("x")]))
    assert str(server.requests[0].url) == "http://localhost:8000/v1/chat/completions"
    assert server.requests[0].headers["authorization"] == f"Bearer {KEY}"
    assert KEY not in repr(p)
    await p.http.aclose()


async def test_mount_without_key_mounts_nothing(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    coordinator = MockCoordinator()
    with caplog.at_level(logging.WARNING):
        assert await mount(coordinator, {}) is None
    assert coordinator.mount_history == []
    assert "no API key" in caplog.text


async def test_mount_with_key_mounts_and_cleanup_closes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    coordinator = MockCoordinator()
    cleanup = await mount(coordinator, {"api_key": KEY, "name": "gpt"})
    assert cleanup is not None
    [entry] = coordinator.mount_history
    assert (entry["mount_point"], entry["name"]) == ("providers", "gpt")
    mounted = entry["module"]
    assert isinstance(mounted, OpenAIChatProvider)
    assert mounted.http.hooks is coordinator.hooks
    await cleanup()
    assert mounted.http.is_closed


class RefusingCoordinator(MockCoordinator):
    """A coordinator whose provider mount point refuses the provider."""

    async def mount(self, mount_point: str, module: Any, name: str | None = None) -> None:
        self.refused = module
        raise MountError("providers: refused")


async def test_a_failed_mount_closes_the_provider_http_client() -> None:
    coordinator = RefusingCoordinator()

    with pytest.raises(MountError, match="refused"):
        await mount(coordinator, {"api_key": "sk-test"})

    # Nobody runs a cleanup for a mount that failed: the client must not be left open.
    assert coordinator.refused.http.is_closed
