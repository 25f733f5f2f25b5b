"""loop-streaming: provider streams relayed as events, the fallback, failures, invariants.

The providers here are in-memory: each ``stream()`` call replays one scripted list of
provider events (what ``OpenAIChatProvider.stream`` / ``AnthropicProvider.stream`` yield),
so the tests see exactly what the orchestrator does with them. Tool delays run on virtual
time under trio (an autojump clock) and on short real delays under asyncio.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from amplifier_anyio.errors import StreamError
from amplifier_anyio.events import (
    CANCEL_COMPLETED,
    CONTENT_BLOCK_DELTA,
    CONTENT_BLOCK_END,
    CONTENT_BLOCK_START,
    EXECUTION_END,
    ORCHESTRATOR_COMPLETE,
    PROVIDER_ERROR,
    THINKING_DELTA,
    TOOL_POST,
)
from amplifier_anyio.kernel import TurnResult, TurnStatus
from amplifier_anyio.models import (
    ChatRequest,
    ChatResponse,
    ProviderInfo,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    ToolCallBlock,
    ToolResult,
    Usage,
)
from amplifier_anyio.orchestrators import LoopStreamingOrchestrator
from amplifier_anyio.orchestrators.loop_streaming import mount
from amplifier_anyio.testing import EventRecorder, MockContextManager, MockCoordinator

pytestmark = pytest.mark.anyio

STREAM_EVENTS = (CONTENT_BLOCK_START, CONTENT_BLOCK_DELTA, CONTENT_BLOCK_END, THINKING_DELTA)
ADDED_BY_REGISTRY = ("timestamp", "trace_id", "session_id", "parent_id")
HANG = {"type": "__hang__"}
"""A script item: the stream blocks here until the provider's ``release`` is set."""


@pytest.fixture
def anyio_backend(virtual_backend: tuple[str, dict[str, object]]) -> tuple[str, dict[str, object]]:
    return virtual_backend


# -- fakes -----------------------------------------------------------------------------------


class Events:
    """The iterator a stream yields (a class, not a generator: nothing is left to the GC)."""

    def __init__(
        self, items: list[dict[str, Any]], hanging: anyio.Event, release: anyio.Event
    ) -> None:
        self.items = list(items)
        self.hanging = hanging
        self.release = release

    def __aiter__(self) -> Events:
        return self

    async def __anext__(self) -> dict[str, Any]:
        await anyio.lowlevel.checkpoint()
        if not self.items:
            raise StopAsyncIteration
        item = self.items.pop(0)
        if item is HANG:
            self.hanging.set()
            await self.release.wait()
            return await self.__anext__()
        return item


class StreamingProvider:
    """Each ``stream()`` replays the next script; ``complete()`` must not be used."""

    name = "fake"

    def __init__(self, *scripts: list[dict[str, Any]]) -> None:
        self.scripts = list(scripts)
        self.requests: list[ChatRequest] = []
        self.opened = 0
        self.closed = 0
        self.hanging = anyio.Event()
        self.release = anyio.Event()

    def get_info(self) -> ProviderInfo:
        return ProviderInfo(id="fake", display_name="Fake streaming provider")

    def parse_tool_calls(self, response: ChatResponse) -> list[ToolCall]:
        return list(response.tool_calls or [])

    async def complete(self, request: ChatRequest, **kwargs: Any) -> ChatResponse:
        raise AssertionError("complete() was called although the provider streams")

    @asynccontextmanager
    async def stream(self, request: ChatRequest, **kwargs: Any) -> AsyncIterator[Events]:
        self.requests.append(request)
        self.opened += 1
        try:
            yield Events(self.scripts.pop(0), self.hanging, self.release)
        finally:
            self.closed += 1


class CompletingProvider:
    """A provider without ``stream()``."""

    name = "plain"

    def __init__(self, *responses: ChatResponse) -> None:
        self.responses = list(responses)
        self.requests: list[ChatRequest] = []

    def get_info(self) -> ProviderInfo:
        return ProviderInfo(id="plain", display_name="Plain provider")

    def parse_tool_calls(self, response: ChatResponse) -> list[ToolCall]:
        return list(response.tool_calls or [])

    async def complete(self, request: ChatRequest, **kwargs: Any) -> ChatResponse:
        await anyio.lowlevel.checkpoint()
        self.requests.append(request)
        return self.responses.pop(0)


class DelayTool:
    """Sleeps a per-call number of seconds (``None``: forever), then echoes its input."""

    def __init__(self, delays: dict[str, float | None]) -> None:
        self.name = "probe"
        self.description = "sleeps, then echoes"
        self.input_schema: dict[str, Any] = {"type": "object"}
        self.delays = delays
        self.entered: list[str] = []
        self.exited: set[str] = set()
        self.finished: set[str] = set()

    async def execute(self, tool_input: dict[str, Any]) -> ToolResult:
        key = tool_input["key"]
        self.entered.append(key)
        try:
            delay = self.delays[key]
            if delay is None:
                await anyio.sleep_forever()
            await anyio.sleep(delay or 0)
        finally:
            self.exited.add(key)
        self.finished.add(key)
        return ToolResult(output={"echo": key})


# -- scripts ---------------------------------------------------------------------------------


def text_script(text: str, *, usage: Usage | None = None) -> list[dict[str, Any]]:
    """A streamed text answer, split in two deltas, ending with its response."""
    half = len(text) // 2
    block = TextBlock(text=text)
    return [
        {"type": "content_block:start", "index": 0, "block_type": "text"},
        {"type": "content_block:delta", "index": 0, "block_type": "text", "delta": text[:half]},
        {"type": "content_block:delta", "index": 0, "block_type": "text", "delta": text[half:]},
        {"type": "content_block:end", "index": 0, "block": block},
        {"type": "response", "response": ChatResponse(content=[block], usage=usage)},
    ]


def calls_script(*keys: str) -> list[dict[str, Any]]:
    """A streamed turn asking for one ``probe`` call per key (id ``call-<key>``)."""
    events: list[dict[str, Any]] = []
    blocks = []
    for index, key in enumerate(keys):
        block = ToolCallBlock(id=f"call-{key}", name="probe", input={"key": key})
        arguments = json.dumps(block.input)
        events += [
            {
                "type": "content_block:start",
                "index": index,
                "block_type": "tool_call",
                "id": block.id,
                "name": "probe",
            },
            {
                "type": "content_block:delta",
                "index": index,
                "block_type": "tool_call",
                "delta": arguments,
            },
            {"type": "content_block:end", "index": index, "block": block},
        ]
        blocks.append(block)
    calls = [ToolCall(id=b.id, name=b.name, arguments=b.input) for b in blocks]
    response = ChatResponse(
        content=list(blocks),
        tool_calls=calls,
        usage=Usage(input_tokens=5, output_tokens=3, total_tokens=8),
    )
    return [*events, {"type": "response", "response": response}]


async def run_turn(
    provider: Any,
    tools: dict[str, Any] | None = None,
    *,
    coordinator: MockCoordinator | None = None,
    context: MockContextManager | None = None,
    config: dict[str, Any] | None = None,
) -> tuple[TurnResult, EventRecorder, MockContextManager]:
    coordinator = coordinator or MockCoordinator()
    recorder = EventRecorder()
    recorder.attach(coordinator.hooks)
    context = context or MockContextManager()
    orchestrator = LoopStreamingOrchestrator(config)
    result = await orchestrator.run_turn(
        "hello",
        context,
        {provider.name: provider},
        tools or {},
        coordinator.hooks,
        coordinator=coordinator,
    )
    return result, recorder, context


def payloads(recorder: EventRecorder, event: str) -> list[dict[str, Any]]:
    """Payloads of ``event`` without the fields every event gets from the registry."""
    return [
        {k: v for k, v in data.items() if k not in ADDED_BY_REGISTRY}
        for _, data in recorder.get_events(event)
    ]


def check_ending(recorder: EventRecorder, status: str) -> None:
    """Invariant 1: one orchestrator:complete and one execution:end, nothing after them."""
    names = recorder.names()
    assert names.count(ORCHESTRATOR_COMPLETE) == 1
    assert names.count(EXECUTION_END) == 1
    assert names[-2:] == [ORCHESTRATOR_COMPLETE, EXECUTION_END]
    assert recorder.get_events(ORCHESTRATOR_COMPLETE)[0][1]["status"] == status


def check_pairs(messages: list[dict[str, Any]]) -> None:
    """Invariant 2: each assistant tool call answered right after it, in call order."""
    for at, message in enumerate(messages):
        ids = [c["id"] for c in message.get("tool_calls") or []]
        following = messages[at + 1 : at + 1 + len(ids)]
        assert [(m["role"], m["tool_call_id"]) for m in following] == [("tool", i) for i in ids]
    assert sum(m["role"] == "tool" for m in messages) == sum(
        len(m.get("tool_calls") or []) for m in messages
    )


def cancelled_content() -> dict[str, Any]:
    return {"error": "Tool execution was cancelled", "cancelled": True, "tool": "probe"}


# -- the provider call -----------------------------------------------------------------------


async def test_provider_without_stream_is_called_with_complete() -> None:
    provider = CompletingProvider(ChatResponse(content=[TextBlock(text="plain answer")]))
    result, recorder, context = await run_turn(provider)

    assert result.status is TurnStatus.SUCCESS
    assert result.text == "plain answer"
    assert len(provider.requests) == 1
    assert not any(name in STREAM_EVENTS for name in recorder.names())
    assert context.messages[-1] == {
        "role": "assistant",
        "content": [{"type": "text", "text": "plain answer"}],
    }


async def test_stream_events_are_relayed_with_the_provider_name() -> None:
    thinking = ThinkingBlock(thinking="let me see", signature="sig-1", visibility="internal")
    answer = TextBlock(text="Hi there")
    script = [
        {"type": "content_block:start", "index": 0, "block_type": "thinking"},
        {"type": "thinking:delta", "index": 0, "delta": "let me see"},
        {"type": "content_block:end", "index": 0, "block": thinking},
        {"type": "content_block:start", "index": 1, "block_type": "text"},
        {"type": "content_block:delta", "index": 1, "block_type": "text", "delta": "Hi"},
        {"type": "content_block:delta", "index": 1, "block_type": "text", "delta": " there"},
        {"type": "content_block:end", "index": 1, "block": answer},
        {"type": "response", "response": ChatResponse(content=[thinking, answer])},
    ]
    provider = StreamingProvider(script)
    result, recorder, _ = await run_turn(provider)

    assert result.text == "Hi there"  # the thinking never leaks into the answer
    relayed = [
        (name, {k: v for k, v in data.items() if k not in ADDED_BY_REGISTRY})
        for name, data in recorder.events
        if name in STREAM_EVENTS
    ]
    expected = [
        (CONTENT_BLOCK_START, {"provider": "fake", "index": 0, "block_type": "thinking"}),
        (THINKING_DELTA, {"provider": "fake", "index": 0, "delta": "let me see"}),
        (
            CONTENT_BLOCK_END,
            {
                "provider": "fake",
                "index": 0,
                "block": {
                    "type": "thinking",
                    "thinking": "let me see",
                    "signature": "sig-1",
                    "visibility": "internal",
                },
            },
        ),
        (CONTENT_BLOCK_START, {"provider": "fake", "index": 1, "block_type": "text"}),
        (
            CONTENT_BLOCK_DELTA,
            {"provider": "fake", "index": 1, "block_type": "text", "delta": "Hi"},
        ),
        (
            CONTENT_BLOCK_DELTA,
            {"provider": "fake", "index": 1, "block_type": "text", "delta": " there"},
        ),
        (
            CONTENT_BLOCK_END,
            {"provider": "fake", "index": 1, "block": {"type": "text", "text": "Hi there"}},
        ),
    ]
    assert relayed == expected
    assert "response" not in recorder.names()
    assert provider.closed == provider.opened == 1


async def test_content_block_end_carries_the_block_as_a_dict() -> None:
    provider = StreamingProvider(calls_script("a"), text_script("done"))
    tool = DelayTool({"a": 0})
    _, recorder, _ = await run_turn(provider, {"probe": tool})

    blocks = [p["block"] for p in payloads(recorder, CONTENT_BLOCK_END)]
    assert blocks == [
        {"type": "tool_call", "id": "call-a", "name": "probe", "input": {"key": "a"}},
        {"type": "text", "text": "done"},
    ]
    assert all(type(block) is dict for block in blocks)


async def test_stream_without_a_response_event_ends_the_turn_with_a_stream_error() -> None:
    truncated = text_script("cut short")[:-1]
    provider = StreamingProvider(truncated)
    result, recorder, context = await run_turn(provider)

    assert result.status is TurnStatus.ERROR
    assert isinstance(result.error, StreamError)
    [error] = payloads(recorder, PROVIDER_ERROR)
    assert error["provider"] == "fake"
    assert error["error"]["type"] == "StreamError"
    assert provider.closed == 1
    check_ending(recorder, "error")
    assert context.messages == [{"role": "user", "content": "hello"}]


async def test_mount_installs_the_streaming_orchestrator() -> None:
    coordinator = MockCoordinator()
    await mount(coordinator, {"max_iterations": 3})
    orchestrator = coordinator.get("orchestrator")
    assert isinstance(orchestrator, LoopStreamingOrchestrator)
    assert orchestrator.config.max_iterations == 3


# -- invariants ------------------------------------------------------------------------------


async def test_success_keeps_the_invariants_and_sums_usage() -> None:
    delays: dict[str, float | None] = {"a": 0.03, "b": 0.01, "c": 0.02}
    contexts = []
    for order in (delays, dict(zip(delays, reversed(list(delays.values())), strict=True))):
        provider = StreamingProvider(
            calls_script("a", "b", "c"),
            text_script("all done", usage=Usage(input_tokens=7, output_tokens=2, total_tokens=9)),
        )
        tool = DelayTool(order)
        result, recorder, context = await run_turn(provider, {"probe": tool})

        assert result.status is TurnStatus.SUCCESS
        assert result.text == "all done"
        assert (result.usage.input_tokens, result.usage.output_tokens) == (12, 5)
        check_ending(recorder, "success")
        check_pairs(context.messages)
        assert set(tool.entered) == tool.exited == tool.finished == {"a", "b", "c"}
        assert [json.loads(m["content"]) for m in context.messages if m["role"] == "tool"] == [
            {"echo": "a"},
            {"echo": "b"},
            {"echo": "c"},
        ]
        contexts.append(context.messages)
    assert contexts[0] == contexts[1]  # tool timing does not change the context


async def test_immediate_cancel_during_the_stream_closes_it() -> None:
    script = [*text_script("never finished")[:2], HANG]
    provider = StreamingProvider(script)
    coordinator = MockCoordinator()
    outcome: list[TurnResult] = []

    async def run() -> None:
        result, recorder, context = await run_turn(provider, coordinator=coordinator)
        outcome.append(result)
        check_ending(recorder, "cancelled")
        assert CANCEL_COMPLETED in recorder.names()
        assert [p["delta"] for p in payloads(recorder, CONTENT_BLOCK_DELTA)] == ["never f"]
        assert context.messages == [{"role": "user", "content": "hello"}]

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        await provider.hanging.wait()
        await coordinator.request_cancel(immediate=True)

    [result] = outcome
    assert result.status is TurnStatus.CANCELLED
    assert result.text == ""
    assert provider.closed == 1


async def test_graceful_cancel_lets_the_stream_and_its_tools_finish() -> None:
    first = calls_script("a")
    provider = StreamingProvider([*first[:2], HANG, *first[2:]], text_script("unused"))
    tool = DelayTool({"a": 0.01})
    coordinator = MockCoordinator()
    outcome: list[tuple[TurnResult, EventRecorder, MockContextManager]] = []

    async def run() -> None:
        outcome.append(await run_turn(provider, {"probe": tool}, coordinator=coordinator))

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        await provider.hanging.wait()
        await coordinator.request_cancel(immediate=False)
        provider.release.set()

    [(result, recorder, context)] = outcome
    assert result.status is TurnStatus.CANCELLED
    assert provider.opened == provider.closed == 1  # no provider call after the batch
    assert tool.finished == {"a"}
    check_ending(recorder, "cancelled")
    check_pairs(context.messages)
    assert json.loads(context.messages[-1]["content"]) == {"echo": "a"}


async def test_immediate_cancel_during_tools_keeps_finished_results() -> None:
    provider = StreamingProvider(calls_script("fast", "stuck", "quick"))
    tool = DelayTool({"fast": 0.01, "stuck": None, "quick": 0})
    coordinator = MockCoordinator()
    posted: set[str] = set()
    both_posted = anyio.Event()
    outcome: list[tuple[TurnResult, EventRecorder, MockContextManager]] = []

    async def on_post(event: str, data: dict[str, Any]) -> None:
        # A result is stored before its tool:post: once both finished calls are posted,
        # only "stuck" is left running, whichever of the two finished first.
        posted.add(data["tool_call_id"])
        if {"call-fast", "call-quick"} <= posted:
            both_posted.set()

    coordinator.hooks.register(TOOL_POST, on_post)

    async def run() -> None:
        outcome.append(await run_turn(provider, {"probe": tool}, coordinator=coordinator))

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        await both_posted.wait()
        await coordinator.request_cancel(immediate=True)

    [(result, recorder, context)] = outcome
    assert result.status is TurnStatus.CANCELLED
    check_ending(recorder, "cancelled")
    check_pairs(context.messages)
    contents = {
        m["tool_call_id"]: json.loads(m["content"]) for m in context.messages if m["role"] == "tool"
    }
    assert contents == {
        "call-fast": {"echo": "fast"},
        "call-stuck": cancelled_content(),
        "call-quick": {"echo": "quick"},
    }
    assert set(tool.entered) == tool.exited  # nothing of the turn still runs
    assert "stuck" not in tool.finished
