"""A tool-calling turn through a Responses-compatible server on 127.0.0.1.

The server (``tests/_loopback.py``) answers ``POST /v1/responses`` with bodies and event
streams written from the ``openai`` SDK's types: first a reasoning item and a function call,
then — once the request carries the call's output — the answer. Every request body is
validated against the SDK's params. loop-basic takes the JSON path, loop-streaming the
stream; both run on asyncio and trio over a real socket.
"""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

from _loopback import Reply, Request, open_loopback, sse_event
from _responses_wire import (
    function_call,
    message,
    reasoning,
    response_body,
    stream_events,
    validate_request,
)
from amplifier_anyio import AmplifierSession, TurnStatus
from amplifier_anyio.events import CONTENT_BLOCK_DELTA
from amplifier_anyio.models import ToolResult
from amplifier_anyio.providers.openai import OpenAIChatProvider
from amplifier_anyio.testing import EventRecorder

pytestmark = pytest.mark.anyio

ARGUMENTS = '{"city": "Paris"}'


class Weather:
    name = "get_weather"
    description = "Current weather for a city"
    input_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"city": {"type": "string"}},
    }

    def __init__(self) -> None:
        self.inputs: list[dict[str, Any]] = []

    async def execute(self, input: dict[str, Any]) -> ToolResult:
        self.inputs.append(input)
        return ToolResult(output="sunny, 18 C")


def answer_for(request: Request, stream: bool) -> Reply:
    validate_request(request.body)
    outputs = [i for i in request.body["input"] if i.get("type") == "function_call_output"]
    if not outputs:
        body = response_body(
            [reasoning("Use the tool."), function_call("call_1", "get_weather", ARGUMENTS)],
            response_id="resp_a",
        )
    else:
        body = response_body([message(f"It is {outputs[0]['output']}.")], response_id="resp_b")
    if not stream:
        return Reply(json=body)
    return Reply(events=[_frame(e) for e in stream_events(body)])


def _frame(event: dict[str, Any]) -> bytes:
    return sse_event(event, event["type"])


@pytest.mark.parametrize("orchestrator", ["loop-basic", "loop-streaming"])
async def test_a_tool_calling_turn_through_a_loopback_responses_server(orchestrator: str) -> None:
    streaming = orchestrator == "loop-streaming"

    async def handler(request: Request) -> Reply:
        assert (request.method, request.path) == ("POST", "/v1/responses")
        return answer_for(request, streaming)

    tool = Weather()
    async with open_loopback(handler) as server:
        plan = {"session": {"orchestrator": orchestrator, "context": "context-simple"}}
        async with AmplifierSession(plan) as session:
            coordinator = session.coordinator
            recorder = EventRecorder()
            recorder.attach(coordinator.hooks)
            config = {
                "api": "responses",
                "base_url": f"{server.url}/v1",
                "api_key": "sk-loopback",
                "model": "gpt-5",
                "timeout": 30,
            }
            provider = OpenAIChatProvider(config, hooks=coordinator.hooks)
            await coordinator.mount("providers", provider, name=provider.name)
            coordinator.register_cleanup(provider.http.aclose)
            await coordinator.mount("tools", tool, name=tool.name)
            result = await session.run("Weather in Paris?")
            messages = await coordinator.get("context").get_messages()
    assert result.status is TurnStatus.SUCCESS, result.error
    assert result.text == "It is sunny, 18 C."
    assert tool.inputs == [{"city": "Paris"}]
    assert len(server.requests) == 2
    second = server.requests[1].body["input"]
    # the reasoning item went back (encrypted, unchanged) right before its call
    assert [i["type"] for i in second] == [
        "message",
        "reasoning",
        "function_call",
        "function_call_output",
    ]
    assert second[1]["encrypted_content"] == "gAAAA-enc"
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"]
    if streaming:
        deltas = [data for _, data in recorder.get_events(CONTENT_BLOCK_DELTA)]
        arguments = "".join(d["delta"] for d in deltas if d["block_type"] == "tool_call")
        assert arguments == ARGUMENTS
