"""Hypothesis strategies for every model of [`amplifier_anyio.models`][amplifier_anyio.models].

Module authors property-test their own context managers, orchestrators and providers
with these in CI:

```python
from hypothesis import given
from amplifier_anyio.testing import strategies as ast

@given(ast.conversations(max_turns=4))
def test_my_view_keeps_system_messages(conversation): ...
```

Every strategy draws valid values: each model strategy builds an instance the
converter round-trips, and `conversations` draws message dicts in the shape a
context manager stores them (each assistant tool call answered, in order, right after
its message). This module imports hypothesis, a test dependency; nothing else in
``amplifier_anyio`` does.
"""

from __future__ import annotations

import string
import typing
from decimal import Decimal
from typing import Any, TypeVar

from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from ..models import (
    ChatRequest,
    ChatResponse,
    ContentBlock,
    ContextInjection,
    HookResult,
    ImageBlock,
    Message,
    ModelInfo,
    ModuleInfo,
    Price,
    PriceTable,
    ProviderBlock,
    ProviderInfo,
    ReasoningBlock,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    ToolCallBlock,
    ToolResult,
    ToolResultBlock,
    ToolSpec,
    Usage,
    unstructure,
)

__all__ = (
    # plain data
    "json_values",
    "json_objects",
    # content blocks
    "text_blocks",
    "thinking_blocks",
    "redacted_thinking_blocks",
    "tool_call_blocks",
    "tool_result_blocks",
    "image_blocks",
    "reasoning_blocks",
    "provider_blocks",
    "content_blocks",
    # messages and the provider envelope
    "tool_calls",
    "tool_specs",
    "messages",
    "usages",
    "prices",
    "price_tables",
    "chat_requests",
    "chat_responses",
    # results and descriptions
    "tool_results",
    "hook_results",
    "context_injections",
    "provider_infos",
    "model_infos",
    "module_infos",
    "models",
    # conversations as context managers store them
    "message_dicts",
    "conversations",
)

T = TypeVar("T")

_MAX_INT = 2**53  # exact in every JSON reader, not only Python's
_IDENT_CHARS = string.ascii_letters + string.digits + "_-"
_ENV_CHARS = string.ascii_uppercase + string.digits + "_"


def _closed_values(cls: type, field: str) -> tuple[Any, ...]:
    """The values a ``Literal`` field accepts, read from the model so the two never drift."""
    hint = typing.get_type_hints(cls)[field]
    literals = [a for a in typing.get_args(hint) if a is not type(None)]
    if literals and all(typing.get_origin(a) is typing.Literal for a in literals):
        return tuple(v for a in literals for v in typing.get_args(a))
    return typing.get_args(hint)


def _identifiers(max_size: int = 24) -> st.SearchStrategy[str]:
    return st.text(alphabet=_IDENT_CHARS, min_size=1, max_size=max_size)


def _short_text(max_size: int = 40) -> st.SearchStrategy[str]:
    return st.text(max_size=max_size)


def _optional(strategy: st.SearchStrategy[T]) -> st.SearchStrategy[T | None]:
    return st.none() | strategy


def json_values(*, max_leaves: int = 8) -> st.SearchStrategy[Any]:
    """Any JSON value: null, booleans, integers, finite floats, strings, lists, objects.

    No NaN or infinity (JSON has neither), integers within +-2**53 and at most
    ``max_leaves`` scalars in one value.
    """
    scalars = (
        st.none()
        | st.booleans()
        | st.integers(min_value=-_MAX_INT, max_value=_MAX_INT)
        | st.floats(allow_nan=False, allow_infinity=False)
        | _short_text()
    )
    return st.recursive(
        scalars,
        lambda inner: (
            st.lists(inner, max_size=4) | st.dictionaries(_short_text(12), inner, max_size=4)
        ),
        max_leaves=max_leaves,
    )


def json_objects(*, max_size: int = 4) -> st.SearchStrategy[dict[str, Any]]:
    """A JSON object (``dict[str, Any]``) of at most ``max_size`` keys."""
    return st.dictionaries(_short_text(12), json_values(max_leaves=4), max_size=max_size)


def _visibilities() -> st.SearchStrategy[Any]:
    return _optional(st.sampled_from(_closed_values(TextBlock, "visibility")))


def text_blocks() -> st.SearchStrategy[TextBlock]:
    """A [`TextBlock`][amplifier_anyio.TextBlock] with any text, possibly empty."""
    return st.builds(TextBlock, text=_short_text(), visibility=_visibilities())


def thinking_blocks() -> st.SearchStrategy[ThinkingBlock]:
    """A [`ThinkingBlock`][amplifier_anyio.ThinkingBlock], with or without a signature."""
    return st.builds(
        ThinkingBlock,
        thinking=_short_text(),
        signature=_optional(_identifiers(40)),
        visibility=_visibilities(),
    )


def redacted_thinking_blocks() -> st.SearchStrategy[RedactedThinkingBlock]:
    """A [`RedactedThinkingBlock`][amplifier_anyio.models.RedactedThinkingBlock] carrying opaque
    data."""
    return st.builds(
        RedactedThinkingBlock,
        data=st.text(alphabet=string.ascii_letters + string.digits + "+/=", max_size=40),
        visibility=_visibilities(),
    )


def tool_call_blocks() -> st.SearchStrategy[ToolCallBlock]:
    """A [`ToolCallBlock`][amplifier_anyio.models.ToolCallBlock] with a JSON object as input."""
    return st.builds(
        ToolCallBlock,
        id=_identifiers(),
        name=_identifiers(),
        input=json_objects(),
        visibility=_visibilities(),
    )


def tool_result_blocks() -> st.SearchStrategy[ToolResultBlock]:
    """A [`ToolResultBlock`][amplifier_anyio.models.ToolResultBlock] whose output is any JSON
    value."""
    return st.builds(
        ToolResultBlock,
        tool_call_id=_identifiers(),
        output=json_values(),
        visibility=_visibilities(),
    )


def _image_sources() -> st.SearchStrategy[dict[str, Any]]:
    base64 = st.fixed_dictionaries(
        {
            "type": st.just("base64"),
            "media_type": st.sampled_from(("image/png", "image/jpeg", "image/webp")),
            "data": st.text(alphabet=string.ascii_letters + string.digits + "+/=", max_size=40),
        }
    )
    url = st.fixed_dictionaries(
        {"type": st.just("url"), "url": _identifiers().map(lambda s: f"https://example.com/{s}")}
    )
    return base64 | url


def image_blocks() -> st.SearchStrategy[ImageBlock]:
    """An [`ImageBlock`][amplifier_anyio.models.ImageBlock] with a base64 or URL source."""
    return st.builds(ImageBlock, source=_image_sources(), visibility=_visibilities())


def reasoning_blocks() -> st.SearchStrategy[ReasoningBlock]:
    """A [`ReasoningBlock`][amplifier_anyio.models.ReasoningBlock] with JSON content and summary
    parts."""
    parts = st.lists(json_values(max_leaves=3), max_size=3)
    return st.builds(
        ReasoningBlock,
        content=parts,
        summary=parts,
        id=_optional(_identifiers()),
        encrypted_content=_optional(st.text(max_size=20)),
        visibility=_visibilities(),
    )


def provider_blocks() -> st.SearchStrategy[ProviderBlock]:
    """A [`ProviderBlock`][amplifier_anyio.models.ProviderBlock]: a provider's own block (a server
    tool's) kept verbatim."""
    data = st.builds(
        lambda kind, rest: {**rest, "type": kind},
        st.sampled_from(("server_tool_use", "web_search_tool_result", "web_fetch_tool_result")),
        json_objects(),
    )
    return st.builds(
        ProviderBlock,
        provider=st.sampled_from(("anthropic",)),
        data=data,
        visibility=_visibilities(),
    )


def content_blocks() -> st.SearchStrategy[ContentBlock]:
    """Any content block, of each of the eight types."""
    return st.one_of(
        text_blocks(),
        thinking_blocks(),
        redacted_thinking_blocks(),
        tool_call_blocks(),
        tool_result_blocks(),
        image_blocks(),
        reasoning_blocks(),
        provider_blocks(),
    )


def tool_calls() -> st.SearchStrategy[ToolCall]:
    """A [`ToolCall`][amplifier_anyio.ToolCall] whose arguments are a JSON object."""
    return st.builds(ToolCall, id=_identifiers(), name=_identifiers(), arguments=json_objects())


def _json_schemas() -> st.SearchStrategy[dict[str, Any]]:
    kinds = st.sampled_from(("string", "integer", "number", "boolean", "array", "object"))
    properties = st.dictionaries(_identifiers(12), kinds.map(lambda k: {"type": k}), max_size=4)
    return properties.flatmap(
        lambda props: st.fixed_dictionaries(
            {"type": st.just("object"), "properties": st.just(props)},
            optional={"required": st.lists(st.sampled_from(sorted(props)), unique=True)}
            if props
            else {},
        )
    )


def tool_specs() -> st.SearchStrategy[ToolSpec]:
    """A [`ToolSpec`][amplifier_anyio.ToolSpec] with an object JSON schema as parameters."""
    return st.builds(
        ToolSpec,
        name=_identifiers(),
        parameters=_json_schemas(),
        description=_optional(_short_text()),
    )


def messages() -> st.SearchStrategy[Message]:
    """Any [`Message`][amplifier_anyio.Message] the model accepts: any role, string or block
    content.

    Fields are drawn independently, so combinations no orchestrator writes (a user
    message with ``tool_calls``) appear too; use `conversations` for realistic
    histories.
    """
    return st.builds(
        Message,
        role=st.sampled_from(_closed_values(Message, "role")),
        content=_short_text() | st.lists(content_blocks(), max_size=3),
        name=_optional(_identifiers()),
        tool_call_id=_optional(_identifiers()),
        tool_calls=_optional(st.lists(tool_calls(), max_size=3)),
        metadata=_optional(json_objects()),
    )


def _counts() -> st.SearchStrategy[int]:
    return st.integers(min_value=0, max_value=10**9)


def usages() -> st.SearchStrategy[Usage]:
    """A [`Usage`][amplifier_anyio.Usage] with non-negative counts; the optional counts may be
    None."""
    return st.builds(
        Usage,
        input_tokens=_counts(),
        output_tokens=_counts(),
        total_tokens=_counts(),
        reasoning_tokens=_optional(_counts()),
        cache_read_tokens=_optional(_counts()),
        cache_write_tokens=_optional(_counts()),
        cost_usd=_optional(_costs()),
    )


def prices() -> st.SearchStrategy[Price]:
    """A [`Price`][amplifier_anyio.models.Price]: dollars per million tokens, the cache
    prices None (the input price) or their own."""
    return st.builds(
        Price,
        input_per_mtok=_costs(),
        output_per_mtok=_costs(),
        cache_read_per_mtok=_optional(_costs()),
        cache_write_per_mtok=_optional(_costs()),
    )


def price_tables() -> st.SearchStrategy[PriceTable]:
    """A [`PriceTable`][amplifier_anyio.models.PriceTable] of a few models."""
    return st.builds(PriceTable, prices=st.dictionaries(_identifiers(), prices(), max_size=3))


def _costs() -> st.SearchStrategy[Decimal]:
    return st.decimals(min_value=0, max_value=10**6, allow_nan=False, allow_infinity=False)


def _tool_choices() -> st.SearchStrategy[str | dict[str, Any] | None]:
    named = _identifiers().map(lambda n: {"type": "function", "function": {"name": n}})
    return st.none() | st.sampled_from(("auto", "none", "required")) | named


def chat_requests() -> st.SearchStrategy[ChatRequest]:
    """A [`ChatRequest`][amplifier_anyio.ChatRequest] with a few messages and every optional setting
    sometimes set."""
    return st.builds(
        ChatRequest,
        messages=st.lists(messages(), max_size=4),
        tools=_optional(st.lists(tool_specs(), max_size=3)),
        model=_optional(_identifiers()),
        temperature=_optional(st.floats(min_value=0.0, max_value=2.0)),
        top_p=_optional(st.floats(min_value=0.0, max_value=1.0)),
        max_output_tokens=_optional(st.integers(min_value=1, max_value=10**6)),
        tool_choice=_tool_choices(),
        reasoning_effort=_optional(st.sampled_from(("low", "medium", "high"))),
        response_format=_optional(st.just({"type": "json_object"})),
        stop=_optional(st.lists(_short_text(8), max_size=3)),
        stream=st.booleans(),
        conversation_id=_optional(_identifiers()),
        timeout=_optional(st.floats(min_value=0.001, max_value=3600.0)),
        metadata=_optional(json_objects()),
    )


def chat_responses() -> st.SearchStrategy[ChatResponse]:
    """A [`ChatResponse`][amplifier_anyio.ChatResponse]: any blocks, maybe tool calls, usage and a
    finish reason."""
    return st.builds(
        ChatResponse,
        content=st.lists(content_blocks(), max_size=4),
        tool_calls=_optional(st.lists(tool_calls(), max_size=3)),
        usage=_optional(usages()),
        finish_reason=_optional(
            st.sampled_from(("stop", "tool_calls", "length", "content_filter")) | _identifiers()
        ),
        metadata=_optional(json_objects()),
    )


def _errors() -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {}, optional={"message": _short_text(), "type": _identifiers(), "code": _counts()}
    )


def tool_results() -> st.SearchStrategy[ToolResult]:
    """A [`ToolResult`][amplifier_anyio.ToolResult], successful or not, with any JSON output (or
    none)."""
    return st.builds(
        ToolResult,
        success=st.booleans(),
        output=json_values(),
        error=_optional(_errors()),
    )


def hook_results() -> st.SearchStrategy[HookResult]:
    """A [`HookResult`][amplifier_anyio.HookResult] of any action, with the other fields drawn
    independently."""

    def closed(field: str) -> st.SearchStrategy[Any]:
        return st.sampled_from(_closed_values(HookResult, field))

    return st.builds(
        HookResult,
        action=closed("action"),
        data=_optional(json_objects()),
        reason=_optional(_short_text()),
        context_injection=_optional(_short_text()),
        context_injection_role=closed("context_injection_role"),
        ephemeral=st.booleans(),
        approval_prompt=_optional(_short_text()),
        approval_options=_optional(st.lists(_short_text(12), max_size=3)),
        approval_timeout=st.floats(min_value=0.0, max_value=86_400.0),
        approval_default=closed("approval_default"),
        suppress_output=st.booleans(),
        user_message=_optional(_short_text()),
        user_message_level=closed("user_message_level"),
        user_message_source=_optional(_identifiers()),
        append_to_last_tool_result=st.booleans(),
        priority=st.integers(min_value=-1000, max_value=1000),
    )


def context_injections() -> st.SearchStrategy[ContextInjection]:
    """A [`ContextInjection`][amplifier_anyio.models.ContextInjection] as the coordinator records
    one."""
    return st.builds(
        ContextInjection,
        content=_short_text(),
        role=st.sampled_from(_closed_values(ContextInjection, "role")),
        ephemeral=st.booleans(),
        append_to_last_tool_result=st.booleans(),
        hook_name=_identifiers(),
        event=st.sampled_from(("", "prompt:submit", "tool:pre", "tool:post")),
    )


def _budgets() -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {},
        optional={
            "context_window": st.integers(min_value=1_000, max_value=2_000_000),
            "max_output_tokens": st.integers(min_value=1, max_value=100_000),
            "model": _identifiers(),
        },
    )


def _name_lists(chars: str = _IDENT_CHARS) -> st.SearchStrategy[tuple[str, ...]]:
    names = st.text(alphabet=chars, min_size=1, max_size=16)
    return st.lists(names, max_size=3, unique=True).map(tuple)


def provider_infos() -> st.SearchStrategy[ProviderInfo]:
    """A [`ProviderInfo`][amplifier_anyio.models.ProviderInfo]; ``defaults`` sometimes holds the
    budget keys."""
    return st.builds(
        ProviderInfo,
        id=_identifiers(),
        display_name=_short_text(),
        credential_env_vars=_name_lists(_ENV_CHARS),
        capabilities=_name_lists(),
        defaults=_budgets(),
    )


def model_infos() -> st.SearchStrategy[ModelInfo]:
    """A [`ModelInfo`][amplifier_anyio.models.ModelInfo] with positive window and output sizes."""
    return st.builds(
        ModelInfo,
        id=_identifiers(),
        display_name=_short_text(),
        context_window=st.integers(min_value=1, max_value=2_000_000),
        max_output_tokens=st.integers(min_value=1, max_value=200_000),
        capabilities=_name_lists(),
        defaults=_budgets(),
    )


def module_infos() -> st.SearchStrategy[ModuleInfo]:
    """A [`ModuleInfo`][amplifier_anyio.models.ModuleInfo] of any module type."""
    return st.builds(
        ModuleInfo,
        id=_identifiers(),
        name=_short_text(),
        version=st.lists(st.integers(0, 99), min_size=3, max_size=3).map(
            lambda parts: ".".join(map(str, parts))
        ),
        type=st.sampled_from(_closed_values(ModuleInfo, "type")),
        mount_point=st.sampled_from(("orchestrator", "context", "providers", "tools", "hooks")),
        description=_short_text(),
        config_schema=_optional(_json_schemas()),
    )


def models() -> st.SearchStrategy[Any]:
    """An instance of any model: a block, message, request, response, result or info."""
    return st.one_of(
        content_blocks(),
        tool_calls(),
        tool_specs(),
        messages(),
        usages(),
        chat_requests(),
        chat_responses(),
        tool_results(),
        hook_results(),
        context_injections(),
        provider_infos(),
        model_infos(),
        module_infos(),
    )


def message_dicts() -> st.SearchStrategy[dict[str, Any]]:
    """One unstructured message: the dict [`unstructure`][amplifier_anyio.unstructure] gives."""
    return messages().map(unstructure)


# Sizes in three bands, so a token budget sees tiny, medium and large messages alike.
_SIZES = st.one_of(
    st.integers(min_value=0, max_value=40),
    st.integers(min_value=41, max_value=400),
    st.integers(min_value=401, max_value=4000),
)


@st.composite
def _sized_text(draw: st.DrawFn) -> str:
    # A drawn seed repeated to a drawn length: big texts without drawing thousands of
    # characters one by one, which would make every example slow.
    size = draw(_SIZES)
    seed = draw(st.text(min_size=1, max_size=8))
    return (seed * (size // len(seed) + 1))[:size]


def _arguments() -> st.SearchStrategy[dict[str, Any]]:
    # Flat and cheap: a conversation holds dozens of calls, and nested JSON in each one
    # made drawing a conversation ten times slower without finding anything new.
    values = st.integers(min_value=-_MAX_INT, max_value=_MAX_INT) | _identifiers() | st.booleans()
    return st.dictionaries(_identifiers(12), values, max_size=3)


def _chance(draw: st.DrawFn, one_in: int) -> bool:
    return draw(st.integers(min_value=0, max_value=one_in - 1)) == 0


@st.composite
def _tool_round(draw: st.DrawFn, first_id: int, max_tool_calls: int) -> list[dict[str, Any]]:
    count = draw(st.integers(min_value=1, max_value=max_tool_calls))
    calls: list[dict[str, Any]] = [
        {
            "id": f"call_{first_id + i}",
            "name": draw(_identifiers(16)),
            "arguments": draw(_arguments()),
        }
        for i in range(count)
    ]
    text = draw(_sized_text()) if _chance(draw, 3) else ""
    round_: list[dict[str, Any]] = [{"role": "assistant", "content": text, "tool_calls": calls}]
    round_ += [
        {"role": "tool", "tool_call_id": call["id"], "content": draw(_sized_text())}
        for call in calls
    ]
    return round_


@st.composite
def _conversations(
    draw: st.DrawFn, min_turns: int, max_turns: int, max_tool_calls: int
) -> list[dict[str, Any]]:
    history: list[dict[str, Any]] = []
    if draw(st.booleans()):
        history.append({"role": "system", "content": draw(_sized_text())})
    next_id = 0
    for turn in range(draw(st.integers(min_value=min_turns, max_value=max_turns))):
        if turn and _chance(draw, 6):
            history.append({"role": "system", "content": draw(_sized_text())})
        history.append({"role": "user", "content": draw(_sized_text())})
        for _ in range(draw(st.integers(min_value=0, max_value=3))):
            round_ = draw(_tool_round(next_id, max_tool_calls))
            next_id += len(round_) - 1
            history += round_
        # Most turns end with the model's answer; some stop short, as an interrupted turn does.
        if not _chance(draw, 5):
            history.append({"role": "assistant", "content": draw(_sized_text())})
    return history


def conversations(
    *, min_turns: int = 0, max_turns: int = 8, max_tool_calls: int = 8
) -> st.SearchStrategy[list[dict[str, Any]]]:
    """A whole history of message dicts, as a context manager stores it.

    An optional leading system message, then ``min_turns`` to ``max_turns`` turns. A
    turn is a user message (sometimes preceded by another system message), zero to three
    assistant messages with 1 to ``max_tool_calls`` ``tool_calls`` each, and usually a
    final plain assistant answer. Each tool call (``{"id", "name", "arguments"}``, ids
    unique in the whole conversation) is answered by exactly one
    ``{"role": "tool", "tool_call_id": id, "content": str}`` right after its assistant
    message, in call order. Content lengths range from 0 to 4000 characters. Every dict
    structures into a [`Message`][amplifier_anyio.Message].
    """
    if min_turns < 0 or max_turns < min_turns:
        msg = f"need 0 <= min_turns <= max_turns, got {min_turns=}, {max_turns=}"
        raise InvalidArgument(msg)
    if max_tool_calls < 1:
        msg = f"max_tool_calls must be at least 1, got {max_tool_calls}"
        raise InvalidArgument(msg)
    return _conversations(min_turns, max_turns, max_tool_calls)
