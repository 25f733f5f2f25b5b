"""Whole session turns against a real third-party server: ``fakellm`` (PyPI).

fakellm is a FastAPI/uvicorn server that speaks the OpenAI Chat Completions API
(``/v1/chat/completions``) and the Anthropic Messages API (``/v1/messages``), answering from
YAML rules. A module fixture writes the rules, starts ``fakellm serve`` as a real subprocess
on a free port of 127.0.0.1, waits until it accepts connections, and stops it by its pid.
The providers are built with ``base_url`` pointing at it and **no** test transport, so every
request crosses a real socket, is parsed by a server we did not write, and is answered in
that server's own shapes (OpenAI: ``content: null`` with tool calls, no usage in streams;
Anthropic: ``tool_use`` blocks, typed SSE events).

Covered, for both providers, on asyncio and trio (real sockets: no MockClock):

- ``loop-basic`` (non-streaming) and ``loop-streaming`` (streaming) turns with two tool
  calls in one reply; the second request must carry both tool results (the rule that
  answers it matches only on both results, otherwise fakellm falls back to an echo text);
- a 429 then a 200: the provider's own retry succeeds and ``provider:retry`` names the 429;
- a 429 with ``session.providers_policy``: the turn fails over from provider-openai to
  provider-anthropic and ``provider:failover`` names both and the 429.

What fakellm 0.3.5 cannot express, so it is not tested here:

- an error status in a **streaming** answer: ``build_stream`` ignores ``respond.status``
  (a stream is always 200), so the 429 retry is tested on the non-streaming path only;
- thinking blocks, usage in OpenAI streams, ``Retry-After`` headers, server-tool blocks and
  ``pause_turn`` (those are covered against ``httpx.MockTransport`` servers in
  ``test_provider_sessions.py`` and the unit tests).

fakellm tracks conversations by the hash of the first user message, so every test sends a
prompt of its own (a fresh uuid) and its rules count turns from 1.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from _servers import start_fakellm
from amplifier_anyio import AmplifierSession, TurnStatus
from amplifier_anyio.events import PROVIDER_FAILOVER, PROVIDER_RESPONSE, PROVIDER_RETRY, TOOL_PRE
from amplifier_anyio.models import ToolResult
from amplifier_anyio.providers import RetryPolicy
from amplifier_anyio.providers.anthropic import AnthropicProvider
from amplifier_anyio.providers.openai import OpenAIChatProvider
from amplifier_anyio.testing import EventRecorder
from tiers import needs

pytestmark = [pytest.mark.anyio, *needs("fakellm")]

PROVIDERS = ("openai", "anthropic")
WEATHER_ARGS = {"city": "Paris", "unit": "celsius"}
TIME_ARGS = {"zone": "Europe/Paris"}
WEATHER_OUT = "sunny-18c-paris"
TIME_OUT = "clock-14h05-cet"
ANSWER = "Sunny, 18 C, and it is 14:05 in Paris."
RECOVERED = "Answered after one 429."

RULES = f"""\
version: 1
rules:
  - name: parallel_results
    when:
      turn: 2
      tool_result_contains: "{WEATHER_OUT}"
      messages_contain: "{TIME_OUT}"
    respond:
      content: "{ANSWER}"
  - name: parallel_calls
    when:
      turn: 1
      messages_contain: "zz-parallel"
    respond:
      tool_calls:
        - name: get_weather
          arguments: {{city: Paris, unit: celsius}}
        - name: get_time
          arguments: {{zone: Europe/Paris}}
  - name: rate_limited
    when:
      turn: 1
      messages_contain: "zz-ratelimit"
    respond:
      status: 429
      error: "Rate limit exceeded (mock)"
  - name: after_rate_limit
    when:
      turn: 2
      messages_contain: "zz-ratelimit"
    respond:
      content: "{RECOVERED}"
"""


@pytest.fixture(scope="module")
def fakellm_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``http://127.0.0.1:<port>`` of a fakellm server run as a subprocess for this module."""
    server = start_fakellm(tmp_path_factory.mktemp("fakellm"), RULES)
    try:
        yield server.url
    finally:
        server.stop()


class Tool:
    """A tool that records its inputs and answers with a fixed text."""

    def __init__(self, name: str, output: str) -> None:
        self.name = name
        self.description = f"test tool {name}"
        self.input_schema: dict[str, Any] = {"type": "object", "properties": {}}
        self.output = output
        self.inputs: list[dict[str, Any]] = []

    async def execute(self, input: dict[str, Any]) -> ToolResult:
        self.inputs.append(dict(input))
        return ToolResult(output=self.output)


def make_provider(kind: str, url: str, hooks: Any) -> OpenAIChatProvider | AnthropicProvider:
    retry = {"retry_initial_delay": 0.05, "retry_jitter": 0.0, "timeout": 30}
    if kind == "openai":
        config = {"api_key": "sk-fakellm-test", "base_url": f"{url}/v1", "model": "gpt-4o-mini"}
        return OpenAIChatProvider({**config, **retry}, hooks=hooks)
    config = {"api_key": "sk-ant-fakellm-test", "base_url": url, "model": "claude-sonnet-4-5"}
    return AnthropicProvider({**config, **retry}, hooks=hooks)


@contextlib.asynccontextmanager
async def open_session(kind: str, url: str, orchestrator: str, tools: tuple[Tool, ...] = ()) -> Any:
    plan = {"session": {"orchestrator": orchestrator, "context": "context-simple"}}
    async with AmplifierSession(plan) as session:
        coordinator = session.coordinator
        recorder = EventRecorder()
        recorder.attach(coordinator.hooks)
        provider = make_provider(kind, url, coordinator.hooks)
        await coordinator.mount("providers", provider, name=provider.name)
        coordinator.register_cleanup(provider.http.aclose)
        for tool in tools:
            await coordinator.mount("tools", tool, name=tool.name)
        yield session, recorder


async def served(url: str, count: int) -> list[tuple[str, str, bool]]:
    """(api, matched rule, streamed) of the server's last ``count`` requests, oldest first
    (from fakellm's own record; the tests of this module run one after the other)."""
    async with httpx.AsyncClient() as client:
        stats = (await client.get(f"{url}/_fakellm/stats")).json()
    recent = stats["recent"][:count]
    return [(r["api"], r["matched_rule"], r["stream"]) for r in reversed(recent)]


def prompt(tag: str) -> str:
    return f"{tag} What is the weather and the time in Paris? ({uuid.uuid4().hex})"


@pytest.mark.parametrize("orchestrator", ["loop-basic", "loop-streaming"])
@pytest.mark.parametrize("kind", PROVIDERS)
async def test_parallel_tool_calls_round_trip(
    fakellm_url: str, kind: str, orchestrator: str
) -> None:
    weather, clock = Tool("get_weather", WEATHER_OUT), Tool("get_time", TIME_OUT)
    async with open_session(kind, fakellm_url, orchestrator, (weather, clock)) as (session, rec):
        result = await session.run(prompt("zz-parallel"))
        messages = await session.coordinator.get("context").get_messages()

    # fakellm answers with this text only when the second request carries both results
    assert result.status is TurnStatus.SUCCESS, result.error
    assert result.text == ANSWER
    assert result.turn_count == 2
    assert weather.inputs == [WEATHER_ARGS]
    assert clock.inputs == [TIME_ARGS]
    pre = [payload for _, payload in rec.get_events(TOOL_PRE)]
    assert sorted(p["tool_name"] for p in pre) == ["get_time", "get_weather"]
    assert len({p["parallel_group_id"] for p in pre}) == 1  # one batch: the calls ran together
    assert [p["tool_calls"] for _, p in rec.get_events(PROVIDER_RESPONSE)] == [2, 0]
    calls = messages[1]["tool_calls"]
    assert [c["name"] for c in calls] == ["get_weather", "get_time"]
    results = [m for m in messages if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in results] == [c["id"] for c in calls]
    streamed = orchestrator == "loop-streaming"
    assert await served(fakellm_url, 2) == [
        (kind, "parallel_calls", streamed),
        (kind, "parallel_results", streamed),
    ]


@pytest.mark.parametrize("kind", PROVIDERS)
async def test_a_429_is_retried_and_the_turn_succeeds(fakellm_url: str, kind: str) -> None:
    async with open_session(kind, fakellm_url, "loop-basic") as (session, rec):
        result = await session.run(prompt("zz-ratelimit"))

    assert result.status is TurnStatus.SUCCESS, result.error
    assert result.text == RECOVERED
    retries = [payload for _, payload in rec.get_events(PROVIDER_RETRY)]
    assert [(r["attempt"], r["status_code"]) for r in retries] == [(1, 429)]
    assert retries[0]["error"]["type"] == "RateLimitError"
    assert "Rate limit exceeded (mock)" in retries[0]["error"]["msg"]
    assert await served(fakellm_url, 2) == [
        (kind, "rate_limited", False),
        (kind, "after_rate_limit", False),
    ]


async def test_a_429_fails_over_to_the_next_provider(fakellm_url: str) -> None:
    # provider-openai gets the 429 and does not retry it; provider-anthropic answers
    plan = {
        "session": {
            "orchestrator": "loop-basic",
            "context": "context-simple",
            "providers_policy": {"fallback": ["backup"], "on": [429, "5xx"]},
        }
    }
    async with AmplifierSession(plan) as session:
        coordinator = session.coordinator
        recorder = EventRecorder()
        recorder.attach(coordinator.hooks)
        primary = make_provider("openai", fakellm_url, coordinator.hooks)
        backup = make_provider("anthropic", fakellm_url, coordinator.hooks)
        primary.http.retry = RetryPolicy(max_retries=0)
        for name, provider in (("primary", primary), ("backup", backup)):
            provider.priority = 0 if name == "primary" else 1
            await coordinator.mount("providers", provider, name=name)
            coordinator.register_cleanup(provider.http.aclose)
        result = await session.run(prompt("zz-ratelimit"))
        messages = await coordinator.get("context").get_messages()

    assert result.status is TurnStatus.SUCCESS, result.error
    assert result.text == RECOVERED
    failovers = [payload for _, payload in recorder.get_events(PROVIDER_FAILOVER)]
    assert [(f["from"], f["to"], f["reason"], f["status_code"]) for f in failovers] == [
        ("primary", "backup", "429", 429)
    ]
    assert not recorder.get_events(PROVIDER_RETRY)
    assert [m["role"] for m in messages] == ["user", "assistant"]
    assert messages[1]["metadata"]["provider"] == "backup"
    assert await served(fakellm_url, 2) == [
        ("openai", "rate_limited", False),
        ("anthropic", "after_rate_limit", False),
    ]
