"""loop-basic: prompt → provider → tools (in parallel) → provider … → answer.

Every turn runs inside one cancel scope bound to the coordinator's cancellation token,
so ``request_immediate()`` (or ``turn_timeout``) interrupts whatever is in flight and the
turn ends with status ``cancelled``; graceful cancellation lets the running tool batch
finish and stops at the top of the next iteration. On every path — success, error,
iteration limit, either cancel, the host's own cancellation — the turn ends with exactly
one ``orchestrator:complete`` and one ``execution:end``, emitted under a bounded shield.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

import anyio
import attrs

from ..errors import ConfigError, StreamError, ValidationError
from ..events import (
    CANCEL_COMPLETED,
    CONTENT_BLOCK_DELTA,
    CONTENT_BLOCK_END,
    CONTENT_BLOCK_START,
    EXECUTION_END,
    EXECUTION_START,
    ORCHESTRATOR_COMPLETE,
    PROMPT_COMPLETE,
    PROMPT_SUBMIT,
    PROVIDER_ERROR,
    PROVIDER_REQUEST,
    PROVIDER_RESPONSE,
    THINKING_DELTA,
)
from ..kernel.cancellation import CancellationToken
from ..kernel.coordinator import ModuleCoordinator
from ..kernel.tracing import trace_scope
from ..kernel.turns import TurnResult, TurnStatus
from ..models import ChatRequest, ChatResponse, HookResult, Usage, structure, unstructure
from ..runtime.tool_batch import ToolBatch, ToolBatchConfig
from ..runtime.turn import (
    LOOP_LIMIT_REMINDER,
    apply_injections,
    assistant_message,
    build_request,
    error_payload,
    pending_injection,
    select_provider,
    tool_calls_of,
)

__all__ = ("LoopBasicConfig", "LoopBasicOrchestrator", "mount")

logger = logging.getLogger(__name__)

_FINISH_TIMEOUT = 30.0  # seconds the shielded terminal events may take
_STREAM_EVENTS = frozenset(
    {CONTENT_BLOCK_START, CONTENT_BLOCK_DELTA, CONTENT_BLOCK_END, THINKING_DELTA}
)
_EXECUTION_STATUS = {
    TurnStatus.SUCCESS: "completed",
    TurnStatus.INCOMPLETE: "incomplete",
    TurnStatus.ERROR: "error",
    TurnStatus.CANCELLED: "cancelled",
}


@attrs.frozen(kw_only=True)
class LoopBasicConfig:
    """loop-basic's settings (``-1`` iterations: unlimited; timeouts in seconds)."""

    max_iterations: int = -1
    parallel_tools: bool = True
    max_parallel_tools: int | None = None
    tool_timeout: float | None = None
    turn_timeout: float | None = None
    extended_thinking: bool = False
    reasoning_effort: str | None = None
    default_provider: str | None = None

    def __attrs_post_init__(self) -> None:
        if self.max_iterations < -1:
            msg = f"max_iterations: must be -1 (unlimited) or at least 0, not {self.max_iterations}"
            raise ConfigError(msg)
        if self.turn_timeout is not None and self.turn_timeout <= 0:
            msg = f"turn_timeout: must be positive, not {self.turn_timeout}"
            raise ConfigError(msg)

    @classmethod
    def from_dict(cls, config: dict[str, Any] | None) -> LoopBasicConfig:
        """Parse a plan's orchestrator config; errors name the key."""
        config = dict(config or {})
        known = {a.name for a in attrs.fields(cls)}
        for key in sorted(set(config) - known):
            logger.warning("loop-basic: ignoring unknown config key %r", key)
            config.pop(key)
        try:
            parsed = structure(config, cls)
            _batch_config(parsed)
        except ValidationError as exc:
            raise ConfigError("; ".join(exc.errors)) from exc
        except ValueError as exc:
            raise ConfigError(str(exc)) from exc
        return parsed


def _batch_config(config: LoopBasicConfig) -> ToolBatchConfig:
    """The tool-batch settings of an orchestrator config."""
    return ToolBatchConfig(
        parallel=config.parallel_tools,
        max_parallel_tools=config.max_parallel_tools,
        tool_timeout=config.tool_timeout,
    )


class LoopBasicOrchestrator:
    """The basic agent loop with structured parallel tools.

    ``execute()`` is Amplifier's call (the answer as a string; a failed turn raises its
    exception). ``run_turn()`` returns the full :class:`TurnResult`; the last one stays in
    :attr:`last_result`.
    """

    name = "loop-basic"
    streaming = False

    def __init__(self, config: LoopBasicConfig | dict[str, Any] | None = None) -> None:
        if not isinstance(config, LoopBasicConfig):
            config = LoopBasicConfig.from_dict(config)
        self.config = config
        self.last_result: TurnResult | None = None
        self._batch = _batch_config(config)
        # Used for turns run without a session's coordinator, so that hook results and
        # cancellation take the same path either way.
        self._standalone = ModuleCoordinator()

    async def execute(
        self,
        prompt: str,
        context: Any,
        providers: dict[str, Any],
        tools: dict[str, Any],
        hooks: Any,
        **kwargs: Any,
    ) -> str:
        """Run one turn and return its text; re-raise the turn's error if it failed."""
        result = await self.run_turn(
            prompt, context, providers, tools, hooks, coordinator=kwargs.get("coordinator")
        )
        if result.error is not None:
            raise result.error
        return result.text

    async def run_turn(
        self,
        prompt: str,
        context: Any,
        providers: dict[str, Any],
        tools: dict[str, Any],
        hooks: Any,
        *,
        coordinator: Any = None,
    ) -> TurnResult:
        """Run one turn to its end and describe how it ended.

        Errors are reported in the result (status ``error``); the host's own cancellation
        propagates after the terminal events were emitted.
        """
        if coordinator is None:
            coordinator = self._standalone
            await coordinator.mount("context", context)
        coordinator.reset_turn()
        turn = _Turn(
            config=self.config,
            batch=self._batch,
            prompt=prompt,
            context=context,
            providers=providers,
            tools=tools or {},
            hooks=hooks,
            coordinator=coordinator,
            token=coordinator.cancellation,
            orchestrator_name=self.name,
            streaming=self.streaming,
        )
        with trace_scope(turn.trace_id):
            await turn.run()
        self.last_result = turn.result()
        return self.last_result

    @property
    def cancellation(self) -> CancellationToken:
        """The token of turns run without a coordinator."""
        return self._standalone.cancellation


@attrs.define(eq=False)
class _Turn:
    """The state of one turn (kept apart from the orchestrator so turns never share it)."""

    config: LoopBasicConfig
    batch: ToolBatchConfig
    prompt: str
    context: Any
    providers: dict[str, Any]
    tools: dict[str, Any]
    hooks: Any
    coordinator: ModuleCoordinator
    token: CancellationToken
    trace_id: str = attrs.field(factory=lambda: uuid.uuid4().hex)
    iterations: int = 0
    usage: Usage = attrs.field(factory=Usage)
    text: str = ""
    status: TurnStatus = TurnStatus.SUCCESS
    error: BaseException | None = None
    injections: list[dict[str, Any]] = attrs.field(factory=list)
    provider_name: str = ""
    orchestrator_name: str = "loop-basic"
    streaming: bool = False

    def result(self) -> TurnResult:
        return TurnResult(
            text=self.text,
            status=self.status,
            turn_count=self.iterations,
            usage=self.usage,
            error=self.error,
            trace_id=self.trace_id,
        )

    async def run(self) -> None:
        try:
            await self.hooks.emit(EXECUTION_START, {"prompt": self.prompt})
            deadline = anyio.current_time() + (self.config.turn_timeout or float("inf"))
            with anyio.CancelScope(deadline=deadline) as scope, self.token.bind_scope(scope):
                await self._loop()
        except Exception as exc:  # noqa: BLE001 - any failure ends the turn with status error
            self.status, self.error = TurnStatus.ERROR, exc
        except BaseException:
            # The host cancelled (or the process is stopping): close the turn, re-raise.
            self.status = TurnStatus.CANCELLED
            await self._finish()
            raise
        else:
            if scope.cancelled_caught:
                self.status = TurnStatus.CANCELLED
        await self._finish()

    # -- the loop --------------------------------------------------------------------------

    async def _loop(self) -> None:
        submitted = await self._hook(PROMPT_SUBMIT, {"prompt": self.prompt})
        if submitted.action == "deny":
            self._deny(submitted)
            return
        self._queue_ephemeral(submitted)
        await self.context.add_message({"role": "user", "content": self.prompt})
        self.provider_name, provider = select_provider(self.providers, self.config.default_provider)
        limit = self.config.max_iterations
        while limit == -1 or self.iterations < limit:
            if self.token.is_cancelled:
                self.status = TurnStatus.CANCELLED
                return
            response = await self._call(provider, with_tools=True)
            if response is None:
                return
            calls = tool_calls_of(provider, response)
            if not calls:
                await self._answer(response)
                return
            batch = ToolBatch(
                calls=calls,
                tools=self.tools,
                hooks=self.hooks,
                coordinator=self.coordinator,
                config=self.batch,
            )
            await batch.run(self.context, assistant_message(response, calls))
            self.injections.extend(batch.pending_injections)
        await self._wrap_up(provider)

    async def _call(
        self, provider: Any, *, with_tools: bool, reminder: bool = False
    ) -> ChatResponse | None:
        """One provider call with its events; None when a hook denied it."""
        payload: dict[str, Any] = {"provider": self.provider_name, "iteration": self.iterations}
        if reminder:
            payload["max_reached"] = True
        requested = await self._hook(PROVIDER_REQUEST, payload)
        if requested.action == "deny":
            self._deny(requested)
            return None
        self._queue_ephemeral(requested)
        messages = await self.context.get_messages_for_request(provider=provider)
        injections, self.injections = self.injections, []
        if reminder:
            injections.append({"role": "user", "content": LOOP_LIMIT_REMINDER})
        request = build_request(
            apply_injections(messages, injections),
            self.tools if with_tools else None,
            reasoning_effort=self.config.reasoning_effort,
        )
        kwargs = {"extended_thinking": True} if self.config.extended_thinking else {}
        self.iterations += 1
        try:
            response = await self._complete(provider, request, kwargs)
        except Exception as exc:
            await self.hooks.emit(PROVIDER_ERROR, error_payload(self.provider_name, exc))
            raise
        if response.usage is not None:
            self.usage = self.usage + response.usage
        await self.hooks.emit(
            PROVIDER_RESPONSE,
            {
                "provider": self.provider_name,
                "usage": unstructure(response.usage) if response.usage else None,
                "tool_calls": len(response.tool_calls or ()),
            },
        )
        return response

    async def _complete(
        self, provider: Any, request: ChatRequest, kwargs: dict[str, Any]
    ) -> ChatResponse:
        stream = getattr(provider, "stream", None) if self.streaming else None
        if stream is None:
            response: ChatResponse = await provider.complete(request, **kwargs)
            return response
        return await self._consume(stream(request, **kwargs))

    async def _consume(self, stream: Any) -> ChatResponse:
        """Relay a provider stream as events; leaving the block closes the connection."""
        final: ChatResponse | None = None
        async with stream as events:
            async for event in events:
                kind = event.get("type")
                if kind == "response":
                    final = event["response"]
                elif kind in _STREAM_EVENTS:
                    await self.hooks.emit(kind, _stream_payload(self.provider_name, event))
        if final is None:
            msg = "the stream ended without a response"
            raise StreamError(msg, provider=self.provider_name)
        return final

    async def _answer(self, response: ChatResponse) -> None:
        if response.content:
            await self.context.add_message(assistant_message(response, ()))
        self.text = response.text
        self.status = TurnStatus.SUCCESS

    async def _wrap_up(self, provider: Any) -> None:
        """The iteration limit: one last call without tools; its text is the answer."""
        response = await self._call(provider, with_tools=False, reminder=True)
        if response is None:
            return
        await self._answer(response)
        self.status = TurnStatus.INCOMPLETE

    # -- hooks -----------------------------------------------------------------------------

    async def _hook(self, event: str, data: dict[str, Any]) -> HookResult:
        result: HookResult = await self.hooks.emit(event, data)
        return await self.coordinator.process_hook_result(result, event, self.orchestrator_name)

    def _queue_ephemeral(self, result: HookResult) -> None:
        if result.action == "inject_context" and result.ephemeral and result.context_injection:
            self.injections.append(pending_injection(result))

    def _deny(self, result: HookResult) -> None:
        self.text = f"Operation denied: {result.reason or 'no reason given'}"
        self.status = TurnStatus.INCOMPLETE

    # -- the end ---------------------------------------------------------------------------

    async def _finish(self) -> None:
        """The terminal events, exactly once, shielded so no cancel can drop them."""
        with anyio.CancelScope(shield=True), anyio.move_on_after(_FINISH_TIMEOUT):
            await self.coordinator.flush_cancel_request()
            if self.status is TurnStatus.CANCELLED or self.token.is_cancelled:
                await self.hooks.emit(
                    CANCEL_COMPLETED,
                    {
                        "orchestrator": self.orchestrator_name,
                        "was_immediate": self.token.is_immediate,
                        "turn_count": self.iterations,
                    },
                )
            if self.status in (TurnStatus.SUCCESS, TurnStatus.INCOMPLETE):
                await self.hooks.emit(
                    PROMPT_COMPLETE, {"response_preview": self.text[:200], "length": len(self.text)}
                )
            await self.hooks.emit(
                ORCHESTRATOR_COMPLETE,
                {
                    "orchestrator": self.orchestrator_name,
                    "turn_count": self.iterations,
                    "status": str(self.status),
                },
            )
            await self.hooks.emit(
                EXECUTION_END,
                {"response": self.text, "status": _EXECUTION_STATUS[self.status]},
            )


def _stream_payload(provider: str, event: dict[str, Any]) -> dict[str, Any]:
    payload = {k: v for k, v in event.items() if k != "type"}
    if "block" in payload and not isinstance(payload["block"], dict):
        payload["block"] = unstructure(payload["block"])
    return {"provider": provider, **payload}


async def mount(coordinator: Any, config: dict[str, Any] | None = None) -> None:
    """Mount loop-basic as the session's orchestrator."""
    await coordinator.mount("orchestrator", LoopBasicOrchestrator(config))
