"""Upstream orchestrators driving our providers against a real third-party server.

The orchestrators are in ``tests/upstream_loops``: packages written for these tests that
call a provider and read its answers exactly as upstream's loop-basic, loop-streaming and
loop-events do (amplifier-core 2.0.2's pydantic ``ChatRequest``, attribute reads and
``model_dump()`` of the answer, ``parse_tool_calls``, upstream's ``LLMError``), with tools
answering amplifier-core ``ToolResult``s. They are mounted by ``source`` next to our
provider-openai / provider-anthropic pointed at fakellm, whose server and rules are
``test_fakellm``'s (the same module fixture): turn 1 asks for two tool calls, turn 2
answers only when the request carries both results.

Upstream loop-basic and loop-streaming run their tools in ``asyncio.gather``: those run
on asyncio only; loop-events runs on both backends.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import test_fakellm as fakellm

from amplifier_anyio import AmplifierSession, TurnStatus
from amplifier_anyio.errors import RateLimitError
from amplifier_anyio.testing import EventRecorder
from tiers import needs, optional

upstream_errors = optional("amplifier_core.llm_errors")

pytestmark = [pytest.mark.anyio, *needs("amplifier_core", "fakellm")]

fakellm_url = fakellm.fakellm_url  # its server, its rules

LOOPS = str(Path(__file__).parents[1] / "upstream_loops")
ASYNCIO_ONLY = pytest.mark.parametrize("anyio_backend", ["asyncio"])
OUTPUTS = {"get_weather": fakellm.WEATHER_OUT, "get_time": fakellm.TIME_OUT}


def plan_for(loop: str, kind: str, url: str, **provider: Any) -> dict[str, Any]:
    if kind == "openai":
        config = {"api_key": "sk-fakellm-test", "base_url": f"{url}/v1", "model": "gpt-4o-mini"}
    else:
        config = {"api_key": "sk-ant-fakellm-test", "base_url": url, "model": "claude-sonnet-4-5"}
    config.update(retry_initial_delay=0.05, retry_jitter=0.0, timeout=30, **provider)
    return {
        "session": {
            "orchestrator": {"module": f"upstream-loop-{loop}", "source": LOOPS},
            "context": "context-simple",
        },
        "providers": [{"module": f"provider-{kind}", "config": config}],
        "tools": [{"module": "upstream-tools", "source": LOOPS, "config": {"outputs": OUTPUTS}}],
    }


async def full_turn(loop: str, kind: str, url: str) -> None:
    async with AmplifierSession(plan_for(loop, kind, url)) as session:
        recorder = EventRecorder()
        recorder.attach(session.coordinator.hooks)
        result = await session.run(fakellm.prompt("zz-parallel"))
        messages = await session.coordinator.get("context").get_messages()
        tools = session.coordinator.get("tools")
        orchestrator = session.coordinator.get("orchestrator")

    # fakellm answers with this text only when the second request carries both results
    assert result.status is TurnStatus.SUCCESS, result.error
    assert result.text == fakellm.ANSWER
    assert tools["get_weather"].inputs == [fakellm.WEATHER_ARGS]
    assert tools["get_time"].inputs == [fakellm.TIME_ARGS]
    # what the loop stored from our answer: dumped blocks, {id, tool, arguments} calls
    call_message = messages[1]
    assert [c["tool"] for c in call_message["tool_calls"]] == ["get_weather", "get_time"]
    assert all(isinstance(block, dict) for block in call_message["content"])
    answers = [m["tool_call_id"] for m in messages if m["role"] == "tool"]
    assert answers == [c["id"] for c in call_message["tool_calls"]]
    [complete] = [data for _, data in recorder.get_events("orchestrator:complete")]
    assert complete["status"] == "success"
    if loop == "streaming":  # our providers have no `stream`: upstream took complete()
        assert orchestrator.streamed == ["complete", "complete"]
    assert await fakellm.served(url, 2) == [
        (kind, "parallel_calls", False),
        (kind, "parallel_results", False),
    ]


@ASYNCIO_ONLY
@pytest.mark.parametrize("loop", ["basic", "streaming"])
@pytest.mark.parametrize("kind", fakellm.PROVIDERS)
async def test_an_upstream_asyncio_loop_runs_a_tool_calling_turn_on_our_provider(
    fakellm_url: str, kind: str, loop: str
) -> None:
    await full_turn(loop, kind, fakellm_url)


@pytest.mark.parametrize("kind", fakellm.PROVIDERS)
async def test_upstream_loop_events_runs_a_tool_calling_turn_on_our_provider(
    fakellm_url: str, kind: str
) -> None:
    await full_turn("events", kind, fakellm_url)


@ASYNCIO_ONLY
@pytest.mark.parametrize("loop", ["basic", "streaming"])
@pytest.mark.parametrize("kind", fakellm.PROVIDERS)
async def test_an_upstream_loop_sees_our_error_as_upstreams_llm_error(
    fakellm_url: str, kind: str, loop: str
) -> None:
    plan = plan_for(loop, kind, fakellm_url, max_retries=0)
    async with AmplifierSession(plan) as session:
        recorder = EventRecorder()
        recorder.attach(session.coordinator.hooks)
        result = await session.run(fakellm.prompt("zz-ratelimit"))

    assert result.status is TurnStatus.ERROR
    assert isinstance(result.error, RateLimitError)  # ours, for our callers
    assert isinstance(result.error, upstream_errors.RateLimitError)  # upstream's, for the loop
    assert "Rate limit exceeded (mock)" in str(result.error)
    # the loop's `except LLMError` branch reported it, with the fields only it reads
    [reported] = [data for _, data in recorder.get_events("provider:error")]
    assert reported["error"]["type"] == "RateLimitError"
    assert (reported["retryable"], reported["status_code"]) == (True, 429)


@pytest.mark.parametrize("kind", fakellm.PROVIDERS)
async def test_an_error_upstream_loop_events_answers_with_still_fails_the_turn(
    fakellm_url: str, kind: str
) -> None:
    plan = plan_for("events", kind, fakellm_url, max_retries=0)
    async with AmplifierSession(plan) as session:
        result = await session.run(fakellm.prompt("zz-ratelimit"))

    # loop-events answered "Error getting response: …" and reported success
    assert result.text.startswith("Error getting response:")
    assert result.status is TurnStatus.ERROR
    assert isinstance(result.error, RateLimitError)
    assert result.error.status_code == 429
