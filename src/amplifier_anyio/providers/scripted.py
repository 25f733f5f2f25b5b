"""ScriptedProvider: an offline, deterministic provider for tests, examples and the CLI.

It answers from a list of [`ChatResponse`][amplifier_anyio.ChatResponse] (an item that is an
exception is raised instead) or from a function of the request, after an optional simulated latency.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import anyio
import attrs

from ..config_schema import ConfigSchema, Setting
from ..errors import ConfigError, LLMError, ValidationError
from ..models import ChatRequest, ChatResponse, ModelInfo, ProviderInfo, ToolCall, structure
from ..models._pricing import PriceTable
from ._upstream import answers_upstream

__all__ = ("ScriptedProvider", "ScriptExhaustedError", "mount")

Reply = Callable[[ChatRequest], Any]
"""``request -> ChatResponse`` (sync or async): a scripted provider's brain."""


class ScriptExhaustedError(LLMError):
    """The script has no reply left for another request."""


class ScriptedProvider:
    """Replies from a script, deterministically.

    ``latency`` is seconds per call (a number, or a list consumed call by call, the last
    value repeating). ``pricing`` (a `PriceTable` or its config) prices each reply's
    usage as the HTTP providers do (model ``scripted``, or the request's). Every request is
    recorded in `requests`.
    """

    def __init__(
        self,
        script: Iterable[ChatResponse | BaseException] | Reply,
        *,
        name: str = "scripted",
        latency: float | Iterable[float] = 0.0,
        priority: int | None = None,
        context_window: int = 200_000,
        max_output_tokens: int = 8_192,
        pricing: PriceTable | Mapping[str, Any] | None = None,
    ) -> None:
        self.name = name
        self.priority = priority
        self._reply: Reply | None = script if callable(script) else None
        self._script: list[ChatResponse | BaseException] = [] if callable(script) else list(script)
        self._latency = [latency] if isinstance(latency, int | float) else list(latency)
        self.context_window = context_window
        self.max_output_tokens = max_output_tokens
        self.requests: list[ChatRequest] = []
        if not isinstance(pricing, PriceTable):
            pricing = PriceTable.from_config(pricing)
        self.pricing = pricing

    def get_info(self) -> ProviderInfo:
        """Describe the provider; defaults carry the simulated model's window."""
        return ProviderInfo(
            id=self.name,
            display_name="Scripted provider",
            capabilities=("tools",),
            defaults={
                "model": "scripted",
                "context_window": self.context_window,
                "max_output_tokens": self.max_output_tokens,
            },
        )

    async def list_models(self) -> list[ModelInfo]:
        """The single simulated model."""
        await anyio.lowlevel.checkpoint()
        return [
            ModelInfo(
                id="scripted",
                display_name="Scripted model",
                context_window=self.context_window,
                max_output_tokens=self.max_output_tokens,
                capabilities=("tools",),
            )
        ]

    @answers_upstream
    async def complete(self, request: ChatRequest, **kwargs: Any) -> ChatResponse:
        """Record the request, wait the latency, then give (or raise) the next reply. An
        upstream orchestrator's request is recorded converted, and answered in upstream's
        shape (``docs/upstream.md``)."""
        self.requests.append(request)
        await anyio.sleep(self._next_latency())
        if self._reply is not None:
            reply = self._reply(request)
            if inspect.isawaitable(reply):
                reply = await reply
            return self._priced(_checked(reply), request)
        if not self._script:
            msg = f"script exhausted after {len(self.requests) - 1} replies"
            raise ScriptExhaustedError(msg, provider=self.name)
        item = self._script.pop(0)
        if isinstance(item, BaseException):
            raise item
        return self._priced(item, request)

    def _priced(self, response: ChatResponse, request: ChatRequest) -> ChatResponse:
        if not self.pricing or response.usage is None:
            return response
        usage = self.pricing.priced(response.usage, request.model or "scripted")
        return attrs.evolve(response, usage=usage)

    def parse_tool_calls(self, response: ChatResponse) -> list[ToolCall]:
        """The response's tool calls."""
        return list(response.tool_calls or [])

    def _next_latency(self) -> float:
        if len(self._latency) > 1:
            return float(self._latency.pop(0))
        return float(self._latency[0]) if self._latency else 0.0


def _checked(reply: Any) -> ChatResponse:
    if isinstance(reply, ChatResponse):
        return reply
    if isinstance(reply, dict):
        return structure(reply, ChatResponse)
    msg = f"scripted reply must be a ChatResponse or a dict, not {type(reply).__name__}"
    raise TypeError(msg)


async def mount(coordinator: Any, config: dict[str, Any] | None = None) -> None:
    """Mount a scripted provider.

    Config: ``responses`` (a list of ChatResponse dicts), or ``demo: true`` for the
    built-in demo script; ``latency``; ``name``; ``priority``; ``pricing``.
    """
    config = dict(config or {})
    name = str(config.get("name", "scripted"))
    if config.get("demo"):
        from .demo import demo_reply  # noqa: PLC0415 - only the demo plan needs it

        script: Any = demo_reply
    else:
        try:
            script = [structure(r, ChatResponse) for r in config.get("responses", [])]
        except ValidationError as exc:
            raise ConfigError(f"responses: {'; '.join(exc.errors)}") from exc
    provider = ScriptedProvider(
        script,
        name=name,
        latency=config.get("latency", 0.0),
        priority=config.get("priority"),
        pricing=config.get("pricing"),
    )
    await coordinator.mount("providers", provider, name=name)


CONFIG_SCHEMA = ConfigSchema(
    "provider-scripted",
    {
        "responses": Setting((list,), "ChatResponse dicts answered in order"),
        "demo": Setting((bool,), "answer with the built-in demo script"),
        "latency": Setting((float, list), "seconds before each answer (one, or one per reply)"),
        "name": Setting((str,), "the provider's mount name"),
        "priority": Setting((int,), "selection priority (lower first)"),
        "pricing": Setting((dict,), "dollars per million tokens (one price, or by model)"),
    },
)
"""The keys provider-scripted accepts."""
