"""SSE lines end at ``\\r\\n``, ``\\n`` or ``\\r`` only, however the body is cut into chunks.

A JSON string may hold U+2028, U+2029 or U+0085 raw (``json.dumps(..., ensure_ascii=False)``,
as many servers send); ``httpx``'s ``aiter_lines()`` splits there, so such a delta used to
become two broken lines and a ``MalformedResponseError``. The streams now cut lines with
:class:`LineSplitter`.
"""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from amplifier_anyio.models import ChatRequest, Message
from amplifier_anyio.providers._sse import LineSplitter
from amplifier_anyio.providers.anthropic import AnthropicProvider
from amplifier_anyio.providers.openai import OpenAIChatProvider

pytestmark = pytest.mark.anyio

TEXT = "line\u2028separator, paragraph\u2029separator, next\x85line, form\x0cfeed"


def openai_stream() -> bytes:
    chunks = [
        {"choices": [{"index": 0, "delta": {"role": "assistant", "content": TEXT}}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
    ]
    frames = [f"data: {json.dumps(c, ensure_ascii=False)}\r\n\r\n" for c in chunks]
    return ("".join(frames) + "data: [DONE]\r\n\r\n").encode()


def anthropic_stream() -> bytes:
    events: list[dict[str, Any]] = [
        {"type": "message_start", "message": {"id": "m", "model": "c", "content": []}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text"}},
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "text_delta", "text": TEXT},
        },
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {}},
        {"type": "message_stop"},
    ]
    return "".join(
        f"event: {e['type']}\rdata: {json.dumps(e, ensure_ascii=False)}\r\r" for e in events
    ).encode()


class Pieces(httpx.AsyncByteStream):
    """The body in pieces of ``size`` bytes (a multi-byte character may be cut)."""

    def __init__(self, data: bytes, size: int) -> None:
        self.parts = [data[i : i + size] for i in range(0, len(data), size)]

    async def __aiter__(self) -> Any:
        for part in self.parts:
            yield part


@pytest.mark.parametrize("size", [1, 7, 4096])
@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_raw_unicode_line_separators_inside_json_survive_a_stream(
    kind: str, size: int
) -> None:
    body = openai_stream() if kind == "openai" else anthropic_stream()

    def server(request: httpx.Request) -> httpx.Response:
        headers = {"content-type": "text/event-stream; charset=utf-8"}
        return httpx.Response(200, stream=Pieces(body, size), headers=headers)

    transport = httpx.MockTransport(server)
    provider = make_provider(kind, transport)
    request = ChatRequest(messages=[Message(role="user", content="hi")])
    try:
        async with provider.open_stream(request) as events:
            final = [e["response"] async for e in events if e["type"] == "response"]
    finally:
        await provider.http.aclose()
    assert [r.text for r in final] == [TEXT]


def make_provider(kind: str, transport: httpx.MockTransport) -> Any:
    provider: Any
    if kind == "openai":
        provider = OpenAIChatProvider(
            {"api_key": "k", "base_url": "http://x/v1"}, transport=transport
        )
    else:
        provider = AnthropicProvider({"api_key": "k", "base_url": "http://x"}, transport=transport)
    return provider


@pytest.mark.parametrize("size", [1, 2, 4096])
@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_a_byte_order_mark_before_the_first_event_loses_nothing(kind: str, size: int) -> None:
    body = b"\xef\xbb\xbf" + (openai_stream() if kind == "openai" else anthropic_stream())

    def server(request: httpx.Request) -> httpx.Response:
        headers = {"content-type": "text/event-stream; charset=utf-8"}
        return httpx.Response(200, stream=Pieces(body, size), headers=headers)

    provider = make_provider(kind, httpx.MockTransport(server))
    request = ChatRequest(messages=[Message(role="user", content="hi")])
    try:
        async with provider.open_stream(request) as events:
            final = [e["response"] async for e in events if e["type"] == "response"]
    finally:
        await provider.http.aclose()
    assert [r.text for r in final] == [TEXT]  # the first event carried the text


def test_only_a_leading_byte_order_mark_is_dropped() -> None:
    splitter = LineSplitter()
    assert splitter.feed("") == []
    assert splitter.feed("\ufeff") == []
    assert splitter.feed("data: \ufeffx\n\ufeffy\n") == ["data: \ufeffx", "\ufeffy"]


LINE_TEXT = st.text(alphabet=st.sampled_from("ab:\r\n\u2028\x85 "), max_size=60)


@given(text=LINE_TEXT, cuts=st.lists(st.integers(min_value=0, max_value=60), max_size=8))
def test_any_split_gives_the_lines_of_the_whole(text: str, cuts: list[int]) -> None:
    points = sorted({min(c, len(text)) for c in cuts})
    pieces = [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True)]
    splitter = LineSplitter()
    lines = [line for piece in pieces for line in splitter.feed(piece)] + splitter.flush()
    expected = re.split(r"\r\n|\r|\n", text)
    if expected[-1] == "":
        expected.pop()  # a final terminator ends the last line; it starts no new one
    assert lines == expected
