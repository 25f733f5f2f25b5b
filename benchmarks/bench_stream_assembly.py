"""Stream assembly against answer size: ``python -m benchmarks.bench_stream_assembly``.

Each provider streams a text answer of 1, 2, 4, 8 and 16 MB in 64-byte deltas through an
``httpx.MockTransport``; the time from the first byte to the final ``ChatResponse`` is
measured and the log-log slope over the sizes is reported (1.0 is linear; the issue asks
for at most 1.2). A report, not a timed test: ``--quick`` stops at 4 MB.
"""

from __future__ import annotations

import json
import math
import sys
import time
from typing import Any

import anyio
import httpx

from amplifier_anyio.models import ChatRequest, Message
from amplifier_anyio.providers.anthropic import AnthropicProvider
from amplifier_anyio.providers.openai import OpenAIChatProvider

MB = 1 << 20
DELTA = 64
REQUEST = ChatRequest(messages=[Message(role="user", content="Write a lot.")])


def openai_body(size: int) -> bytes:
    piece = "x" * DELTA
    chunk = json.dumps({"choices": [{"index": 0, "delta": {"content": piece}}]})
    frames = [f"data: {chunk}\n\n"] * (size // DELTA)
    end = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
    frames += [f"data: {json.dumps(end)}\n\n", "data: [DONE]\n\n"]
    return "".join(frames).encode()


def anthropic_body(size: int) -> bytes:
    def frame(event: dict[str, Any]) -> str:
        return f"event: {event['type']}\ndata: {json.dumps(event)}\n\n"

    start = {"id": "msg", "model": "m", "content": [], "usage": {"input_tokens": 1}}
    delta = frame(
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "text_delta", "text": "x" * DELTA},
        }
    )
    frames = [
        frame({"type": "message_start", "message": start}),
        frame({"type": "content_block_start", "index": 0, "content_block": {"type": "text"}}),
        *([delta] * (size // DELTA)),
        frame({"type": "content_block_stop", "index": 0}),
        frame({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {}}),
        frame({"type": "message_stop"}),
    ]
    return "".join(frames).encode()


async def assemble(kind: str, body: bytes) -> float:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=body, headers={"content-type": "text/event-stream"})

    transport = httpx.MockTransport(answer)
    provider: Any
    if kind == "openai":
        provider = OpenAIChatProvider(
            {"api_key": "k", "base_url": "http://b/v1"}, transport=transport
        )
    else:
        provider = AnthropicProvider({"api_key": "k", "base_url": "http://b"}, transport=transport)
    started = time.perf_counter()
    try:
        async with provider.open_stream(REQUEST) as events:
            async for event in events:
                if event["type"] == "response":
                    final = event["response"]
    finally:
        await provider.http.aclose()
    elapsed = time.perf_counter() - started
    assert len(final.text) >= (len(body) // 4), "the answer was not assembled"
    return elapsed


def slope(points: list[tuple[int, float]]) -> float:
    xs = [math.log(size) for size, _ in points]
    ys = [math.log(seconds) for _, seconds in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mx) ** 2 for x in xs
    )


def run(sizes_mb: tuple[int, ...] = (1, 2, 4, 8, 16)) -> dict[str, Any]:
    """Seconds per size and the log-log slope, for each provider."""
    report: dict[str, Any] = {}
    for kind, build in (("openai", openai_body), ("anthropic", anthropic_body)):
        points = []
        for mb in sizes_mb:
            body = build(mb * MB)
            seconds = min(anyio.run(assemble, kind, body) for _ in range(2))
            points.append((mb * MB, seconds))
            print(f"{kind:9} {mb:3d} MB  {seconds:7.3f} s", flush=True)
        report[kind] = {"seconds": {s // MB: t for s, t in points}, "slope": slope(points)}
        print(f"{kind:9} log-log slope {report[kind]['slope']:.2f}", flush=True)
    return report


if __name__ == "__main__":
    run((1, 2, 4) if "--quick" in sys.argv else (1, 2, 4, 8, 16))
