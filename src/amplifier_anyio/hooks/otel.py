"""hooks-otel: OpenTelemetry spans and metrics per the GenAI semantic conventions.

A listener: it opens and closes spans from the session's events and never changes a turn
(every handler answers ``continue``). Needs the extra ``[otel]`` (``opentelemetry-api``);
the application chooses the SDK and the exporter.

Spans, one trace per turn:

* ``invoke_agent {agent_name}`` (INTERNAL) from ``execution:start`` to ``execution:end``,
  a child of whatever span is current where the turn runs (a web request's, say);
* ``chat {model}`` (CLIENT) per provider call, from ``provider:request`` to
  ``provider:response`` / ``provider:error``, a child of the turn (of the ``plan`` span
  while a lifecycle turn plans);
* ``execute_tool {tool}`` (INTERNAL) per tool call, from ``tool:pre`` to ``tool:post`` /
  ``tool:error``. Those events are emitted inside each call's own task, so the span is
  started there: parallel calls are siblings under the turn, and the call's span is the
  current span of the tool's code (a span the tool opens is its child) on both backends;
* ``plan {agent_name}`` around a lifecycle turn's planning stage (``lifecycle:initialize``
  to ``lifecycle:plan``) when such events appear.

Every span opened is closed, whatever way the turn ends: the spans of a turn still open
at ``orchestrator:complete`` or ``execution:end`` (an event that never came: a cancel, a
hook that denied) are closed there, and anything still open at ``session:end`` or at the
session's cleanup is closed then. Cancellation is not an error: those spans end with
status UNSET and ``amplifier.outcome = cancelled``. A failure sets ``error.type`` and
status ERROR; a tool timeout is ``error.type = timeout``. Every span says how it ended in
``amplifier.outcome`` (``success``, ``incomplete``, ``error``, ``cancelled``, or
``unfinished`` for a span closed only because its turn or session ended).

Metrics: ``gen_ai.client.operation.duration`` and ``gen_ai.client.token.usage`` per
provider call, ``gen_ai.client.operation.time_to_first_chunk`` per streamed call,
``gen_ai.execute_tool.duration`` per tool call.

Message content (prompts, answers, tool arguments and results, instructions, tool
definitions, error messages) is recorded only when asked: config ``capture_content``, or
else the environment variable ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``.

The attribute and metric names are still being renamed upstream: they live in
[`ATTRIBUTES`][amplifier_anyio.hooks.otel.ATTRIBUTES] and
[`METRICS`][amplifier_anyio.hooks.otel.METRICS] only. Times come from the event loop's clock
(anchored to the wall clock), so spans follow a test's virtual clock too.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping
from contextvars import ContextVar, Token
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import urlsplit

import anyio
import attrs

try:
    from opentelemetry import context as otel_context
    from opentelemetry import metrics, trace
    from opentelemetry.trace import SpanKind, Status, StatusCode
except ModuleNotFoundError as exc:  # pragma: no cover - only without the extra
    msg = "hooks-otel needs opentelemetry-api: pip install 'amplifier-anyio[otel]'"
    raise ModuleNotFoundError(msg, name=exc.name) from exc

from ..config_schema import ConfigSchema
from ..errors import ConfigError, ValidationError
from ..events import (
    CANCEL_REQUESTED,
    CONTENT_BLOCK_DELTA,
    CONTENT_BLOCK_START,
    EXECUTION_END,
    EXECUTION_START,
    LLM_REQUEST,
    LLM_RESPONSE,
    ORCHESTRATOR_COMPLETE,
    PROVIDER_ERROR,
    PROVIDER_REQUEST,
    PROVIDER_RESPONSE,
    PROVIDER_RETRY,
    SESSION_END,
    THINKING_DELTA,
    TOOL_ERROR,
    TOOL_POST,
    TOOL_PRE,
)
from ..models import structure
from . import _otel_content as content

if TYPE_CHECKING:
    from opentelemetry.trace import Span

    from ..kernel._hooks import HookRegistry

__all__ = (
    "ATTRIBUTES",
    "METRICS",
    "OPERATIONS",
    "CAPTURE_CONTENT_ENV",
    "OtelConfig",
    "OtelHook",
    "OtelHookStatistics",
    "mount",
)

logger = logging.getLogger(__name__)

# -- the one mapping table -------------------------------------------------------------------

ATTRIBUTES: Final[Mapping[str, str]] = MappingProxyType(
    {
        "operation": "gen_ai.operation.name",
        "provider": "gen_ai.provider.name",
        "agent_name": "gen_ai.agent.name",
        "conversation_id": "gen_ai.conversation.id",
        "request_model": "gen_ai.request.model",
        "request_stream": "gen_ai.request.stream",
        "response_model": "gen_ai.response.model",
        "response_id": "gen_ai.response.id",
        "finish_reasons": "gen_ai.response.finish_reasons",
        "input_tokens": "gen_ai.usage.input_tokens",
        "output_tokens": "gen_ai.usage.output_tokens",
        "cache_read_tokens": "gen_ai.usage.cache_read.input_tokens",
        "cache_creation_tokens": "gen_ai.usage.cache_creation.input_tokens",
        "reasoning_tokens": "gen_ai.usage.reasoning.output_tokens",
        "token_type": "gen_ai.token.type",
        "tool_name": "gen_ai.tool.name",
        "tool_call_id": "gen_ai.tool.call.id",
        "tool_type": "gen_ai.tool.type",
        "tool_description": "gen_ai.tool.description",
        "error_type": "error.type",
        "server_address": "server.address",
        "server_port": "server.port",
        "input_messages": "gen_ai.input.messages",
        "output_messages": "gen_ai.output.messages",
        "system_instructions": "gen_ai.system_instructions",
        "tool_definitions": "gen_ai.tool.definitions",
        "tool_arguments": "gen_ai.tool.call.arguments",
        "tool_result": "gen_ai.tool.call.result",
        "outcome": "amplifier.outcome",
        "trace_id": "amplifier.trace_id",
        "iteration": "amplifier.iteration",
        "parallel_group_id": "amplifier.tool.parallel_group_id",
        "plan_steps": "amplifier.plan.steps",
    }
)
"""Our name for each attribute -> its name in the semantic conventions (or ours,
``amplifier.*``, where they have none). The only place attribute names are spelled."""

METRICS: Final[Mapping[str, str]] = MappingProxyType(
    {
        "operation_duration": "gen_ai.client.operation.duration",
        "token_usage": "gen_ai.client.token.usage",
        "time_to_first_chunk": "gen_ai.client.operation.time_to_first_chunk",
        "tool_duration": "gen_ai.execute_tool.duration",
    }
)
"""Our name for each instrument -> its name in the semantic conventions."""

OPERATIONS: Final[Mapping[str, str]] = MappingProxyType(
    {
        "turn": "invoke_agent",
        "chat": "chat",
        "tool": "execute_tool",
        "plan": "plan",
        "input": "input",  # gen_ai.token.type values
        "output": "output",
        "timeout": "timeout",  # error.type of a tool call that ran out of time
        "other": "_OTHER",  # error.type when the failure has no type of its own
        "function": "function",  # gen_ai.tool.type
    }
)
"""Operation names and the other enumerated values the conventions define."""

CAPTURE_CONTENT_ENV: Final = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
"""The environment variable that turns content capture on (``true``) when config does
not say."""

_A = ATTRIBUTES
_OP = OPERATIONS
_DURATION_BUCKETS = tuple(0.01 * 2**i for i in range(14))  # 0.01 … 81.92 s
_TOKEN_BUCKETS = tuple(float(4**i) for i in range(14))  # 1 … 67_108_864
_ON = frozenset({"1", "true", "yes", "on", "span_only", "span_and_event"})
_OUTCOME_OF_STATUS = {
    "completed": "success",
    "success": "success",
    "incomplete": "incomplete",
    "error": "error",
    "cancelled": "cancelled",
    "awaiting_approval": "awaiting_approval",  # the turn paused; session.resume() goes on
}
_LIFECYCLE = "lifecycle:"
_LIFECYCLE_STAGES = (
    "initialize",
    "plan",
    "route",
    "execute",
    "aggregate",
    "complete",
    "failed",
    "cancelled",
)
_EARLY = -1_000_000_000  # closing handlers run first: their time is the operation's end
_LATE = 1_000_000_000  # opening handlers run last: a handler before them may deny


@attrs.frozen(kw_only=True)
class OtelConfig:
    """hooks-otel's settings.

    ``capture_content``: record message content (None: ask the environment variable).
    ``agent_name``: ``gen_ai.agent.name`` and the span names' suffix. ``tracer_provider`` /
    ``meter_provider``: the providers to use (None: the global ones), objects a Python
    plan can pass.
    """

    capture_content: bool | None = None
    agent_name: str | None = None
    tracer_provider: Any = None
    meter_provider: Any = None

    @classmethod
    def from_dict(cls, config: Mapping[str, Any] | None) -> OtelConfig:
        """Parse a plan's hook config; errors name the key. Unknown keys are dropped here
        (the session reports them from
        [`CONFIG_SCHEMA`][amplifier_anyio.hooks.otel.CONFIG_SCHEMA])."""
        known = {a.name for a in attrs.fields(cls)}
        config = {k: v for k, v in (config or {}).items() if k in known}
        for key, kind in (("capture_content", bool), ("agent_name", str)):
            value = config.get(key)
            if value is not None and not isinstance(value, kind):
                msg = (
                    f"{key}: expected {'a boolean' if kind is bool else 'a string'}, got {value!r}"
                )
                raise ConfigError(msg)
        try:
            return structure(config, cls)
        except ValidationError as exc:
            raise ConfigError("; ".join(exc.errors)) from exc

    def captures_content(self) -> bool:
        """Whether message content is recorded: the config's say, else the environment's."""
        if self.capture_content is not None:
            return self.capture_content
        return os.environ.get(CAPTURE_CONTENT_ENV, "").strip().lower() in _ON


@attrs.frozen(kw_only=True)
class OtelHookStatistics:
    """Spans started and ended so far, and how many turns and spans are open now."""

    spans_started: int
    spans_ended: int
    open_turns: int

    @property
    def open_spans(self) -> int:
        """Spans started and not ended."""
        return self.spans_started - self.spans_ended


@attrs.define(eq=False)
class _Op:
    """One open span and what its metrics need."""

    span: Span
    start: float  # loop clock, seconds
    metric_attributes: dict[str, Any] = attrs.field(factory=dict)
    first_chunk: bool = False


@attrs.define(eq=False)
class _Turn:
    """The open spans of one turn (``span`` is None for events seen outside a turn)."""

    span: Span | None
    conversation_id: str | None
    chat: _Op | None = None
    plan: _Op | None = None
    tools: dict[str, _Op] = attrs.field(factory=dict)
    op: _Op | None = None
    error_type: str | None = None
    stage_at: float | None = None
    usage: dict[str, int] = attrs.field(factory=dict)
    provider: str | None = None


# The spans this task made current, innermost last: (op, otel token). A context variable,
# so each task holds its own (a tool's task inherits the turn's entries and adds its own).
_attached: ContextVar[tuple[tuple[_Op, Token[otel_context.Context]], ...]] = ContextVar(
    "amplifier_otel_attached", default=()
)


class OtelHook:
    """Spans and metrics from a session's events (see the module docstring).

    ``register(hooks)`` starts listening; ``close()`` ends every span still open and stops
    listening. ``coordinator`` (optional) lets it describe providers (model, server) and
    tools (description) from what is mounted.
    """

    def __init__(
        self, config: OtelConfig | Mapping[str, Any] | None = None, *, coordinator: Any = None
    ) -> None:
        if not isinstance(config, OtelConfig):
            config = OtelConfig.from_dict(config)
        self.config = config
        self.capture = config.captures_content()
        self._coordinator = coordinator
        tracer_provider = config.tracer_provider or trace.get_tracer_provider()
        meter_provider = config.meter_provider or metrics.get_meter_provider()
        self._tracer = tracer_provider.get_tracer(__name__)
        meter = meter_provider.get_meter(__name__)
        self._operation_duration = meter.create_histogram(
            METRICS["operation_duration"],
            unit="s",
            description="GenAI operation duration.",
            explicit_bucket_boundaries_advisory=_DURATION_BUCKETS,
        )
        self._token_usage = meter.create_histogram(
            METRICS["token_usage"],
            unit="{token}",
            description="Number of input and output tokens used.",
            explicit_bucket_boundaries_advisory=_TOKEN_BUCKETS,
        )
        self._first_chunk = meter.create_histogram(
            METRICS["time_to_first_chunk"],
            unit="s",
            description="Time to receive the first chunk of a streamed response.",
            explicit_bucket_boundaries_advisory=_DURATION_BUCKETS,
        )
        self._tool_duration = meter.create_histogram(
            METRICS["tool_duration"],
            unit="s",
            description="Duration of a tool execution.",
            explicit_bucket_boundaries_advisory=_DURATION_BUCKETS,
        )
        self._turns: dict[str | None, _Turn] = {}
        self._providers: dict[tuple[str, int], dict[str, Any]] = {}
        self._unregister: list[Callable[[], None]] = []
        self._started = 0
        self._ended = 0
        self._wall_ns = 0
        self._loop_zero = 0.0

    # -- public ----------------------------------------------------------------------------

    def register(self, hooks: HookRegistry) -> Callable[[], None]:
        """Listen on ``hooks``; returns the function that stops listening."""
        handlers: list[tuple[str, Callable[[str, dict[str, Any]], None], int]] = [
            (EXECUTION_START, self._on_turn_start, _EARLY),
            (PROVIDER_REQUEST, self._on_chat_start, _LATE),
            (PROVIDER_RETRY, self._on_retry, _EARLY),
            (CONTENT_BLOCK_START, self._on_chunk, _EARLY),
            (CONTENT_BLOCK_DELTA, self._on_chunk, _EARLY),
            (THINKING_DELTA, self._on_chunk, _EARLY),
            (PROVIDER_RESPONSE, self._on_chat_end, _EARLY),
            (PROVIDER_ERROR, self._on_chat_error, _EARLY),
            (TOOL_PRE, self._on_tool_start, _LATE),
            (TOOL_ERROR, self._on_tool_error, _EARLY),
            (TOOL_POST, self._on_tool_end, _EARLY),
            (CANCEL_REQUESTED, self._on_cancel_requested, _EARLY),
            (ORCHESTRATOR_COMPLETE, self._on_orchestrator_complete, _EARLY),
            (EXECUTION_END, self._on_turn_end, _EARLY),
            (SESSION_END, self._on_session_end, _EARLY),
        ]
        if self.capture:  # the whole request and response: asked for only when recorded
            handlers += [
                (LLM_REQUEST, self._on_llm_request, _EARLY),
                (LLM_RESPONSE, self._on_llm_response, _EARLY),
            ]
        handlers += [(f"{_LIFECYCLE}{s}", self._on_stage, _EARLY) for s in _LIFECYCLE_STAGES]
        undo = [hooks.register(e, h, priority=p, name="hooks-otel") for e, h, p in handlers]
        self._unregister.extend(undo)

        def unregister() -> None:
            for fn in undo:
                fn()

        return unregister

    def close(self) -> None:
        """End every span still open (``unfinished``) and stop listening."""
        self.end_all()
        while self._unregister:
            self._unregister.pop()()

    def end_all(self, outcome: str = "unfinished") -> None:
        """End every span still open, each with ``outcome``."""
        for key in list(self._turns):
            self._end_turn(key, outcome, None)

    def statistics(self) -> OtelHookStatistics:
        """Spans started and ended, and the turns open now."""
        return OtelHookStatistics(
            spans_started=self._started, spans_ended=self._ended, open_turns=len(self._turns)
        )

    # -- time, spans, context --------------------------------------------------------------

    def _anchor(self) -> None:
        self._wall_ns = time.time_ns()
        self._loop_zero = _loop_time()

    def _ns(self, at: float) -> int:
        return self._wall_ns + int((at - self._loop_zero) * 1e9)

    def _start(
        self,
        name: str,
        parent: Span | None,
        kind: SpanKind,
        attributes: dict[str, Any],
        at: float,
    ) -> _Op:
        ctx = trace.set_span_in_context(parent) if parent is not None else None
        span = self._tracer.start_span(
            name, context=ctx, kind=kind, attributes=attributes, start_time=self._ns(at)
        )
        self._started += 1
        return _Op(span=span, start=at)

    def _end(
        self,
        op: _Op,
        outcome: str,
        error_type: str | None = None,
        message: str | None = None,
        at: float | None = None,
    ) -> float:
        """End ``op``'s span; returns its duration in seconds."""
        at = _loop_time() if at is None else at
        span = op.span
        span.set_attribute(_A["outcome"], outcome)
        if error_type is not None:
            span.set_attribute(_A["error_type"], error_type)
            span.set_status(Status(StatusCode.ERROR, message if self.capture else None))
        span.end(end_time=self._ns(at))
        self._ended += 1
        _detach(op)
        return at - op.start

    def _turn_of(self, data: Mapping[str, Any]) -> _Turn:
        """The turn an event belongs to; events outside any turn share a span-less one."""
        key = data.get("trace_id")
        turn = self._turns.get(key)
        if turn is None:
            if not self._turns:
                self._anchor()
            turn = self._turns[key] = _Turn(span=None, conversation_id=data.get("session_id"))
        return turn

    def _parent(self, turn: _Turn) -> Span | None:
        if turn.plan is not None:
            return turn.plan.span
        return turn.span

    def _name(self, operation: str, suffix: str | None) -> str:
        return f"{operation} {suffix}" if suffix else operation

    def _base(self, operation: str, turn: _Turn) -> dict[str, Any]:
        attributes: dict[str, Any] = {_A["operation"]: operation}
        if turn.conversation_id:
            attributes[_A["conversation_id"]] = turn.conversation_id
        if self.config.agent_name:
            attributes[_A["agent_name"]] = self.config.agent_name
        return attributes

    # -- turns -----------------------------------------------------------------------------

    def _on_turn_start(self, _event: str, data: dict[str, Any]) -> None:
        key = data.get("trace_id")
        if key in self._turns:  # a turn started twice under one id: close the first
            self._end_turn(key, "unfinished", None)
        if not self._turns:
            self._anchor()
        now = _loop_time()
        turn = _Turn(span=None, conversation_id=data.get("session_id"))
        attributes = self._base(_OP["turn"], turn)
        if key:
            attributes[_A["trace_id"]] = key
        if self.capture and isinstance(data.get("prompt"), str):
            attributes[_A["input_messages"]] = content.to_json(
                content.text_message("user", data["prompt"])
            )
        name = self._name(_OP["turn"], self.config.agent_name)
        # No explicit parent: the span current where the turn runs (the host's), if any.
        op = self._start(name, None, SpanKind.INTERNAL, attributes, now)
        turn.span, turn.op = op.span, op
        self._turns[key] = turn
        _attach(op)

    def _on_orchestrator_complete(self, _event: str, data: dict[str, Any]) -> None:
        turn = self._turns.get(data.get("trace_id"))
        if turn is not None:
            self._end_children(turn, _OUTCOME_OF_STATUS.get(str(data.get("status")), "success"))

    def _on_turn_end(self, _event: str, data: dict[str, Any]) -> None:
        key = data.get("trace_id")
        turn = self._turns.get(key)
        if turn is None:
            return
        outcome = _OUTCOME_OF_STATUS.get(str(data.get("status")), "success")
        error = data.get("error")
        error_type = turn.error_type
        message = None
        if isinstance(error, Mapping):
            error_type = str(error.get("type") or error_type or _OP["other"])
            message = str(error.get("msg") or "")
        if outcome == "error" and error_type is None:
            error_type = _OP["other"]
        if turn.op is not None:
            span = turn.op.span
            if turn.provider:
                span.set_attribute(_A["provider"], turn.provider)
            for name, value in turn.usage.items():
                span.set_attribute(_A[name], value)
            if self.capture and isinstance(data.get("response"), str) and data["response"]:
                span.set_attribute(
                    _A["output_messages"],
                    content.to_json(content.text_message("assistant", data["response"])),
                )
        self._end_turn(key, outcome, error_type if outcome == "error" else None, message)

    def _end_children(self, turn: _Turn, turn_outcome: str) -> None:
        """End the turn's chat, tool and plan spans whose own end never came."""
        outcome = "cancelled" if turn_outcome == "cancelled" else "unfinished"
        now = _loop_time()
        for op in turn.tools.values():
            self._end(op, outcome, at=now)
        turn.tools.clear()
        if turn.chat is not None:
            self._end(turn.chat, outcome, at=now)
            turn.chat = None
        if turn.plan is not None:
            self._end(turn.plan, outcome, at=now)
            turn.plan = None

    def _end_turn(
        self, key: str | None, outcome: str, error_type: str | None, message: str | None = None
    ) -> None:
        turn = self._turns.pop(key, None)
        if turn is None:
            return
        self._end_children(turn, outcome)
        if turn.op is not None:
            self._end(turn.op, outcome, error_type, message)

    def _on_session_end(self, _event: str, _data: dict[str, Any]) -> None:
        self.end_all()

    def _on_cancel_requested(self, _event: str, data: dict[str, Any]) -> None:
        key = data.get("trace_id")
        turns = [self._turns[key]] if key in self._turns else list(self._turns.values())
        for turn in turns:
            if turn.span is not None:
                turn.span.add_event(
                    "amplifier.cancel.requested", {"amplifier.cancel.level": str(data.get("level"))}
                )

    # -- lifecycle stages ------------------------------------------------------------------

    def _on_stage(self, event: str, data: dict[str, Any]) -> None:
        turn = self._turn_of(data)
        stage = event[len(_LIFECYCLE) :]
        now = _loop_time()
        if stage == "initialize":
            if turn.plan is None:
                turn.plan = self._start_plan(turn, now)
        elif stage == "plan":
            op = turn.plan or self._start_plan(turn, turn.stage_at or now)
            turn.plan = None
            steps = _steps(data.get("data"))
            if steps is not None:
                op.span.set_attribute(_A["plan_steps"], steps)
            self._end(op, "success", at=now)
        elif turn.plan is not None:
            op, turn.plan = turn.plan, None
            if stage == "failed":
                self._end(op, "error", _error_type(data.get("data")), at=now)
            else:
                self._end(op, "cancelled" if stage == "cancelled" else "unfinished", at=now)
        turn.stage_at = now

    def _start_plan(self, turn: _Turn, at: float) -> _Op:
        attributes = self._base(_OP["plan"], turn)
        name = self._name(_OP["plan"], self.config.agent_name)
        return self._start(name, turn.span, SpanKind.INTERNAL, attributes, at)

    # -- provider calls --------------------------------------------------------------------

    def _on_chat_start(self, _event: str, data: dict[str, Any]) -> None:
        turn = self._turn_of(data)
        if turn.chat is not None:  # its end never came
            self._end(turn.chat, "unfinished")
        described = self._describe_provider(str(data.get("provider", "")))
        attributes = self._base(_OP["chat"], turn)
        attributes.pop(_A["agent_name"], None)
        attributes.update(described)
        attributes[_A["request_stream"]] = bool(data.get("stream", False))
        if isinstance(data.get("iteration"), int):
            attributes[_A["iteration"]] = data["iteration"]
        name = self._name(_OP["chat"], described.get(_A["request_model"]))
        op = self._start(name, self._parent(turn), SpanKind.CLIENT, attributes, _loop_time())
        op.metric_attributes = {
            k: v for k, v in attributes.items() if k not in (_A["conversation_id"], _A["iteration"])
        }
        op.metric_attributes.pop(_A["request_stream"], None)
        turn.chat = op
        turn.provider = described.get(_A["provider"])
        _attach(op)

    def _describe_provider(self, name: str) -> dict[str, Any]:
        """``gen_ai.provider.name``, the request model and the server of a mounted provider."""
        provider = None
        if self._coordinator is not None:
            mounted = self._coordinator.get("providers") or {}
            provider = mounted.get(name)
        cache_key = (name, id(provider))
        cached = self._providers.get(cache_key)
        if cached is None:
            cached = self._providers[cache_key] = _provider_attributes(name, provider)
        return cached

    def _on_llm_request(self, _event: str, data: dict[str, Any]) -> None:
        turn = self._turns.get(data.get("trace_id"))
        request = data.get("request")
        if turn is None or turn.chat is None or not isinstance(request, Mapping):
            return
        span = turn.chat.span
        messages = request.get("messages") or []
        span.set_attribute(_A["input_messages"], content.to_json(content.input_messages(messages)))
        system = content.system_instructions(messages)
        if system:
            span.set_attribute(_A["system_instructions"], content.to_json(system))
        if request.get("tools"):
            definitions = content.tool_definitions(request["tools"])
            span.set_attribute(_A["tool_definitions"], content.to_json(definitions))

    def _on_llm_response(self, _event: str, data: dict[str, Any]) -> None:
        turn = self._turns.get(data.get("trace_id"))
        response = data.get("response")
        if turn is None or turn.chat is None or not isinstance(response, Mapping):
            return
        messages = content.output_messages(response)
        turn.chat.span.set_attribute(_A["output_messages"], content.to_json(messages))

    def _on_chunk(self, _event: str, data: dict[str, Any]) -> None:
        turn = self._turns.get(data.get("trace_id"))
        op = turn.chat if turn is not None else None
        if op is None or op.first_chunk:
            return
        op.first_chunk = True
        self._first_chunk.record(_loop_time() - op.start, op.metric_attributes)

    def _on_retry(self, _event: str, data: dict[str, Any]) -> None:
        turn = self._turns.get(data.get("trace_id"))
        if turn is None or turn.chat is None:
            return
        error = _mapping(data.get("error"))
        attributes: dict[str, str | int | float] = {
            "amplifier.retry.attempt": int(data.get("attempt") or 0),
            "amplifier.retry.delay": float(data.get("delay") or 0.0),
            _A["error_type"]: str(error.get("type") or _OP["other"]),
        }
        turn.chat.span.add_event("amplifier.provider.retry", attributes)

    def _on_chat_end(self, _event: str, data: dict[str, Any]) -> None:
        turn = self._turns.get(data.get("trace_id"))
        op = turn.chat if turn is not None else None
        if turn is None or op is None:
            return
        turn.chat = None
        span = op.span
        attributes = op.metric_attributes
        if data.get("model"):
            span.set_attribute(_A["response_model"], str(data["model"]))
            attributes[_A["response_model"]] = str(data["model"])
        if data.get("response_id"):
            span.set_attribute(_A["response_id"], str(data["response_id"]))
        if data.get("finish_reason"):
            span.set_attribute(_A["finish_reasons"], (str(data["finish_reason"]),))
        usage = data.get("usage")
        tokens = _tokens(usage) if isinstance(usage, Mapping) else {}
        for name, value in tokens.items():
            span.set_attribute(_A[name], value)
            turn.usage[name] = turn.usage.get(name, 0) + value
        self._operation_duration.record(self._end(op, "success"), attributes)
        for kind in ("input", "output"):
            if f"{kind}_tokens" in tokens:
                self._token_usage.record(
                    tokens[f"{kind}_tokens"], {**attributes, _A["token_type"]: _OP[kind]}
                )

    def _on_chat_error(self, _event: str, data: dict[str, Any]) -> None:
        turn = self._turns.get(data.get("trace_id"))
        op = turn.chat if turn is not None else None
        if turn is None or op is None:
            return
        turn.chat = None
        error = _mapping(data.get("error"))
        error_type = str(error.get("type") or _OP["other"])
        turn.error_type = error_type
        duration = self._end(op, "error", error_type, str(error.get("msg") or ""))
        self._operation_duration.record(
            duration, {**op.metric_attributes, _A["error_type"]: error_type}
        )

    # -- tool calls ------------------------------------------------------------------------

    def _on_tool_start(self, _event: str, data: dict[str, Any]) -> None:
        turn = self._turn_of(data)
        call_id = str(data.get("tool_call_id", ""))
        if call_id in turn.tools:  # its end never came
            self._end(turn.tools.pop(call_id), "unfinished")
        tool_name = str(data.get("tool_name", ""))
        attributes = self._base(_OP["tool"], turn)
        attributes.pop(_A["agent_name"], None)
        attributes[_A["tool_name"]] = tool_name
        attributes[_A["tool_call_id"]] = call_id
        attributes[_A["tool_type"]] = _OP["function"]
        if data.get("parallel_group_id"):
            attributes[_A["parallel_group_id"]] = str(data["parallel_group_id"])
        description = self._tool_description(tool_name)
        if description:
            attributes[_A["tool_description"]] = description
        if self.capture:
            attributes[_A["tool_arguments"]] = content.to_json(data.get("tool_input"))
        name = self._name(_OP["tool"], tool_name)
        op = self._start(name, turn.span, SpanKind.INTERNAL, attributes, _loop_time())
        op.metric_attributes = {_A["operation"]: _OP["tool"], _A["tool_name"]: tool_name}
        turn.tools[call_id] = op
        _attach(op)  # this is the call's own task: the tool's code sees its span

    def _tool_description(self, name: str) -> str | None:
        if self._coordinator is None:
            return None
        tool = (self._coordinator.get("tools") or {}).get(name)
        description = getattr(tool, "description", None)
        return description if isinstance(description, str) else None

    def _on_tool_error(self, _event: str, data: dict[str, Any]) -> None:
        turn = self._turns.get(data.get("trace_id"))
        op = turn.tools.pop(str(data.get("tool_call_id", "")), None) if turn else None
        if op is None:
            return
        error = _mapping(data.get("error"))
        kind = str(error.get("type") or _OP["other"])
        error_type = _OP["timeout"] if kind == "TimeoutError" else kind
        duration = self._end(op, "error", error_type, str(error.get("msg") or ""))
        self._tool_duration.record(duration, {**op.metric_attributes, _A["error_type"]: error_type})

    def _on_tool_end(self, _event: str, data: dict[str, Any]) -> None:
        turn = self._turns.get(data.get("trace_id"))
        op = turn.tools.pop(str(data.get("tool_call_id", "")), None) if turn else None
        if op is None:
            return
        result = _mapping(data.get("result"))
        if self.capture and "output" in result:
            op.span.set_attribute(_A["tool_result"], content.to_json(result.get("output")))
        if result.get("success", True) is False:
            error = _mapping(result.get("error"))
            error_type = str(error.get("type") or _OP["other"])
            duration = self._end(op, "error", error_type, str(error.get("message") or ""))
            attributes = {**op.metric_attributes, _A["error_type"]: error_type}
        else:
            duration, attributes = self._end(op, "success"), op.metric_attributes
        self._tool_duration.record(duration, attributes)


# -- helpers ---------------------------------------------------------------------------------


def _loop_time() -> float:
    """The event loop's clock (virtual under a test's mock clock); outside a loop, the
    monotonic clock."""
    try:
        return anyio.current_time()
    except Exception:  # noqa: BLE001 - no event loop (a close() from synchronous code)
        return time.monotonic()


def _attach(op: _Op) -> None:
    """Make ``op``'s span the current one in this task, until `_detach`."""
    token = otel_context.attach(trace.set_span_in_context(op.span))
    _attached.set((*_attached.get(), (op, token)))


def _detach(op: _Op) -> None:
    """Undo the attach of ``op`` (and any made after it) if this task made it."""
    stack = _attached.get()
    index = next((i for i, (entry, _token) in enumerate(stack) if entry is op), None)
    if index is None:
        return  # attached in another task, which ended (or never attached): nothing here
    for _entry, token in reversed(stack[index:]):
        otel_context.detach(token)
    _attached.set(stack[:index])


def _provider_attributes(name: str, provider: Any) -> dict[str, Any]:
    """What a provider says about itself, as chat span attributes."""
    attributes: dict[str, Any] = {_A["provider"]: name}
    if provider is None:
        return attributes
    info = None
    get_info = getattr(provider, "get_info", None)
    if callable(get_info):
        try:
            info = get_info()
        except Exception:
            logger.debug("provider %s: get_info failed", name, exc_info=True)
    provider_id = getattr(info, "id", None)
    if isinstance(provider_id, str) and provider_id:
        attributes[_A["provider"]] = provider_id
    model = getattr(provider, "model", None)
    if not isinstance(model, str):
        defaults = getattr(info, "defaults", None)
        model = defaults.get("model") if isinstance(defaults, Mapping) else None
    if isinstance(model, str) and model:
        attributes[_A["request_model"]] = model
    base_url = getattr(provider, "base_url", None)
    if isinstance(base_url, str) and base_url:
        parts = urlsplit(base_url)
        if parts.hostname:
            attributes[_A["server_address"]] = parts.hostname
            port = parts.port or {"https": 443, "http": 80}.get(parts.scheme)
            if port is not None:
                attributes[_A["server_port"]] = port
    return attributes


def _tokens(usage: Mapping[str, Any]) -> dict[str, int]:
    """Our usage dict as the conventions' counts (None and absent counts left out)."""
    found = {}
    for ours, name in (
        ("input_tokens", "input_tokens"),
        ("output_tokens", "output_tokens"),
        ("cache_read_tokens", "cache_read_tokens"),
        ("cache_write_tokens", "cache_creation_tokens"),
        ("reasoning_tokens", "reasoning_tokens"),
    ):
        value = usage.get(ours)
        if isinstance(value, int) and not isinstance(value, bool):
            found[name] = value
    return found


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _steps(data: Any) -> int | None:
    steps = data.get("steps") if isinstance(data, Mapping) else data
    return len(steps) if isinstance(steps, list) else None


def _error_type(data: Any) -> str:
    error = data.get("error") if isinstance(data, Mapping) else None
    if isinstance(error, Mapping) and error.get("type"):
        return str(error["type"])
    return _OP["other"]


async def mount(coordinator: Any, config: dict[str, Any] | None = None) -> Callable[[], None]:
    """Listen on the session's hooks; the cleanup it returns ends what is still open."""
    hook = OtelHook(config, coordinator=coordinator)
    hook.register(coordinator.hooks)
    await anyio.lowlevel.checkpoint()
    return hook.close


CONFIG_SCHEMA = ConfigSchema.from_attrs("hooks-otel", OtelConfig)
"""The keys hooks-otel accepts (checked by ``validate --strict``)."""
