"""An OpenTelemetry span per activity of a durable session, in its turn's trace: the
provider calls', the tool calls' (and a ``task`` call's), each with the session id and its
call; hooks-otel's spans of the same turn join the trace; a child session's spans are in
its root turn's trace (SDK in-memory exporter)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _temporal_kit import FAST, agent_plan, demo_plan, queue, reply
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from test_durable_sessions import SCRIPT

from amplifier_anyio import TurnStatus
from amplifier_anyio.temporal import SessionWorker, TemporalSessions
from amplifier_anyio.temporal._spans import turn_span_id

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


def tracing() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def of(spans: tuple[ReadableSpan, ...], prefix: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name.startswith(prefix)]


def attribute(span: ReadableSpan, key: str) -> Any:
    assert span.attributes is not None
    return span.attributes.get(key)


async def test_one_span_per_activity_in_the_turns_trace(temporal_server: str) -> None:
    provider, exporter = tracing()
    plan = demo_plan(SCRIPT)
    plan["hooks"] = [{"module": "hooks-otel", "config": {"tracer_provider": provider}}]
    task_queue = queue()
    async with (
        SessionWorker(
            plan, address=temporal_server, task_queue=task_queue, tracer_provider=provider
        ),
        TemporalSessions(address=temporal_server, task_queue=task_queue) as sessions,
    ):
        session = await sessions.open(plan)
        result = await session.run("count them")
    assert result.status is TurnStatus.SUCCESS
    assert result.trace_id is not None
    spans = tuple(exporter.get_finished_spans())
    providers = of(spans, "amplifier-provider-call")
    tools = of(spans, "amplifier-tool-call")
    assert len(providers) == 3  # one per provider call
    assert sorted(attribute(s, "gen_ai.tool.call.id") for s in tools) == ["c1", "c2", "c3"]
    assert sorted(s.name for s in tools) == [
        "amplifier-tool-call reverse_words",
        "amplifier-tool-call word_count",
        "amplifier-tool-call word_count",
    ]
    assert sorted(attribute(s, "amplifier.iteration") for s in providers) == [0, 1, 2]
    trace = int(result.trace_id, 16)
    for span in (*providers, *tools):
        assert span.context is not None
        assert span.context.trace_id == trace
        assert span.parent is not None
        assert span.parent.span_id == turn_span_id(result.trace_id)
        assert attribute(span, "gen_ai.conversation.id") == session.id
        assert attribute(span, "amplifier.trace_id") == result.trace_id
        assert attribute(span, "temporal.activity.attempt") == 1
        assert attribute(span, "amplifier.outcome") == "success"
    # hooks-otel's spans of the turn (the worker's plan mounts it): in the same trace
    agent = of(spans, "invoke_agent")
    chats = of(spans, "chat")
    executed = of(spans, "execute_tool")
    assert len(agent) == 1
    assert (len(chats), len(executed)) == (3, 3)
    for span in (*agent, *chats, *executed):
        assert span.context is not None
        assert span.context.trace_id == trace


async def test_a_task_call_and_its_childs_calls_have_their_spans(
    temporal_server: str, tmp_path: Path
) -> None:
    provider, exporter = tracing()
    scripts = {
        "go": [reply(calls=[("t1", "task", {"agent": "helper", "instruction": "sub job"})])],
        "sub job": [reply(calls=[("h1", "marker", {"delay": 0})]), reply("child answer")],
    }
    scripts["go"].append(reply("parent done"))
    plan = agent_plan(scripts, tmp_path / "marks", FAST)
    task_queue = queue()
    async with (
        SessionWorker(
            plan, address=temporal_server, task_queue=task_queue, tracer_provider=provider
        ),
        TemporalSessions(address=temporal_server, task_queue=task_queue) as sessions,
    ):
        session = await sessions.open(plan)
        result = await session.run("go")
        child = await (await sessions.attach(f"{session.id}-t1")).last_result()
    assert result.trace_id is not None
    assert child is not None
    assert child.trace_id is not None
    spans = tuple(exporter.get_finished_spans())
    by_call = {attribute(s, "gen_ai.tool.call.id"): s for s in of(spans, "amplifier-tool-call")}
    assert set(by_call) == {"t1", "h1"}
    (start,) = of(spans, "amplifier-task-start")
    trace = int(result.trace_id, 16)
    for span in (by_call["t1"], by_call["h1"], start):
        assert span.context is not None
        assert span.context.trace_id == trace  # the child's turn: in its root turn's trace
    assert by_call["t1"].parent is not None
    assert by_call["h1"].parent is not None
    assert by_call["t1"].parent.span_id == turn_span_id(result.trace_id)
    assert by_call["h1"].parent.span_id == turn_span_id(child.trace_id)  # under its turn
    assert child.trace_id != result.trace_id
    assert attribute(by_call["h1"], "gen_ai.conversation.id") == f"{session.id}-t1"
