"""hooks-otel: what a user of an OpenTelemetry backend sees from turns, on both backends.

Spans go to the SDK's in-memory exporter, metrics to its in-memory reader; a span
processor of the test's own records every span started and ended, so "no span left open"
is checked independently of the hook. trio runs on a fresh autojump ``MockClock`` (the
hook's times follow the loop's clock, so virtual durations are exact there); asyncio runs
on the real clock with every scenario duration scaled down, and its checks are of order,
never of speed.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
import pytest
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from amplifier_anyio import AmplifierSession
from amplifier_anyio.errors import ConfigError, RateLimitError
from amplifier_anyio.hooks.otel import CONFIG_SCHEMA, OtelConfig, OtelHook
from amplifier_anyio.kernel import TurnResult
from amplifier_anyio.models import (
    ChatRequest,
    ChatResponse,
    ProviderInfo,
    TextBlock,
    ToolCall,
    ToolResult,
    Usage,
)
from amplifier_anyio.orchestrators import LoopBasicOrchestrator, LoopStreamingOrchestrator
from amplifier_anyio.providers.anthropic import AnthropicProvider
from amplifier_anyio.providers.openai import OpenAIChatProvider
from amplifier_anyio.providers.scripted import ScriptedProvider
from amplifier_anyio.testing import MockContextManager, MockCoordinator, MockTool

pytestmark = pytest.mark.anyio

CONVERSATION = "conversation-7"


@pytest.fixture
def anyio_backend(virtual_backend: tuple[str, dict[str, object]]) -> tuple[str, dict[str, object]]:
    return virtual_backend


@pytest.fixture
def virtual(anyio_backend: tuple[str, dict[str, object]]) -> bool:
    return anyio_backend[0] == "trio"


@pytest.fixture
def s(virtual: bool) -> float:
    """Seconds per scenario second: 1 on virtual time, 1/10 on the real clock (its windows,
    100 ms and more, hold on a loaded machine; at 1/50 a 20 ms call once missed its
    100 ms window while two suites ran at once)."""
    return 1.0 if virtual else 0.1


# -- the observed turn -----------------------------------------------------------------------


class OpenSpans(SpanProcessor):
    """Every span started and not yet ended, as the SDK sees it."""

    def __init__(self) -> None:
        self.open: dict[int, str] = {}
        self.started = 0

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        self.open[span.context.span_id] = span.name
        self.started += 1

    def on_end(self, span: ReadableSpan) -> None:
        assert span.context is not None
        self.open.pop(span.context.span_id, None)


class Traced:
    """loop-basic (or another orchestrator) observed by hooks-otel."""

    def __init__(
        self,
        orchestrator: Any = None,
        *,
        hook_config: dict[str, Any] | None = None,
        context: MockContextManager | None = None,
        **config: Any,
    ) -> None:
        self.exporter = InMemorySpanExporter()
        self.processor = OpenSpans()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(self.processor)
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.reader = InMemoryMetricReader()
        meter_provider = MeterProvider(metric_readers=[self.reader])
        self.coordinator = MockCoordinator(session_id=CONVERSATION)
        settings = {
            "agent_name": "helper",
            "capture_content": False,
            "tracer_provider": self.tracer_provider,
            "meter_provider": meter_provider,
            **(hook_config or {}),
        }
        self.hook = OtelHook(settings, coordinator=self.coordinator)
        self.hook.register(self.coordinator.hooks)
        self.context = context or MockContextManager()
        self.orchestrator = orchestrator or LoopBasicOrchestrator(config)

    async def run(self, provider: Any, tools: dict[str, Any], prompt: str = "go") -> TurnResult:
        await self.coordinator.mount("providers", provider, name="p")
        for name, tool in tools.items():
            await self.coordinator.mount("tools", tool, name=name)
        result: TurnResult = await self.orchestrator.run_turn(
            prompt,
            self.context,
            {"p": provider},
            tools,
            self.coordinator.hooks,
            coordinator=self.coordinator,
        )
        return result

    def spans(self, operation: str | None = None) -> list[ReadableSpan]:
        found = self.exporter.get_finished_spans()
        return [
            sp
            for sp in found
            if operation is None or (sp.attributes or {}).get("gen_ai.operation.name") == operation
        ]

    def one(self, operation: str) -> ReadableSpan:
        (span,) = self.spans(operation)
        return span

    def assert_all_closed(self) -> None:
        assert self.processor.open == {}
        assert self.hook.statistics().open_spans == 0
        assert self.hook.statistics().open_turns == 0
        assert len(self.spans()) == self.processor.started == self.hook.statistics().spans_started

    def points(self, metric: str) -> list[Any]:
        data = self.reader.get_metrics_data()
        if data is None:
            return []
        return [
            point
            for rm in data.resource_metrics
            for sm in rm.scope_metrics
            for m in sm.metrics
            if m.name == metric
            for point in m.data.data_points
        ]

    def dump(self) -> str:
        """Everything exported: every span as JSON, then the metrics as JSON."""
        data = self.reader.get_metrics_data()
        spans = "\n".join(sp.to_json() for sp in self.spans())
        return spans + "\n" + (data.to_json() if data is not None else "")


def attrs_of(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def seconds(span: ReadableSpan) -> float:
    assert span.start_time is not None
    assert span.end_time is not None
    return (span.end_time - span.start_time) / 1e9


def parent_id(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def span_id(span: ReadableSpan) -> int:
    assert span.context is not None
    return span.context.span_id


def calls(*names: str, prefix: str = "c") -> ChatResponse:
    return ChatResponse(
        tool_calls=[ToolCall(id=f"{prefix}{i}", name=n) for i, n in enumerate(names)],
        usage=Usage(input_tokens=10, output_tokens=3, total_tokens=13),
        finish_reason="tool_calls",
        metadata={"response_id": "resp-1", "model": "scripted-2026"},
    )


def answer(text: str = "done") -> ChatResponse:
    return ChatResponse(
        content=[TextBlock(text=text)],
        usage=Usage(input_tokens=20, output_tokens=5, total_tokens=25, cache_read_tokens=8),
        finish_reason="stop",
        metadata={"response_id": "resp-2", "model": "scripted-2026"},
    )


class SpanProbe:
    """A tool that notes the span current in its own code, then sleeps ``delay``."""

    def __init__(self, name: str, delay: float) -> None:
        self.name = name
        self.description = f"probe {name}"
        self.input_schema: dict[str, Any] = {"type": "object"}
        self.delay = delay
        self.current: int | None = None

    async def execute(self, tool_input: dict[str, Any]) -> ToolResult:
        self.current = trace.get_current_span().get_span_context().span_id
        await anyio.sleep(self.delay)
        return ToolResult(output=f"{self.name} done")


class Raiser:
    name = "raiser"
    description = "raises"
    input_schema: dict[str, Any] = {"type": "object"}  # noqa: RUF012 - read only

    async def execute(self, tool_input: dict[str, Any]) -> ToolResult:
        await anyio.lowlevel.checkpoint()
        raise ValueError("broken")


class Canceller:
    """Asks the coordinator to cancel the turn, then takes ``after`` seconds to finish."""

    def __init__(self, coordinator: MockCoordinator, *, immediate: bool, after: float) -> None:
        self.name = "canceller"
        self.description = "cancels its own turn"
        self.input_schema: dict[str, Any] = {"type": "object"}
        self.coordinator = coordinator
        self.immediate = immediate
        self.after = after

    async def execute(self, tool_input: dict[str, Any]) -> ToolResult:
        await self.coordinator.request_cancel(immediate=self.immediate)
        await anyio.sleep(self.after)
        return ToolResult(output="cancelled the turn")


# -- one turn, three parallel tools ----------------------------------------------------------


async def test_three_parallel_tools_give_one_turn_two_chats_and_three_sibling_tool_spans(
    virtual: bool, s: float
) -> None:
    traced = Traced()
    probes = {n: SpanProbe(n, d * s) for n, d in (("a", 1), ("b", 2), ("c", 3))}
    provider = ScriptedProvider([calls("a", "b", "c"), answer()], latency=2 * s)

    result = await traced.run(provider, probes)

    assert result.status == "success"
    traced.assert_all_closed()
    turn = traced.one("invoke_agent")
    chats = sorted(traced.spans("chat"), key=lambda sp: sp.start_time or 0)
    tools = sorted(traced.spans("execute_tool"), key=lambda sp: attrs_of(sp)["gen_ai.tool.name"])
    assert (len(chats), len(tools), len(traced.spans())) == (2, 3, 6)

    # Names, kinds and the tree: every chat and tool span is a child of the turn.
    assert (turn.name, turn.kind, turn.parent) == ("invoke_agent helper", SpanKind.INTERNAL, None)
    assert [c.name for c in chats] == ["chat scripted", "chat scripted"]
    assert {c.kind for c in chats} == {SpanKind.CLIENT}
    assert [t.name for t in tools] == ["execute_tool a", "execute_tool b", "execute_tool c"]
    assert {parent_id(sp) for sp in (*chats, *tools)} == {span_id(turn)}
    assert len({sp.context.trace_id for sp in traced.spans() if sp.context}) == 1
    # Each tool's own code ran under its execute_tool span (started in its own task).
    assert [probes[n].current for n in "abc"] == [span_id(t) for t in tools]

    # Required attributes.
    assert attrs_of(turn) == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "helper",
        "gen_ai.conversation.id": CONVERSATION,
        "gen_ai.provider.name": "scripted",
        "gen_ai.usage.input_tokens": 30,
        "gen_ai.usage.output_tokens": 8,
        "gen_ai.usage.cache_read.input_tokens": 8,
        "amplifier.trace_id": result.trace_id,
        "amplifier.outcome": "success",
    }
    first, second = (attrs_of(c) for c in chats)
    assert first == {
        "gen_ai.operation.name": "chat",
        "gen_ai.conversation.id": CONVERSATION,
        "gen_ai.provider.name": "scripted",
        "gen_ai.request.model": "scripted",
        "gen_ai.request.stream": False,
        "gen_ai.response.model": "scripted-2026",
        "gen_ai.response.id": "resp-1",
        "gen_ai.response.finish_reasons": ("tool_calls",),
        "gen_ai.usage.input_tokens": 10,
        "gen_ai.usage.output_tokens": 3,
        "amplifier.iteration": 0,
        "amplifier.outcome": "success",
    }
    assert second["gen_ai.response.id"] == "resp-2"
    assert second["gen_ai.response.finish_reasons"] == ("stop",)
    assert second["gen_ai.usage.cache_read.input_tokens"] == 8
    group = {attrs_of(t)["amplifier.tool.parallel_group_id"] for t in tools}
    assert len(group) == 1
    for index, (tool, name) in enumerate(zip(tools, "abc", strict=True)):
        assert attrs_of(tool) == {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.conversation.id": CONVERSATION,
            "gen_ai.tool.name": name,
            "gen_ai.tool.call.id": f"c{index}",
            "gen_ai.tool.type": "function",
            "gen_ai.tool.description": f"probe {name}",
            "amplifier.tool.parallel_group_id": next(iter(group)),
            "amplifier.outcome": "success",
        }
        assert tool.status.status_code is StatusCode.UNSET

    # Times nest: the chats and tools inside the turn, the tools between the two chats,
    # and the three tools at once (each starts before any ends).
    spans_in_turn = (*chats, *tools)
    assert all(turn.start_time <= sp.start_time for sp in spans_in_turn)  # type: ignore[operator]
    assert all(sp.end_time <= turn.end_time for sp in spans_in_turn)  # type: ignore[operator]
    assert all(chats[0].end_time <= t.start_time for t in tools)  # type: ignore[operator]
    assert all(t.end_time <= chats[1].start_time for t in tools)  # type: ignore[operator]
    assert max(t.start_time for t in tools) < min(t.end_time for t in tools)  # type: ignore[type-var]
    if virtual:
        assert [seconds(t) for t in tools] == [1.0, 2.0, 3.0]
        assert [seconds(c) for c in chats] == [2.0, 2.0]
        assert seconds(turn) == 7.0


async def test_the_turn_span_is_a_child_of_the_span_current_where_the_turn_runs() -> None:
    traced = Traced()
    tracer = traced.tracer_provider.get_tracer("host")

    with tracer.start_as_current_span("http request") as host:
        await traced.run(ScriptedProvider([answer()]), {})

    turn = traced.one("invoke_agent")
    assert parent_id(turn) == host.get_span_context().span_id
    assert turn.context is not None
    assert turn.context.trace_id == host.get_span_context().trace_id


async def test_sequential_tools_nest_the_same_way_and_leave_nothing_current(s: float) -> None:
    traced = Traced(parallel_tools=False)
    probes = {n: SpanProbe(n, s) for n in "ab"}

    await traced.run(ScriptedProvider([calls("a", "b"), answer()]), probes)

    turn = traced.one("invoke_agent")
    tools = traced.spans("execute_tool")
    assert {parent_id(t) for t in tools} == {span_id(turn)}
    assert sorted(p.current for p in probes.values()) == sorted(span_id(t) for t in tools)  # type: ignore[type-var]
    a, b = sorted(tools, key=lambda sp: sp.start_time or 0)
    assert a.end_time <= b.start_time  # type: ignore[operator]
    assert not trace.get_current_span().get_span_context().is_valid
    traced.assert_all_closed()


# -- how turns end ---------------------------------------------------------------------------


async def test_a_provider_error_marks_the_chat_and_the_turn(s: float) -> None:
    traced = Traced()
    provider = ScriptedProvider([RateLimitError("slow down", provider="p")])

    result = await traced.run(provider, {})

    assert result.status == "error"
    chat, turn = traced.one("chat"), traced.one("invoke_agent")
    for span in (chat, turn):
        assert span.status.status_code is StatusCode.ERROR
        assert attrs_of(span)["error.type"] == "RateLimitError"
        assert attrs_of(span)["amplifier.outcome"] == "error"
    (point,) = traced.points("gen_ai.client.operation.duration")
    assert point.attributes["error.type"] == "RateLimitError"
    assert point.count == 1
    traced.assert_all_closed()


async def test_failing_tools_are_errors_of_their_own_spans_only() -> None:
    traced = Traced()
    tools = {"raiser": Raiser(), "sad": MockTool("sad", error="no luck"), "ok": MockTool("ok")}
    provider = ScriptedProvider([calls("raiser", "sad", "ok", "missing"), answer()])

    result = await traced.run(provider, tools)

    assert result.status == "success"
    by_name = {attrs_of(t)["gen_ai.tool.name"]: t for t in traced.spans("execute_tool")}
    expected = {"raiser": "ValueError", "sad": "_OTHER", "missing": "ToolNotFoundError"}
    for name, error_type in expected.items():
        assert by_name[name].status.status_code is StatusCode.ERROR, name
        assert attrs_of(by_name[name])["error.type"] == error_type
    assert by_name["ok"].status.status_code is StatusCode.UNSET
    assert "error.type" not in attrs_of(by_name["ok"])
    assert traced.one("invoke_agent").status.status_code is StatusCode.UNSET
    traced.assert_all_closed()


async def test_a_tool_timeout_is_error_type_timeout(virtual: bool, s: float) -> None:
    traced = Traced(tool_timeout=5 * s)
    tools = {"slow": MockTool("slow", delay=3600), "fast": MockTool("fast", delay=s)}

    result = await traced.run(ScriptedProvider([calls("slow", "fast"), answer()]), tools)

    assert result.status == "success"
    by_name = {attrs_of(t)["gen_ai.tool.name"]: t for t in traced.spans("execute_tool")}
    slow = by_name["slow"]
    assert slow.status.status_code is StatusCode.ERROR
    assert (attrs_of(slow)["error.type"], attrs_of(slow)["amplifier.outcome"]) == (
        "timeout",
        "error",
    )
    points = {
        p.attributes["gen_ai.tool.name"]: p for p in traced.points("gen_ai.execute_tool.duration")
    }
    assert points["slow"].attributes["error.type"] == "timeout"
    assert "error.type" not in points["fast"].attributes
    if virtual:
        assert seconds(slow) == 5.0
        assert points["slow"].sum == 5.0
    traced.assert_all_closed()


async def test_a_graceful_cancel_is_not_an_error(s: float) -> None:
    traced = Traced()
    tools = {
        "canceller": Canceller(traced.coordinator, immediate=False, after=s),
        "other": MockTool("other", delay=2 * s),
    }

    result = await traced.run(ScriptedProvider([calls("canceller", "other"), answer()]), tools)

    assert result.status == "cancelled"
    # The batch finished (graceful): its tools succeeded; no second provider call.
    assert len(traced.spans("chat")) == 1
    assert {attrs_of(t)["amplifier.outcome"] for t in traced.spans("execute_tool")} == {"success"}
    turn = traced.one("invoke_agent")
    assert turn.status.status_code is StatusCode.UNSET
    assert attrs_of(turn)["amplifier.outcome"] == "cancelled"
    assert "error.type" not in attrs_of(turn)
    assert [e.name for e in turn.events] == ["amplifier.cancel.requested"]
    traced.assert_all_closed()


async def test_an_immediate_cancel_closes_the_interrupted_tool_spans_as_cancelled(
    s: float,
) -> None:
    traced = Traced()
    tools = {
        "canceller": Canceller(traced.coordinator, immediate=True, after=3600),
        "other": MockTool("other", delay=3600),
    }

    result = await traced.run(ScriptedProvider([calls("canceller", "other"), answer()]), tools)

    assert result.status == "cancelled"
    for span in traced.spans():
        assert span.status.status_code is StatusCode.UNSET, span.name
        assert attrs_of(span)["amplifier.outcome"] in ("cancelled", "success"), span.name
    assert {attrs_of(t)["amplifier.outcome"] for t in traced.spans("execute_tool")} == {"cancelled"}
    assert attrs_of(traced.one("invoke_agent"))["amplifier.outcome"] == "cancelled"
    assert all(
        t.end_time <= traced.one("invoke_agent").end_time  # type: ignore[operator]
        for t in traced.spans("execute_tool")
    )
    traced.assert_all_closed()


async def test_a_host_cancel_closes_every_span(s: float) -> None:
    """The host cancels once ``quick`` has finished, while ``hang`` still runs (by that
    order, not by a deadline: on a loaded machine ``quick`` may take longer than any
    window picked for it)."""
    traced = Traced()
    tools = {"hang": MockTool("hang", delay=3600), "quick": MockTool("quick", delay=s)}
    quick_done = anyio.Event()

    def after_quick(_event: str, data: dict[str, Any]) -> None:
        if data["tool_name"] == "quick":
            quick_done.set()

    traced.coordinator.hooks.register("tool:post", after_quick, priority=10_000)  # after otel's
    host = anyio.CancelScope()

    async def turn() -> None:
        with host:
            await traced.run(ScriptedProvider([calls("hang", "quick"), answer()]), tools)

    with anyio.fail_after(60):  # a hang detector
        async with anyio.create_task_group() as group:
            group.start_soon(turn)
            await quick_done.wait()
            host.cancel()

    assert host.cancelled_caught
    by_name = {attrs_of(t)["gen_ai.tool.name"]: t for t in traced.spans("execute_tool")}
    assert attrs_of(by_name["quick"])["amplifier.outcome"] == "success"
    assert attrs_of(by_name["hang"])["amplifier.outcome"] == "cancelled"
    turn = traced.one("invoke_agent")
    assert (turn.status.status_code, attrs_of(turn)["amplifier.outcome"]) == (
        StatusCode.UNSET,
        "cancelled",
    )
    traced.assert_all_closed()


async def test_a_cancel_during_the_provider_call_closes_the_chat_span(s: float) -> None:
    traced = Traced()
    provider = ScriptedProvider([answer()], latency=3600)

    with anyio.move_on_after(s):
        await traced.run(provider, {})

    chat = traced.one("chat")
    assert (chat.status.status_code, attrs_of(chat)["amplifier.outcome"]) == (
        StatusCode.UNSET,
        "cancelled",
    )
    assert not trace.get_current_span().get_span_context().is_valid
    traced.assert_all_closed()


async def test_a_denied_tool_call_opens_no_span_and_leaves_none_open() -> None:
    traced = Traced()

    def deny(event: str, data: dict[str, Any]) -> Any:
        from amplifier_anyio.models import HookResult  # noqa: PLC0415

        return HookResult(action="deny", reason="no") if data["tool_name"] == "a" else None

    traced.coordinator.hooks.register("tool:pre", deny)
    tools = {"a": MockTool("a"), "b": MockTool("b")}

    await traced.run(ScriptedProvider([calls("a", "b"), answer()]), tools)

    assert [attrs_of(t)["gen_ai.tool.name"] for t in traced.spans("execute_tool")] == ["b"]
    traced.assert_all_closed()


# -- dropped events ---------------------------------------------------------------------------


async def test_spans_whose_end_event_never_came_are_closed_with_the_turn() -> None:
    traced = Traced()
    hooks = traced.coordinator.hooks
    base = {"trace_id": "t-1"}

    await hooks.emit("execution:start", {**base, "prompt": "x"})
    await hooks.emit("provider:request", {**base, "provider": "p", "iteration": 0})
    await hooks.emit("provider:response", {**base, "provider": "p", "usage": None})
    await hooks.emit("tool:pre", {**base, "tool_name": "t", "tool_call_id": "c1"})
    await hooks.emit("provider:request", {**base, "provider": "p", "iteration": 1})
    assert traced.hook.statistics().open_spans == 3
    await hooks.emit("orchestrator:complete", {**base, "status": "cancelled"})
    assert traced.hook.statistics().open_spans == 1
    await hooks.emit("execution:end", {**base, "response": "", "status": "cancelled"})

    outcomes = sorted(
        (sp.name, attrs_of(sp)["amplifier.outcome"], sp.status.status_code.name)
        for sp in traced.spans()
    )
    assert outcomes == [
        ("chat", "cancelled", "UNSET"),
        ("chat", "success", "UNSET"),
        ("execute_tool t", "cancelled", "UNSET"),
        ("invoke_agent helper", "cancelled", "UNSET"),
    ]
    traced.assert_all_closed()


async def test_a_turn_whose_terminal_events_never_came_is_closed_at_session_end() -> None:
    traced = Traced()
    hooks = traced.coordinator.hooks

    await hooks.emit("execution:start", {"trace_id": "t-2", "prompt": "x"})
    await hooks.emit("tool:pre", {"trace_id": "t-2", "tool_name": "t", "tool_call_id": "c1"})
    await hooks.emit("tool:pre", {"tool_name": "loose", "tool_call_id": "c9"})  # no turn
    await hooks.emit("session:end", {"status": "completed"})

    assert {attrs_of(sp)["amplifier.outcome"] for sp in traced.spans()} == {"unfinished"}
    assert len(traced.spans()) == 3
    traced.assert_all_closed()


async def test_the_cleanup_of_a_session_closes_what_is_open_and_stops_listening() -> None:
    traced = Traced()
    hooks = traced.coordinator.hooks

    await hooks.emit("execution:start", {"trace_id": "t-3", "prompt": "x"})
    traced.hook.close()
    await hooks.emit("execution:start", {"trace_id": "t-4", "prompt": "x"})

    assert [attrs_of(sp)["amplifier.outcome"] for sp in traced.spans()] == ["unfinished"]
    assert hooks.list_handlers("execution:start") == {"execution:start": []}
    traced.assert_all_closed()


# -- content ---------------------------------------------------------------------------------

SECRETS = ("PROMPT-SECRET", "SYSTEM-SECRET", "ARGS-SECRET", "RESULT-SECRET", "ANSWER-SECRET")


async def capture_run(capture: bool | None) -> Traced:
    context = MockContextManager([{"role": "system", "content": "be terse SYSTEM-SECRET"}])
    traced = Traced(hook_config={"capture_content": capture}, context=context)
    call = ChatResponse(
        tool_calls=[ToolCall(id="c0", name="echo", arguments={"q": "ARGS-SECRET"})],
        content=[TextBlock(text="calling")],
    )
    tools = {"echo": MockTool("echo", "RESULT-SECRET"), "sad": MockTool("sad", error="ERR")}
    provider = ScriptedProvider([call, answer("the ANSWER-SECRET")])
    await traced.run(provider, tools, prompt="tell me PROMPT-SECRET")
    return traced


async def test_without_content_capture_no_message_text_is_exported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", raising=False)
    traced = await capture_run(None)

    dump = traced.dump()
    assert "invoke_agent" in dump
    assert "gen_ai.client.token.usage" in dump
    assert [secret for secret in SECRETS if secret in dump] == []
    assert "gen_ai.input.messages" not in dump


async def test_with_content_capture_the_messages_are_on_the_spans() -> None:
    traced = await capture_run(True)

    dump = traced.dump()
    assert [secret for secret in SECRETS if secret not in dump] == []
    first_chat = min(traced.spans("chat"), key=lambda sp: sp.start_time or 0)
    chat = attrs_of(first_chat)
    assert chat["gen_ai.input.messages"] == (
        '[{"role":"user","parts":[{"type":"text","content":"tell me PROMPT-SECRET"}]}]'
    )
    assert chat["gen_ai.system_instructions"] == (
        '[{"type":"text","content":"be terse SYSTEM-SECRET"}]'
    )
    assert '"name":"echo"' in chat["gen_ai.tool.definitions"]
    assert '"arguments":{"q":"ARGS-SECRET"}' in chat["gen_ai.output.messages"]
    tool = attrs_of(traced.one("execute_tool"))
    assert (tool["gen_ai.tool.call.arguments"], tool["gen_ai.tool.call.result"]) == (
        '{"q":"ARGS-SECRET"}',
        '"RESULT-SECRET"',
    )
    # The system message stays out of the messages (it is the instructions).
    assert "SYSTEM-SECRET" not in chat["gen_ai.input.messages"]


async def test_the_environment_variable_turns_capture_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    assert "PROMPT-SECRET" in (await capture_run(None)).dump()
    # Config wins over the environment.
    assert "PROMPT-SECRET" not in (await capture_run(False)).dump()


# -- metrics ---------------------------------------------------------------------------------


async def test_metrics_are_recorded_with_their_attributes(virtual: bool, s: float) -> None:
    traced = Traced()
    tools = {n: MockTool(n, delay=d * s) for n, d in (("a", 1), ("b", 2))}

    await traced.run(ScriptedProvider([calls("a", "b"), answer()], latency=s), tools)

    (duration,) = traced.points("gen_ai.client.operation.duration")
    assert duration.count == 2
    assert dict(duration.attributes) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "scripted",
        "gen_ai.request.model": "scripted",
        "gen_ai.response.model": "scripted-2026",
    }
    tokens = {
        p.attributes["gen_ai.token.type"]: p for p in traced.points("gen_ai.client.token.usage")
    }
    assert (tokens["input"].sum, tokens["input"].count) == (30, 2)
    assert (tokens["output"].sum, tokens["output"].count) == (8, 2)
    tool_points = {
        p.attributes["gen_ai.tool.name"]: p for p in traced.points("gen_ai.execute_tool.duration")
    }
    assert set(tool_points) == {"a", "b"}
    assert dict(tool_points["a"].attributes) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "a",
    }
    assert traced.points("gen_ai.client.operation.time_to_first_chunk") == []  # not streamed
    if virtual:
        assert duration.sum == 2.0
        assert (tool_points["a"].sum, tool_points["b"].sum) == (1.0, 2.0)


class SlowStream:
    """A streaming provider whose first chunk comes after ``first`` seconds."""

    name = "streamer"

    def __init__(self, first: float) -> None:
        self.first = first

    def get_info(self) -> ProviderInfo:
        return ProviderInfo(id="openai", display_name="compatible", defaults={"model": "m-1"})

    base_url = "http://127.0.0.1:8123/v1"

    def parse_tool_calls(self, response: ChatResponse) -> list[ToolCall]:
        return list(response.tool_calls or [])

    async def complete(self, request: ChatRequest, **kwargs: Any) -> ChatResponse:
        raise AssertionError("streams")

    @asynccontextmanager
    async def stream(self, request: ChatRequest, **kwargs: Any) -> AsyncIterator[Any]:
        yield self._events()

    async def _events(self) -> AsyncIterator[dict[str, Any]]:
        await anyio.sleep(self.first)
        yield {"type": "content_block:start", "index": 0, "block_type": "text"}
        yield {"type": "content_block:delta", "index": 0, "delta": "hi"}
        await anyio.sleep(self.first)
        yield {"type": "response", "response": answer("hi")}


async def test_a_streamed_call_records_time_to_first_chunk_and_its_server(
    virtual: bool, s: float
) -> None:
    traced = Traced(LoopStreamingOrchestrator())

    await traced.run(SlowStream(s / 2), {})

    chat = attrs_of(traced.one("chat"))
    assert chat["gen_ai.request.stream"] is True
    assert (chat["gen_ai.provider.name"], chat["gen_ai.request.model"]) == ("openai", "m-1")
    assert (chat["server.address"], chat["server.port"]) == ("127.0.0.1", 8123)
    (first,) = traced.points("gen_ai.client.operation.time_to_first_chunk")
    assert first.count == 1
    assert first.attributes["server.address"] == "127.0.0.1"
    if virtual:
        assert first.sum == 0.5
        assert seconds(traced.one("chat")) == 1.0


# -- lifecycle stages ------------------------------------------------------------------------


async def test_a_planning_stage_is_a_plan_span_holding_its_provider_calls() -> None:
    traced = Traced()
    hooks = traced.coordinator.hooks
    base = {"trace_id": "t-5"}

    await hooks.emit("execution:start", {**base, "prompt": "x"})
    await hooks.emit("lifecycle:initialize", {**base, "stage": "initialize", "data": {}})
    await hooks.emit("provider:request", {**base, "provider": "p", "iteration": 0})
    await hooks.emit("provider:response", {**base, "provider": "p", "usage": None})
    await hooks.emit("lifecycle:plan", {**base, "stage": "plan", "data": {"steps": [1, 2]}})
    await hooks.emit("provider:request", {**base, "provider": "p", "iteration": 1})
    await hooks.emit("provider:response", {**base, "provider": "p", "usage": None})
    await hooks.emit("lifecycle:complete", {**base, "stage": "complete", "data": {}})
    await hooks.emit("execution:end", {**base, "response": "ok", "status": "completed"})

    turn, plan = traced.one("invoke_agent"), traced.one("plan")
    planning, answering = sorted(traced.spans("chat"), key=lambda sp: sp.start_time or 0)
    assert plan.name == "plan helper"
    assert parent_id(plan) == span_id(turn)
    assert parent_id(planning) == span_id(plan)
    assert parent_id(answering) == span_id(turn)
    assert attrs_of(plan)["amplifier.plan.steps"] == 2
    traced.assert_all_closed()


async def test_a_planning_stage_that_fails_is_an_error_of_the_plan_span() -> None:
    traced = Traced()
    hooks = traced.coordinator.hooks
    base = {"trace_id": "t-6"}

    await hooks.emit("execution:start", {**base, "prompt": "x"})
    await hooks.emit("lifecycle:initialize", {**base, "stage": "initialize", "data": {}})
    await hooks.emit(
        "lifecycle:failed",
        {**base, "stage": "failed", "data": {"error": {"type": "OrchestrationError"}}},
    )
    await hooks.emit(
        "execution:end",
        {**base, "response": "", "status": "error", "error": {"type": "OrchestrationError"}},
    )

    plan, turn = traced.one("plan"), traced.one("invoke_agent")
    assert attrs_of(plan)["error.type"] == "OrchestrationError"
    assert (turn.status.status_code, attrs_of(turn)["error.type"]) == (
        StatusCode.ERROR,
        "OrchestrationError",
    )
    traced.assert_all_closed()


# -- in a session, from a plan ---------------------------------------------------------------


async def test_mounted_from_a_plan_the_conversation_id_is_the_session_id(s: float) -> None:
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    plan = {
        "session": {"orchestrator": "loop-basic", "context": "context-simple"},
        "providers": [{"module": "provider-scripted", "config": {"demo": True}}],
        "tools": [{"module": "tool-demo", "config": {"delay": s}}],
        "hooks": [
            {
                "module": "hooks-otel",
                "config": {"tracer_provider": tracer_provider, "agent_name": "demo"},
            }
        ],
    }

    async with AmplifierSession(plan, session_id="s-42") as session:
        first = await session.run("one two")
        second = await session.run("three")

    spans = exporter.get_finished_spans()
    turns = [sp for sp in spans if sp.name == "invoke_agent demo"]
    assert [attrs_of(t)["amplifier.trace_id"] for t in turns] == [first.trace_id, second.trace_id]
    assert {attrs_of(sp)["gen_ai.conversation.id"] for sp in spans} == {"s-42"}
    assert len({sp.context.trace_id for sp in turns if sp.context}) == 2
    assert {sp.name for sp in spans} >= {"chat scripted", "execute_tool word_count"}


# -- config ----------------------------------------------------------------------------------


def test_bad_config_values_are_config_errors_naming_the_key() -> None:
    with pytest.raises(ConfigError, match=r"^capture_content: expected a boolean"):
        OtelConfig.from_dict({"capture_content": "yes"})
    with pytest.raises(ConfigError, match=r"^agent_name: expected a string"):
        OtelConfig.from_dict({"agent_name": 3})
    assert OtelConfig.from_dict({"agent_name": "a", "unknown": 1}).agent_name == "a"


def test_the_schema_lists_the_keys() -> None:
    assert set(CONFIG_SCHEMA.settings) == {
        "capture_content",
        "agent_name",
        "tracer_provider",
        "meter_provider",
    }
    assert [p.key for p in CONFIG_SCHEMA.check({"capture_content": "x", "nope": 1})] == [
        "capture_content",
        "nope",
    ]


async def test_a_loop_lifecycle_turn_plans_inside_a_plan_span_and_runs_its_tools_below_the_turn(
    s: float,
) -> None:
    """The real loop-lifecycle orchestrator, not replayed events: its planning call sits in
    the ``plan`` span, its three tool calls and its aggregating call under the turn."""
    from amplifier_anyio.orchestrators import LoopLifecycleOrchestrator  # noqa: PLC0415

    plan = [
        {"id": "a", "tool": "fetch_a", "input": {"q": "x"}},
        {"id": "b", "tool": "fetch_b", "input": {"q": "y"}},
        {"id": "c", "tool": "combine", "depends_on": ["a", "b"]},
    ]
    provider = ScriptedProvider(
        [
            ChatResponse(content=[TextBlock(text=json.dumps(plan))]),
            ChatResponse(content=[TextBlock(text="combined")]),
        ]
    )
    tools = {
        "fetch_a": MockTool("fetch_a", "A", delay=1 * s),
        "fetch_b": MockTool("fetch_b", "B", delay=1 * s),
        "combine": MockTool("combine", "AB"),
    }
    traced = Traced(LoopLifecycleOrchestrator())

    result = await traced.run(provider, tools)

    assert result.status == "success", result.error
    assert result.text == "combined"
    turn, plan_span = traced.one("invoke_agent"), traced.one("plan")
    assert parent_id(plan_span) == span_id(turn)
    planning, aggregating = sorted(traced.spans("chat"), key=lambda sp: sp.start_time or 0)
    assert parent_id(planning) == span_id(plan_span)
    assert parent_id(aggregating) == span_id(turn)
    tool_spans = traced.spans("execute_tool")
    assert sorted(attrs_of(sp)["gen_ai.tool.name"] for sp in tool_spans) == sorted(tools)
    assert {parent_id(sp) for sp in tool_spans} == {span_id(turn)}
    traced.assert_all_closed()


# -- the real HTTP providers -----------------------------------------------------------------


def _openai_server(request: httpx.Request) -> httpx.Response:
    body = json.loads(request.content)
    answered = any(m.get("role") == "tool" for m in body["messages"])
    if answered:
        message: dict[str, Any] = {"role": "assistant", "content": "It is 14:05."}
        finish, usage = "stop", {"prompt_tokens": 90, "completion_tokens": 6}
    else:
        message = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_T3nR7",
                    "type": "function",
                    "function": {"name": "get_time", "arguments": '{"zone": "Europe/Paris"}'},
                }
            ],
        }
        finish, usage = "tool_calls", {"prompt_tokens": 50, "completion_tokens": 12}
    usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
    usage["prompt_tokens_details"] = {"cached_tokens": 32}
    return httpx.Response(
        200,
        json={
            "id": "chatcmpl-otel-1" if not answered else "chatcmpl-otel-2",
            "object": "chat.completion",
            "created": 1741569952,
            "model": "gpt-4o-2024-08-06",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": usage,
        },
    )


def _anthropic_server(request: httpx.Request) -> httpx.Response:
    body = json.loads(request.content)
    answered = any(
        isinstance(m.get("content"), list)
        and any(b.get("type") == "tool_result" for b in m["content"])
        for m in body["messages"]
    )
    if answered:
        content: list[dict[str, Any]] = [{"type": "text", "text": "It is 14:05."}]
        stop = "end_turn"
    else:
        content = [
            {
                "type": "tool_use",
                "id": "toolu_01Time",
                "name": "get_time",
                "input": {"zone": "Europe/Paris"},
            }
        ]
        stop = "tool_use"
    return httpx.Response(
        200,
        json={
            "id": "msg_otel_2" if answered else "msg_otel_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-5-20250929",
            "content": content,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": {
                "input_tokens": 100,
                "cache_read_input_tokens": 30,
                "cache_creation_input_tokens": 20,
                "output_tokens": 7,
            },
        },
    )


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_the_real_providers_name_their_system_server_and_cached_tokens(kind: str) -> None:
    traced = Traced()
    if kind == "openai":
        provider: Any = OpenAIChatProvider(
            {"api_key": "sk-test-0123456789", "base_url": "http://127.0.0.1:8765/v1"},
            hooks=traced.coordinator.hooks,
            transport=httpx.MockTransport(_openai_server),
        )
    else:
        provider = AnthropicProvider(
            {"api_key": "sk-ant-test-0123456789", "base_url": "https://llm.internal.example"},
            hooks=traced.coordinator.hooks,
            transport=httpx.MockTransport(_anthropic_server),
        )
    clock = MockTool("get_time", output="14:05 CET")

    result = await traced.run(provider, {"get_time": clock})

    assert result.status.value == "success", result
    assert result.text == "It is 14:05."
    chats = traced.spans("chat")
    assert len(chats) == 2
    first, second = (attrs_of(span) for span in chats)
    if kind == "openai":
        assert first["gen_ai.provider.name"] == "openai"
        assert (first["server.address"], first["server.port"]) == ("127.0.0.1", 8765)
        assert first["gen_ai.response.model"] == "gpt-4o-2024-08-06"
        assert first["gen_ai.response.id"] == "chatcmpl-otel-1"
        assert first["gen_ai.response.finish_reasons"] == ("tool_calls",)
        assert (first["gen_ai.usage.input_tokens"], first["gen_ai.usage.output_tokens"]) == (50, 12)
        assert first["gen_ai.usage.cache_read.input_tokens"] == 32
        assert second["gen_ai.usage.input_tokens"] == 90
    else:
        assert first["gen_ai.provider.name"] == "anthropic"
        assert (first["server.address"], first["server.port"]) == ("llm.internal.example", 443)
        assert first["gen_ai.response.id"] == "msg_otel_1"
        assert first["gen_ai.response.finish_reasons"] == ("tool_use",)
        # Anthropic's input_tokens leaves the cache out; the convention's count includes it.
        assert first["gen_ai.usage.input_tokens"] == 150
        assert first["gen_ai.usage.cache_read.input_tokens"] == 30
        assert first["gen_ai.usage.cache_creation.input_tokens"] == 20
        assert first["gen_ai.usage.output_tokens"] == 7
    (tool,) = traced.spans("execute_tool")
    assert attrs_of(tool)["gen_ai.tool.name"] == "get_time"
    assert attrs_of(tool)["gen_ai.tool.call.id"] in ("call_T3nR7", "toolu_01Time")
    assert attrs_of(traced.one("invoke_agent"))["gen_ai.conversation.id"] == CONVERSATION
    traced.assert_all_closed()
