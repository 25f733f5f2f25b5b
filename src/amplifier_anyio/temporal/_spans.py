"""An OpenTelemetry span per activity of a durable session, in its turn's trace.

A turn's ``trace_id`` (the workflow's, 32 hex digits: ``TurnResult.trace_id``) is the
OpenTelemetry trace id of its activities' spans; their parent is the turn's span id, derived
from the trace id, so every worker that runs one of the turn's calls puts its span in the
same trace under the same parent, with nothing carried but the trace id. A child session's
turn (a ``task`` call's child workflow) is in its root turn's trace: its spans have the
root's trace id and its own turn's span id as their parent. The turn's span itself is not
exported (no process owns it: its id is all there is). Each span carries
the session id, the call (its id and tool, or the provider call's iteration) and the
activity's attempt. Spans the call's own code opens (hooks-otel's ``chat`` and
``execute_tool``) are children of the activity's span.

Only with ``opentelemetry-api`` installed (extra ``[otel]``); without it, no span. The
tracer provider is the worker's (``SessionWorker(tracer_provider=...)``), else the global.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator, Mapping
from typing import Any

import anyio

__all__ = ("activity_span", "turn_context", "turn_span_id", "ATTRIBUTES")

ATTRIBUTES = {
    "session_id": "gen_ai.conversation.id",
    "trace_id": "amplifier.trace_id",
    "tool_call_id": "gen_ai.tool.call.id",
    "tool_name": "gen_ai.tool.name",
    "iteration": "amplifier.iteration",
    "activity": "temporal.activity.type",
    "activity_id": "temporal.activity.id",
    "attempt": "temporal.activity.attempt",
    "workflow_id": "temporal.workflow.id",
    "outcome": "amplifier.outcome",
}
"""The span attributes' names, by what they say."""

try:
    from opentelemetry import trace
    from opentelemetry.trace import (
        NonRecordingSpan,
        SpanContext,
        SpanKind,
        Status,
        StatusCode,
        TraceFlags,
    )
except ModuleNotFoundError:  # pragma: no cover - without the otel extra: no spans
    trace = None  # type: ignore[assignment]


def turn_span_id(trace_id: str) -> int:
    """The span id of a turn (the parent of its activities' spans), from its trace id."""
    digest = hashlib.sha256(f"amplifier-turn:{trace_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") or 1


def _turn_parent(trace_id: str | None, root: str | None = None) -> Any:
    """The OpenTelemetry context whose current span is the turn's (remote: only its ids),
    in the trace of ``root`` (a child session's turn: its root turn's trace id; None: the
    turn's own), or None (no opentelemetry, or not one of our trace ids)."""
    if trace is None or not trace_id:
        return None
    try:
        trace_int = int(root or trace_id, 16)
    except ValueError:
        return None
    parent = SpanContext(
        trace_id=trace_int,
        span_id=turn_span_id(trace_id),
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
    )
    return trace.set_span_in_context(NonRecordingSpan(parent))


@contextlib.contextmanager
def turn_context(trace_id: str | None, root: str | None = None) -> Iterator[None]:
    """Make the turn's span the current span for the block (the worker delivers a turn's
    session-level events in it: hooks-otel's ``invoke_agent`` span joins the turn's trace)."""
    context = _turn_parent(trace_id, root)
    if context is None:
        yield
        return
    from opentelemetry import context as otel_context  # noqa: PLC0415 - optional

    token = otel_context.attach(context)
    try:
        yield
    finally:
        otel_context.detach(token)


@contextlib.contextmanager
def activity_span(
    name: str,
    trace_id: str | None,
    attributes: Mapping[str, Any],
    tracer_provider: Any = None,
    root: str | None = None,
) -> Iterator[None]:
    """A span around one activity, a child of its turn's span (the current span while the
    activity runs), in the trace of ``root`` (`turn_context`). Cancellation is not an
    error: the span says ``amplifier.outcome = cancelled``; an exception sets status ERROR
    and ``error.type``."""
    context = _turn_parent(trace_id, root)
    if context is None:
        yield  # no opentelemetry, or not a trace id of a turn: no span
        return
    provider = tracer_provider or trace.get_tracer_provider()
    tracer = provider.get_tracer(__name__)
    kept = {ATTRIBUTES.get(k, k): v for k, v in attributes.items() if v is not None}
    with tracer.start_as_current_span(
        name,
        context=context,
        kind=SpanKind.INTERNAL,
        attributes=kept,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        try:
            yield
        except anyio.get_cancelled_exc_class():
            span.set_attribute(ATTRIBUTES["outcome"], "cancelled")
            raise
        except Exception as exc:
            span.set_attribute(ATTRIBUTES["outcome"], "error")
            span.set_attribute("error.type", type(exc).__name__)
            span.set_status(Status(StatusCode.ERROR, str(exc)))
            raise
        span.set_attribute(ATTRIBUTES["outcome"], "success")
