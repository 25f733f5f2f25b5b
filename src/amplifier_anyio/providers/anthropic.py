"""Anthropic Messages API over httpx.

System and developer messages become the top-level ``system`` prompt; assistant tool
calls become ``tool_use`` blocks; consecutive tool results become ``tool_result`` blocks
of one user message, in call order; thinking blocks travel back with their ``signature``
unchanged (redacted thinking as is). Blocks we do not interpret — server tools'
``server_tool_use`` / ``web_search_tool_result`` and the like — are kept verbatim as
``ProviderBlock`` and sent back unchanged, in place (a ``pause_turn`` continuation needs
them). ``base_url`` is the API root without ``/v1``, as the official SDK takes it; one
that ends in ``/v1`` (the OpenAI habit) is cut back to the root, with a warning.
"""

from __future__ import annotations

import copy
import json
import logging
import re
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from typing import Any, Final

import attrs
import httpx

from ..config_schema import ConfigSchema, Setting
from ..errors import ConfigError, InvalidRequestError
from ..models import (
    ChatRequest,
    ChatResponse,
    ContentBlock,
    ImageBlock,
    Message,
    ModelInfo,
    ProviderBlock,
    ProviderInfo,
    RedactedThinkingBlock,
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
    stream_items,
    text_field,
)
from ._http import (
    INVALID_ARGUMENTS_KEY,
    TRUNCATING_FINISH_REASONS,
    HookEmitter,
    decode_tool_arguments,
    error_from_payload,
    truncated_arguments,
)
from ._sse import SSEEvent
from ._upstream import answers_upstream

__all__ = (
    "AnthropicProvider",
    "mount",
    "to_wire_messages",
    "parse_message",
    "parse_usage",
    "DEFAULT_BASE_URL",
    "DEFAULT_MODEL",
    "API_VERSION",
    "ApiVersion",
    "API_VERSIONS",
    "api_version",
    "CONFIG_SCHEMA",
)

_log = logging.getLogger(__name__)

DEFAULT_BASE_URL: Final = "https://api.anthropic.com"
DEFAULT_MODEL: Final = "claude-sonnet-4-5"
API_VERSION: Final = "2023-06-01"
_SPEC: Final = ProviderSpec(
    id="anthropic",
    display_name="Anthropic Messages",
    env_prefix="ANTHROPIC",
    base_url=DEFAULT_BASE_URL,
    model=DEFAULT_MODEL,
    context_window=200_000,
    max_output_tokens=8_192,
    max_output_keys=("max_tokens", "max_output_tokens"),
    capabilities=("tools", "streaming", "vision", "thinking"),
    model_capabilities=("tools", "thinking"),
)
_DEFAULT_THINKING_BUDGET: Final = 10_000
_MIN_THINKING_BUDGET: Final = 1_024  # the API's floor for budget_tokens
_EPHEMERAL: Final = {"type": "ephemeral"}


@attrs.frozen(kw_only=True)
class ApiVersion:
    """What requests sent under one ``anthropic-version`` may contain."""

    version: str
    sampling_together: bool
    """``temperature`` and ``top_p`` in one request; when not, only ``temperature`` goes."""


API_VERSIONS: Final[Mapping[str, ApiVersion]] = {
    "2023-06-01": ApiVersion(version="2023-06-01", sampling_together=True),
}
"""The ``anthropic-version`` values we know, and what each accepts.

``2023-06-01`` (the named-event stream format our decoder reads) is the oldest we can talk
to. A later, unknown version gets the shape the newest API accepts: ``temperature`` or
``top_p``, never both (the newest SDK's version no longer accepts them together).
"""

_NEWER: Final = ApiVersion(version="newer", sampling_together=False)
_DATE: Final = re.compile(r"\d{4}-\d{2}-\d{2}")


def api_version(version: str) -> ApiVersion:
    """The capabilities of ``version`` (a ``YYYY-MM-DD`` date); ``ConfigError`` for a
    malformed one or one older than every version we can talk to."""
    if version in API_VERSIONS:
        return API_VERSIONS[version]
    if not _DATE.fullmatch(version):
        msg = f"anthropic_version: expected a date YYYY-MM-DD, got {version!r}"
        raise ConfigError(msg)
    oldest = min(API_VERSIONS)
    if version < oldest:
        msg = (
            f"anthropic_version: {version!r} is older than {oldest}, the first version whose "
            "Messages stream format this provider reads"
        )
        raise ConfigError(msg)
    newest = max(API_VERSIONS)
    if version < newest:  # between two known versions: the older one's rules apply
        return API_VERSIONS[max(v for v in API_VERSIONS if v < version)]
    return attrs.evolve(_NEWER, version=version)


def _api_root(settings: ProviderSettings) -> ProviderSettings:
    """``settings`` with a base URL ending in ``/v1`` cut back to the API root, with a
    warning: ``/v1`` is ours to add (as the official SDK does), and a base URL with it —
    the OpenAI habit — would send every request to ``…/v1/v1/messages``."""
    base = settings.base_url.rstrip("/")
    if not base.endswith("/v1"):
        return settings
    root = base.removesuffix("/v1")
    _log.warning(
        "provider-%s: base_url %s ends in /v1; Anthropic's base URL is the API root "
        "without it: using %s (requests go to %s/v1/messages)",
        _SPEC.id,
        base,
        root,
        root,
    )
    return attrs.evolve(settings, base_url=root)


class AnthropicProvider(HTTPProvider):
    """A provider for the Messages API.

    ``api_key`` comes from config or ``ANTHROPIC_API_KEY``; see ``docs/providers.md`` for
    every config key. ``transport`` replaces the network (tests); ``hooks`` receives
    ``provider:retry``.
    """

    spec = _SPEC
    stream_path = "messages"

    def __init__(
        self,
        config: Mapping[str, Any] | None = None,
        *,
        hooks: HookEmitter | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        **http_options: Any,
    ) -> None:
        cfg = expand_env(config or {})
        settings = _api_root(ProviderSettings.from_config(cfg, _SPEC))
        self.max_tokens = settings.max_output_tokens
        self.temperature: float | None = cfg.get("temperature")
        self.extended_thinking = bool(cfg.get("extended_thinking", False))
        self.thinking_budget = _budget(
            cfg.get("thinking_budget_tokens", _DEFAULT_THINKING_BUDGET), "thinking_budget_tokens"
        )
        if self.extended_thinking and self.thinking_budget >= self.max_tokens:
            msg = (
                f"thinking_budget_tokens: {self.thinking_budget} must be below max_tokens "
                f"({self.max_tokens}): the answer needs room after the thinking"
            )
            raise ConfigError(msg)
        self.prompt_caching = bool(cfg.get("prompt_caching", True))
        version = header_value(cfg.get("anthropic_version") or API_VERSION, "anthropic_version")
        self.api_version = api_version(version)
        headers = {"accept": "application/json", "anthropic-version": version}
        if settings.api_key:
            headers["x-api-key"] = settings.api_key
        betas = cfg.get("beta_headers") or []
        if betas:
            headers["anthropic-beta"] = ",".join([betas] if isinstance(betas, str) else betas)
        # base_url is the API root, as the official SDK takes it; the version is ours to add
        http = settings.client(
            headers, api_path="/v1", hooks=hooks, transport=transport, **http_options
        )
        super().__init__(settings, http)

    def get_info(self) -> ProviderInfo:
        """Identity, credentials and the defaults context managers size requests with."""
        return _SPEC.info(
            model=self.model, context_window=self.context_window, max_output_tokens=self.max_tokens
        )

    async def list_models(self) -> list[ModelInfo]:
        """Every model of ``GET /v1/models``, following ``has_more`` pages."""
        models: list[ModelInfo] = []
        params: dict[str, Any] = {"limit": 100}
        while True:
            page = await self.http.request_json("GET", "models", params=params)
            models += _SPEC.models(
                page.get("data", []),
                context_window=self.context_window,
                max_output_tokens=self.max_tokens,
                display_name_key="display_name",
            )
            if not page.get("has_more") or not page.get("last_id"):
                return models
            params = {"limit": 100, "after_id": page["last_id"]}

    @answers_upstream
    async def complete(self, request: ChatRequest, **kwargs: Any) -> ChatResponse:
        """One non-streaming Messages call. An upstream orchestrator's request gets
        its answer in upstream's shape (``docs/upstream.md``)."""
        payload = self.build_payload(request, stream=False, **kwargs)
        body = await self.http.request_json(
            "POST", "messages", json_body=payload, model=payload["model"], timeout=request.timeout
        )
        with malformed_guard(self._name, payload["model"], "a message"):
            response = parse_message(body)
        return self.priced(response, payload["model"])

    def _decode_stream(
        self, sse: AsyncIterator[SSEEvent], model: str
    ) -> AsyncGenerator[dict[str, Any], None]:
        return _stream_events(sse, provider=self._name, model=model)

    def build_payload(self, request: ChatRequest, *, stream: bool, **kwargs: Any) -> dict[str, Any]:
        """The JSON body for ``request``.

        ``kwargs`` may carry ``extended_thinking`` and ``thinking_budget_tokens``, as
        upstream orchestrators pass them.
        """
        system, messages = to_wire_messages(request.messages)
        payload: dict[str, Any] = {
            "model": request.model or self.model,
            "max_tokens": request.max_output_tokens or self.max_tokens,
            "messages": messages,
        }
        if system:
            payload["system"] = self._system(system)
        if request.tools:
            tools = [_wire_tool(tool) for tool in request.tools]
            if self.prompt_caching:
                tools[-1]["cache_control"] = dict(_EPHEMERAL)
            payload["tools"] = tools
            if request.tool_choice is not None:
                payload["tool_choice"] = _wire_tool_choice(request.tool_choice)
        if kwargs.get("extended_thinking", self.extended_thinking):
            payload["thinking"] = self._thinking(payload, kwargs)
        else:  # the API rejects a temperature together with extended thinking
            self._sampling(payload, request)
        if request.stop:
            payload["stop_sequences"] = request.stop
        if self.prompt_caching:
            _cache_conversation(messages)
        if stream:
            payload["stream"] = True
        return payload

    def _thinking(self, payload: dict[str, Any], kwargs: dict[str, Any]) -> dict[str, Any]:
        """The ``thinking`` field of ``payload``: its budget (``thinking_budget_tokens``,
        shrunk below ``max_tokens`` to fit); an error when no budget fits or the tool
        choice forces a tool, which the API refuses with extended thinking."""
        budget = _budget(
            kwargs.get("thinking_budget_tokens", self.thinking_budget), "thinking_budget_tokens"
        )
        # never above the configured max_tokens: the budget shrinks to fit instead
        budget = min(budget, payload["max_tokens"] - 1)
        if budget < _MIN_THINKING_BUDGET:
            msg = (
                f"max_tokens ({payload['max_tokens']}) leaves no room for extended thinking "
                f"(a budget of at least {_MIN_THINKING_BUDGET} tokens below max_tokens)"
            )
            raise InvalidRequestError(msg, provider=self._name, model=payload["model"])
        choice = payload.get("tool_choice", {}).get("type")
        if choice in ("any", "tool"):
            msg = (
                f"tool_choice {choice!r} cannot be used with extended thinking "
                "(the API accepts only auto or none)"
            )
            raise InvalidRequestError(msg, provider=self._name, model=payload["model"])
        return {"type": "enabled", "budget_tokens": budget}

    def _sampling(self, payload: dict[str, Any], request: ChatRequest) -> None:
        """Set ``temperature`` (the request's, else the provider's) and ``top_p`` on
        ``payload``; an ``anthropic-version`` that takes one of them only gets the
        temperature."""
        temperature = request.temperature if request.temperature is not None else self.temperature
        if temperature is not None:
            payload["temperature"] = temperature
        if request.top_p is None:
            return
        if "temperature" not in payload or self.api_version.sampling_together:
            payload["top_p"] = request.top_p
        else:
            _log.debug(
                "%s: top_p not sent: anthropic-version %s takes temperature or top_p, not both",
                self._name,
                self.api_version.version,
            )

    def _system(self, text: str) -> str | list[dict[str, Any]]:
        if not self.prompt_caching:
            return text
        return [{"type": "text", "text": text, "cache_control": dict(_EPHEMERAL)}]


def _budget(value: Any, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < _MIN_THINKING_BUDGET:
        msg = f"{key}: expected an integer >= {_MIN_THINKING_BUDGET}, got {value!r}"
        raise ConfigError(msg)
    return value


def _cache_conversation(messages: list[dict[str, Any]]) -> None:
    """Mark the last block of the last message ``cache_control: ephemeral``, so the
    conversation so far is a cached prefix for the next call (as upstream does)."""
    for message in reversed(messages):
        content = message.get("content")
        if isinstance(content, list) and content:
            block = content[-1]
            if block.get("type") not in ("thinking", "redacted_thinking"):
                block["cache_control"] = dict(_EPHEMERAL)
            return


# -- request conversion ---------------------------------------------------------------


def to_wire_messages(
    messages: list[Message] | list[dict[str, Any]],
) -> tuple[str, list[dict[str, Any]]]:
    """(system prompt, Messages API messages) for our messages (models or plain dicts)."""
    system: list[str] = []
    wire: list[dict[str, Any]] = []
    for item in messages:
        message = item if isinstance(item, Message) else structure(item, Message)
        if message.role in ("system", "developer"):
            system.append(_plain_text(message.content))
        elif message.role == "tool":
            _append_user(wire, [_tool_result(message.tool_call_id or "", message.content)])
        elif message.role == "assistant":
            blocks = _assistant_blocks(message)
            if blocks:
                wire.append({"role": "assistant", "content": blocks})
        else:
            _append_user(wire, _user_blocks(message.content))
    return "\n\n".join(s for s in system if s), wire


def _append_user(wire: list[dict[str, Any]], blocks: list[dict[str, Any]]) -> None:
    """Add blocks as a user turn; tool results join the user turn right before them."""
    if not blocks:
        return
    last = wire[-1] if wire else None
    joins = blocks[0]["type"] == "tool_result"
    if last is not None and last["role"] == "user" and joins and _only_results(last):
        last["content"].extend(blocks)
    else:
        wire.append({"role": "user", "content": blocks})


def _only_results(message: dict[str, Any]) -> bool:
    return all(block["type"] == "tool_result" for block in message["content"])


def _plain_text(content: str | list[ContentBlock]) -> str:
    if isinstance(content, str):
        return content
    return "\n\n".join(b.text for b in content if isinstance(b, TextBlock) and b.text)


def _user_blocks(content: str | list[ContentBlock]) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    blocks: list[dict[str, Any]] = []
    for block in content:
        if isinstance(block, TextBlock) and block.text:
            blocks.append({"type": "text", "text": block.text})
        elif isinstance(block, ImageBlock):
            blocks.append({"type": "image", "source": block.source})
        elif isinstance(block, ToolResultBlock):
            blocks.append(_tool_result(block.tool_call_id, block.output))
    # tool_result blocks must open the user turn that answers the calls
    return sorted(blocks, key=lambda b: b["type"] != "tool_result")


def _assistant_blocks(message: Message) -> list[dict[str, Any]]:
    """The blocks in their order: thinking (signed), redacted thinking, text, server-tool
    blocks (verbatim) and tool_use; then calls only in ``tool_calls``."""
    blocks: list[dict[str, Any]] = []
    seen: set[str] = set()
    content = (
        [TextBlock(text=message.content)] if isinstance(message.content, str) else message.content
    )
    for block in content:
        if isinstance(block, ThinkingBlock) and block.signature:
            blocks.append(
                {"type": "thinking", "thinking": block.thinking, "signature": block.signature}
            )
        elif isinstance(block, RedactedThinkingBlock):
            blocks.append({"type": "redacted_thinking", "data": block.data})
        elif isinstance(block, TextBlock) and block.text:
            blocks.append({"type": "text", "text": block.text})
        elif isinstance(block, ProviderBlock) and block.provider == _SPEC.id:
            blocks.append(copy.deepcopy(block.data))  # verbatim; cache_control may be added
        elif isinstance(block, ToolCallBlock) and block.id not in seen:
            seen.add(block.id)
            blocks.append(_tool_use(block.id, block.name, block.input))
    for call in message.tool_calls or []:
        if call.id not in seen:
            seen.add(call.id)
            blocks.append(_tool_use(call.id, call.name, call.arguments))
    return blocks


def _tool_use(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """A ``tool_use`` block; a call whose arguments could not be decoded goes back with the
    object the model's text holds, if any, else ``{}`` (the API takes only an object; our
    marker is never sent)."""
    marker = arguments.get(INVALID_ARGUMENTS_KEY)
    if isinstance(marker, dict):
        try:
            value = json.loads(str(marker.get("raw") or ""))
        except ValueError:
            value = None
        arguments = value if isinstance(value, dict) else {}
    return {"type": "tool_use", "id": call_id, "name": name, "input": arguments}


def _tool_result(tool_use_id: str, output: Any) -> dict[str, Any]:
    if isinstance(output, list) and all(isinstance(b, TextBlock) for b in output):
        text = "".join(b.text for b in output)
    elif isinstance(output, str):
        text = output
    else:
        text = "" if output is None else json.dumps(output, default=str)
    return {"type": "tool_result", "tool_use_id": tool_use_id, "content": text}


def _wire_tool(tool: ToolSpec) -> dict[str, Any]:
    wire: dict[str, Any] = {
        "name": tool.name,
        "input_schema": tool.parameters or {"type": "object", "properties": {}},
    }
    if tool.description:
        wire["description"] = tool.description
    return wire


def _wire_tool_choice(choice: str | dict[str, Any]) -> dict[str, Any]:
    if isinstance(choice, dict):
        return choice
    named = {
        "auto": {"type": "auto"},
        "required": {"type": "any"},
        "any": {"type": "any"},
        "none": {"type": "none"},
    }
    return named.get(choice, {"type": "tool", "name": choice})


# -- response conversion --------------------------------------------------------------


def parse_message(body: Mapping[str, Any]) -> ChatResponse:
    """A ``message`` object as our ChatResponse.

    A ``tool_use`` block that ``max_tokens`` cut off (the last block of a ``max_tokens``
    answer) carries the truncation marker instead of its partial input.
    """
    if not isinstance(body, Mapping):
        raise TypeError(f"the body is {type(body).__name__}, not an object")
    raw_content = body.get("content") or []
    if not isinstance(raw_content, list):
        raise TypeError(f"content is {type(raw_content).__name__}, not a list")
    content = [_block(raw) for raw in raw_content]
    stop_reason = body.get("stop_reason")
    text_field(stop_reason, "stop_reason")
    content = _mark_truncated(content, stop_reason, None)
    calls = [
        ToolCall(id=b.id, name=b.name, arguments=b.input)
        for b in content
        if isinstance(b, ToolCallBlock)
    ]
    return ChatResponse(
        content=content,
        tool_calls=calls or None,
        usage=parse_usage(body.get("usage")),
        finish_reason=body.get("stop_reason"),
        metadata=_metadata(body),
    )


def _mark_truncated(
    content: list[ContentBlock], stop_reason: Any, raw: str | None
) -> list[ContentBlock]:
    """``content`` with a last ``tool_use`` cut by ``max_tokens`` marked as truncated;
    ``raw`` is its partial JSON when known (a stream), else its input as JSON."""
    if stop_reason not in TRUNCATING_FINISH_REASONS or not content:
        return content
    last = content[-1]
    if not isinstance(last, ToolCallBlock):
        return content
    text = raw if raw is not None else json.dumps(last.input)
    marked = ToolCallBlock(
        id=last.id, name=last.name, input=truncated_arguments(text, str(stop_reason))
    )
    return [*content[:-1], marked]


def _block(raw: Mapping[str, Any]) -> ContentBlock:
    kind = raw.get("type")
    if kind == "text":
        return TextBlock(text=text_field(raw.get("text"), "a text block"))
    if kind == "thinking":
        return ThinkingBlock(
            thinking=text_field(raw.get("thinking"), "a thinking block"),
            signature=text_field(raw.get("signature"), "a signature") or None,
            visibility="internal",
        )
    if kind == "redacted_thinking":
        data = text_field(raw.get("data"), "a redacted thinking block")
        return RedactedThinkingBlock(data=data, visibility="internal")
    if kind == "tool_use":
        raw_input = raw.get("input")
        if raw_input is not None and not isinstance(raw_input, dict):
            raise TypeError(f"a tool_use input is {type(raw_input).__name__}, not an object")
        return ToolCallBlock(
            id=text_field(raw.get("id"), "a tool_use id"),
            name=text_field(raw.get("name"), "a tool_use name"),
            input=raw_input or {},
        )
    if not isinstance(kind, str):
        raise TypeError(f"a content block's type is {type(kind).__name__}, not a string")
    # server tools (server_tool_use, web_search_tool_result…) and future block types are
    # not ours to interpret: kept verbatim, sent back unchanged
    return ProviderBlock(provider=_SPEC.id, data=dict(raw))


def parse_usage(usage: Mapping[str, Any] | None) -> Usage | None:
    """Anthropic usage; ``input_tokens`` counts every prompt token, cached ones included.

    The API's ``input_tokens`` excludes cache reads and writes; we add them back so the
    number means the same as OpenAI's ``prompt_tokens``, and report the cache split in
    ``cache_read_tokens`` / ``cache_write_tokens``.
    """
    if not usage:
        return None
    cache_read = usage.get("cache_read_input_tokens")
    cache_write = usage.get("cache_creation_input_tokens")
    prompt = int(usage.get("input_tokens") or 0) + int(cache_read or 0) + int(cache_write or 0)
    output = int(usage.get("output_tokens") or 0)
    return Usage(
        input_tokens=prompt,
        output_tokens=output,
        total_tokens=prompt + output,
        cache_read_tokens=cache_read,
        cache_write_tokens=cache_write,
    )


def _metadata(body: Mapping[str, Any]) -> dict[str, Any] | None:
    meta = {key: body[key] for key in ("model",) if body.get(key)}
    if body.get("id"):
        meta["response_id"] = body["id"]
    return meta or None


# -- streaming ------------------------------------------------------------------------

_KINDS: Final = {
    "text": "text",
    "thinking": "thinking",
    "redacted_thinking": "thinking",
    "tool_use": "tool_call",
}


class _StreamState:
    """The message as ``message_start`` / ``content_block_*`` / ``message_delta`` build it."""

    end_event = "message_stop"

    def decode(self, event: SSEEvent, *, provider: str, model: str) -> dict[str, Any] | None:
        if event.event == "ping":
            return None
        data = decode_stream_object(event.data, noun="event", provider=provider, model=model)
        if data.get("type") == "error" or event.event == "error":
            raise error_from_payload(data, provider=provider, model=model)
        return data

    def ended(self) -> bool:
        return self.stopped

    def closing(self) -> list[dict[str, Any]]:
        return [*self.close_open_blocks(), {"type": "response", "response": self.response()}]

    def __init__(self) -> None:
        self.message: dict[str, Any] = {}
        self.usage: dict[str, Any] = {}
        self.blocks: dict[int, dict[str, Any]] = {}
        self.json_parts: dict[int, list[str]] = {}
        self.parts: dict[tuple[int, str], list[str]] = {}
        self.finished: list[ContentBlock] = []
        self.stopped_blocks: set[int] = set()
        self.last_json: str | None = None  # the raw input of the last finished block
        self.stopped = False

    def handle(self, data: dict[str, Any]) -> list[dict[str, Any]]:
        kind = data.get("type")
        if kind == "message_start":
            self.message = dict(data.get("message") or {})
            self.usage.update(self.message.get("usage") or {})
        elif kind == "content_block_start":
            return self._start(int(data["index"]), dict(data.get("content_block") or {}))
        elif kind == "content_block_delta":
            return self._delta(int(data["index"]), data.get("delta") or {})
        elif kind == "content_block_stop":
            return self._stop(int(data["index"]))
        elif kind == "message_delta":
            self.message.update(
                {k: v for k, v in (data.get("delta") or {}).items() if v is not None}
            )
            self.usage.update({k: v for k, v in (data.get("usage") or {}).items() if v is not None})
        elif kind == "message_stop":
            self.stopped = True
        return []

    def _start(self, index: int, block: dict[str, Any]) -> list[dict[str, Any]]:
        self.blocks[index] = block
        self.json_parts[index] = []
        event: dict[str, Any] = {
            "type": "content_block:start",
            "index": index,
            "block_type": _KINDS.get(block.get("type", ""), block.get("type")),
        }
        if block.get("type") == "tool_use":
            event.update(id=block.get("id", ""), name=block.get("name", ""))
        return [event]

    def _delta(self, index: int, delta: Mapping[str, Any]) -> list[dict[str, Any]]:
        self.blocks.setdefault(index, {"type": "text", "text": ""})
        kind = delta.get("type")
        if kind == "text_delta":
            self._part(index, "text", delta.get("text", ""))
            return [
                {
                    "type": "content_block:delta",
                    "index": index,
                    "block_type": "text",
                    "delta": delta.get("text", ""),
                }
            ]
        if kind == "thinking_delta":
            self._part(index, "thinking", delta.get("thinking", ""))
            return [{"type": "thinking:delta", "index": index, "delta": delta.get("thinking", "")}]
        if kind == "signature_delta":
            self._part(index, "signature", delta.get("signature", ""))
        elif kind == "input_json_delta":
            part = delta.get("partial_json", "")
            self.json_parts.setdefault(index, []).append(part)
            if part:
                kind = str(self.blocks[index].get("type"))
                event = {
                    "type": "content_block:delta",
                    "index": index,
                    "block_type": _KINDS.get(kind, kind),
                    "delta": part,
                }
                if kind == "tool_use":  # the call it builds, for a UI that shows it forming
                    event["id"] = self.blocks[index].get("id", "")
                return [event]
        return []

    def _part(self, index: int, field: str, text: Any) -> None:
        """Keep a delta; the parts are joined once, when the block stops (linear time)."""
        self.parts.setdefault((index, field), []).append(text_field(text, f"a {field} delta"))

    def _stop(self, index: int) -> list[dict[str, Any]]:
        self.stopped_blocks.add(index)
        raw = self.blocks.get(index, {})
        for field in ("text", "thinking", "signature"):
            parts = self.parts.pop((index, field), None)
            if parts:
                raw[field] = str(raw.get(field) or "") + "".join(parts)
        self.last_json = None
        if raw.get("type") == "tool_use":
            parts = self.json_parts.get(index) or []
            self.last_json = "".join(parts) if parts else None
            raw["input"] = (
                decode_tool_arguments(self.last_json) if parts else raw.get("input") or {}
            )
        elif self.json_parts.get(index):  # a server tool's input, streamed as JSON
            raw["input"] = json.loads("".join(self.json_parts[index]))
        block = _block(raw)
        self.finished.append(block)
        return [{"type": "content_block:end", "index": index, "block": block}]

    def close_open_blocks(self) -> list[dict[str, Any]]:
        """Finish the blocks a truncated stream started and never stopped (a tool call cut
        by ``max_tokens`` is kept, marked, instead of being lost)."""
        events: list[dict[str, Any]] = []
        for index in sorted(set(self.blocks) - self.stopped_blocks):
            events += self._stop(index)
        return events

    def response(self) -> ChatResponse:
        stop_reason = self.message.get("stop_reason")
        content = _mark_truncated(self.finished, stop_reason, self.last_json)
        calls = [
            ToolCall(id=b.id, name=b.name, arguments=b.input)
            for b in content
            if isinstance(b, ToolCallBlock)
        ]
        return ChatResponse(
            content=content,
            tool_calls=calls or None,
            usage=parse_usage(self.usage),
            finish_reason=self.message.get("stop_reason"),
            metadata=_metadata(self.message),
        )


def _stream_events(
    sse: AsyncIterator[SSEEvent], *, provider: str, model: str
) -> AsyncGenerator[dict[str, Any], None]:
    return stream_items(sse, _StreamState(), provider=provider, model=model)


# -- module entry point ---------------------------------------------------------------


async def mount(coordinator: Any, config: dict[str, Any] | None = None) -> Any:
    """Mount an AnthropicProvider; without an API key, log a warning and mount nothing.

    Returns the async cleanup that closes the HTTP client.
    """
    return await mount_provider(coordinator, AnthropicProvider, config)


CONFIG_SCHEMA = ConfigSchema(
    "provider-anthropic",
    {
        **COMMON_SETTINGS,
        "max_tokens": Setting((int,), "output limit when the request has none"),
        "extended_thinking": Setting((bool,), "send a thinking budget"),
        "thinking_budget_tokens": Setting((int,), ">= 1024, below max_tokens"),
        "prompt_caching": Setting((bool,), "cache_control on system, tools, conversation"),
        "beta_headers": Setting((str, list), "anthropic-beta values"),
        "anthropic_version": Setting((str,), "anthropic-version header"),
    },
    aliases={"max_output_tokens": "max_tokens"},
)
"""The keys provider-anthropic accepts (checked by ``validate --strict``)."""
