"""Messages, content blocks, tool calls and the provider request/response envelope.

Field names follow Amplifier's so unstructured dicts are wire-compatible with its
transcripts. Content blocks carry their tag as the class attribute ``type``; the
converter writes it into, and reads it from, the ``type`` key.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any, ClassVar, Literal, TypeAlias

import attrs

from ._validators import one_of

__all__ = (
    "Visibility",
    "Role",
    "TextBlock",
    "ThinkingBlock",
    "RedactedThinkingBlock",
    "ToolCallBlock",
    "ToolResultBlock",
    "ImageBlock",
    "ReasoningBlock",
    "ProviderBlock",
    "ContentBlock",
    "BLOCK_TYPES",
    "Message",
    "ToolCall",
    "INVALID_ARGUMENTS_KEY",
    "ToolSpec",
    "Usage",
    "ChatRequest",
    "ChatResponse",
)

Visibility: TypeAlias = Literal["internal", "developer", "user"]
Role: TypeAlias = Literal["system", "developer", "user", "assistant", "tool"]

_VISIBILITIES = ("internal", "developer", "user")
_ROLES = ("system", "developer", "user", "assistant", "tool")


def _visibility() -> Any:
    return attrs.field(default=None, validator=one_of(_VISIBILITIES, optional=True))


@attrs.frozen(kw_only=True)
class TextBlock:
    """Plain text from the model or the user."""

    type: ClassVar[str] = "text"
    text: str
    visibility: Visibility | None = _visibility()


@attrs.frozen(kw_only=True)
class ThinkingBlock:
    """Model reasoning shown in clear; ``signature`` must be sent back unchanged."""

    type: ClassVar[str] = "thinking"
    thinking: str
    signature: str | None = None
    visibility: Visibility | None = _visibility()


@attrs.frozen(kw_only=True)
class RedactedThinkingBlock:
    """Encrypted model reasoning, passed back to the provider as is."""

    type: ClassVar[str] = "redacted_thinking"
    data: str
    visibility: Visibility | None = _visibility()


@attrs.frozen(kw_only=True)
class ToolCallBlock:
    """A tool call inside an assistant message's content."""

    type: ClassVar[str] = "tool_call"
    id: str
    name: str
    input: dict[str, Any] = attrs.field(factory=dict)
    visibility: Visibility | None = _visibility()


@attrs.frozen(kw_only=True)
class ToolResultBlock:
    """The result of a tool call inside a message's content."""

    type: ClassVar[str] = "tool_result"
    tool_call_id: str
    output: Any = None
    visibility: Visibility | None = _visibility()


@attrs.frozen(kw_only=True)
class ImageBlock:
    """An image, described by its ``source`` (base64 data or a URL)."""

    type: ClassVar[str] = "image"
    source: dict[str, Any]
    visibility: Visibility | None = _visibility()


@attrs.frozen(kw_only=True)
class ReasoningBlock:
    """A reasoning item of the OpenAI Responses API: its content and summary parts.

    ``id`` and ``encrypted_content`` are the item's own, kept so that the item can be sent
    back unchanged in the next request (the Responses API reads reasoning across turns);
    providers of other APIs never send the block.
    """

    type: ClassVar[str] = "reasoning"
    content: list[Any] = attrs.field(factory=list)
    summary: list[Any] = attrs.field(factory=list)
    id: str | None = None
    encrypted_content: str | None = None
    visibility: Visibility | None = _visibility()


def _wire_block(_instance: Any, _attribute: Any, value: dict[str, Any]) -> None:
    if not isinstance(value, dict) or not isinstance(value.get("type"), str):
        msg = "data must be a JSON object with a string 'type' (the provider's block type)"
        raise TypeError(msg)


@attrs.frozen(kw_only=True)
class ProviderBlock:
    """A provider's own block that we do not interpret, kept verbatim to be sent back.

    Anthropic's server tools (``server_tool_use``, ``web_search_tool_result``…) answer
    with blocks the next request must carry unchanged (a ``pause_turn`` continuation, a
    later turn). ``provider`` names the provider id whose wire format ``data`` is in
    (``"anthropic"``); ``data`` is the block as the API sent it, its own ``type``
    included. Other providers never send it.
    """

    type: ClassVar[str] = "provider_block"
    provider: str
    data: dict[str, Any] = attrs.field(validator=_wire_block)
    visibility: Visibility | None = _visibility()


ContentBlock: TypeAlias = (
    TextBlock
    | ThinkingBlock
    | RedactedThinkingBlock
    | ToolCallBlock
    | ToolResultBlock
    | ImageBlock
    | ReasoningBlock
    | ProviderBlock
)

BLOCK_TYPES: dict[str, type[ContentBlock]] = {
    cls.type: cls
    for cls in (
        TextBlock,
        ThinkingBlock,
        RedactedThinkingBlock,
        ToolCallBlock,
        ToolResultBlock,
        ImageBlock,
        ReasoningBlock,
        ProviderBlock,
    )
}
"""The content block classes by their ``type`` tag."""


INVALID_ARGUMENTS_KEY = "__invalid_arguments__"
"""Marker key of a tool call whose arguments were not a JSON object.

Providers set ``arguments={INVALID_ARGUMENTS_KEY: {"raw": <text>, "error": <why>}}`` so one
bad call never fails the whole response; the tool batch answers it with an error result
instead of running the tool.
"""


@attrs.frozen(kw_only=True)
class ToolCall:
    """A tool call requested by the model: ``arguments`` is already a decoded JSON object."""

    id: str
    name: str
    arguments: dict[str, Any] = attrs.field(factory=dict)


@attrs.frozen(kw_only=True)
class Message:
    """One conversation message.

    ``content`` is a string or a list of content blocks. Assistant messages may list
    ``tool_calls``; ``role="tool"`` messages answer one call through ``tool_call_id``.
    """

    role: Role = attrs.field(validator=one_of(_ROLES))
    content: str | list[ContentBlock] = attrs.field(default="")
    name: str | None = None
    tool_call_id: str | None = None
    tool_calls: list[ToolCall] | None = None
    metadata: dict[str, Any] | None = None

    @content.validator
    def _check_content(self, _attribute: Any, value: Any) -> None:
        # Refused when built, not when a request is: None would only fail far away.
        if not isinstance(value, str | list):
            msg = f"content: expected a string or a list of content blocks, got {value!r}"
            raise TypeError(msg)


@attrs.frozen(kw_only=True)
class ToolSpec:
    """A tool as offered to the model: its name, JSON-schema parameters and description."""

    name: str
    parameters: dict[str, Any] = attrs.field(factory=dict)
    description: str | None = None


def _cost(_instance: Any, _attribute: Any, value: Any) -> None:
    if value is None:
        return
    if not isinstance(value, Decimal) or not value.is_finite():
        msg = f"cost_usd: expected a finite Decimal (or None), got {value!r}"
        raise TypeError(msg)


@attrs.frozen(kw_only=True)
class Usage:
    """Token counts reported by a provider for one call, and what they cost.

    ``input_tokens`` counts every prompt token, cached ones included (the cache split is in
    ``cache_read_tokens`` / ``cache_write_tokens``). ``cost_usd`` is a `Decimal` (never a
    float: sums of many small prices must not drift), set by a provider that has a price
    for the model (its ``pricing`` config); None when nobody knows the price. It is written
    as a string in JSON.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    reasoning_tokens: int | None = None
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    cost_usd: Decimal | None = attrs.field(default=None, validator=_cost)

    def __add__(self, other: Usage) -> Usage:
        """Sum two usages; an optional count stays None only when both are None."""

        def opt(a: Any, b: Any) -> Any:
            return None if a is None and b is None else (a or 0) + (b or 0)

        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            total_tokens=self.total_tokens + other.total_tokens,
            reasoning_tokens=opt(self.reasoning_tokens, other.reasoning_tokens),
            cache_read_tokens=opt(self.cache_read_tokens, other.cache_read_tokens),
            cache_write_tokens=opt(self.cache_write_tokens, other.cache_write_tokens),
            cost_usd=opt(self.cost_usd, other.cost_usd),
        )


@attrs.frozen(kw_only=True)
class ChatRequest:
    """What an orchestrator asks a provider for."""

    messages: list[Message]
    tools: list[ToolSpec] | None = None
    model: str | None = None
    temperature: float | None = None
    top_p: float | None = None
    max_output_tokens: int | None = None
    tool_choice: str | dict[str, Any] | None = None
    reasoning_effort: str | None = None
    response_format: dict[str, Any] | None = None
    stop: list[str] | None = None
    stream: bool = False
    conversation_id: str | None = None
    timeout: float | None = None
    metadata: dict[str, Any] | None = None


@attrs.frozen(kw_only=True)
class ChatResponse:
    """A provider's answer: content blocks, the tool calls it asks for, usage."""

    content: list[ContentBlock] = attrs.field(factory=list)
    tool_calls: list[ToolCall] | None = None
    usage: Usage | None = None
    finish_reason: str | None = None
    metadata: dict[str, Any] | None = None

    @property
    def text(self) -> str:
        """The text blocks joined by blank lines; thinking never appears here."""
        return "\n\n".join(b.text for b in self.content if isinstance(b, TextBlock) and b.text)
