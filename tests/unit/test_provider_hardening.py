"""Providers against real-world servers: one regression test per problem of issue 12.

Each test plays a server the way a real one misbehaved (llama.cpp's 500 on ``null``
content, an httpx error repeating a key, refusals, truncation, several choices, slow
streams…) through an ``httpx.MockTransport`` or a listener on 127.0.0.1.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any, ClassVar

import anyio
import anyio.abc
import anyio.lowlevel
import httpx
import pytest

from amplifier_anyio import AmplifierSession
from amplifier_anyio.config_schema import schema_of
from amplifier_anyio.errors import (
    ConfigError,
    InvalidRequestError,
    LLMError,
    LLMTimeoutError,
    MalformedResponseError,
    ProviderUnavailableError,
)
from amplifier_anyio.events import PROVIDER_RESPONSE
from amplifier_anyio.models import (
    INVALID_ARGUMENTS_KEY,
    ChatRequest,
    Message,
    ToolCall,
    ToolResult,
    ToolSpec,
)
from amplifier_anyio.providers._http import HTTPClient, RetryPolicy, redact
from amplifier_anyio.providers.anthropic import AnthropicProvider, _StreamState
from amplifier_anyio.providers.anthropic import mount as mount_anthropic
from amplifier_anyio.providers.openai import OpenAIChatProvider
from amplifier_anyio.providers.openai import mount as mount_openai
from amplifier_anyio.testing import EventRecorder, MockCoordinator

pytestmark = pytest.mark.anyio

KEY = "sk-proj-HARDENING-0123456789abcdefXYZ"
OPENAI_BASE = "https://llm.example/v1"
ANTHROPIC_BASE = "https://claude.example"
WEATHER = ToolSpec(
    name="get_weather",
    description="Current weather for a city",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}},
)


# -- servers ----------------------------------------------------------------------------


class Server:
    """A MockTransport handler: answers from a list (the last one repeats) or a function,
    recording every request."""

    def __init__(self, *answers: httpx.Response | Callable[[httpx.Request], httpx.Response]):
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []

    @property
    def bodies(self) -> list[Any]:
        return [json.loads(r.content) if r.content else None for r in self.requests]

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        return answer(request) if callable(answer) else answer


async def _no_wait(delay: float) -> None:
    await anyio.lowlevel.checkpoint()


def openai(server: Server, **config: Any) -> OpenAIChatProvider:
    cfg = {"api_key": KEY, "base_url": OPENAI_BASE, "model": "gpt-4o", **config}
    return OpenAIChatProvider(cfg, transport=httpx.MockTransport(server), sleep=_no_wait)


def anthropic(server: Server, **config: Any) -> AnthropicProvider:
    cfg = {"api_key": KEY, "base_url": ANTHROPIC_BASE, "model": "claude-x", **config}
    return AnthropicProvider(cfg, transport=httpx.MockTransport(server), sleep=_no_wait)


def completion(message: dict[str, Any], finish_reason: str = "stop") -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "gpt-4o",
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7},
    }


def tool_history() -> list[Message]:
    """A conversation whose assistant message holds a tool call and no text."""
    call = ToolCall(id="call_1", name="get_weather", arguments={"city": "Paris"})
    return [
        Message(role="user", content="Weather in Paris?"),
        Message(role="assistant", content="", tool_calls=[call]),
        Message(role="tool", content="sunny", tool_call_id="call_1"),
    ]


# -- 1. assistant content, 5xx validation errors, keys, redaction ------------------------


def llama_cpp_server(request: httpx.Request) -> httpx.Response:
    """What llama-cpp-python's server does: a 500 (pydantic's message) when an assistant
    message's content is null or missing, a completion otherwise."""
    for message in json.loads(request.content)["messages"]:
        if message["role"] == "assistant" and message.get("content") is None:
            detail = (
                "1 validation error for ChatCompletionRequestAssistantMessage\ncontent\n"
                "  Input should be a valid string [type=string_type, input_value=None]"
            )
            body = {"error": {"message": detail, "type": "internal_server_error"}}
            return httpx.Response(500, json=body)
    return httpx.Response(200, json=completion({"role": "assistant", "content": "Sunny."}))


async def test_a_tool_round_trip_works_with_a_llama_cpp_style_server() -> None:
    server = Server(llama_cpp_server)
    response = await openai(server).complete(ChatRequest(messages=tool_history(), tools=[WEATHER]))
    assert response.text == "Sunny."
    assistant = server.bodies[0]["messages"][1]
    assert assistant["content"] == ""
    assert assistant["tool_calls"][0]["function"]["name"] == "get_weather"


async def test_assistant_tool_content_can_be_null_for_servers_that_want_it() -> None:
    server = Server(llama_cpp_server)
    provider = openai(server, assistant_tool_content=None)
    with pytest.raises(InvalidRequestError, match="validation error"):
        await provider.complete(ChatRequest(messages=tool_history()))
    assert server.bodies[0]["messages"][1]["content"] is None
    with pytest.raises(ConfigError, match="assistant_tool_content"):
        openai(server, assistant_tool_content="none")


async def test_a_5xx_carrying_a_validation_message_is_not_retried() -> None:
    server = Server(llama_cpp_server)
    provider = openai(server, assistant_tool_content=None)
    with pytest.raises(InvalidRequestError) as caught:
        await provider.complete(ChatRequest(messages=tool_history()))
    assert len(server.requests) == 1
    assert caught.value.retryable is False
    assert caught.value.status_code == 500
    # a plain 500 is still worth repeating
    plain = Server(
        httpx.Response(500, json={"error": {"message": "internal error", "type": "server_error"}}),
        httpx.Response(200, json=completion({"role": "assistant", "content": "ok"})),
    )
    assert (await openai(plain).complete(ChatRequest(messages=tool_history()))).text == "ok"
    assert len(plain.requests) == 2


@pytest.mark.parametrize("make", [openai, anthropic], ids=["openai", "anthropic"])
async def test_a_key_with_a_trailing_newline_is_stripped(make: Any) -> None:
    server = Server(httpx.Response(200, json={"data": []}))
    provider = make(server, api_key=f"  {KEY}\n")
    await provider.list_models()
    headers = server.requests[0].headers
    sent = headers.get("authorization") or headers.get("x-api-key")
    assert sent in (KEY, f"Bearer {KEY}")


@pytest.mark.parametrize(
    ("mount", "env"), [(mount_openai, "OPENAI_API_KEY"), (mount_anthropic, "ANTHROPIC_API_KEY")]
)
@pytest.mark.parametrize("bad", [f"{KEY[:10]}\n{KEY[10:]}", f"{KEY[:10]} {KEY[10:]}", KEY + "\x07"])
async def test_a_key_with_whitespace_inside_is_refused_at_mount_without_echoing_it(
    mount: Any, env: str, bad: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    coordinator = MockCoordinator()
    with pytest.raises(ConfigError) as caught:
        await mount(coordinator, {"api_key": bad})
    text = str(caught.value)
    assert text.startswith("api_key:")
    assert "\n" not in text
    assert KEY[:10] not in text
    assert KEY[10:] not in text
    monkeypatch.setenv(env, bad)
    with pytest.raises(ConfigError, match=f"^{env}:"):
        await mount(coordinator, {})
    assert coordinator.mount_history == []


async def test_an_invalid_header_is_never_retried_and_never_leaks_the_key() -> None:
    """A real HTTP/1.1 connection: the library refuses the header and repeats its value."""
    bad_key = KEY + "\n"
    connections = 0

    async def serve(stream: anyio.abc.SocketStream) -> None:
        nonlocal connections
        connections += 1
        async with stream:
            await anyio.sleep(1)

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, serve)
        client = HTTPClient(
            provider="openai",
            base_url=f"http://127.0.0.1:{port}/v1",
            headers={"authorization": f"Bearer {bad_key}"},
            secrets=(bad_key,),
            retry=RetryPolicy(max_retries=3, initial_delay=0.0, jitter=0.0),
        )
        try:
            with pytest.raises(InvalidRequestError) as caught:
                await client.request_json("GET", "models")
        finally:
            await client.aclose()
        tg.cancel_scope.cancel()
    error = caught.value
    assert error.retryable is False
    assert connections == 1
    assert error.__cause__ is None
    assert error.__context__ is None
    assert KEY[:12] not in str(error)
    assert KEY[-12:] not in repr(error.args)


def _runs(secret: str, size: int = 12) -> list[str]:
    return [secret[i : i + size] for i in range(len(secret) - size + 1)]


def test_redaction_covers_escaped_quoted_encoded_and_partial_forms() -> None:
    secret = 'sk-ant-api03-"quoted"\\back-é-0123456789ABCDEF'
    forms = [
        secret,
        json.dumps(secret),
        json.dumps(secret, ensure_ascii=False),
        repr(secret),
        repr(secret.encode()),
        httpx.URL("https://x/", params={"key": secret}).query.decode(),
        secret[:20] + "...",  # printed in part
        "key=" + secret[:-5],  # cut by a length limit
    ]
    for form in forms:
        text = f"Illegal header value {form} (see docs)"
        masked = redact(text, [secret])
        assert "***" in masked, form
        assert not any(run in masked for run in _runs(secret)), (form, masked)
        assert masked.startswith("Illegal header value ")
        assert masked.endswith(" (see docs)")
    assert redact("nothing secret here", [secret]) == "nothing secret here"


async def test_a_server_echoing_the_key_escaped_never_reaches_the_error() -> None:
    echoed = json.dumps({"error": {"message": f"bad key {json.dumps(KEY[:25])}…"}})
    server = Server(httpx.Response(401, text=echoed))
    with pytest.raises(LLMError) as caught:
        await openai(server).list_models()
    assert not any(run in str(caught.value) for run in _runs(KEY))
    assert not any(run in json.dumps(caught.value.body) for run in _runs(KEY))


async def test_a_plain_5xx_is_still_retried_until_the_limit() -> None:
    server = Server(httpx.Response(503, json={"error": {"message": "busy"}}))
    with pytest.raises(ProviderUnavailableError):
        await openai(server, max_retries=2).list_models()
    assert len(server.requests) == 3


# -- 2. finish reasons: refusals, truncation, filters, pause_turn -------------------------


def sse_response(*events: dict[str, Any] | str) -> httpx.Response:
    """An SSE body: dicts as ``data:`` JSON (Anthropic's carry their ``event:`` name)."""
    lines = []
    for event in events:
        if isinstance(event, str):
            lines.append(f"data: {event}\n\n")
        elif "type" in event and "choices" not in event:
            lines.append(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n")
        else:
            lines.append(f"data: {json.dumps(event)}\n\n")
    return httpx.Response(
        200, content="".join(lines).encode(), headers={"content-type": "text/event-stream"}
    )


def oa_chunk(delta: dict[str, Any], finish: str | None = None, index: int = 0) -> dict[str, Any]:
    return {
        "id": "chatcmpl-s",
        "object": "chat.completion.chunk",
        "model": "gpt-4o",
        "choices": [{"index": index, "delta": delta, "finish_reason": finish}],
    }


def an_message(content: list[dict[str, Any]], stop: str) -> dict[str, Any]:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-x",
        "content": content,
        "stop_reason": stop,
        "usage": {"input_tokens": 5, "output_tokens": 2},
    }


def an_stream(blocks: list[list[dict[str, Any]]], stop: str) -> list[dict[str, Any]]:
    """message_start, each block's events as given, message_delta(stop), message_stop."""
    events: list[dict[str, Any]] = [
        {"type": "message_start", "message": {**an_message([], None), "stop_reason": None}}  # type: ignore[arg-type]
    ]
    for block in blocks:
        events += block
    events += [
        {"type": "message_delta", "delta": {"stop_reason": stop}, "usage": {"output_tokens": 9}},
        {"type": "message_stop"},
    ]
    return events


def an_text_block(index: int, text: str, *, stop: bool = True) -> list[dict[str, Any]]:
    events = [
        {
            "type": "content_block_start",
            "index": index,
            "content_block": {"type": "text", "text": ""},
        },
        {
            "type": "content_block_delta",
            "index": index,
            "delta": {"type": "text_delta", "text": text},
        },
    ]
    return events + ([{"type": "content_block_stop", "index": index}] if stop else [])


def an_tool_block(index: int, parts: list[str], *, stop: bool = True) -> list[dict[str, Any]]:
    start = {"type": "tool_use", "id": f"toolu_{index}", "name": "get_weather", "input": {}}
    events: list[dict[str, Any]] = [
        {"type": "content_block_start", "index": index, "content_block": start}
    ]
    events += [
        {
            "type": "content_block_delta",
            "index": index,
            "delta": {"type": "input_json_delta", "partial_json": part},
        }
        for part in parts
    ]
    return events + ([{"type": "content_block_stop", "index": index}] if stop else [])


class Weather:
    """A tool that records its calls."""

    name = "get_weather"
    description = "weather"
    input_schema: ClassVar[dict[str, Any]] = WEATHER.parameters

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    async def execute(self, input: dict[str, Any]) -> Any:
        self.calls.append(input)
        return ToolResult(success=True, output="sunny")


async def run_turn(
    provider: Any, *, streaming: bool = False, tool: Weather | None = None
) -> tuple[Any, list[dict[str, Any]], list[dict[str, Any]]]:
    """One session turn with ``provider``; (result, provider:response payloads, context)."""
    orchestrator = "loop-streaming" if streaming else "loop-basic"
    plan = {"session": {"orchestrator": orchestrator, "context": "context-simple"}}
    async with AmplifierSession(plan) as session:
        recorder = EventRecorder()
        recorder.attach(session.coordinator.hooks)
        await session.coordinator.mount("providers", provider, name=provider.name)
        session.coordinator.register_cleanup(provider.http.aclose)
        if tool is not None:
            await session.coordinator.mount("tools", tool, name=tool.name)
        result = await session.run("Weather in Paris?")
        context = await session.coordinator.get("context").get_messages()
    responses = [data for _, data in recorder.get_events(PROVIDER_RESPONSE)]
    return result, responses, context


CUT_ANSWERS = [
    ("openai", "length"),
    ("openai", "content_filter"),
    ("anthropic", "max_tokens"),
    ("anthropic", "refusal"),
]


@pytest.mark.parametrize("streaming", [False, True], ids=["complete", "stream"])
@pytest.mark.parametrize(("kind", "reason"), CUT_ANSWERS)
async def test_a_cut_refused_or_filtered_answer_ends_the_turn_incomplete(
    kind: str, reason: str, streaming: bool
) -> None:
    if kind == "openai":
        answer = (
            sse_response(oa_chunk({"content": "It is sun"}), oa_chunk({}, reason), "[DONE]")
            if streaming
            else httpx.Response(
                200, json=completion({"role": "assistant", "content": "It is sun"}, reason)
            )
        )
        provider: Any = openai(Server(answer))
    else:
        answer = (
            sse_response(*an_stream([an_text_block(0, "It is sun")], reason))
            if streaming
            else httpx.Response(
                200, json=an_message([{"type": "text", "text": "It is sun"}], reason)
            )
        )
        provider = anthropic(Server(answer))
    result, responses, _ = await run_turn(provider, streaming=streaming)
    assert result.status == "incomplete"
    assert result.finish_reason == reason
    assert result.text == "It is sun"
    assert [r["finish_reason"] for r in responses] == [reason]


@pytest.mark.parametrize("streaming", [False, True], ids=["complete", "stream"])
async def test_an_openai_refusal_is_kept_as_text_and_ends_incomplete(streaming: bool) -> None:
    refusal = "I'm sorry, I cannot help with that."
    if streaming:
        answer = sse_response(
            oa_chunk({"role": "assistant", "content": None, "refusal": ""}),
            oa_chunk({"refusal": refusal[:10]}),
            oa_chunk({"refusal": refusal[10:]}, "stop"),
            "[DONE]",
        )
    else:
        message = {"role": "assistant", "content": None, "refusal": refusal}
        answer = httpx.Response(200, json=completion(message, "stop"))
    result, _, _ = await run_turn(openai(Server(answer)), streaming=streaming)
    assert result.text == refusal
    assert result.status == "incomplete"
    assert result.finish_reason == "refusal"


async def test_no_choices_is_an_llm_error() -> None:
    body = {"id": "x", "object": "chat.completion", "choices": [], "prompt_filter_results": []}
    with pytest.raises(MalformedResponseError, match="no choices"):
        await openai(Server(httpx.Response(200, json=body))).complete(
            ChatRequest(messages=[Message(role="user", content="hi")])
        )


def truncated_tool_answer(kind: str, streaming: bool) -> httpx.Response:
    partial = ['{"ci', 'ty": "Par']
    if kind == "openai":
        if not streaming:
            message = {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": "".join(partial)},
                    }
                ],
            }
            return httpx.Response(200, json=completion(message, "length"))
        first = {"index": 0, "id": "call_1", "type": "function"}
        return sse_response(
            oa_chunk(
                {"tool_calls": [{**first, "function": {"name": "get_weather", "arguments": ""}}]}
            ),
            oa_chunk({"tool_calls": [{"index": 0, "function": {"arguments": partial[0]}}]}),
            oa_chunk(
                {"tool_calls": [{"index": 0, "function": {"arguments": partial[1]}}]}, "length"
            ),
            "[DONE]",
        )
    if not streaming:  # the API gives the input it could not finish as {}
        block = {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}
        return httpx.Response(200, json=an_message([block], "max_tokens"))
    return sse_response(*an_stream([an_tool_block(0, partial, stop=False)], "max_tokens"))


@pytest.mark.parametrize("streaming", [False, True], ids=["complete", "stream"])
@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_a_tool_call_cut_by_the_token_limit_becomes_an_error_result(
    kind: str, streaming: bool
) -> None:
    final = (
        httpx.Response(200, json=completion({"role": "assistant", "content": "Sorry."}))
        if kind == "openai"
        else httpx.Response(200, json=an_message([{"type": "text", "text": "Sorry."}], "end_turn"))
    )
    if streaming:
        final = (
            sse_response(oa_chunk({"content": "Sorry."}, "stop"), "[DONE]")
            if kind == "openai"
            else sse_response(*an_stream([an_text_block(0, "Sorry.")], "end_turn"))
        )
    server = Server(truncated_tool_answer(kind, streaming), final)
    tool = Weather()
    make = openai if kind == "openai" else anthropic
    result, _, context = await run_turn(make(server), streaming=streaming, tool=tool)
    assert tool.calls == []  # never run with {} or with half its arguments
    results = [m for m in context if m["role"] == "tool"]
    assert len(results) == 1
    assert "cut off by the output token limit" in results[0]["content"]
    assert result.status == "success"
    assert result.text == "Sorry."


async def test_pause_turn_continues_the_turn() -> None:
    paused = an_message([{"type": "text", "text": "Searching…"}], "pause_turn")
    done = an_message([{"type": "text", "text": "Found it."}], "end_turn")
    server = Server(httpx.Response(200, json=paused), httpx.Response(200, json=done))
    result, responses, context = await run_turn(anthropic(server))
    assert result.status == "success"
    assert result.text == "Found it."
    assert [r["finish_reason"] for r in responses] == ["pause_turn", "end_turn"]
    second = server.bodies[1]["messages"]
    assert second[-1]["content"][0]["text"] == "Searching…"
    assert [m["role"] for m in context] == ["user", "assistant", "assistant"]


async def test_endless_pause_turn_ends_incomplete() -> None:
    paused = an_message([{"type": "text", "text": "…"}], "pause_turn")
    server = Server(httpx.Response(200, json=paused))
    result, responses, _ = await run_turn(anthropic(server))
    assert result.status == "incomplete"
    assert result.finish_reason == "pause_turn"
    assert 2 < len(responses) < 20


# -- 3. streams: several choices, index-less deltas, deadlines, no wait, linear ------------


class Trickle(httpx.AsyncByteStream):
    """A body sent in pieces with a pause before each; can hang once they are sent."""

    def __init__(self, data: bytes, *, piece: int = 1, pause: float = 0.0, hang: bool = False):
        self.pieces = [data[i : i + piece] for i in range(0, len(data), piece)]
        self.pause = pause
        self.hang = hang

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for piece in self.pieces:
            await anyio.sleep(self.pause)
            yield piece
        if self.hang:
            await anyio.sleep_forever()

    async def aclose(self) -> None:
        await anyio.lowlevel.checkpoint()


def streamed(body: httpx.AsyncByteStream) -> httpx.Response:
    return httpx.Response(200, stream=body, headers={"content-type": "text/event-stream"})


def sse_bytes(response: httpx.Response) -> bytes:
    return response.content


async def collect(provider: Any, **request: Any) -> list[dict[str, Any]]:
    chat = ChatRequest(messages=[Message(role="user", content="hi")], **request)
    async with provider.open_stream(chat) as events:
        return [event async for event in events]


def final(events: list[dict[str, Any]]) -> Any:
    assert events[-1]["type"] == "response"
    return events[-1]["response"]


async def test_a_stream_with_several_choices_uses_the_first_and_warns_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    answer = sse_response(
        oa_chunk({"role": "assistant", "content": "Hel"}, index=0),
        oa_chunk({"role": "assistant", "content": "Bon"}, index=1),
        oa_chunk({"content": "lo"}, index=0),
        oa_chunk({"content": "jour"}, "stop", index=1),
        oa_chunk({}, "stop", index=0),
        "[DONE]",
    )
    with caplog.at_level("WARNING"):
        events = await collect(openai(Server(answer)))
    assert final(events).text == "Hello"
    assert "".join(e["delta"] for e in events if e["type"] == "content_block:delta") == "Hello"
    warnings = [r for r in caplog.records if "several choices" in r.getMessage()]
    assert len(warnings) == 1


async def test_tool_call_deltas_without_index_stay_separate_calls() -> None:
    def call(cid: str, name: str) -> dict[str, Any]:
        return {"id": cid, "type": "function", "function": {"name": name, "arguments": ""}}

    def args(text: str) -> dict[str, Any]:
        return {"function": {"arguments": text}}

    answer = sse_response(
        oa_chunk({"role": "assistant", "tool_calls": [call("call_a", "get_weather")]}),
        oa_chunk({"tool_calls": [args('{"city": ')]}),
        oa_chunk({"tool_calls": [args('"Paris"}')]}),
        oa_chunk({"tool_calls": [call("call_b", "get_weather")]}),
        oa_chunk({"tool_calls": [args('{"city": "Oslo"}')]}, "tool_calls"),
        "[DONE]",
    )
    response = final(await collect(openai(Server(answer))))
    assert [(c.id, c.arguments) for c in response.tool_calls] == [
        ("call_a", {"city": "Paris"}),
        ("call_b", {"city": "Oslo"}),
    ]


class TestDeadlines:
    """Virtual time on trio (MockClock autojump), real time on asyncio."""

    @pytest.fixture
    def anyio_backend(self, virtual_backend: Any) -> Any:
        return virtual_backend

    @pytest.mark.parametrize("kind", ["openai", "anthropic"])
    async def test_a_slow_loris_stream_times_out_with_the_whole_response_deadline(
        self, kind: str
    ) -> None:
        if kind == "openai":
            body = sse_bytes(sse_response(*[oa_chunk({"content": "x"}) for _ in range(100)]))
            provider: Any = openai(Server(streamed(Trickle(body, pause=0.05))), timeout=1)
        else:
            events = an_stream([an_text_block(0, "x" * 50)], "end_turn")
            body = sse_bytes(sse_response(*events))
            provider = anthropic(Server(streamed(Trickle(body, pause=0.05))), timeout=1)
        started = anyio.current_time()
        with anyio.fail_after(5), pytest.raises(LLMTimeoutError, match="within 1"):
            await collect(provider)
        assert anyio.current_time() - started < 2

    async def test_a_silent_stream_ends_at_the_idle_timeout(self) -> None:
        body = sse_bytes(sse_response(oa_chunk({"content": "x"})))
        provider = openai(Server(streamed(Trickle(body, piece=64, hang=True))), idle_timeout=0.5)
        started = anyio.current_time()
        with anyio.fail_after(5), pytest.raises(LLMTimeoutError, match="idle_timeout"):
            await collect(provider)
        assert anyio.current_time() - started < 1

    @pytest.mark.parametrize("kind", ["openai", "anthropic"])
    async def test_no_wait_after_the_last_event_when_the_server_keeps_the_connection(
        self, kind: str
    ) -> None:
        if kind == "openai":
            body = sse_bytes(sse_response(oa_chunk({"content": "hi"}, "stop"), "[DONE]"))
            provider: Any = openai(Server(streamed(Trickle(body, piece=32, hang=True))))
        else:
            body = sse_bytes(sse_response(*an_stream([an_text_block(0, "hi")], "end_turn")))
            provider = anthropic(Server(streamed(Trickle(body, piece=32, hang=True))))
        started = anyio.current_time()
        with anyio.fail_after(1.5):
            events = await collect(provider)
        assert final(events).text == "hi"
        assert anyio.current_time() - started < 0.5


class CountingText(str):
    """A delta text that counts how often it is concatenated onto a growing string."""

    additions = 0

    def __radd__(self, other: str) -> str:
        CountingText.additions += 1
        return str.__add__(other, self)


def test_anthropic_stream_assembly_joins_parts_once() -> None:
    state = _StreamState()
    state.handle(an_stream([], "end_turn")[0])
    state.handle(an_text_block(0, "")[0])
    CountingText.additions = 0
    for _ in range(1000):
        delta = {"type": "text_delta", "text": CountingText("ab")}
        state.handle({"type": "content_block_delta", "index": 0, "delta": delta})
    events = state.handle({"type": "content_block_stop", "index": 0})
    assert events[0]["block"].text == "ab" * 1000
    assert CountingText.additions == 0  # no copy of the whole text per delta


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_the_invalid_arguments_marker_is_never_sent_back(kind: str) -> None:
    raw = '{"city": "Paris",'
    marker = {INVALID_ARGUMENTS_KEY: {"raw": raw, "error": "invalid JSON"}}
    messages = [
        Message(role="user", content="Weather?"),
        Message(
            role="assistant",
            content="",
            tool_calls=[ToolCall(id="call_1", name="get_weather", arguments=marker)],
        ),
        Message(role="tool", content="Error: bad arguments", tool_call_id="call_1"),
    ]
    make = openai if kind == "openai" else anthropic
    payload = make(Server(httpx.Response(500))).build_payload(
        ChatRequest(messages=messages), stream=False
    )
    assert INVALID_ARGUMENTS_KEY not in json.dumps(payload)
    if kind == "openai":
        assert payload["messages"][1]["tool_calls"][0]["function"]["arguments"] == raw
    else:
        assert payload["messages"][1]["content"][0]["input"] == {}


# -- 5. config: Azure, env vars, ${VAR}, request fields, Anthropic caching and thinking ---


async def test_azure_openai_uses_the_deployment_url_api_version_and_api_key_header(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AZURE_OPENAI_API_KEY", KEY)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    server = Server(httpx.Response(200, json=completion({"role": "assistant", "content": "hi"})))
    provider = OpenAIChatProvider(
        {
            "azure_endpoint": "https://contoso.openai.azure.com/",
            "azure_deployment": "gpt4o-prod",
            "api_version": "2024-10-21",
        },
        transport=httpx.MockTransport(server),
    )
    await provider.complete(ChatRequest(messages=[Message(role="user", content="hi")]))
    request = server.requests[0]
    assert str(request.url) == (
        "https://contoso.openai.azure.com/openai/deployments/gpt4o-prod/chat/completions"
        "?api-version=2024-10-21"
    )
    assert request.headers["api-key"] == KEY
    assert "authorization" not in request.headers
    assert server.bodies[0]["model"] == "gpt4o-prod"
    with pytest.raises(ConfigError, match=r"^api_version:"):
        OpenAIChatProvider({"azure_endpoint": "https://x", "azure_deployment": "d"})


async def test_openai_org_and_project_come_from_the_sdk_env_vars(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_ORG_ID", "org-123")
    monkeypatch.setenv("OPENAI_PROJECT_ID", "proj_456")
    server = Server(httpx.Response(200, json={"data": []}))
    await openai(server).list_models()
    assert server.requests[0].headers["openai-organization"] == "org-123"
    assert server.requests[0].headers["openai-project"] == "proj_456"


@pytest.mark.parametrize(("mount", "kind"), [(mount_openai, "openai"), (mount_anthropic, "an")])
async def test_env_references_in_config_are_expanded(
    mount: Any, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MY_LLM_KEY", KEY)
    coordinator = MockCoordinator()
    cleanup = await mount(coordinator, {"api_key": "${MY_LLM_KEY}", "base_url": "http://h/v1"})
    provider = coordinator.mount_history[0]["module"]
    assert provider.http._secrets == (KEY,)
    await cleanup()
    monkeypatch.delenv("MY_LLM_KEY")
    with pytest.raises(ConfigError, match=r"^api_key: environment variable MY_LLM_KEY is not set"):
        await mount(MockCoordinator(), {"api_key": "${MY_LLM_KEY}"})


def test_openai_request_fields_from_config() -> None:
    provider = openai(
        Server(httpx.Response(500)),
        parallel_tool_calls=False,
        max_output_tokens=2048,
        temperature=0.2,
    )
    request = ChatRequest(messages=[Message(role="user", content="hi")], tools=[WEATHER])
    payload = provider.build_payload(request, stream=False)
    assert payload["parallel_tool_calls"] is False
    assert payload["max_completion_tokens"] == 2048
    assert payload["temperature"] == 0.2
    reasoning = provider.build_payload(request, stream=False, reasoning_effort="high")
    assert reasoning["reasoning_effort"] == "high"
    assert "temperature" not in reasoning  # reasoning models reject it


def test_anthropic_caches_the_conversation_prefix() -> None:
    payload = anthropic(Server(httpx.Response(500))).build_payload(
        ChatRequest(messages=tool_history(), tools=[WEATHER]), stream=False
    )
    last = payload["messages"][-1]["content"][-1]
    assert last["type"] == "tool_result"
    assert last["cache_control"] == {"type": "ephemeral"}
    assert payload["tools"][-1]["cache_control"] == {"type": "ephemeral"}
    plain = anthropic(Server(httpx.Response(500)), prompt_caching=False).build_payload(
        ChatRequest(messages=tool_history()), stream=False
    )
    assert "cache_control" not in json.dumps(plain)


async def test_anthropic_thinking_budget_and_tool_choice_are_validated() -> None:
    with pytest.raises(ConfigError, match=r"^thinking_budget_tokens:"):
        anthropic(Server(httpx.Response(500)), thinking_budget_tokens=512)
    with pytest.raises(ConfigError, match="below max_tokens"):
        anthropic(
            Server(httpx.Response(500)),
            extended_thinking=True,
            thinking_budget_tokens=8000,
            max_tokens=4000,
        )
    provider = anthropic(Server(httpx.Response(500)), max_tokens=4000)
    request = ChatRequest(
        messages=[Message(role="user", content="hi")], tools=[WEATHER], tool_choice="required"
    )
    with pytest.raises(InvalidRequestError, match="tool_choice 'any'"):
        provider.build_payload(request, stream=False, extended_thinking=True)
    auto = ChatRequest(messages=[Message(role="user", content="hi")], tools=[WEATHER])
    payload = provider.build_payload(auto, stream=False, extended_thinking=True)
    assert payload["max_tokens"] == 4000  # the configured limit is never raised
    assert payload["thinking"]["budget_tokens"] < 4000


async def test_anthropic_version_is_configurable() -> None:
    server = Server(httpx.Response(200, json={"data": [], "has_more": False}))
    await anthropic(server, anthropic_version="2024-01-01").list_models()
    assert server.requests[0].headers["anthropic-version"] == "2024-01-01"


# -- config schemas -----------------------------------------------------------------------


def test_provider_modules_declare_every_key_they_read() -> None:
    openai_cfg = {
        "api_key": "k",
        "base_url": "http://h/v1",
        "model": "m",
        "timeout": 5,
        "idle_timeout": 1.5,
        "max_retries": 0,
        "parallel_tool_calls": True,
        "assistant_tool_content": None,
        "azure_endpoint": "https://x",
        "azure_deployment": "d",
        "api_version": "2024-10-21",
        "organization": "org",
        "project": "p",
        "max_output_tokens": 10,
        "max_tokens_field": "max_tokens",
        "reasoning_effort": "low",
    }
    anthropic_cfg = {
        "api_key": "k",
        "max_output_tokens": 4000,
        "extended_thinking": True,
        "thinking_budget_tokens": 2048,
        "prompt_caching": False,
        "beta_headers": ["a"],
        "anthropic_version": "2023-06-01",
    }
    for mount, cfg in ((mount_openai, openai_cfg), (mount_anthropic, anthropic_cfg)):
        schema = schema_of(mount)
        assert schema is not None
        assert schema.check(cfg) == []
        problems = schema.check({"timeout": "slow", "bogus": 1})
        assert [(p.key, p.kind) for p in problems] == [("timeout", "type"), ("bogus", "unknown")]
