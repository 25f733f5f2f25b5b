"""Tool-call arguments stream as ``content_block:delta`` events while the model writes them.

A loop-streaming turn over each wire format — Chat Completions, Anthropic Messages,
Responses — whose first answer is one tool call with its arguments split over several
events: a UI listening to ``content_block:delta`` sees the call build up, piece by piece,
named by its call id, before the tool runs.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

import httpx
import pytest

from _responses_wire import function_call, message, response_body, sse, stream_events
from amplifier_anyio import AmplifierSession, TurnStatus
from amplifier_anyio.events import CONTENT_BLOCK_DELTA, CONTENT_BLOCK_START, TOOL_PRE
from amplifier_anyio.models import ToolResult
from amplifier_anyio.providers.anthropic import AnthropicProvider
from amplifier_anyio.providers.openai import OpenAIChatProvider
from amplifier_anyio.testing import EventRecorder

pytestmark = pytest.mark.anyio

ARGUMENTS = '{"path": "notes/today.md", "content": "a longer text, written piece by piece"}'
PIECES = [ARGUMENTS[i : i + 9] for i in range(0, len(ARGUMENTS), 9)]


def chat_streams() -> list[bytes]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return f"data: {json.dumps({'id': 'c', 'model': 'm', 'choices': [choice]})}\n\n"

    start = {
        "index": 0,
        "id": "call_w",
        "type": "function",
        "function": {"name": "write", "arguments": ""},
    }
    parts = [chunk({"tool_calls": [start]})]
    parts += [chunk({"tool_calls": [{"index": 0, "function": {"arguments": p}}]}) for p in PIECES]
    parts.append(chunk({}, "tool_calls"))
    answer = [chunk({"content": "Written."}), chunk({}, "stop")]
    return [
        ("".join(parts) + "data: [DONE]\n\n").encode(),
        ("".join(answer) + "data: [DONE]\n\n").encode(),
    ]


def anthropic_streams() -> list[bytes]:
    def event(kind: str, **data: Any) -> str:
        return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n"

    start = {
        "id": "msg",
        "type": "message",
        "role": "assistant",
        "model": "claude",
        "content": [],
        "usage": {"input_tokens": 5, "output_tokens": 1},
    }
    use = {"type": "tool_use", "id": "toolu_w", "name": "write", "input": {}}
    first = [
        event("message_start", message=start),
        event("content_block_start", index=0, content_block=use),
    ]
    first += [
        event("content_block_delta", index=0, delta={"type": "input_json_delta", "partial_json": p})
        for p in PIECES
    ]
    first += [
        event("content_block_stop", index=0),
        event("message_delta", delta={"stop_reason": "tool_use"}, usage={"output_tokens": 9}),
        event("message_stop"),
    ]
    text = {"type": "text", "text": ""}
    second = [
        event("message_start", message=start),
        event("content_block_start", index=0, content_block=text),
        event("content_block_delta", index=0, delta={"type": "text_delta", "text": "Written."}),
        event("content_block_stop", index=0),
        event("message_delta", delta={"stop_reason": "end_turn"}, usage={"output_tokens": 2}),
        event("message_stop"),
    ]
    return ["".join(first).encode(), "".join(second).encode()]


def responses_streams() -> list[bytes]:
    call = response_body([function_call("call_w", "write", ARGUMENTS)])
    return [
        sse(stream_events(call, piece=9)),
        sse(stream_events(response_body([message("Written.")]))),
    ]


WIRES = {
    "chat": (OpenAIChatProvider, {"base_url": "https://x.example/v1"}, chat_streams, "call_w"),
    "anthropic": (
        AnthropicProvider,
        {"base_url": "https://x.example"},
        anthropic_streams,
        "toolu_w",
    ),
    "responses": (
        OpenAIChatProvider,
        {"base_url": "https://x.example/v1", "api": "responses"},
        responses_streams,
        "call_w",
    ),
}


class Write:
    name = "write"
    description = "write a file"
    input_schema: ClassVar[dict[str, Any]] = {"type": "object"}

    async def execute(self, input: dict[str, Any]) -> ToolResult:
        return ToolResult(output="ok")


@pytest.mark.parametrize("wire", sorted(WIRES))
async def test_tool_arguments_stream_as_they_form(wire: str) -> None:
    cls, config, streams, call_id = WIRES[wire]
    bodies = streams()

    def answer(_request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200, content=bodies.pop(0), headers={"content-type": "text/event-stream"}
        )

    plan = {"session": {"orchestrator": "loop-streaming", "context": "context-simple"}}
    async with AmplifierSession(plan) as session:
        coordinator = session.coordinator
        recorder = EventRecorder()
        recorder.attach(coordinator.hooks)
        provider = cls({"api_key": "k", **config}, transport=httpx.MockTransport(answer))
        await coordinator.mount("providers", provider, name="p")
        coordinator.register_cleanup(provider.http.aclose)
        await coordinator.mount("tools", Write(), name="write")
        result = await session.run("write it")

    assert result.status is TurnStatus.SUCCESS, result.error
    events = recorder.get_events()
    starts = [
        d for _, d in recorder.get_events(CONTENT_BLOCK_START) if d["block_type"] == "tool_call"
    ]
    assert [(s["id"], s["name"]) for s in starts] == [(call_id, "write")]
    deltas = [
        d for _, d in recorder.get_events(CONTENT_BLOCK_DELTA) if d["block_type"] == "tool_call"
    ]
    assert [d["delta"] for d in deltas] == PIECES
    assert {d["id"] for d in deltas} == {call_id}
    # every piece was seen before the tool ran
    first_pre = next(i for i, (name, _) in enumerate(events) if name == TOOL_PRE)
    last_piece = max(
        i
        for i, (name, data) in enumerate(events)
        if name == CONTENT_BLOCK_DELTA and data["block_type"] == "tool_call"
    )
    assert last_piece < first_pre
