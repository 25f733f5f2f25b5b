"""OpenAI over httpx: Chat Completions (OpenAI and every compatible server) or Responses.

vLLM, Ollama, llama.cpp server, LM Studio and others speak the same ``/chat/completions``
protocol; point ``base_url`` (version included, e.g. ``http://localhost:11434/v1``) at
them. Tool calls go both ways, ``stream()`` decodes the SSE chunks, usage and finish
reasons are reported as the server gives them.

With ``api: responses`` the provider speaks OpenAI's Responses API (``/responses``):
reasoning items travel back with the next request, tool calls and results are items, and
the history stays ours (``store: false``) unless ``previous_response_id: true`` lets the
server keep it. The wire mapping is in `amplifier_anyio.providers._responses`.

``max_output_tokens`` is sent as ``max_completion_tokens`` by default: OpenAI deprecated
``max_tokens`` and its reasoning models reject it. Older compatible servers that only know
``max_tokens`` take config ``max_tokens_field: max_tokens``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any, Final

import httpx

from ..config_schema import ConfigSchema, Setting
from ..errors import ConfigError, LLMError, MalformedResponseError, NotFoundError
from ..models import (
    ChatRequest,
    ChatResponse,
    ContentBlock,
    ImageBlock,
    Message,
    ModelInfo,
    ProviderInfo,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    ToolCallBlock,
    ToolResultBlock,
    ToolSpec,
    Usage,
    structure,
)
from ._base import (
    COMMON_SETTINGS,
    HTTPProvider,
    ProviderSettings,
    ProviderSpec,
    decode_stream_object,
    expand_env,
    header_value,
    malformed_guard,
    mount_provider,
    text_field,
)
from ._http import (
    TRUNCATING_FINISH_REASONS,
    HookEmitter,
    decode_tool_arguments,
    drain,
    encode_tool_arguments,
    error_from_payload,
    tool_output_text,
    truncated_arguments,
)
from ._responses import (
    parse_response,
    responses_stream_events,
    responses_text_format,
    responses_tool,
    responses_tool_choice,
    to_responses_input,
)
from ._sse import SSEEvent
from ._upstream import answers_upstream

__all__ = (
    "OpenAIChatProvider",
    "mount",
    "to_wire_messages",
    "resolve_config",
    "parse_completion",
    "parse_usage",
    "DEFAULT_BASE_URL",
    "DEFAULT_MODEL",
    "API_CHOICES",
    "CONFIG_SCHEMA",
)

logger = logging.getLogger(__name__)

DEFAULT_BASE_URL: Final = "https://api.openai.com/v1"
DEFAULT_MODEL: Final = "gpt-4o"
_SPEC: Final = ProviderSpec(
    id="openai",
    display_name="OpenAI Chat Completions",
    env_prefix="OPENAI",
    base_url=DEFAULT_BASE_URL,
    model=DEFAULT_MODEL,
    context_window=128_000,
    max_output_tokens=16_384,
    max_output_keys=("max_output_tokens",),
    capabilities=("tools", "streaming", "vision", "reasoning_effort"),
    model_capabilities=("tools",),
)
_CHOICES: Final = ("auto", "none", "required")
API_CHOICES: Final = ("chat", "responses")
"""The values of config ``api``: Chat Completions (default) or Responses."""
_PATHS: Final = {"chat": "chat/completions", "responses": "responses"}
_REASONING_MODELS: Final = ("o1", "o3", "o4", "gpt-5")
_ENCRYPTED_REASONING: Final = "reasoning.encrypted_content"


class OpenAIChatProvider(HTTPProvider):
    """A provider for the Chat Completions API, or the Responses API (``api: responses``).

    Arguments come from ``config`` (see ``docs/providers.md``); ``api_key`` and
    ``base_url`` fall back to ``OPENAI_API_KEY`` / ``OPENAI_BASE_URL``. A server that
    needs no key (a local one) works with an empty key. ``transport`` replaces the
    network (tests); ``hooks`` receives ``provider:retry``.
    """

    spec = _SPEC

    def __init__(
        self,
        config: Mapping[str, Any] | None = None,
        *,
        hooks: HookEmitter | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        **http_options: Any,
    ) -> None:
        cfg = resolve_config(config or {})
        settings = ProviderSettings.from_config(cfg, _SPEC)
        self.max_output_tokens = settings.max_output_tokens
        self.configured_max_output = cfg.get("max_output_tokens")
        self.max_tokens_field = str(cfg.get("max_tokens_field", "max_completion_tokens"))
        self.temperature: float | None = cfg.get("temperature")
        self.reasoning_effort: str | None = cfg.get("reasoning_effort")
        self.parallel_tool_calls: bool | None = cfg.get("parallel_tool_calls")
        self.assistant_tool_content = _tool_content(cfg.get("assistant_tool_content", ""))
        self.api = _api(cfg.get("api", "chat"))
        self.stream_path = _PATHS[self.api]
        self.chain = _flag(cfg, "previous_response_id", default=False)
        self.store = _flag(cfg, "store", default=self.chain)
        self.reasoning_summary: str | None = cfg.get("reasoning_summary", "auto")
        self.include: list[str] | None = cfg.get("include")
        self.prompt_cache_key: str | None = cfg.get("prompt_cache_key")
        self.cache_diagnostics = _flag(cfg, "prompt_cache_diagnostics", default=False)
        headers = {"accept": "application/json"}
        params: dict[str, str] = {}
        if cfg.get("azure"):
            if settings.api_key:
                headers["api-key"] = settings.api_key
            params["api-version"] = str(cfg["api_version"])
        elif settings.api_key:
            headers["authorization"] = f"Bearer {settings.api_key}"
        for key, env, header in (
            ("organization", "OPENAI_ORG_ID", "openai-organization"),
            ("project", "OPENAI_PROJECT_ID", "openai-project"),
        ):
            value = cfg.get(key) or os.environ.get(env)
            if value:
                headers[header] = header_value(value, key if cfg.get(key) else env)
        http = settings.client(
            headers, hooks=hooks, transport=transport, params=params, **http_options
        )
        super().__init__(settings, http)

    def get_info(self) -> ProviderInfo:
        """Identity, credentials and the defaults context managers size requests with."""
        return _SPEC.info(
            model=self.model,
            context_window=self.context_window,
            max_output_tokens=self.max_output_tokens,
        )

    async def list_models(self) -> list[ModelInfo]:
        """The server's models (``GET /models``), with this provider's size defaults."""
        body = await self.http.request_json("GET", "models")
        return _SPEC.models(
            body.get("data", []),
            context_window=self.context_window,
            max_output_tokens=self.max_output_tokens,
        )

    @answers_upstream
    async def complete(self, request: ChatRequest, **kwargs: Any) -> ChatResponse:
        """One non-streaming completion. An upstream orchestrator's request gets
        its answer in upstream's shape (``docs/upstream.md``)."""
        try:
            return await self._complete(request, **kwargs)
        except NotFoundError:
            if not self._chained(request, kwargs):
                raise
            logger.warning("%s: previous_response_id not found; sending the history", self._name)
            return await self._complete(request, **{**kwargs, "previous_response_id": False})

    async def _complete(self, request: ChatRequest, **kwargs: Any) -> ChatResponse:
        payload = self.build_payload(request, stream=False, **kwargs)
        body = await self.http.request_json(
            "POST",
            self.stream_path,
            json_body=payload,
            model=payload["model"],
            timeout=request.timeout,
        )
        with malformed_guard(self._name, payload["model"], "a completion"):
            if self.api == "responses":
                response = parse_response(body, provider=self._name, model=payload["model"])
            else:
                response = parse_completion(body, provider=self._name, model=payload["model"])
        return self.priced(response, payload["model"])

    @asynccontextmanager
    async def open_stream(
        self, request: ChatRequest, **kwargs: Any
    ) -> AsyncIterator[AsyncIterator[dict[str, Any]]]:
        """Stream a completion: yields an iterator of events, the last one ``response``.
        A ``previous_response_id`` the server no longer knows is dropped once (the whole
        history is sent instead)."""
        async with AsyncExitStack() as stack:
            try:
                events = await stack.enter_async_context(super().open_stream(request, **kwargs))
            except NotFoundError:
                if not self._chained(request, kwargs):
                    raise
                logger.warning(
                    "%s: previous_response_id not found; sending the history", self._name
                )
                unchained = {**kwargs, "previous_response_id": False}
                events = await stack.enter_async_context(super().open_stream(request, **unchained))
            yield events

    def _chained(self, request: ChatRequest, kwargs: Mapping[str, Any]) -> bool:
        return (
            self.api == "responses"
            and kwargs.get("previous_response_id", self.chain) is not False
            and _last_response(request.messages)[0] is not None
        )

    def _decode_stream(
        self, sse: AsyncIterator[SSEEvent], model: str
    ) -> AsyncGenerator[dict[str, Any], None]:
        if self.api == "responses":
            return responses_stream_events(sse, provider=self._name, model=model)
        return _stream_events(sse, provider=self._name, model=model)

    def build_payload(self, request: ChatRequest, *, stream: bool, **kwargs: Any) -> dict[str, Any]:
        """The JSON body for ``request`` (public so callers can inspect what is sent)."""
        if self.api == "responses":
            return self._responses_payload(request, stream=stream, **kwargs)
        model = request.model or self.model
        messages = to_wire_messages(request.messages, tool_content=self.assistant_tool_content)
        payload: dict[str, Any] = {"model": model, "messages": messages}
        if request.tools:
            payload["tools"] = [_wire_tool(tool) for tool in request.tools]
            if request.tool_choice is not None:
                payload["tool_choice"] = _wire_tool_choice(request.tool_choice)
            self._parallel(payload)
        max_tokens, effort, temperature = self._sampling(request, kwargs)
        if max_tokens:
            payload[self.max_tokens_field] = max_tokens
        if effort:
            payload["reasoning_effort"] = effort
        elif temperature is not None:
            payload["temperature"] = temperature
        for key in ("top_p", "stop", "response_format"):
            if getattr(request, key) is not None:
                payload[key] = getattr(request, key)
        if stream:
            payload["stream"] = True
            payload["stream_options"] = {"include_usage": True}
        return payload

    def _parallel(self, payload: dict[str, Any]) -> None:
        if self.parallel_tool_calls is not None:
            payload["parallel_tool_calls"] = bool(self.parallel_tool_calls)

    def _sampling(
        self, request: ChatRequest, kwargs: Mapping[str, Any]
    ) -> tuple[int | None, str | None, float | None]:
        """The output limit, the reasoning effort and the temperature of a request: its
        own, else the call's keyword, else the config. A reasoning effort leaves the
        temperature out (reasoning models reject a sampling temperature)."""
        max_tokens = (
            request.max_output_tokens
            or kwargs.get("max_output_tokens")
            or self.configured_max_output
        )
        effort = request.reasoning_effort or kwargs.get("reasoning_effort") or self.reasoning_effort
        temperature = request.temperature if request.temperature is not None else self.temperature
        return max_tokens, effort, None if effort else temperature

    def _responses_payload(
        self, request: ChatRequest, *, stream: bool, **kwargs: Any
    ) -> dict[str, Any]:
        """The body of ``POST /responses``: our history as input items (after the last
        answer only, with ``previous_response_id``), the options mapped to their
        Responses names."""
        model = request.model or self.model
        messages: list[Any] = list(request.messages)
        chain = kwargs.get("previous_response_id", self.chain) is not False
        previous, after = _last_response(messages) if chain else (None, 0)
        store = self.store or previous is not None
        leading = [m for m in messages[:after] if _role(m) == "system"] if previous else []
        instructions, items = to_responses_input(
            [*leading, *messages[after:]], resend_reasoning=store
        )
        payload: dict[str, Any] = {"model": model, "input": items, "store": store}
        if instructions:
            payload["instructions"] = instructions
        if previous is not None:
            payload["previous_response_id"] = previous
        if request.tools:
            payload["tools"] = [responses_tool(tool) for tool in request.tools]
            if request.tool_choice is not None:
                payload["tool_choice"] = responses_tool_choice(request.tool_choice)
            self._parallel(payload)
        max_tokens, effort, temperature = self._sampling(request, kwargs)
        if max_tokens:
            payload["max_output_tokens"] = max_tokens
        if effort:
            reasoning: dict[str, Any] = {"effort": effort}
            if self.reasoning_summary:
                reasoning["summary"] = self.reasoning_summary
            payload["reasoning"] = reasoning
        elif temperature is not None:
            payload["temperature"] = temperature
        if request.top_p is not None:
            payload["top_p"] = request.top_p
        if request.response_format is not None:
            payload["text"] = {"format": responses_text_format(request.response_format)}
        if request.stop:
            logger.debug("%s: the Responses API has no stop sequences; not sent", self._name)
        include = self._include(model, effort, store)
        if include:
            payload["include"] = include
        if self.prompt_cache_key:
            payload["prompt_cache_key"] = self.prompt_cache_key
        if self.cache_diagnostics:
            last, _ = _last_response(messages)
            if last is not None:
                payload["prompt_cache_options"] = {"comparison_response_id": last}
        if stream:
            payload["stream"] = True
        return payload

    def _include(self, model: str, effort: str | None, store: bool) -> list[str]:
        """What the response should include: the config's list, else the encrypted
        reasoning a stateless request needs to send reasoning back (reasoning models only:
        others refuse it)."""
        if self.include is not None:
            return list(self.include)
        reasons = effort is not None or model.startswith(_REASONING_MODELS)
        return [_ENCRYPTED_REASONING] if reasons and not store else []


# -- config ---------------------------------------------------------------------------


def _api(value: Any) -> str:
    if value not in API_CHOICES:
        msg = f"api: expected one of {', '.join(API_CHOICES)}, got {value!r}"
        raise ConfigError(msg)
    return str(value)


def _flag(cfg: Mapping[str, Any], key: str, *, default: bool) -> bool:
    value = cfg.get(key, default)
    if not isinstance(value, bool):
        msg = f"{key}: expected true or false, got {value!r}"
        raise ConfigError(msg)
    return value


def _role(message: Any) -> Any:
    return message.role if isinstance(message, Message) else message.get("role")


def _last_response(messages: list[Any]) -> tuple[str | None, int]:
    """The response id of the last assistant message that has one, and the index after it
    (what a chained request sends); (None, 0) without one."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if _role(message) != "assistant":
            continue
        meta = message.metadata if isinstance(message, Message) else message.get("metadata")
        response_id = (meta or {}).get("response_id")
        if isinstance(response_id, str) and response_id:
            return response_id, index + 1
    return None, 0


def resolve_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """The config as the provider reads it: ``${VAR}`` expanded, and for Azure OpenAI
    (``azure_endpoint`` / ``azure_deployment``, or ``AZURE_OPENAI_ENDPOINT``) the
    deployment URL, the ``api-version`` and the key from ``AZURE_OPENAI_API_KEY``."""
    cfg = expand_env(config)
    endpoint = cfg.get("azure_endpoint") or (
        os.environ.get("AZURE_OPENAI_ENDPOINT") if cfg.get("azure_deployment") else None
    )
    if not (endpoint or cfg.get("azure_deployment")):
        return cfg
    deployment = cfg.get("azure_deployment")
    if not endpoint:
        msg = "azure_endpoint: required with azure_deployment (or set AZURE_OPENAI_ENDPOINT)"
        raise ConfigError(msg)
    version = cfg.get("api_version") or os.environ.get("OPENAI_API_VERSION")
    if not version:
        msg = "api_version: required for Azure OpenAI (or set OPENAI_API_VERSION)"
        raise ConfigError(msg)
    base = str(endpoint).rstrip("/") + "/openai"
    cfg.update(
        azure=True,
        api_version=version,
        base_url=f"{base}/deployments/{deployment}" if deployment else base,
    )
    cfg.setdefault("model", deployment)
    if not cfg.get("api_key") and os.environ.get("AZURE_OPENAI_API_KEY"):
        cfg["api_key"] = header_value(os.environ["AZURE_OPENAI_API_KEY"], "AZURE_OPENAI_API_KEY")
    return cfg


# -- request conversion ---------------------------------------------------------------


def _tool_content(value: Any) -> str | None:
    if value is None or value == "":
        return value  # type: ignore[no-any-return]
    msg = f'assistant_tool_content: must be "" or null, got {value!r}'
    raise ConfigError(msg)


def to_wire_messages(
    messages: list[Message] | list[dict[str, Any]], *, tool_content: str | None = ""
) -> list[dict[str, Any]]:
    """Our messages (models or plain dicts) as Chat Completions messages.

    ``tool_content`` is the ``content`` of an assistant message that has tool calls and no
    text: ``""`` by default (llama.cpp's server answers 500 to ``null`` and to a missing
    content), ``None`` for a server that wants ``null``.
    """
    wire: list[dict[str, Any]] = []
    for item in messages:
        message = item if isinstance(item, Message) else structure(item, Message)
        if message.role == "assistant":
            wire.append(_wire_assistant(message, tool_content))
        elif message.role == "tool":
            wire.append(_wire_tool_result(message.tool_call_id or "", message.content))
        else:
            wire.extend(_wire_plain(message))
    return wire


def _wire_plain(message: Message) -> list[dict[str, Any]]:
    """A system, developer or user message; tool_result blocks become tool messages."""
    if isinstance(message.content, str):
        return [_with_name({"role": message.role, "content": message.content}, message)]
    results = [
        _wire_tool_result(b.tool_call_id, b.output)
        for b in message.content
        if isinstance(b, ToolResultBlock)
    ]
    parts = [_wire_part(b) for b in message.content if isinstance(b, TextBlock | ImageBlock)]
    if not parts:
        return results
    if all(p["type"] == "text" for p in parts):
        content: str | list[dict[str, Any]] = "\n\n".join(p["text"] for p in parts)
    else:
        content = parts
    return [*results, _with_name({"role": message.role, "content": content}, message)]


def _with_name(wire: dict[str, Any], message: Message) -> dict[str, Any]:
    if message.name:
        wire["name"] = message.name
    return wire


def _wire_part(block: TextBlock | ImageBlock) -> dict[str, Any]:
    if isinstance(block, TextBlock):
        return {"type": "text", "text": block.text}
    source = block.source
    if source.get("type") == "base64":
        url = f"data:{source.get('media_type', 'image/png')};base64,{source.get('data', '')}"
    else:
        url = str(source.get("url", ""))
    return {"type": "image_url", "image_url": {"url": url}}


def _wire_assistant(message: Message, tool_content: str | None) -> dict[str, Any]:
    """Text plus tool calls; thinking and reasoning blocks are not sent to OpenAI."""
    calls = list(message.tool_calls or [])
    if isinstance(message.content, str):
        text = message.content
    else:
        text = "".join(b.text for b in message.content if isinstance(b, TextBlock))
        known = {c.id for c in calls}
        calls += [
            ToolCall(id=b.id, name=b.name, arguments=b.input)
            for b in message.content
            if isinstance(b, ToolCallBlock) and b.id not in known
        ]
    wire: dict[str, Any] = {"role": "assistant", "content": text or (tool_content if calls else "")}
    if calls:
        wire["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": encode_tool_arguments(call.arguments)},
            }
            for call in calls
        ]
    return wire


def _wire_tool_result(tool_call_id: str, output: Any) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": tool_call_id, "content": tool_output_text(output)}


def _wire_tool(tool: ToolSpec) -> dict[str, Any]:
    function: dict[str, Any] = {
        "name": tool.name,
        "parameters": tool.parameters or {"type": "object", "properties": {}},
    }
    if tool.description:
        function["description"] = tool.description
    return {"type": "function", "function": function}


def _wire_tool_choice(choice: str | dict[str, Any]) -> str | dict[str, Any]:
    if isinstance(choice, dict) or choice in _CHOICES:
        return choice
    return {"type": "function", "function": {"name": choice}}


# -- response conversion --------------------------------------------------------------


def parse_completion(
    body: Mapping[str, Any], *, provider: str = "openai", model: str | None = None
) -> ChatResponse:
    """A ``chat.completion`` object as our ChatResponse.

    The first choice is the answer. A ``refusal`` is kept as the text, with finish reason
    ``refusal``; a tool call cut by the token limit carries the truncation marker.
    Raises [`MalformedResponseError`][amplifier_anyio.errors.MalformedResponseError] when there is
    no choice.
    """
    if not isinstance(body, Mapping):
        raise TypeError(f"the body is {type(body).__name__}, not an object")
    choices = body.get("choices")
    if not choices:
        msg = f"{provider} answered with no choices (a filtered prompt, or not a completion)"
        raise MalformedResponseError(msg, provider=provider, model=model, body=dict(body))
    choice = choices[0]
    message = choice.get("message") or {}
    finish = choice.get("finish_reason")
    calls = [
        _tool_call(c.get("id", ""), c.get("function") or {})
        for c in message.get("tool_calls") or []
    ]
    if calls and finish in TRUNCATING_FINISH_REASONS:
        last = (message["tool_calls"][-1].get("function") or {}).get("arguments") or ""
        calls[-1] = ToolCall(
            id=calls[-1].id, name=calls[-1].name, arguments=truncated_arguments(last, finish)
        )
    content: list[ContentBlock] = []
    reasoning = text_field(message.get("reasoning_content"), "reasoning_content")
    if reasoning:
        content.append(ThinkingBlock(thinking=reasoning, visibility="internal"))
    text = _content_text(message.get("content"))
    if text:
        content.append(TextBlock(text=text))
    refusal = text_field(message.get("refusal"), "refusal")
    if refusal:
        content.append(TextBlock(text=refusal))
        finish = _refused(finish)
    if finish is not None and not isinstance(finish, str):
        raise TypeError(f"finish_reason is {type(finish).__name__}")
    content += [ToolCallBlock(id=c.id, name=c.name, input=c.arguments) for c in calls]
    return ChatResponse(
        content=content,
        tool_calls=calls or None,
        usage=parse_usage(body.get("usage")),
        finish_reason=finish,
        metadata=_metadata(body),
    )


def _content_text(value: Any) -> str:
    """``message.content``: text, or a list of parts whose text parts are joined."""
    if isinstance(value, list):
        return "".join(
            text_field(part.get("text"), "a content part")
            for part in value
            if part.get("type") in ("text", "output_text")
        )
    return text_field(value, "content")


def _refused(finish: str | None) -> str | None:
    """A refusal ends with ``stop`` on the wire; we say ``refusal`` so it is never silent."""
    return "refusal" if finish in (None, "stop") else finish


def _tool_call(call_id: Any, function: Mapping[str, Any]) -> ToolCall:
    return ToolCall(
        id=text_field(call_id, "a tool call's id"),
        name=text_field(function.get("name"), "a tool call's name"),
        arguments=decode_tool_arguments(function.get("arguments")),
    )


def parse_usage(usage: Mapping[str, Any] | None) -> Usage | None:
    """OpenAI usage: prompt/completion tokens, reasoning and cached-prompt details."""
    if not usage:
        return None
    prompt = int(usage.get("prompt_tokens") or 0)
    completion = int(usage.get("completion_tokens") or 0)
    reasoning = (usage.get("completion_tokens_details") or {}).get("reasoning_tokens")
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
    return Usage(
        input_tokens=prompt,
        output_tokens=completion,
        total_tokens=int(usage.get("total_tokens") or prompt + completion),
        reasoning_tokens=reasoning,
        cache_read_tokens=cached,
    )


def _metadata(body: Mapping[str, Any]) -> dict[str, Any] | None:
    meta = {
        key: body[src] for key, src in (("response_id", "id"), ("model", "model")) if body.get(src)
    }
    return meta or None


# -- streaming ------------------------------------------------------------------------


class _StreamState:
    """Blocks assembled from chunks, with our block indexes in order of appearance."""

    def __init__(self) -> None:
        self.blocks: dict[int, dict[str, Any]] = {}
        self.thinking: int | None = None
        self.text: int | None = None
        self.tools: dict[Any, int] = {}  # wire key (index, or id) -> our block index
        self.last_key: Any = None
        self.finish_reason: str | None = None
        self.refused = False
        self.usage: Usage | None = None
        self.meta: dict[str, Any] | None = None
        self.done = False
        self.answered = False  # some chunk carried the first choice

    def open(self, kind: str, **fields: Any) -> tuple[int, dict[str, Any]]:
        index = len(self.blocks)
        self.blocks[index] = {"kind": kind, "parts": [], **fields}
        event = {"type": "content_block:start", "index": index, "block_type": kind, **fields}
        return index, event

    def chunk(self, chunk: Mapping[str, Any]) -> tuple[list[dict[str, Any]], bool]:
        """The events of one chunk, and whether it had a choice other than the first."""
        self.meta = self.meta or _metadata(chunk)
        if chunk.get("usage"):
            self.usage = parse_usage(chunk["usage"])
        events: list[dict[str, Any]] = []
        several = False
        for choice in chunk.get("choices") or []:
            if (choice.get("index") or 0) != 0:  # n > 1: the first choice is the answer
                several = True
                continue
            self.answered = True
            events += self.feed(choice.get("delta") or {})
            if choice.get("finish_reason"):
                self.finish_reason = text_field(choice["finish_reason"], "finish_reason")
        return events, several

    def feed(self, delta: Mapping[str, Any]) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        if text_field(delta.get("reasoning_content"), "reasoning_content"):
            if self.thinking is None:
                self.thinking, start = self.open("thinking")
                events.append(start)
            self.blocks[self.thinking]["parts"].append(delta["reasoning_content"])
            events.append(
                {
                    "type": "thinking:delta",
                    "index": self.thinking,
                    "delta": delta["reasoning_content"],
                }
            )
        for field in ("content", "refusal"):
            text = text_field(delta.get(field), field)
            if not text:
                continue
            self.refused = self.refused or field == "refusal"
            if self.text is None:
                self.text, start = self.open("text")
                events.append(start)
            self.blocks[self.text]["parts"].append(text)
            events.append(
                {
                    "type": "content_block:delta",
                    "index": self.text,
                    "block_type": "text",
                    "delta": text,
                }
            )
        for fragment in delta.get("tool_calls") or []:
            events += self._feed_tool(fragment)
        return events

    def _feed_tool(self, fragment: Mapping[str, Any]) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        wire_index = self._wire_key(fragment)
        function = fragment.get("function") or {}
        if wire_index not in self.tools:
            index, start = self.open(
                "tool_call", id=fragment.get("id", ""), name=function.get("name", "")
            )
            self.tools[wire_index] = index
            events.append(start)
        index = self.tools[wire_index]
        block = self.blocks[index]
        if fragment.get("id") and not block["id"]:
            block["id"] = fragment["id"]
        if function.get("name") and not block["name"]:
            block["name"] = function["name"]
        if function.get("arguments"):
            block["parts"].append(function["arguments"])
            events.append(
                {
                    "type": "content_block:delta",
                    "index": index,
                    "block_type": "tool_call",
                    "id": block["id"],
                    "delta": function["arguments"],
                }
            )
        return events

    def _wire_key(self, fragment: Mapping[str, Any]) -> Any:
        """Which call a fragment belongs to: its ``index``; without one (some compatible
        servers), a new ``id`` opens a new call and a fragment without ``id`` continues
        the last one."""
        if fragment.get("index") is not None:
            return int(fragment["index"])
        call_id = fragment.get("id")
        if call_id:
            key = ("id", call_id)
            self.last_key = key
            return key
        if self.last_key is None:
            self.last_key = ("id", "")
        return self.last_key

    def finish(self) -> list[dict[str, Any]]:
        content: list[ContentBlock] = []
        calls: list[ToolCall] = []
        events: list[dict[str, Any]] = []
        finish = _refused(self.finish_reason) if self.refused else self.finish_reason
        last_tool = max(self.tools.values(), default=None)
        for index, block in self.blocks.items():
            text = "".join(block["parts"])
            built: ContentBlock
            if block["kind"] == "text":
                built = TextBlock(text=text)
            elif block["kind"] == "thinking":
                built = ThinkingBlock(thinking=text, visibility="internal")
            else:
                call = _tool_call(block["id"], {"name": block["name"], "arguments": text})
                if index == last_tool and finish in TRUNCATING_FINISH_REASONS:
                    call = ToolCall(
                        id=call.id, name=call.name, arguments=truncated_arguments(text, finish)
                    )
                calls.append(call)
                built = ToolCallBlock(id=call.id, name=call.name, input=call.arguments)
            content.append(built)
            events.append({"type": "content_block:end", "index": index, "block": built})
        response = ChatResponse(
            content=content,
            tool_calls=calls or None,
            usage=self.usage,
            finish_reason=finish,
            metadata=self.meta,
        )
        events.append({"type": "response", "response": response})
        return events


async def _stream_events(
    sse: AsyncIterator[SSEEvent], *, provider: str, model: str
) -> AsyncGenerator[dict[str, Any], None]:
    state = _StreamState()
    failure: LLMError | None = None
    warned = False
    async for event in sse:
        if event.data.strip() == "[DONE]":
            state.done = True
            break
        try:
            chunk = decode_stream_object(event.data, noun="chunk", provider=provider, model=model)
            if "error" in chunk:
                raise error_from_payload(chunk, provider=provider, model=model)
        except LLMError as exc:
            failure = exc
            break
        try:
            with malformed_guard(provider, model, "a stream chunk"):
                items, several = state.chunk(chunk)
        except LLMError as exc:
            failure = exc
            break
        if several and not warned:
            warned = True
            logger.warning("%s: the stream has several choices; using choice 0", provider)
        for item in items:
            yield item
    await drain(sse)
    if failure is not None:
        raise failure
    if not state.done and state.finish_reason is None:
        raise error_from_payload(
            {"error": {"message": "the stream ended before the response was complete"}},
            provider=provider,
            model=model,
        )
    if not state.answered:  # chunks, but never a choice: no answer at all, not an empty one
        raise error_from_payload(
            {"error": {"message": "the stream carried no choices (not a chat completion)"}},
            provider=provider,
            model=model,
        )
    with malformed_guard(provider, model, "a stream"):
        items = state.finish()
    for item in items:
        yield item


# -- module entry point ---------------------------------------------------------------


async def mount(coordinator: Any, config: dict[str, Any] | None = None) -> Any:
    """Mount an OpenAIChatProvider; without a key (and no custom base_url) mount nothing.

    A local compatible server needs no key: a ``base_url`` in config (or
    ``OPENAI_BASE_URL``) other than OpenAI's is enough. Returns the async cleanup that
    closes the HTTP client.
    """
    cfg = resolve_config(config or {})
    keyless = not cfg.get("azure") and _SPEC.base_url_of(cfg).rstrip("/") != DEFAULT_BASE_URL
    return await mount_provider(coordinator, OpenAIChatProvider, cfg, keyless=keyless)


CONFIG_SCHEMA = ConfigSchema(
    "provider-openai",
    {
        **COMMON_SETTINGS,
        "max_output_tokens": Setting((int,), "output limit sent when the request has none"),
        "max_tokens_field": Setting((str,), "wire name of the output limit"),
        "reasoning_effort": Setting((str,), "used when the request has none"),
        "parallel_tool_calls": Setting((bool,), "sent with tools when set"),
        "assistant_tool_content": Setting((str,), '"" (default) or null'),
        "organization": Setting((str,), "OpenAI-Organization header (or OPENAI_ORG_ID)"),
        "project": Setting((str,), "OpenAI-Project header (or OPENAI_PROJECT_ID)"),
        "azure_endpoint": Setting((str,), "Azure OpenAI resource URL"),
        "azure_deployment": Setting((str,), "Azure OpenAI deployment name"),
        "api_version": Setting((str,), "Azure OpenAI api-version"),
        "api": Setting((str,), "chat (Chat Completions, default) or responses"),
        "store": Setting((bool,), "responses: let the server store responses"),
        "previous_response_id": Setting((bool,), "responses: chain requests by response id"),
        "reasoning_summary": Setting((str,), "responses: reasoning summary (default auto)"),
        "include": Setting((list,), "responses: include list (default: encrypted reasoning)"),
        "prompt_cache_key": Setting((str,), "responses: cache routing key"),
        "prompt_cache_diagnostics": Setting((bool,), "responses: ask why a cache missed"),
    },
)
"""The keys provider-openai accepts (checked by ``validate --strict``)."""
