"""Whole session turns with the real HTTP providers, an ``httpx.MockTransport`` as the server.

Each test opens an ``AmplifierSession`` whose plan names the orchestrator (``loop-basic``
or ``loop-streaming``) and ``context-simple``; the provider and two recording tools are
then mounted on the session's coordinator (the plan-less route), because the providers'
``mount()`` builds its own network transport and a test must hand in the mock one. The
server answers with Chat Completions or Messages API payloads shaped as the public API
references show them; each request body the provider sent is kept and checked field by
field.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.lowlevel
import httpx
import pytest

from amplifier_anyio import AmplifierSession, TurnResult, TurnStatus
from amplifier_anyio.errors import AuthenticationError
from amplifier_anyio.events import (
    CANCEL_REQUESTED,
    CONTENT_BLOCK_DELTA,
    CONTENT_BLOCK_END,
    CONTENT_BLOCK_START,
    EXECUTION_END,
    EXECUTION_START,
    ORCHESTRATOR_COMPLETE,
    PROVIDER_ERROR,
    PROVIDER_REQUEST,
    PROVIDER_RESPONSE,
    SESSION_END,
    THINKING_DELTA,
    TOOL_POST,
    TOOL_PRE,
)
from amplifier_anyio.kernel import current_tool_call
from amplifier_anyio.models import ToolResult
from amplifier_anyio.providers.anthropic import AnthropicProvider
from amplifier_anyio.providers.openai import OpenAIChatProvider
from amplifier_anyio.testing import EventRecorder

pytestmark = pytest.mark.anyio

PROVIDERS = ("openai", "anthropic")
KEYS = {
    "openai": "sk-proj-SESSIONKEY-0123456789abcdefXYZ",
    "anthropic": "sk-ant-api03-SESSIONKEY-0123456789abcdefXYZ",
}
OPENAI_MODEL = "gpt-4o-2024-08-06"
ANTHROPIC_MODEL = "claude-sonnet-4-5-20250929"
SIGNATURE = "EqQBCgIYAhIMSIGNED-thinking-abcdefghijklmnop=="
PROMPT = "What is the weather and the time in Paris?"
ANSWER = "It is 18 °C in Paris and 14:05 there."

WEATHER_ARGS = {"city": "Paris", "unit": "celsius"}
TIME_ARGS = {"zone": "Europe/Paris"}
WEATHER_OUT = {"city": "Paris", "temp_c": 18, "sky": "clear"}
TIME_OUT = "14:05 CET"
CANCELLED = {"error": "Tool execution was cancelled", "cancelled": True, "tool": "get_time"}


def call_ids(kind: str) -> tuple[str, str]:
    """The ids the server gives the weather and the time calls."""
    if kind == "openai":
        return "call_W8yQ2mE4kPz1", "call_T3nR7vB0cXa5"
    return "toolu_01WeatherA1b2c3", "toolu_01TimeD4e5f6g7"


# -- Chat Completions payloads ---------------------------------------------------------------


def oa_usage(prompt: int, completion: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0},
    }


def oa_completion(message: dict[str, Any], finish: str, usage: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT",
        "object": "chat.completion",
        "created": 1741569952,
        "model": OPENAI_MODEL,
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
        "usage": usage,
        "system_fingerprint": "fp_fc9f1d7035",
    }


def oa_chunk(
    delta: dict[str, Any] | None, finish: str | None = None, **extra: Any
) -> dict[str, Any]:
    choices = (
        []
        if delta is None
        else [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]
    )
    return {
        "id": "chatcmpl-stream-7",
        "object": "chat.completion.chunk",
        "created": 1741569952,
        "model": OPENAI_MODEL,
        "system_fingerprint": "fp_fc9f1d7035",
        "choices": choices,
        "usage": None,
        **extra,
    }


def oa_sse(chunks: list[dict[str, Any]], *, done: bool = True) -> bytes:
    text = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks)
    return (text + ("data: [DONE]\n\n" if done else "")).encode()


def pieces(text: str, n: int = 3) -> list[str]:
    """``text`` cut into ``n`` fragments, as a server streams JSON arguments."""
    size = max(1, -(-len(text) // n))
    return [text[i : i + size] for i in range(0, len(text), size)]


def oa_tool_round(kind_ids: tuple[str, str], *, stream: bool) -> httpx.Response:
    weather_id, time_id = kind_ids
    calls = [
        (weather_id, "get_weather", json.dumps(WEATHER_ARGS)),
        (time_id, "get_time", json.dumps(TIME_ARGS)),
    ]
    if not stream:
        message = {
            "role": "assistant",
            "content": None,
            "refusal": None,
            "annotations": [],
            "tool_calls": [
                {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}
                for cid, name, args in calls
            ],
        }
        return httpx.Response(200, json=oa_completion(message, "tool_calls", oa_usage(50, 20)))
    chunks = [oa_chunk({"role": "assistant", "content": None})]
    for index, (cid, name, args) in enumerate(calls):
        opening = {"index": index, "id": cid, "type": "function"}
        chunks.append(
            oa_chunk({"tool_calls": [{**opening, "function": {"name": name, "arguments": ""}}]})
        )
        chunks += [
            oa_chunk({"tool_calls": [{"index": index, "function": {"arguments": part}}]})
            for part in pieces(args)
        ]
    chunks += [oa_chunk({}, "tool_calls"), oa_chunk(None, usage=oa_usage(50, 20))]
    return sse_response(oa_sse(chunks))


def oa_text_round(text: str, *, stream: bool) -> httpx.Response:
    if not stream:
        message: dict[str, Any] = {
            "role": "assistant",
            "content": text,
            "refusal": None,
            "annotations": [],
        }
        return httpx.Response(200, json=oa_completion(message, "stop", oa_usage(90, 12)))
    chunks = [oa_chunk({"role": "assistant", "content": ""})]
    chunks += [oa_chunk({"content": part}) for part in pieces(text, 4)]
    chunks += [oa_chunk({}, "stop"), oa_chunk(None, usage=oa_usage(90, 12))]
    return sse_response(oa_sse(chunks))


# -- Messages API payloads -------------------------------------------------------------------


def an_usage(input_tokens: int, output_tokens: int) -> dict[str, Any]:
    return {
        "input_tokens": input_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": output_tokens,
    }


def an_message(content: list[dict[str, Any]], stop: str, usage: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
        "type": "message",
        "role": "assistant",
        "model": ANTHROPIC_MODEL,
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": usage,
    }


def an_sse(events: list[dict[str, Any]]) -> bytes:
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events).encode()


def an_start(input_tokens: int) -> dict[str, Any]:
    message = an_message([], "", an_usage(input_tokens, 1))
    message["stop_reason"] = None
    return {"type": "message_start", "message": message}


def an_block(
    index: int, block: dict[str, Any], deltas: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    return [
        {"type": "content_block_start", "index": index, "content_block": block},
        *({"type": "content_block_delta", "index": index, "delta": d} for d in deltas),
        {"type": "content_block_stop", "index": index},
    ]


def an_end(stop: str, output_tokens: int) -> list[dict[str, Any]]:
    return [
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop, "stop_sequence": None},
            "usage": {"output_tokens": output_tokens},
        },
        {"type": "message_stop"},
    ]


THINKING = "Two independent lookups; ask for both at once."
PREAMBLE = "Let me check both."


def an_tool_round(kind_ids: tuple[str, str], *, stream: bool) -> httpx.Response:
    weather_id, time_id = kind_ids
    calls = [(weather_id, "get_weather", WEATHER_ARGS), (time_id, "get_time", TIME_ARGS)]
    if not stream:
        content: list[dict[str, Any]] = [
            {"type": "thinking", "thinking": THINKING, "signature": SIGNATURE},
            {"type": "text", "text": PREAMBLE},
            *({"type": "tool_use", "id": c, "name": n, "input": a} for c, n, a in calls),
        ]
        return httpx.Response(200, json=an_message(content, "tool_use", an_usage(40, 30)))
    events = [an_start(40)]
    events += an_block(
        0,
        {"type": "thinking", "thinking": ""},
        [{"type": "thinking_delta", "thinking": part} for part in pieces(THINKING, 2)]
        + [{"type": "signature_delta", "signature": SIGNATURE}],
    )
    events += an_block(1, {"type": "text", "text": ""}, [{"type": "text_delta", "text": PREAMBLE}])
    for offset, (cid, name, args) in enumerate(calls):
        fragments = ["", *pieces(json.dumps(args))]
        events += an_block(
            2 + offset,
            {"type": "tool_use", "id": cid, "name": name, "input": {}},
            [{"type": "input_json_delta", "partial_json": part} for part in fragments],
        )
    events += an_end("tool_use", 30)
    return sse_response(an_sse(events))


def an_text_round(text: str, *, stream: bool) -> httpx.Response:
    if not stream:
        content = [{"type": "text", "text": text}]
        return httpx.Response(200, json=an_message(content, "end_turn", an_usage(100, 15)))
    events = [an_start(100)]
    events += an_block(
        0,
        {"type": "text", "text": ""},
        [{"type": "text_delta", "text": part} for part in pieces(text, 4)],
    )
    events += an_end("end_turn", 15)
    return sse_response(an_sse(events))


def tool_round(kind: str, *, stream: bool) -> httpx.Response:
    build = oa_tool_round if kind == "openai" else an_tool_round
    return build(call_ids(kind), stream=stream)


def text_round(kind: str, text: str = ANSWER, *, stream: bool) -> httpx.Response:
    build = oa_text_round if kind == "openai" else an_text_round
    return build(text, stream=stream)


def usage_of_two_rounds(kind: str) -> tuple[int, int]:
    """(input, output) tokens of a tool round plus a text round."""
    return (50 + 90, 20 + 12) if kind == "openai" else (40 + 100, 30 + 15)


def hanging_round(kind: str) -> tuple[httpx.Response, Body]:
    """A streamed answer that sends its first text fragment, then blocks forever."""
    if kind == "openai":
        data = oa_sse([oa_chunk({"role": "assistant", "content": "Hel"})], done=False)
    else:
        opening = an_block(0, {"type": "text", "text": ""}, [{"type": "text_delta", "text": "Hel"}])
        data = an_sse([an_start(40), *opening[:2]])  # no block stop, no message stop
    body = Body(data, hang=True)
    return sse_response(body), body


def unauthorized(kind: str) -> httpx.Response:
    """A 401 whose message repeats the key, as some servers do (the provider must mask it)."""
    key = KEYS[kind]
    if kind == "openai":
        error = {
            "message": f"Incorrect API key provided: {key}.",
            "type": "invalid_request_error",
            "param": None,
            "code": "invalid_api_key",
        }
        return httpx.Response(401, json={"error": error})
    error = {"type": "authentication_error", "message": f"invalid x-api-key {key}"}
    return httpx.Response(401, json={"type": "error", "error": error})


# -- the mock server -------------------------------------------------------------------------


class Body(httpx.AsyncByteStream):
    """A response body sent in small pieces; may block after them; records being closed."""

    def __init__(self, data: bytes, *, piece: int = 16, hang: bool = False) -> None:
        self.pieces = [data[i : i + piece] for i in range(0, len(data), piece)]
        self.hang = hang
        self.hanging = anyio.Event()
        self.closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for part in self.pieces:
            await anyio.lowlevel.checkpoint()
            yield part
        if self.hang:
            self.hanging.set()
            await anyio.sleep_forever()

    async def aclose(self) -> None:
        self.closed = True


def sse_response(body: bytes | Body) -> httpx.Response:
    stream = body if isinstance(body, Body) else Body(body)
    return httpx.Response(200, stream=stream, headers={"content-type": "text/event-stream"})


class Server:
    """The transport's handler: answers in order and keeps every request's JSON body."""

    def __init__(self, *answers: httpx.Response) -> None:
        self.answers = list(answers)
        self.bodies: list[dict[str, Any]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.bodies.append(json.loads(request.content))
        return self.answers.pop(0)


# -- tools -----------------------------------------------------------------------------------


class Meeting:
    """Two tools wait here for each other: both get through only if they run at once."""

    def __init__(self, expected: int = 2) -> None:
        self.expected = expected
        self.arrived = 0
        self.everyone = anyio.Event()

    async def attend(self) -> None:
        self.arrived += 1
        if self.arrived == self.expected:
            self.everyone.set()
        with anyio.fail_after(10):  # run one after the other, the first would wait forever
            await self.everyone.wait()


class RecordingTool:
    """A tool that records its inputs and call ids; optionally meets others or blocks."""

    def __init__(
        self, name: str, output: Any, *, meeting: Meeting | None = None, block: bool = False
    ) -> None:
        self.name = name
        self.description = f"test tool {name}"
        self.input_schema: dict[str, Any] = {"type": "object", "properties": {}}
        self.output = output
        self.meeting = meeting
        self.block = block
        self.calls: list[tuple[dict[str, Any], str | None]] = []
        self.started = anyio.Event()
        self.finished = False
        self.exited = False

    async def execute(self, input: dict[str, Any]) -> ToolResult:
        call = current_tool_call()
        self.calls.append((dict(input), call.tool_call_id if call else None))
        self.started.set()
        try:
            if self.meeting is not None:
                await self.meeting.attend()
            if self.block:
                await anyio.sleep_forever()
            await anyio.lowlevel.checkpoint()
        finally:
            self.exited = True
        self.finished = True
        return ToolResult(output=self.output)


def two_tools(
    *, meet: bool = True, block_time: bool = False
) -> tuple[RecordingTool, RecordingTool]:
    meeting = Meeting() if meet else None
    weather = RecordingTool("get_weather", WEATHER_OUT, meeting=meeting)
    clock = RecordingTool("get_time", TIME_OUT, meeting=meeting, block=block_time)
    return weather, clock


# -- sessions --------------------------------------------------------------------------------


def make_provider(kind: str, server: Server, hooks: Any) -> OpenAIChatProvider | AnthropicProvider:
    transport = httpx.MockTransport(server)
    if kind == "openai":
        config = {"api_key": KEYS[kind], "base_url": "https://llm.example/v1", "model": "gpt-4o"}
        return OpenAIChatProvider(config, hooks=hooks, transport=transport)
    config = {
        "api_key": KEYS[kind],
        "base_url": "https://anthropic.example",
        "model": ANTHROPIC_MODEL,
    }
    return AnthropicProvider(config, hooks=hooks, transport=transport)


@asynccontextmanager
async def open_session(
    kind: str,
    server: Server,
    tools: tuple[RecordingTool, ...] = (),
    *,
    orchestrator: str = "loop-basic",
    config: dict[str, Any] | None = None,
) -> AsyncIterator[tuple[AmplifierSession, EventRecorder, Any]]:
    """A session whose provider (``kind``) talks to ``server``.

    Yields the session, the recorder of its events and the provider.
    """
    plan: dict[str, Any] = {"session": {"orchestrator": orchestrator, "context": "context-simple"}}
    if config:
        plan["orchestrator"] = {"config": config}
    async with AmplifierSession(plan) as session:
        coordinator = session.coordinator
        recorder = EventRecorder()
        recorder.attach(coordinator.hooks)
        provider = make_provider(kind, server, coordinator.hooks)
        await coordinator.mount("providers", provider, name=provider.name)
        coordinator.register_cleanup(provider.http.aclose)
        for tool in tools:
            await coordinator.mount("tools", tool, name=tool.name)
        yield session, recorder, provider


async def context_of(session: AmplifierSession) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = await session.coordinator.get("context").get_messages()
    return messages


def check_turn_ending(recorder: EventRecorder, status: str, turns: int = 1) -> None:
    """Invariant 1: one orchestrator:complete and one execution:end per turn, last.

    ``session:end`` (the session's cleanup) is the one event allowed after them.
    """
    names = [name for name in recorder.names() if name != SESSION_END]
    assert names.count(EXECUTION_START) == turns
    assert names.count(ORCHESTRATOR_COMPLETE) == turns
    assert names.count(EXECUTION_END) == turns
    assert names[-2:] == [ORCHESTRATOR_COMPLETE, EXECUTION_END]
    assert recorder.get_events(EXECUTION_END)[-1][1]["status"] == status


def check_tool_pairs(messages: list[dict[str, Any]]) -> None:
    """Invariant 2: every assistant tool call answered right after it, in call order."""
    for at, message in enumerate(messages):
        ids = [c["id"] for c in message.get("tool_calls") or []]
        if message["role"] != "assistant" or not ids:
            continue
        answers = messages[at + 1 : at + 1 + len(ids)]
        assert [(m["role"], m.get("tool_call_id")) for m in answers] == [("tool", i) for i in ids]
    answered = {m.get("tool_call_id") for m in messages if m["role"] == "tool"}
    asked = {c["id"] for m in messages for c in m.get("tool_calls") or []}
    assert answered == asked


# -- request-body checks ---------------------------------------------------------------------


def check_openai_round_two(body: dict[str, Any], *, time_content: Any = TIME_OUT) -> None:
    weather_id, time_id = call_ids("openai")
    user, assistant, weather, clock = body["messages"]
    assert user == {"role": "user", "content": PROMPT}
    assert assistant["role"] == "assistant"
    assert assistant["content"] == ""  # "", not null: llama.cpp refuses null (issue 12)
    calls = assistant["tool_calls"]
    assert [(c["id"], c["type"], c["function"]["name"]) for c in calls] == [
        (weather_id, "function", "get_weather"),
        (time_id, "function", "get_time"),
    ]
    arguments = [c["function"]["arguments"] for c in calls]
    assert all(isinstance(a, str) for a in arguments)  # JSON text on the wire, not an object
    assert [json.loads(a) for a in arguments] == [WEATHER_ARGS, TIME_ARGS]
    assert weather["role"] == clock["role"] == "tool"
    assert weather["tool_call_id"] == weather_id
    assert json.loads(weather["content"]) == WEATHER_OUT
    assert clock["tool_call_id"] == time_id
    if isinstance(time_content, dict):
        assert json.loads(clock["content"]) == time_content
    else:
        assert clock["content"] == time_content
    assert [t["function"]["name"] for t in body["tools"]] == ["get_weather", "get_time"]


def check_anthropic_round_two(
    body: dict[str, Any], *, thinking: bool, time_content: Any = TIME_OUT
) -> None:
    weather_id, time_id = call_ids("anthropic")
    user, assistant, results = body["messages"][:3]
    assert user == {"role": "user", "content": [{"type": "text", "text": PROMPT}]}
    assert assistant["role"] == "assistant"
    blocks = assistant["content"]
    if thinking:  # the signed thinking goes back first and exactly as it came
        assert blocks[0] == {"type": "thinking", "thinking": THINKING, "signature": SIGNATURE}
        blocks = blocks[1:]
    assert blocks == [
        {"type": "text", "text": PREAMBLE},
        {"type": "tool_use", "id": weather_id, "name": "get_weather", "input": WEATHER_ARGS},
        {"type": "tool_use", "id": time_id, "name": "get_time", "input": TIME_ARGS},
    ]
    assert results["role"] == "user"
    weather, clock = results["content"]  # ONE user message carries both results, in order
    assert (weather["type"], weather["tool_use_id"]) == ("tool_result", weather_id)
    assert json.loads(weather["content"]) == WEATHER_OUT
    assert (clock["type"], clock["tool_use_id"]) == ("tool_result", time_id)
    if isinstance(time_content, dict):
        assert json.loads(clock["content"]) == time_content
    else:
        assert clock["content"] == time_content
    assert [t["name"] for t in body["tools"]] == ["get_weather", "get_time"]


def check_round_two(kind: str, body: dict[str, Any], *, thinking: bool = True) -> None:
    if kind == "openai":
        check_openai_round_two(body)
    else:
        check_anthropic_round_two(body, thinking=thinking)


def check_parallel_tools(weather: RecordingTool, clock: RecordingTool, kind: str) -> None:
    weather_id, time_id = call_ids(kind)
    assert weather.calls == [(WEATHER_ARGS, weather_id)]
    assert clock.calls == [(TIME_ARGS, time_id)]
    # both got past the meeting, which only happens when they run at the same time
    assert weather.finished
    assert clock.finished


def check_result(result: TurnResult, kind: str) -> None:
    assert result.status is TurnStatus.SUCCESS
    assert result.error is None
    assert result.text == ANSWER
    assert result.turn_count == 2
    expected_in, expected_out = usage_of_two_rounds(kind)
    assert (result.usage.input_tokens, result.usage.output_tokens) == (expected_in, expected_out)
    assert result.usage.total_tokens == expected_in + expected_out


# -- full turns ------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", PROVIDERS)
async def test_full_turn_with_parallel_tool_calls(kind: str) -> None:
    server = Server(tool_round(kind, stream=False), text_round(kind, stream=False))
    weather, clock = two_tools()
    config = {"extended_thinking": True} if kind == "anthropic" else None
    async with open_session(kind, server, (weather, clock), config=config) as (session, rec, _):
        result = await session.run(PROMPT)
        messages = await context_of(session)

    check_result(result, kind)
    check_parallel_tools(weather, clock, kind)
    assert len(server.bodies) == 2
    assert "stream" not in server.bodies[0]
    check_round_two(kind, server.bodies[1])
    if kind == "anthropic":
        assert server.bodies[1]["thinking"] == {
            "type": "enabled",
            "budget_tokens": 8191,
        }  # < max_tokens
    pre = rec.get_events(TOOL_PRE)
    # parallel calls start in any order; each names its call and its place in the batch
    assert {p["index"]: p["tool_call_id"] for _, p in pre} == dict(enumerate(call_ids(kind)))
    assert len({p["parallel_group_id"] for _, p in pre}) == 1
    assert [p["tool_calls"] for _, p in rec.get_events(PROVIDER_RESPONSE)] == [2, 0]
    check_turn_ending(rec, "completed")
    check_tool_pairs(messages)
    assert messages[-1]["role"] == "assistant"
    assert messages[-1]["content"] == [{"type": "text", "text": ANSWER}]


@pytest.mark.parametrize("kind", PROVIDERS)
async def test_full_streaming_turn_assembles_split_tool_arguments(kind: str) -> None:
    server = Server(tool_round(kind, stream=True), text_round(kind, stream=True))
    weather, clock = two_tools()
    async with open_session(kind, server, (weather, clock), orchestrator="loop-streaming") as (
        session,
        rec,
        provider,
    ):
        result = await session.run(PROMPT)
        messages = await context_of(session)

    check_result(result, kind)
    check_parallel_tools(weather, clock, kind)
    assert all(body["stream"] is True for body in server.bodies)
    check_round_two(kind, server.bodies[1])

    starts = [p for _, p in rec.get_events(CONTENT_BLOCK_START)]
    deltas = [p for _, p in rec.get_events(CONTENT_BLOCK_DELTA)]
    ends = [p for _, p in rec.get_events(CONTENT_BLOCK_END)]
    assert all(p["provider"] == provider.name for p in starts + deltas + ends)
    tool_starts = [p for p in starts if p["block_type"] == "tool_call"]
    assert [(p["id"], p["name"]) for p in tool_starts] == list(
        zip(call_ids(kind), ("get_weather", "get_time"), strict=True)
    )
    for start, arguments in zip(tool_starts, (WEATHER_ARGS, TIME_ARGS), strict=True):
        fragments = [
            d["delta"]
            for d in deltas
            if d["index"] == start["index"] and d["block_type"] == "tool_call"
        ]
        assert len(fragments) > 1  # the arguments really arrived split
        assert json.loads("".join(fragments)) == arguments
    ended_calls = [p["block"] for p in ends if p["block"]["type"] == "tool_call"]
    assert [b["input"] for b in ended_calls] == [WEATHER_ARGS, TIME_ARGS]
    text_deltas = [d["delta"] for d in deltas if d["block_type"] == "text"]
    assert "".join(text_deltas).endswith(ANSWER)
    if kind == "anthropic":
        thinking = [p["delta"] for _, p in rec.get_events(THINKING_DELTA)]
        assert "".join(thinking) == THINKING
    check_turn_ending(rec, "completed")
    check_tool_pairs(messages)


# -- cancellation ----------------------------------------------------------------------------


def check_cancelled_stream(
    rec: EventRecorder, body: Body, messages: list[dict[str, Any]], *, requested: bool
) -> None:
    assert body.closed  # leaving the stream closed the HTTP response
    check_turn_ending(rec, "cancelled")
    assert rec.get_events(ORCHESTRATOR_COMPLETE)[-1][1]["status"] == "cancelled"
    assert (CANCEL_REQUESTED in rec.names()) is requested
    first = [p["delta"] for _, p in rec.get_events(CONTENT_BLOCK_DELTA)]
    assert first == ["Hel"]  # the cancel really landed mid-response
    assert messages == [{"role": "user", "content": PROMPT}]  # no half-written answer


@pytest.mark.parametrize("kind", PROVIDERS)
async def test_session_cancel_during_a_stream_closes_the_response(kind: str) -> None:
    answer, body = hanging_round(kind)
    server = Server(answer)
    outcome: list[TurnResult] = []
    async with open_session(kind, server, orchestrator="loop-streaming") as (session, rec, _):

        async def run() -> None:
            outcome.append(await session.run(PROMPT))

        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            await body.hanging.wait()
            await anyio.wait_all_tasks_blocked()
            session.cancel(immediate=True)
        messages = await context_of(session)

    [result] = outcome
    assert result.status is TurnStatus.CANCELLED
    assert result.error is None
    assert result.text == ""
    check_cancelled_stream(rec, body, messages, requested=True)


@pytest.mark.parametrize("kind", PROVIDERS)
async def test_host_cancel_during_a_stream_propagates_and_closes_the_response(kind: str) -> None:
    answer, body = hanging_round(kind)
    server = Server(answer)
    returned: list[TurnResult] = []
    async with open_session(kind, server, orchestrator="loop-streaming") as (session, rec, _):
        host = anyio.CancelScope()

        async def run() -> None:
            with host:
                returned.append(await session.run(PROMPT))

        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            await body.hanging.wait()
            await anyio.wait_all_tasks_blocked()
            host.cancel()
        messages = await context_of(session)

    assert host.cancelled_caught  # the host's cancellation came back out of run()
    assert returned == []
    check_cancelled_stream(rec, body, messages, requested=False)


@pytest.mark.parametrize("orchestrator", ["loop-basic", "loop-streaming"])
@pytest.mark.parametrize("kind", PROVIDERS)
async def test_cancel_during_tools_keeps_finished_result_and_next_request_is_whole(
    kind: str, orchestrator: str
) -> None:
    stream = orchestrator == "loop-streaming"
    server = Server(tool_round(kind, stream=stream), text_round(kind, "Fine.", stream=stream))
    weather, clock = two_tools(meet=False, block_time=True)
    outcome: list[TurnResult] = []
    async with open_session(kind, server, (weather, clock), orchestrator=orchestrator) as (
        session,
        rec,
        _,
    ):

        async def run() -> None:
            outcome.append(await session.run(PROMPT))

        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            await clock.started.wait()
            await anyio.wait_all_tasks_blocked()  # the weather call is done; the clock hangs
            assert weather.finished
            session.cancel(immediate=True)
        cancelled_turn = list(rec.names())
        follow_up = await session.run("And tomorrow?")
        messages = await context_of(session)

    assert outcome[0].status is TurnStatus.CANCELLED
    assert clock.exited  # the hanging tool was interrupted, not left running
    assert not clock.finished
    check_tool_pairs(messages)
    assert cancelled_turn[-2:] == [ORCHESTRATOR_COMPLETE, EXECUTION_END]
    assert follow_up.status is TurnStatus.SUCCESS
    assert follow_up.text == "Fine."
    check_turn_ending(rec, "completed", turns=2)

    body = server.bodies[1]
    if kind == "openai":
        check_openai_round_two_with_cancel(body)
    else:
        check_anthropic_round_two(body, thinking=True, time_content=CANCELLED)
        assert len(body["messages"]) == 4
        assert body["messages"][3] == {
            "role": "user",
            "content": [
                {"type": "text", "text": "And tomorrow?", "cache_control": {"type": "ephemeral"}}
            ],
        }


def check_openai_round_two_with_cancel(body: dict[str, Any]) -> None:
    messages = body["messages"]
    assert len(messages) == 5
    check_openai_round_two({**body, "messages": messages[:4]}, time_content=CANCELLED)
    assert messages[4] == {"role": "user", "content": "And tomorrow?"}


async def test_cancel_while_a_finished_tools_post_hook_runs_keeps_its_result() -> None:
    """The weather tool has returned; a slow ``tool:post`` observer (a log writer, say) is
    still busy with it when the user cancels. The tool finished before the cancel, so its
    real result must reach the context (invariant 3); only the hanging call is cancelled."""
    server = Server(tool_round("openai", stream=False))
    weather, clock = two_tools(meet=False, block_time=True)
    posting = anyio.Event()

    async def slow_observer(event: str, data: dict[str, Any]) -> None:
        if data["tool_name"] == "get_weather":
            posting.set()
            await anyio.Event().wait()  # a write that takes longer than the user waits

    outcome: list[TurnResult] = []
    async with open_session("openai", server, (weather, clock)) as (session, rec, _):
        session.coordinator.hooks.register(TOOL_POST, slow_observer, name="slow-log")

        async def run() -> None:
            outcome.append(await session.run(PROMPT))

        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            await posting.wait()
            await clock.started.wait()
            session.cancel(immediate=True)
        messages = await context_of(session)

    assert outcome[0].status is TurnStatus.CANCELLED
    assert weather.finished
    check_turn_ending(rec, "cancelled")
    check_tool_pairs(messages)
    results = {m["tool_call_id"]: m["content"] for m in messages if m["role"] == "tool"}
    weather_id, time_id = call_ids("openai")
    assert json.loads(results[time_id]) == CANCELLED
    assert json.loads(results[weather_id]) == WEATHER_OUT


# -- provider errors -------------------------------------------------------------------------


@pytest.mark.parametrize("orchestrator", ["loop-basic", "loop-streaming"])
@pytest.mark.parametrize("kind", PROVIDERS)
async def test_unauthorized_provider_ends_the_turn_with_an_error(
    kind: str, orchestrator: str
) -> None:
    server = Server(unauthorized(kind))
    async with open_session(kind, server, orchestrator=orchestrator) as (session, rec, provider):
        result = await session.run(PROMPT)
        messages = await context_of(session)

    assert result.status is TurnStatus.ERROR
    assert isinstance(result.error, AuthenticationError)
    assert result.error.status_code == 401
    assert len(server.bodies) == 1  # a 401 is not retried
    [(_, error)] = rec.get_events(PROVIDER_ERROR)
    assert error["provider"] == provider.name
    assert error["status_code"] == 401
    assert error["retryable"] is False
    assert error["error"]["type"] == "AuthenticationError"
    assert [p["iteration"] for _, p in rec.get_events(PROVIDER_REQUEST)] == [0]
    check_turn_ending(rec, "error")
    key = KEYS[kind]
    assert all(key not in repr(data) for _, data in rec.events)
    assert key not in str(result.error)
    assert messages == [{"role": "user", "content": PROMPT}]
