"""Anthropic server tools (web search) across a ``pause_turn``: the blocks go back unchanged.

The server (an ``httpx.MockTransport``) first answers with a web search the API ran itself —
``text``, ``server_tool_use`` and ``web_search_tool_result`` blocks — and ``stop_reason:
pause_turn``; the turn engine continues, and the second request must carry that paused
answer with every block exactly as it came, in order. Before server-tool blocks were kept
(``ProviderBlock``), they were dropped and the continuation sent back only the text.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import httpx
import pytest

from amplifier_anyio import AmplifierSession, TurnStatus
from amplifier_anyio.events import CONTENT_BLOCK_END
from amplifier_anyio.models import ProviderBlock, structure
from amplifier_anyio.providers.anthropic import AnthropicProvider
from amplifier_anyio.providers.anthropic import to_wire_messages as anthropic_wire
from amplifier_anyio.providers.openai import to_wire_messages as openai_wire
from amplifier_anyio.testing import EventRecorder

pytestmark = pytest.mark.anyio

PROMPT = "What changed in the latest trio release?"
ANSWER = "trio 0.27 dropped Python 3.8 support."
SEARCH_INPUT = {"query": "trio latest release notes"}
PAUSED: list[dict[str, Any]] = [
    {"type": "text", "text": "Let me search for that."},
    {
        "type": "server_tool_use",
        "id": "srvtoolu_01WYG3ziw53XMcoyKL4XcZmE",
        "name": "web_search",
        "input": SEARCH_INPUT,
    },
    {
        "type": "web_search_tool_result",
        "tool_use_id": "srvtoolu_01WYG3ziw53XMcoyKL4XcZmE",
        "content": [
            {
                "type": "web_search_result",
                "url": "https://trio.readthedocs.io/en/stable/history.html",
                "title": "Release history - Trio",
                "encrypted_content": "EqgfCioIARgBIiQ3YTAwMjY1Mi1mZjM5LTQ1NGUtODgx",
                "page_age": "October 2, 2026",
            }
        ],
    },
]


def message(content: list[dict[str, Any]], stop: str) -> dict[str, Any]:
    return {
        "id": "msg_01Server",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {
            "input_tokens": 30,
            "output_tokens": 20,
            "server_tool_use": {"web_search_requests": 1},
        },
    }


def sse(content: list[dict[str, Any]], stop: str) -> bytes:
    start = message([], stop)
    start["stop_reason"] = None
    events: list[dict[str, Any]] = [{"type": "message_start", "message": start}]
    for index, block in enumerate(content):
        if block["type"] == "text":
            opening, deltas = (
                {"type": "text", "text": ""},
                [{"type": "text_delta", "text": block["text"]}],
            )
        elif block["type"] == "server_tool_use":  # its input streams as JSON, in two parts
            opening = {**block, "input": {}}
            raw = json.dumps(block["input"])
            deltas = [
                {"type": "input_json_delta", "partial_json": part} for part in (raw[:10], raw[10:])
            ]
        else:  # a result block arrives whole at its start
            opening, deltas = block, []
        events.append({"type": "content_block_start", "index": index, "content_block": opening})
        events += [{"type": "content_block_delta", "index": index, "delta": d} for d in deltas]
        events.append({"type": "content_block_stop", "index": index})
    events.append(
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop, "stop_sequence": None},
            "usage": {"output_tokens": 20},
        }
    )
    events.append({"type": "message_stop"})
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events).encode()


class Server:
    """Answers the paused search, then the final text; keeps each request body."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        self.bodies.append(body)
        content, stop = (
            (PAUSED, "pause_turn")
            if len(self.bodies) == 1
            else ([{"type": "text", "text": ANSWER}], "end_turn")
        )
        if body.get("stream"):
            headers = {"content-type": "text/event-stream"}
            return httpx.Response(200, content=sse(content, stop), headers=headers)
        return httpx.Response(200, json=message(content, stop))


def without_cache_marks(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The blocks without the ``cache_control`` prompt caching adds to the last one."""
    blocks = copy.deepcopy(blocks)
    assert blocks[-1].pop("cache_control", None) in (None, {"type": "ephemeral"})
    return blocks


@pytest.mark.parametrize("orchestrator", ["loop-basic", "loop-streaming"])
async def test_pause_turn_sends_the_server_tool_blocks_back_unchanged(orchestrator: str) -> None:
    server = Server()
    plan = {"session": {"orchestrator": orchestrator, "context": "context-simple"}}
    async with AmplifierSession(plan) as session:
        recorder = EventRecorder()
        recorder.attach(session.coordinator.hooks)
        provider = AnthropicProvider(
            {"api_key": "sk-ant-test-key-0123456789", "base_url": "https://anthropic.example"},
            hooks=session.coordinator.hooks,
            transport=httpx.MockTransport(server),
        )
        await session.coordinator.mount("providers", provider, name=provider.name)
        session.coordinator.register_cleanup(provider.http.aclose)
        result = await session.run(PROMPT)
        stored = await session.coordinator.get("context").get_messages()

    assert result.status is TurnStatus.SUCCESS, result.error
    assert result.text == ANSWER
    assert len(server.bodies) == 2
    user, paused = server.bodies[1]["messages"]
    assert user["role"] == "user"
    assert paused["role"] == "assistant"
    assert without_cache_marks(paused["content"]) == PAUSED  # every block, verbatim, in order
    # the context keeps them as opaque provider blocks, which round-trip
    kept = [structure(b, ProviderBlock) for b in stored[1]["content"][1:] if b["type"] != "text"]
    assert [b.data for b in kept] == PAUSED[1:]
    assert all(b.provider == "anthropic" for b in kept)
    if orchestrator == "loop-streaming":
        ended = [p["block"] for _, p in recorder.get_events(CONTENT_BLOCK_END)]
        assert [b["type"] for b in ended[:3]] == ["text", "provider_block", "provider_block"]
        assert ended[1]["data"]["input"] == SEARCH_INPUT  # assembled from the JSON deltas


def test_a_provider_block_goes_only_to_its_own_provider() -> None:
    """A conversation moved to another provider: OpenAI never gets Anthropic's blocks, and
    Anthropic never gets a block recorded for another provider."""
    paused = {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Let me search for that."},
            *({"type": "provider_block", "provider": "anthropic", "data": b} for b in PAUSED[1:]),
            {"type": "provider_block", "provider": "other", "data": {"type": "x_result"}},
        ],
    }
    assert openai_wire([{"role": "user", "content": PROMPT}, paused])[1] == {
        "role": "assistant",
        "content": "Let me search for that.",
    }
    _, wire = anthropic_wire([{"role": "user", "content": PROMPT}, paused])
    assert wire[1]["content"] == PAUSED  # the other provider's block is not sent
