"""Fuzz: whatever a server answers with HTTP 200, a provider returns a well-formed
``ChatResponse`` or raises an ``LLMError`` — never ``TypeError``, ``KeyError``…

Bodies are realistic answers with one to three fields replaced by any JSON value or
removed, answers of any JSON shape, and bytes that are not JSON; each goes through
``complete()`` (and, for the stream property, ``stream()``) over an
``httpx.MockTransport``. A second property cuts a recorded SSE stream into arbitrary
TCP-sized pieces (inside a UTF-8 character, inside ``\\r\\n``) and checks the assembled
response does not depend on the cut.

Examples per test follow the Hypothesis profile: ``ci`` runs 1 000 bodies per provider
through ``complete()`` and 300 through ``stream()``; other profiles their share
(``tiers.examples``).
"""

from __future__ import annotations

import copy
import itertools
import json
from collections.abc import AsyncIterator
from typing import Any

import anyio.lowlevel
import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amplifier_anyio.errors import LLMError
from amplifier_anyio.models import (
    ChatRequest,
    ChatResponse,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
)
from amplifier_anyio.providers.anthropic import AnthropicProvider
from amplifier_anyio.providers.openai import OpenAIChatProvider
from tiers import examples

pytestmark = pytest.mark.anyio

BODY_EXAMPLES = examples(1000)
STREAM_EXAMPLES = examples(300)
fuzz = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
REQUEST = ChatRequest(messages=[Message(role="user", content="Weather in Paris?")])

OPENAI_BODY: dict[str, Any] = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "model": "gpt-4o",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": "Checking.",
                "refusal": None,
                "reasoning_content": "think",
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                    }
                ],
            },
            "finish_reason": "tool_calls",
        }
    ],
    "usage": {
        "prompt_tokens": 10,
        "completion_tokens": 5,
        "total_tokens": 15,
        "prompt_tokens_details": {"cached_tokens": 2},
        "completion_tokens_details": {"reasoning_tokens": 1},
    },
}
ANTHROPIC_BODY: dict[str, Any] = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "claude-x",
    "content": [
        {"type": "thinking", "thinking": "hmm", "signature": "sig"},
        {"type": "redacted_thinking", "data": "xyz"},
        {"type": "text", "text": "Checking."},
        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
    ],
    "stop_reason": "tool_use",
    "usage": {
        "input_tokens": 10,
        "output_tokens": 5,
        "cache_read_input_tokens": 1,
        "cache_creation_input_tokens": 0,
    },
}

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=6,
)


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value inside ``value`` (dict keys and list indexes)."""
    found = [prefix] if prefix else []
    if isinstance(value, dict):
        for key, item in value.items():
            found += paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += paths(item, (*prefix, index))
    return found


@st.composite
def mutated(draw: st.DrawFn, base: dict[str, Any]) -> Any:
    """``base`` with one to three values replaced by any JSON value, or removed."""
    body = copy.deepcopy(base)
    for _ in range(draw(st.integers(1, 3))):
        candidates = paths(body)
        if not candidates:
            break
        path = draw(st.sampled_from(candidates))
        parent = body
        for step in path[:-1]:
            parent = parent[step]
        if draw(st.booleans()) and isinstance(parent, dict):
            del parent[path[-1]]
        else:
            parent[path[-1]] = draw(json_values)
    return body


def bodies(base: dict[str, Any]) -> st.SearchStrategy[bytes]:
    as_json = (mutated(base) | json_values).map(lambda b: json.dumps(b).encode())
    return as_json | st.binary(max_size=40)


def check_well_formed(response: ChatResponse) -> None:
    """What the engine relies on: text is text, calls have ids, names and dict arguments."""
    assert isinstance(response, ChatResponse)
    assert isinstance(response.text, str)
    for block in response.content:
        if isinstance(block, TextBlock):
            assert isinstance(block.text, str)
        elif isinstance(block, ThinkingBlock):
            assert isinstance(block.thinking, str)
        elif isinstance(block, ToolCallBlock):
            assert isinstance(block.input, dict)
    for call in response.tool_calls or []:
        assert isinstance(call.id, str)
        assert isinstance(call.name, str)
        assert isinstance(call.arguments, dict)
    assert response.finish_reason is None or isinstance(response.finish_reason, str)
    if response.usage is not None:
        assert isinstance(response.usage.input_tokens, int)
        assert isinstance(response.usage.output_tokens, int)


def make(kind: str, body: bytes | httpx.AsyncByteStream, **headers: str) -> Any:
    def answer(request: httpx.Request) -> httpx.Response:
        if isinstance(body, bytes):
            return httpx.Response(200, content=body, headers=headers)
        return httpx.Response(200, stream=body, headers=headers)

    config = {"api_key": "sk-fuzz-0123456789", "max_retries": 0}
    transport = httpx.MockTransport(answer)
    if kind == "openai":
        return OpenAIChatProvider({**config, "base_url": "http://fuzz/v1"}, transport=transport)
    return AnthropicProvider({**config, "base_url": "http://fuzz"}, transport=transport)


async def outcome(kind: str, body: bytes) -> None:
    provider = make(kind, body)
    try:
        response = await provider.complete(REQUEST)
    except LLMError:
        return
    finally:
        await provider.http.aclose()
    check_well_formed(response)


@settings(fuzz, max_examples=BODY_EXAMPLES)
@given(body=bodies(OPENAI_BODY))
async def test_any_openai_200_body_is_a_response_or_an_llm_error(body: bytes) -> None:
    await outcome("openai", body)


@settings(fuzz, max_examples=BODY_EXAMPLES)
@given(body=bodies(ANTHROPIC_BODY))
async def test_any_anthropic_200_body_is_a_response_or_an_llm_error(body: bytes) -> None:
    await outcome("anthropic", body)


# -- streams ---------------------------------------------------------------------------


def openai_events() -> list[dict[str, Any]]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": "chatcmpl-s",
            "model": "gpt-4o",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }

    call = {"index": 0, "id": "call_1", "type": "function"}
    return [
        chunk({"role": "assistant", "reasoning_content": "thé"}),
        chunk({"content": "18 °C à "}),
        chunk({"content": "Paris"}),
        chunk({"tool_calls": [{**call, "function": {"name": "get_weather", "arguments": ""}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"city": '}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"Zürich"}'}}]}),
        chunk({}, "tool_calls"),
        {"id": "chatcmpl-s", "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 4}},
    ]


USAGE = {"output_tokens": 9}


def anthropic_events() -> list[dict[str, Any]]:
    def start(index: int, block: dict[str, Any]) -> dict[str, Any]:
        return {"type": "content_block_start", "index": index, "content_block": block}

    def delta(index: int, kind: str, field: str, text: str) -> dict[str, Any]:
        return {"type": "content_block_delta", "index": index, "delta": {"type": kind, field: text}}

    def stop(index: int) -> dict[str, Any]:
        return {"type": "content_block_stop", "index": index}

    tool = {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}
    message = {**ANTHROPIC_BODY, "content": [], "stop_reason": None}
    return [
        {"type": "message_start", "message": message},
        start(0, {"type": "thinking", "thinking": ""}),
        delta(0, "thinking_delta", "thinking", "thé"),
        delta(0, "signature_delta", "signature", "sig"),
        stop(0),
        start(1, {"type": "text", "text": ""}),
        delta(1, "text_delta", "text", "18 °C à "),
        {"type": "ping"},
        delta(1, "text_delta", "text", "Paris"),
        stop(1),
        start(2, tool),
        delta(2, "input_json_delta", "partial_json", '{"city": '),
        delta(2, "input_json_delta", "partial_json", '"Zürich"}'),
        stop(2),
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use"},
            "usage": {"output_tokens": 9},
        },
        {"type": "message_stop"},
    ]


def recorded(kind: str, newline: str) -> bytes:
    if kind == "openai":
        frames = [f"data: {json.dumps(e, ensure_ascii=False)}" for e in openai_events()]
        frames.append("data: [DONE]")
    else:
        frames = [
            f"event: {e['type']}{newline}data: {json.dumps(e, ensure_ascii=False)}"
            for e in anthropic_events()
        ]
    return "".join(f"{frame}{newline}{newline}" for frame in frames).encode()


class Pieces(httpx.AsyncByteStream):
    def __init__(self, data: bytes, cuts: list[int]) -> None:
        bounds = [0, *sorted({c for c in cuts if 0 < c < len(data)}), len(data)]
        self.pieces = [data[a:b] for a, b in itertools.pairwise(bounds)]

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for piece in self.pieces:
            await anyio.lowlevel.checkpoint()
            yield piece


async def streamed(kind: str, body: httpx.AsyncByteStream) -> ChatResponse:
    provider = make(kind, body, **{"content-type": "text/event-stream"})
    try:
        async with provider.open_stream(REQUEST) as events:
            items = [event async for event in events]
    finally:
        await provider.http.aclose()
    assert items[-1]["type"] == "response"
    response: ChatResponse = items[-1]["response"]
    return response


@settings(fuzz, max_examples=STREAM_EXAMPLES)
@given(
    kind=st.sampled_from(["openai", "anthropic"]),
    newline=st.sampled_from(["\n", "\r\n"]),
    cuts=st.lists(st.integers(0, 4000), max_size=60),
)
async def test_a_stream_cut_into_any_pieces_gives_the_same_response(
    kind: str, newline: str, cuts: list[int]
) -> None:
    data = recorded(kind, newline)
    whole = await streamed(kind, Pieces(data, []))
    assert "18 °C à Paris" in whole.text
    assert whole.tool_calls is not None
    assert whole.tool_calls[0].arguments == {"city": "Zürich"}
    assert await streamed(kind, Pieces(data, cuts)) == whole


def stream_bodies(kind: str) -> st.SearchStrategy[bytes]:
    events = openai_events() if kind == "openai" else anthropic_events()

    @st.composite
    def body(draw: st.DrawFn) -> bytes:
        chosen = copy.deepcopy(events)
        index = draw(st.integers(0, len(chosen) - 1))
        chosen[index] = draw(mutated(chosen[index]) | json_values)
        frames = [f"data: {json.dumps(e)}\n\n" for e in chosen]
        if kind == "openai":
            frames.append("data: [DONE]\n\n")
        return "".join(frames).encode()

    return body()


def kinds_and_stream_bodies() -> st.SearchStrategy[tuple[str, bytes]]:
    return st.sampled_from(["openai", "anthropic"]).flatmap(
        lambda kind: st.tuples(st.just(kind), stream_bodies(kind))
    )


@settings(fuzz, max_examples=STREAM_EXAMPLES)
@given(case=kinds_and_stream_bodies())
async def test_any_stream_event_is_a_response_or_an_llm_error(case: tuple[str, bytes]) -> None:
    # Everything is drawn before the test's coroutine starts: a draw inside it (st.data())
    # may raise Hypothesis's StopTest, a BaseException that kills the anyio runner task on
    # asyncio ("Task exception was never retrieved ... StopTest" at exit).
    kind, body = case
    try:
        response = await streamed(kind, Pieces(body, []))
    except LLMError:
        return
    check_well_formed(response)
