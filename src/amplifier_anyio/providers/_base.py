"""What the HTTP providers share: config reading, identity, streaming plumbing, mounting.

Each provider module describes itself with a `ProviderSpec` (its id, environment
variables and defaults), reads the config keys common to both APIs through
`ProviderSettings`, and inherits from `HTTPProvider` the parts that do not
depend on the wire format. Payloads, parsing and stream decoding stay in the modules.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from typing import Any, ClassVar, Protocol

import anyio
import attrs
import httpx

from ..config_schema import Setting
from ..errors import ConfigError, LLMError, MalformedResponseError
from ..models import ChatRequest, ChatResponse, ModelInfo, ProviderInfo, ToolCall
from ..models._pricing import PriceTable
from ..models._validators import number
from ._http import HookEmitter, HTTPClient, RetryPolicy, drain, error_from_payload
from ._sse import SSEEvent

_CLOSE_TIMEOUT = 5.0  # seconds closing the HTTP client of a failed mount may take
DEFAULT_TIMEOUT = 600.0
"""Seconds one whole response may take: headers, body, every event of a stream."""
DEFAULT_IDLE_TIMEOUT = 300.0
"""Seconds a stream may stay silent (no byte of a new line) before it is given up."""

__all__ = (
    "DEFAULT_TIMEOUT",
    "DEFAULT_IDLE_TIMEOUT",
    "ProviderSpec",
    "ProviderSettings",
    "HTTPProvider",
    "decode_stream_object",
    "EventStream",
    "stream_items",
    "malformed_guard",
    "text_field",
    "header_value",
    "expand_env",
    "mount_provider",
    "COMMON_SETTINGS",
)


@attrs.frozen(kw_only=True)
class ProviderSpec:
    """One provider's identity and the defaults its config falls back to."""

    id: str
    display_name: str
    env_prefix: str  # OPENAI -> OPENAI_API_KEY, OPENAI_BASE_URL
    base_url: str
    model: str
    context_window: int
    max_output_tokens: int
    max_output_keys: tuple[str, ...]  # config keys for the output limit, first present wins
    capabilities: tuple[str, ...]
    model_capabilities: tuple[str, ...]

    @property
    def api_key_env(self) -> str:
        """The environment variable holding the API key."""
        return f"{self.env_prefix}_API_KEY"

    def api_key(self, cfg: Mapping[str, Any]) -> str:
        """The key from config, else the environment, else empty; surrounding whitespace
        (a trailing newline from a file) is stripped, and a key with whitespace or a
        control character inside is refused with a [`ConfigError`][amplifier_anyio.ConfigError] that
        does not repeat it."""
        if cfg.get("api_key"):
            return header_value(cfg["api_key"], "api_key")
        return header_value(os.environ.get(self.api_key_env) or "", self.api_key_env)

    def base_url_of(self, cfg: Mapping[str, Any]) -> str:
        """The base URL from config, else the environment, else the default."""
        return str(
            cfg.get("base_url") or os.environ.get(f"{self.env_prefix}_BASE_URL") or self.base_url
        )

    def info(self, *, model: str, context_window: int, max_output_tokens: int) -> ProviderInfo:
        """This provider's ``get_info()`` with the instance's current defaults."""
        return ProviderInfo(
            id=self.id,
            display_name=self.display_name,
            credential_env_vars=(self.api_key_env,),
            capabilities=self.capabilities,
            defaults={
                "model": model,
                "context_window": context_window,
                "max_output_tokens": max_output_tokens,
            },
        )

    def models(
        self,
        items: Iterable[Any],
        *,
        context_window: int,
        max_output_tokens: int,
        display_name_key: str | None = None,
    ) -> list[ModelInfo]:
        """ModelInfo for each listed item that has an ``id``; sizes are the instance's."""
        return [
            ModelInfo(
                id=str(item["id"]),
                display_name=str(
                    (item.get(display_name_key) if display_name_key else None) or item["id"]
                ),
                context_window=context_window,
                max_output_tokens=max_output_tokens,
                capabilities=self.model_capabilities,
            )
            for item in items
            if isinstance(item, dict) and "id" in item
        ]


_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def expand_env(config: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` with every ``${VAR}`` in its string values (nested too) replaced by the
    environment variable; an unset one is a [`ConfigError`][amplifier_anyio.ConfigError] naming the
    key and the variable."""

    def expand(value: Any, key: str) -> Any:
        if isinstance(value, str):

            def lookup(match: re.Match[str]) -> str:
                name = match.group(1)
                if name not in os.environ:
                    msg = f"{key}: environment variable {name} is not set"
                    raise ConfigError(msg)
                return os.environ[name]

            return _VAR.sub(lookup, value)
        if isinstance(value, dict):
            return {k: expand(v, f"{key}.{k}") for k, v in value.items()}
        if isinstance(value, list):
            return [expand(v, key) for v in value]
        return value

    return {key: expand(value, key) for key, value in config.items()}


def header_value(value: Any, key: str) -> str:
    """``value`` stripped, as it may go into an HTTP header; one with whitespace, a control
    character or a non-Latin-1 character inside is a [`ConfigError`][amplifier_anyio.ConfigError]
    naming ``key`` (never the value: it may be a credential)."""
    text = str(value).strip()
    for char in text:
        if char.isspace() or ord(char) < 32 or ord(char) == 127 or ord(char) > 255:
            msg = (
                f"{key}: contains whitespace or a control character inside "
                "(the value is not shown); it cannot be sent as an HTTP header"
            )
            raise ConfigError(msg)
    return text


def _retry_policy(cfg: Mapping[str, Any]) -> RetryPolicy:
    try:
        return RetryPolicy.from_config(cfg)
    except (TypeError, ValueError) as exc:
        msg = f"retry settings: {exc}"
        raise ConfigError(msg) from exc


def _first(cfg: Mapping[str, Any], keys: tuple[str, ...], default: Any) -> Any:
    for key in keys:
        if key in cfg:
            return cfg[key]
    return default


@attrs.frozen(kw_only=True)
class ProviderSettings:
    """The config keys both providers read the same way, parsed once."""

    name: str
    api_key: str = attrs.field(repr=False)
    base_url: str
    model: str
    priority: int = attrs.field(validator=number(minimum=0, exclusive=False, integer=True))
    context_window: int = attrs.field(validator=number(integer=True))
    max_output_tokens: int = attrs.field(validator=number(integer=True))
    timeout: float = attrs.field(validator=number())
    idle_timeout: float | None = attrs.field(validator=number(optional=True))
    retry: RetryPolicy
    pricing: PriceTable = attrs.field(factory=PriceTable)

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any], spec: ProviderSpec) -> ProviderSettings:
        """Read ``name``, ``api_key``, ``base_url``, ``model``, ``priority``,
        ``context_window``, the output limit, ``timeout``, ``idle_timeout`` and the retry
        keys and ``pricing``; a bad number is a [`ConfigError`][amplifier_anyio.ConfigError]
        naming its key."""
        return cls(
            name=str(cfg.get("name") or cfg.get("instance_id") or spec.id),
            api_key=spec.api_key(cfg),
            base_url=spec.base_url_of(cfg),
            model=str(cfg.get("model") or cfg.get("default_model") or spec.model),
            priority=cfg.get("priority", 100),
            context_window=cfg.get("context_window", spec.context_window),
            max_output_tokens=_first(cfg, spec.max_output_keys, spec.max_output_tokens),
            timeout=cfg.get("timeout", DEFAULT_TIMEOUT),
            idle_timeout=cfg.get("idle_timeout", DEFAULT_IDLE_TIMEOUT),
            retry=_retry_policy(cfg),
            pricing=PriceTable.from_config(cfg.get("pricing")),
        )

    def client(
        self,
        headers: Mapping[str, str],
        *,
        api_path: str = "",
        hooks: HookEmitter | None,
        transport: httpx.AsyncBaseTransport | None,
        **http_options: Any,
    ) -> HTTPClient:
        """The HTTPClient for these settings; ``api_path`` is appended to the base URL."""
        return HTTPClient(
            provider=self.name,
            base_url=self.base_url.rstrip("/") + api_path,
            headers=headers,
            secrets=(self.api_key,),
            timeout=self.timeout,
            idle_timeout=self.idle_timeout,
            retry=self.retry,
            hooks=hooks,
            transport=transport,
            **http_options,
        )


class HTTPProvider:
    """The wire-independent half of an HTTP provider.

    A subclass sets ``spec`` and ``stream_path`` and supplies ``build_payload`` and
    ``_decode_stream``; it keeps ``complete`` (wrapped in ``_upstream.answers_upstream``),
    ``get_info`` and ``list_models``, and prices its responses with `priced`.
    """

    spec: ClassVar[ProviderSpec]
    stream_path: str

    def __init__(self, settings: ProviderSettings, http: HTTPClient) -> None:
        self._name = settings.name
        self.model = settings.model
        self.base_url = settings.base_url
        self.priority = settings.priority
        self.context_window = settings.context_window
        self.pricing = settings.pricing
        self.http = http

    def __repr__(self) -> str:
        name = type(self).__name__
        return f"{name}(name={self._name!r}, model={self.model!r}, http={self.http!r})"

    @property
    def name(self) -> str:
        """The mount name (config ``name``, default the provider id)."""
        return self._name

    def parse_tool_calls(self, response: ChatResponse) -> list[ToolCall]:
        """The response's tool calls in the order the model made them; bad arguments are
        marked, never raised (see ``_http.decode_tool_arguments``)."""
        return list(response.tool_calls or [])

    def build_payload(self, request: ChatRequest, *, stream: bool, **kwargs: Any) -> dict[str, Any]:
        """The JSON body for ``request``."""
        raise NotImplementedError

    def _decode_stream(
        self, sse: AsyncIterator[SSEEvent], model: str
    ) -> AsyncGenerator[dict[str, Any], None]:
        raise NotImplementedError

    def priced(self, response: ChatResponse, model: str) -> ChatResponse:
        """``response`` with its usage's ``cost_usd`` from the ``pricing`` config (the
        model asked for, then the one that answered); as is without a price."""
        if not self.pricing or response.usage is None:
            return response
        answered = (response.metadata or {}).get("model")
        usage = self.pricing.priced(response.usage, model, answered)
        return response if usage is response.usage else attrs.evolve(response, usage=usage)

    @asynccontextmanager
    async def open_stream(
        self, request: ChatRequest, **kwargs: Any
    ) -> AsyncIterator[AsyncIterator[dict[str, Any]]]:
        """Stream a completion: yields an iterator of events, the last one ``response``.

        Named ``open_stream``, not ``stream``: upstream loop-streaming takes a path that
        never runs tool calls whenever a provider has a ``stream`` attribute, so ours has
        none (``docs/upstream.md``)."""
        payload = self.build_payload(request, stream=True, **kwargs)
        async with self.http.stream_sse(
            self.stream_path, json_body=payload, model=payload["model"], timeout=request.timeout
        ) as sse:
            events = self._priced_events(
                self._decode_stream(sse, payload["model"]), payload["model"]
            )
            try:
                yield events
            finally:
                await events.aclose()

    async def _priced_events(
        self, events: AsyncGenerator[dict[str, Any], None], model: str
    ) -> AsyncGenerator[dict[str, Any], None]:
        try:
            async for event in events:
                if event.get("type") == "response":
                    yield {**event, "response": self.priced(event["response"], model)}
                else:
                    yield event
        finally:
            await events.aclose()


class _ProviderClass(Protocol):
    """A provider class, as ``mount_provider`` uses it."""

    spec: ProviderSpec

    def __call__(
        self, config: Mapping[str, Any] | None = None, *, hooks: HookEmitter | None = None
    ) -> HTTPProvider: ...


_SHAPE_ERRORS = (TypeError, ValueError, KeyError, AttributeError, IndexError)


@contextmanager
def malformed_guard(provider: str, model: str | None, noun: str) -> Iterator[None]:
    """Turn any error of reading a decoded body (a field of the wrong type, a missing
    key) into a [`MalformedResponseError`][amplifier_anyio.errors.MalformedResponseError] naming it;
    LLMErrors pass as they are. Wrap pure parsing only, never a ``yield``."""
    try:
        yield
    except LLMError:
        raise
    except _SHAPE_ERRORS as exc:
        detail = f"{type(exc).__name__}: {exc}"[:300]
        msg = f"{provider} sent {noun} that does not have the API's shape ({detail})"
        raise MalformedResponseError(msg, provider=provider, model=model) from exc


def text_field(value: Any, where: str) -> str:
    """A text field of an answer: a string (None: empty); anything else is malformed."""
    if value is None:
        return ""
    if not isinstance(value, str):
        msg = f"{where} is {type(value).__name__}, not a string"
        raise TypeError(msg)
    return value


def decode_stream_object(data: str, *, noun: str, provider: str, model: str) -> dict[str, Any]:
    """One SSE ``data`` field as a JSON object; anything else is an LLMError to raise."""
    try:
        value = json.loads(data)
    except ValueError as exc:
        err = error_from_payload(
            {"error": {"message": f"undecodable stream {noun}: {data[:200]!r}"}},
            provider=provider,
            model=model,
        )
        raise err from exc
    if not isinstance(value, dict):
        raise error_from_payload(
            {"error": {"message": f"a stream {noun} is not a JSON object"}},
            provider=provider,
            model=model,
        )
    return value


_NUM = (int, float)
COMMON_SETTINGS: dict[str, Setting] = {
    "name": Setting((str,), "mount name"),
    "instance_id": Setting((str,), "mount name (upstream spelling)"),
    "api_key": Setting((str,), "the credential; ${VAR} is expanded"),
    "base_url": Setting((str,), "where the API lives"),
    "model": Setting((str,), "model used when the request names none"),
    "default_model": Setting((str,), "alias of model"),
    "priority": Setting((int,), "provider selection, lower wins"),
    "context_window": Setting((int,), "reported in get_info()"),
    "temperature": Setting(_NUM, "used when the request has none"),
    "timeout": Setting(_NUM, "seconds for a whole response, stream included"),
    "idle_timeout": Setting(_NUM, "seconds a stream may stay silent"),
    "max_retries": Setting((int,), "retries after the first attempt"),
    "retry_initial_delay": Setting(_NUM, "seconds before the first retry"),
    "retry_backoff_factor": Setting(_NUM, "growth of the delay per retry"),
    "retry_max_delay": Setting(_NUM, "cap on one delay"),
    "retry_max_elapsed": Setting(_NUM, "no retry ends later than this"),
    "retry_jitter": Setting(_NUM, "random factor on each delay"),
    "pricing": Setting(
        (dict,), "dollars per million tokens (one price, or by model); session.budget"
    ),
}
"""The config keys both HTTP providers accept."""


async def mount_provider(
    coordinator: Any,
    provider_cls: _ProviderClass,
    config: Mapping[str, Any] | None,
    *,
    keyless: bool = False,
) -> Any:
    """Mount ``provider_cls`` under its name; without a key (unless ``keyless``), mount nothing.

    The warning goes to the provider module's logger. Returns the async cleanup that
    closes the HTTP client.
    """
    cfg = expand_env(config or {})
    spec = provider_cls.spec
    if not (keyless or spec.api_key(cfg)):
        logging.getLogger(provider_cls.__module__).warning(
            "provider-%s: no API key (config api_key or %s); not mounted",
            spec.id,
            spec.api_key_env,
        )
        return None
    provider = provider_cls(cfg, hooks=getattr(coordinator, "hooks", None))
    try:
        await coordinator.mount("providers", provider, name=provider.name)
    except BaseException:
        # Nobody will run a cleanup for a mount that failed: close the client here.
        with anyio.CancelScope(shield=True), anyio.move_on_after(_CLOSE_TIMEOUT):
            await provider.http.aclose()
        raise
    return provider.http.aclose


class EventStream(Protocol):
    """What `stream_items` drives: an API's stream events decoded, turned into our stream
    items, and the items that end it."""

    end_event: str
    """The API's name for the event that ends a whole stream (for the error without it)."""

    def decode(self, event: SSEEvent, *, provider: str, model: str) -> dict[str, Any] | None:
        """The event's JSON object; None to skip it (a ping); an LLMError for an error event."""

    def handle(self, data: dict[str, Any]) -> list[dict[str, Any]]:
        """Our stream items for one event."""

    def ended(self) -> bool:
        """Whether the ending event has come."""

    def closing(self) -> list[dict[str, Any]]:
        """The last items: what is still open, then the ``response``."""


async def stream_items(
    sse: AsyncIterator[SSEEvent], state: EventStream, *, provider: str, model: str
) -> AsyncGenerator[dict[str, Any], None]:
    """Our stream items for an API's event stream, the ``response`` last.

    An error event or a malformed one ends the stream with its LLMError, raised after the
    rest of the stream is drained (so nothing under it is left to the garbage collector);
    a stream that ends before its ending event is an error too.
    """
    failure: LLMError | None = None
    async for event in sse:
        try:
            data = state.decode(event, provider=provider, model=model)
            if data is None:
                continue
            with malformed_guard(provider, model, "a stream event"):
                items = state.handle(data)
        except LLMError as exc:
            failure = exc
            break
        for item in items:
            yield item
        if state.ended():
            break
    await drain(sse)
    if failure is not None:
        raise failure
    if not state.ended():
        raise error_from_payload(
            {"error": {"message": f"the stream ended before {state.end_event}"}},
            provider=provider,
            model=model,
        )
    with malformed_guard(provider, model, "a stream"):
        items = state.closing()
    for item in items:
        yield item
