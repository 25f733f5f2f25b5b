"""hooks-otel under a random cancel point: every span opened is closed, and how it says it
ended agrees with how the turn ended.

Each example draws one or two rounds of 1..4 tool calls (each taking a drawn time, or
running past a drawn ``tool_timeout``), sequential or parallel, a provider latency, and one
cancel — graceful, immediate, the host's own cancel scope or ``turn_timeout`` — at a drawn
instant (often after the turn is over, which must change nothing), under loop-basic,
loop-streaming or loop-events, with or without a provider call that fails (the turn and
that call's span are then errors, and nothing else is). The ``ci`` profile runs 200
examples per backend. Each example runs in its
own event loop: trio on a fresh ``MockClock(autojump_threshold=0)`` (one unit = 1/8 s of
virtual time), asyncio on the real clock (one unit = 1/2048 s).
"""

from __future__ import annotations

from typing import Any

import anyio
import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from amplifier_anyio.errors import ProviderUnavailableError
from amplifier_anyio.hooks.otel import OtelHook
from amplifier_anyio.kernel import TurnResult
from amplifier_anyio.models import ChatResponse, TextBlock, ToolCall
from amplifier_anyio.orchestrators import (
    LoopBasicOrchestrator,
    LoopEventsOrchestrator,
    LoopStreamingOrchestrator,
)
from amplifier_anyio.providers.scripted import ScriptedProvider
from amplifier_anyio.testing import MockContextManager, MockCoordinator, MockTool
from tiers import examples

UNITS = {"trio": 1 / 8, "asyncio": 1 / 2048}
ORCHESTRATORS = {
    "loop-basic": LoopBasicOrchestrator,
    "loop-streaming": LoopStreamingOrchestrator,
    "loop-events": LoopEventsOrchestrator,
}
EXAMPLES = examples(200)


@attrs.frozen
class Scenario:
    rounds: tuple[tuple[int, ...], ...]  # per round, each call's duration in units
    parallel: bool
    latency: int
    tool_timeout: int | None
    cancel: str
    at: int
    orchestrator: str = "loop-basic"
    fail_round: int | None = None  # the provider call that fails (None: none fails)


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    durations = st.integers(min_value=0, max_value=12)
    rounds = draw(
        st.lists(st.lists(durations, min_size=1, max_size=4).map(tuple), min_size=1, max_size=2)
    )
    return Scenario(
        rounds=tuple(rounds),
        parallel=draw(st.booleans()),
        latency=draw(st.integers(min_value=0, max_value=2)),
        tool_timeout=draw(st.none() | st.integers(min_value=1, max_value=8)),
        cancel=draw(st.sampled_from(["graceful", "immediate", "host", "turn_timeout"])),
        at=draw(st.integers(min_value=0, max_value=40)),
        orchestrator=draw(st.sampled_from(sorted(ORCHESTRATORS))),
        fail_round=draw(st.none() | st.integers(min_value=0, max_value=len(rounds))),
    )


class OpenSpans(SpanProcessor):
    def __init__(self) -> None:
        self.open: set[int] = set()

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        self.open.add(span.context.span_id)

    def on_end(self, span: ReadableSpan) -> None:
        assert span.context is not None
        self.open.discard(span.context.span_id)


async def run_scenario(scenario: Scenario, unit: float) -> None:
    exporter, processor = InMemorySpanExporter(), OpenSpans()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(processor)
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    coordinator = MockCoordinator()
    hook = OtelHook({"tracer_provider": tracer_provider}, coordinator=coordinator)
    hook.register(coordinator.hooks)
    tools: dict[str, Any] = {}
    script: list[ChatResponse | BaseException] = []
    for r, durations in enumerate(scenario.rounds):
        calls = []
        for i, units in enumerate(durations):
            name = f"t{r}_{i}"
            tools[name] = MockTool(name, delay=units * unit)
            calls.append(ToolCall(id=f"c{r}_{i}", name=name))
        script.append(ChatResponse(tool_calls=calls))
    script.append(ChatResponse(content=[TextBlock(text="done")]))
    if scenario.fail_round is not None:
        script[scenario.fail_round] = ProviderUnavailableError("the model is down", retryable=False)
    config: dict[str, Any] = {"parallel_tools": scenario.parallel}
    if scenario.tool_timeout is not None:
        config["tool_timeout"] = scenario.tool_timeout * unit
    if scenario.cancel == "turn_timeout":
        config["turn_timeout"] = max(scenario.at, 1) * unit
    orchestrator = ORCHESTRATORS[scenario.orchestrator](config)
    provider = ScriptedProvider(script, latency=scenario.latency * unit)
    results: list[TurnResult] = []
    host = anyio.CancelScope()

    async def turn() -> None:
        with host:
            results.append(
                await orchestrator.run_turn(
                    "go",
                    MockContextManager(),
                    {"p": provider},
                    tools,
                    coordinator.hooks,
                    coordinator=coordinator,
                )
            )

    async with anyio.create_task_group() as tg:
        tg.start_soon(turn)
        await anyio.sleep(scenario.at * unit)
        if scenario.cancel in ("graceful", "immediate"):
            await coordinator.request_cancel(immediate=scenario.cancel == "immediate")
        elif scenario.cancel == "host":
            host.cancel()

    check(scenario, exporter.get_finished_spans(), results, processor, hook)


def check(
    scenario: Scenario,
    spans: tuple[ReadableSpan, ...],
    results: list[TurnResult],
    processor: OpenSpans,
    hook: OtelHook,
) -> None:
    # Every span opened was closed.
    assert processor.open == set()
    assert hook.statistics().open_spans == 0
    assert hook.statistics().open_turns == 0
    (turn,) = [sp for sp in spans if sp.name == "invoke_agent"]
    status = results[0].status if results else "cancelled"  # no result: the host's cancel
    assert (turn.attributes or {})["amplifier.outcome"] == str(status)
    if status == "error":  # only the provider's failure makes a failed turn here
        assert scenario.fail_round is not None
        assert turn.status.status_code is StatusCode.ERROR
        chats = [sp for sp in spans if sp.name.startswith("chat")]
        assert chats[-1].status.status_code is StatusCode.ERROR
    else:
        assert turn.status.status_code is StatusCode.UNSET
    assert turn.context is not None
    for span in spans:
        attributes = span.attributes or {}
        assert "amplifier.outcome" in attributes, span.name
        if span is turn:
            continue
        assert span.parent is not None
        assert span.parent.span_id == turn.context.span_id
        assert turn.start_time <= span.start_time <= span.end_time <= turn.end_time  # type: ignore[operator]
        # Only a tool that ran out of time (or the failing model call) is an error; a
        # cancel never is.
        if span.status.status_code is StatusCode.ERROR and span.name.startswith("chat"):
            assert status == "error", span.name
        elif span.status.status_code is StatusCode.ERROR:
            assert attributes["error.type"] == "timeout", span.name
            assert scenario.tool_timeout is not None
        if attributes["amplifier.outcome"] == "cancelled":
            assert status == "cancelled", span.name
        assert attributes["amplifier.outcome"] != "unfinished", span.name
    calls = sum(len(r) for r in scenario.rounds)
    assert len([sp for sp in spans if sp.name.startswith("execute_tool")]) <= calls
    if status == "success":
        assert len([sp for sp in spans if sp.name.startswith("chat")]) == len(scenario.rounds) + 1


@pytest.mark.parametrize("backend", ["trio", "asyncio"])
@settings(max_examples=EXAMPLES, deadline=None)
@given(scenario=scenarios())
def test_every_span_is_closed_whatever_the_cancel_point(backend: str, scenario: Scenario) -> None:
    options: dict[str, Any] = {}
    if backend == "trio":
        from trio.testing import MockClock  # noqa: PLC0415 - test extra, trio leg only

        options["clock"] = MockClock(autojump_threshold=0)
    anyio.run(run_scenario, scenario, UNITS[backend], backend=backend, backend_options=options)
