"""An OpenTelemetry span per activity of a durable session, in its turn's trace: the
provider calls', the tool calls' (and a ``task`` call's), each with the session id and its
call; hooks-otel's spans of the same turn join the trace; a child session's spans are in
its root turn's trace (SDK in-memory exporter)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from _temporal_kit import FAST, agent_plan, demo_plan, marker_plan, queue, reply
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


def task_plan(tmp_path: Path) -> dict[str, Any]:
    """A turn whose one ``task`` call (``t1``) runs a child that makes one call (``h1``)."""
    scripts = {
        "go": [
            reply(calls=[("t1", "task", {"agent": "helper", "instruction": "sub job"})]),
            reply("parent done"),
        ],
        "sub job": [reply(calls=[("h1", "marker", {"delay": 0})]), reply("child answer")],
    }
    return agent_plan(scripts, tmp_path / "marks", FAST)


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
    plan = task_plan(tmp_path)
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


async def test_the_callers_span_holds_the_turn_and_every_activity_span_of_its_tree(
    temporal_server: str, tmp_path: Path
) -> None:
    """With a tracer on the client, the turn is the exported span ``amplifier-turn``: a
    child of the caller's current span, the parent of the turn's activity spans and of its
    child session's, all in the caller's trace (before, the parent was a derived id that
    no process exported: viewers showed the activity spans under a missing parent)."""
    worker_provider, worker_spans = tracing()
    client_provider, client_spans = tracing()
    plan = task_plan(tmp_path)
    task_queue = queue()
    async with (
        SessionWorker(
            plan, address=temporal_server, task_queue=task_queue, tracer_provider=worker_provider
        ),
        TemporalSessions(
            address=temporal_server, task_queue=task_queue, tracer_provider=client_provider
        ) as sessions,
    ):
        session = await sessions.open(plan)
        with client_provider.get_tracer("app").start_as_current_span("request") as request:
            result = await session.run("go")
    assert result.status is TurnStatus.SUCCESS
    (turn,) = of(tuple(client_spans.get_finished_spans()), "amplifier-turn")
    assert turn.context is not None
    assert turn.parent is not None
    assert turn.parent.span_id == request.get_span_context().span_id
    assert turn.context.trace_id == request.get_span_context().trace_id
    assert attribute(turn, "gen_ai.conversation.id") == session.id
    assert attribute(turn, "amplifier.outcome") == "success"
    assert attribute(turn, "amplifier.trace_id") == result.trace_id
    spans = tuple(worker_spans.get_finished_spans())
    activities = [s for s in spans if s.name.startswith("amplifier-")]
    calls = {attribute(s, "gen_ai.tool.call.id") for s in activities}
    assert calls == {None, "t1", "h1"}  # the providers', the task call's, the child's call's
    assert len(activities) == 7  # 2 + 2 provider calls, task start, 2 tool calls
    for span in activities:
        assert span.context is not None
        assert span.context.trace_id == turn.context.trace_id
        assert span.parent is not None
        assert span.parent.span_id == turn.context.span_id


async def test_a_cancelled_turn_span_says_so(temporal_server: str, tmp_path: Path) -> None:
    client_provider, client_spans = tracing()
    plan = marker_plan([reply(calls=[("s1", "marker", {"delay": 30})])], tmp_path / "m", FAST)
    task_queue = queue()
    async with (
        SessionWorker(plan, address=temporal_server, task_queue=task_queue),
        TemporalSessions(
            address=temporal_server, task_queue=task_queue, tracer_provider=client_provider
        ) as sessions,
    ):
        session = await sessions.open(plan)
        with anyio.move_on_after(1.0) as cut:
            await session.run("go")
        assert cut.cancelled_caught
        last = await session.last_result()
    assert last is not None
    assert last.status is TurnStatus.CANCELLED
    (turn,) = of(tuple(client_spans.get_finished_spans()), "amplifier-turn")
    assert attribute(turn, "amplifier.outcome") == "cancelled"
