"""The test kit against a real third-party server (fakellm, PyPI): a tool-calling turn
recorded, then replayed with no server at all (the same answer, transcript and deltas);
and both HTTP providers pass ``check_provider``.

The server is started as in ``test_fakellm.py`` (a subprocess on a free port of
127.0.0.1, stopped by its pid). Each recording sends a prompt of its own (fakellm counts a
conversation's turns by its first user message). A replay points the provider at a port
nothing listens on, with no retries: one request would fail the turn. One test stops its
own server between recording and replaying, as a CI run has no server.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_fakellm import Tool

from _servers import ServerProcess, accepts, free_port, start_fakellm
from amplifier_anyio import AmplifierSession, TurnStatus
from amplifier_anyio.events import CONTENT_BLOCK_DELTA, TOOL_PRE
from amplifier_anyio.models import ChatRequest, Message
from amplifier_anyio.providers.anthropic import AnthropicProvider
from amplifier_anyio.providers.openai import OpenAIChatProvider
from amplifier_anyio.testing import EventRecorder
from amplifier_anyio.testing.conformance import check_provider
from tiers import needs

pytestmark = [pytest.mark.anyio, *needs("fakellm")]

WEATHER_OUT = "sunny-18c-paris"
TIME_OUT = "clock-14h05-cet"
ANSWER = "Sunny, 18 C, and it is 14:05 in Paris."

RULES = f"""\
version: 1
rules:
  - name: cassette_results
    when:
      turn: 2
      tool_result_contains: "{WEATHER_OUT}"
      messages_contain: "{TIME_OUT}"
    respond:
      content: "{ANSWER}"
  - name: cassette_calls
    when:
      turn: 1
      messages_contain: "zz-cassette"
    respond:
      tool_calls:
        - name: get_weather
          arguments: {{city: Paris, unit: celsius}}
        - name: get_time
          arguments: {{zone: Europe/Paris}}
"""


def Server(home: Path) -> ServerProcess:
    return start_fakellm(home, RULES)


@pytest.fixture(scope="module")
def fakellm_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    server = Server(tmp_path_factory.mktemp("fakellm"))
    try:
        yield server.url
    finally:
        server.stop()


def provider_entry(kind: str, url: str) -> dict[str, Any]:
    fast = {"max_retries": 0, "timeout": 30}
    if kind == "openai":
        config = {"api_key": "sk-fakellm", "base_url": f"{url}/v1", "model": "gpt-4o-mini"}
    else:
        config = {"api_key": "sk-ant-fakellm", "base_url": url, "model": "claude-sonnet-4-5"}
    return {"module": f"provider-{kind}", "config": {**config, **fast}}


def closed_url() -> str:
    return f"http://127.0.0.1:{free_port()}"  # nothing listens there once the socket closed


async def one_turn(
    kind: str, url: str, orchestrator: str, cassette: dict[str, Any], prompt: str
) -> dict[str, Any]:
    plan = {
        "session": {
            "orchestrator": orchestrator,
            "context": "context-simple",
            "cassette": cassette,
        },
        "providers": [provider_entry(kind, url)],
    }
    weather, clock = Tool("get_weather", WEATHER_OUT), Tool("get_time", TIME_OUT)
    session = AmplifierSession(plan)
    recorder = EventRecorder()
    recorder.attach(session.coordinator.hooks)
    async with session:
        for tool in (weather, clock):
            await session.coordinator.mount("tools", tool, name=tool.name)
        result = await session.run(prompt)
        messages = await session.coordinator.get("context").get_messages()
    return {
        "status": result.status,
        "error": result.error,
        "text": result.text,
        "messages": messages,
        "deltas": [d["delta"] for _, d in recorder.get_events(CONTENT_BLOCK_DELTA)],
        "tools": sorted(d["tool_name"] for _, d in recorder.get_events(TOOL_PRE)),
        "inputs": (weather.inputs, clock.inputs),
    }


def prompt() -> str:
    return f"zz-cassette What is the weather and the time in Paris? ({uuid.uuid4().hex})"


@pytest.mark.parametrize("orchestrator", ["loop-basic", "loop-streaming"])
@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_a_recorded_tool_turn_replays_without_the_server(
    fakellm_url: str, kind: str, orchestrator: str, tmp_path: Path
) -> None:
    path = str(tmp_path / "turn.jsonl")
    text = prompt()
    recorded = await one_turn(
        kind, fakellm_url, orchestrator, {"path": path, "mode": "record"}, text
    )
    replayed = await one_turn(
        kind, closed_url(), orchestrator, {"path": path, "mode": "replay"}, text
    )

    assert recorded["status"] is TurnStatus.SUCCESS, recorded["error"]
    assert recorded["text"] == ANSWER  # fakellm saw both tool results
    assert replayed["status"] is TurnStatus.SUCCESS, replayed["error"]
    for key in ("text", "messages", "deltas", "tools", "inputs"):
        assert replayed[key] == recorded[key], key
    if orchestrator == "loop-streaming":
        assert "".join(recorded["deltas"]).endswith(ANSWER)


async def test_replay_after_the_server_stopped(tmp_path: Path) -> None:
    server = Server(tmp_path)
    path = str(tmp_path / "turn.jsonl")
    text = prompt()
    try:
        recorded = await one_turn(
            "openai", server.url, "loop-streaming", {"path": path, "mode": "auto"}, text
        )
    finally:
        server.stop()
    assert not accepts(server.port)
    replayed = await one_turn(
        "openai", server.url, "loop-streaming", {"path": path, "mode": "auto"}, text
    )
    assert recorded["status"] is replayed["status"] is TurnStatus.SUCCESS, replayed["error"]
    assert (replayed["messages"], replayed["deltas"]) == (recorded["messages"], recorded["deltas"])

    # A different question is drift: named by its path, the turn ends with the error.
    drifted = await one_turn(
        "openai", server.url, "loop-streaming", {"path": path, "mode": "replay"}, text + "?"
    )
    assert drifted["status"] is TurnStatus.ERROR
    assert (
        "lane 'root', call 0: the request differs from the recording at messages[0].content"
        in str(drifted["error"])
    )


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_the_http_providers_pass_check_provider(fakellm_url: str, kind: str) -> None:
    config = provider_entry(kind, fakellm_url)["config"]
    provider_class = OpenAIChatProvider if kind == "openai" else AnthropicProvider
    provider = provider_class(config)
    request = ChatRequest(messages=[Message(role="user", content=f"hello {uuid.uuid4().hex}")])
    try:
        await check_provider(provider, request)
    finally:
        await provider.http.aclose()
