"""An OpenTelemetry span per activity of a durable session, in its turn's trace.

A turn's ``trace_id`` (the workflow's, 32 hex digits: ``TurnResult.trace_id``) is the
OpenTelemetry trace id of its activities' spans; their parent is the turn's span id, derived
from the trace id, so every worker that runs one of the turn's calls puts its span in the
same trace under the same parent, with nothing carried but the trace id. A child session's
turn (a ``task`` call's child workflow) is in its root turn's trace: its spans have the
root's trace id and its own turn's span id as their parent.

Where the caller traces, the turn has a real span: ``DurableSession.run`` opens
``amplifier-turn`` (a child of the caller's current span, exported by the client's tracer
provider when the turn returns) and hands its ids to the workflow as the turn's *trace root*
``TRACE/SPAN``: every activity span of the turn, and of its children's turns, is in that
trace under that span, so a viewer shows the durable turn inside the request that ran it.
Without one (no OpenTelemetry on the client, or no valid span), the root is the turn's own
trace id and the parent a derived id no process exports. Each span carries
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

__all__ = ("activity_span", "client_turn_span", "turn_context", "turn_span_id", "ATTRIBUTES")

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


def _available() -> bool:
    return trace is not None


def turn_span_id(trace_id: str) -> int:
    """The span id of a turn (the parent of its activities' spans), from its trace id."""
    digest = hashlib.sha256(f"amplifier-turn:{trace_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") or 1


def _turn_parent(trace_id: str | None, root: str | None = None) -> Any:
    """The OpenTelemetry context whose current span is the turn's (remote: only its ids),
    in the trace of ``root`` (``TRACE`` or ``TRACE/SPAN``: the caller's turn span; a child
    session's turn: its root turn's; None: the turn's own trace, the derived span), or None
    (no opentelemetry, or not one of our ids)."""
    if trace is None or not trace_id:
        return None
    trace_hex, _, span_hex = (root or trace_id).partition("/")
    try:
        trace_int = int(trace_hex, 16)
        span_int = int(span_hex, 16) if span_hex else turn_span_id(trace_id)
    except ValueError:
        return None
    if not trace_int or not span_int:
        return None
    parent = SpanContext(
        trace_id=trace_int,
        span_id=span_int,
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
    kept = {ATTRIBUTES.get(k, k): v for k, v in attributes.items() if v is not None}
    with _span(tracer_provider, name, SpanKind.INTERNAL, kept, context) as span:
        yield
        span.set_attribute(ATTRIBUTES["outcome"], "success")


@contextlib.contextmanager
def _span(
    tracer_provider: Any, name: str, kind: Any, attributes: Mapping[str, Any], context: Any = None
) -> Iterator[Any]:
    """The current span ``name`` for the block. Cancellation is not an error: it says
    ``amplifier.outcome = cancelled``; an exception sets status ERROR and ``error.type``."""
    provider = tracer_provider or trace.get_tracer_provider()
    tracer = provider.get_tracer(__name__)
    with tracer.start_as_current_span(
        name,
        context=context,
        kind=kind,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        try:
            yield span
        except anyio.get_cancelled_exc_class():
            span.set_attribute(ATTRIBUTES["outcome"], "cancelled")
            raise
        except Exception as exc:
            span.set_attribute(ATTRIBUTES["outcome"], "error")
            span.set_attribute("error.type", type(exc).__name__)
            span.set_status(Status(StatusCode.ERROR, str(exc)))
            raise


class ClientTurnSpan:
    """The span of one durable turn on its caller's side (`client_turn_span`)."""

    def __init__(self, span: Any = None) -> None:
        self._span = span
        self.root: str | None = None
        """The turn's trace root for the workflow (``TRACE/SPAN``), or None."""
        if span is not None:
            context = span.get_span_context()
            if context.is_valid:
                self.root = f"{context.trace_id:032x}/{context.span_id:016x}"

    def finished(self, status: str, trace_id: str | None) -> None:
        """Record the turn's outcome (its status and its ``TurnResult.trace_id``)."""
        if self._span is None:
            return
        self._span.set_attribute(ATTRIBUTES["outcome"], status)
        if trace_id:
            self._span.set_attribute(ATTRIBUTES["trace_id"], trace_id)
        if status == "error":
            self._span.set_status(Status(StatusCode.ERROR, "the turn ended in error"))


@contextlib.contextmanager
def client_turn_span(session_id: str, tracer_provider: Any = None) -> Iterator[ClientTurnSpan]:
    """``amplifier-turn``: the span of a durable turn around ``DurableSession.run``, a child of
    the caller's current span, from ``tracer_provider`` (None: the global one). A cancel
    records ``amplifier.outcome = cancelled``; without opentelemetry there is no span and
    the yielded root is None."""
    if not _available():
        yield ClientTurnSpan()
        return
    attributes = {ATTRIBUTES["session_id"]: session_id}
    with _span(tracer_provider, "amplifier-turn", SpanKind.CLIENT, attributes) as span:
        yield ClientTurnSpan(span)
