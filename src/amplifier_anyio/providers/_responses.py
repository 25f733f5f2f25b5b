"""The OpenAI Responses API's wire format: input items, output items, stream events.

provider-openai speaks it with ``api: responses`` (see `amplifier_anyio.providers.openai`).
The shapes follow the ``openai`` SDK's ``openai.types.responses`` (the tests validate our
request bodies against them); nothing here imports the SDK.

Our history maps onto input items in order: the leading system messages become
``instructions``; user, developer and later system messages become messages; an assistant
message becomes its items in the order of its blocks — a reasoning item
(`ReasoningBlock`, sent back unchanged when it can be: it has encrypted
content, or the server stores responses), the text as an assistant message, each call as
a ``function_call``, other output items (`ProviderBlock` of ``openai``) verbatim; a tool
result becomes a ``function_call_output``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from typing import Any, Final

from ..errors import LLMError
from ..models import (
    ChatResponse,
    ContentBlock,
    ImageBlock,
    Message,
    ProviderBlock,
    ReasoningBlock,
    TextBlock,
    ToolCall,
    ToolCallBlock,
    ToolResultBlock,
    ToolSpec,
    Usage,
    structure,
)
from ._base import decode_stream_object, malformed_guard, text_field
from ._http import (
    TRUNCATING_FINISH_REASONS,
    decode_tool_arguments,
    drain,
    encode_tool_arguments,
    error_from_payload,
    tool_output_text,
    truncated_arguments,
)
from ._sse import SSEEvent

__all__ = (
    "PROVIDER_ID",
    "to_responses_input",
    "responses_tool",
    "responses_tool_choice",
    "responses_text_format",
    "parse_response",
    "parse_responses_usage",
    "responses_stream_events",
)

PROVIDER_ID: Final = "openai"
"""The ``provider`` of the `ProviderBlock` items we keep verbatim."""

_CHOICES: Final = ("auto", "none", "required")
_INCOMPLETE: Final = {"max_output_tokens": "length", "content_filter": "content_filter"}


# -- request -------------------------------------------------------------------------------


def to_responses_input(
    messages: list[Message] | list[dict[str, Any]], *, resend_reasoning: bool
) -> tuple[str, list[dict[str, Any]]]:
    """(instructions, input items) for our messages (models or plain dicts).

    ``resend_reasoning``: a reasoning item without encrypted content is sent back by its
    id alone, which only a server that stored the response can resolve (``store``).
    """
    items: list[dict[str, Any]] = []
    leading: list[str] = []
    for entry in messages:
        message = entry if isinstance(entry, Message) else structure(entry, Message)
        if message.role == "system" and not items:
            leading.append(_text_of(message.content))
        elif message.role == "assistant":
            items += _assistant_items(message, resend_reasoning)
        elif message.role == "tool":
            items.append(_call_output(message.tool_call_id or "", message.content))
        else:
            items += _plain_items(message)
    return "\n\n".join(t for t in leading if t), items


def _text_of(content: str | list[ContentBlock]) -> str:
    if isinstance(content, str):
        return content
    return "\n\n".join(b.text for b in content if isinstance(b, TextBlock) and b.text)


def _plain_items(message: Message) -> list[dict[str, Any]]:
    """A user, developer or (later) system message; tool_result blocks become outputs."""
    if isinstance(message.content, str):
        return [{"type": "message", "role": message.role, "content": message.content}]
    outputs = [
        _call_output(b.tool_call_id, b.output)
        for b in message.content
        if isinstance(b, ToolResultBlock)
    ]
    parts: list[dict[str, Any]] = []
    for block in message.content:
        if isinstance(block, TextBlock) and block.text:
            parts.append({"type": "input_text", "text": block.text})
        elif isinstance(block, ImageBlock):
            parts.append({"type": "input_image", "image_url": _image_url(block), "detail": "auto"})
    if not parts:
        return outputs
    return [*outputs, {"type": "message", "role": message.role, "content": parts}]


def _image_url(block: ImageBlock) -> str:
    source = block.source
    if source.get("type") == "base64":
        return f"data:{source.get('media_type', 'image/png')};base64,{source.get('data', '')}"
    return str(source.get("url", ""))


def _assistant_items(message: Message, resend_reasoning: bool) -> list[dict[str, Any]]:
    """An assistant message's items in the order of its blocks; then calls that are only
    in ``tool_calls``. Thinking blocks (another provider's) are not sent."""
    content = (
        [TextBlock(text=message.content)] if isinstance(message.content, str) else message.content
    )
    items: list[dict[str, Any]] = []
    seen: set[str] = set()
    text: list[str] = []

    def flush_text() -> None:
        if text:
            items.append({"type": "message", "role": "assistant", "content": "".join(text)})
            text.clear()

    for block in content:
        if isinstance(block, TextBlock):
            if block.text:
                text.append(block.text)
            continue
        if isinstance(block, ReasoningBlock):
            item = _reasoning_item(block, resend_reasoning)
        elif isinstance(block, ToolCallBlock) and block.id not in seen:
            seen.add(block.id)
            item = _function_call(block.id, block.name, block.input)
        elif isinstance(block, ProviderBlock) and block.provider == PROVIDER_ID:
            item = dict(block.data)
        else:
            continue
        if item is not None:
            flush_text()
            items.append(item)
    flush_text()
    for call in message.tool_calls or []:
        if call.id not in seen:
            seen.add(call.id)
            items.append(_function_call(call.id, call.name, call.arguments))
    return items


def _reasoning_item(block: ReasoningBlock, resend: bool) -> dict[str, Any] | None:
    """The reasoning item to send back, or None when the server could not resolve it."""
    if not block.id or not (block.encrypted_content or resend):
        return None
    item: dict[str, Any] = {"type": "reasoning", "id": block.id, "summary": list(block.summary)}
    if block.encrypted_content:
        item["encrypted_content"] = block.encrypted_content
    return item


def _function_call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    text = encode_tool_arguments(arguments)
    return {"type": "function_call", "call_id": call_id, "name": name, "arguments": text}


def _call_output(call_id: str, output: Any) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id, "output": tool_output_text(output)}


def responses_tool(tool: ToolSpec) -> dict[str, Any]:
    """A function tool. ``strict`` is off: our tools' schemas are not written for it."""
    wire: dict[str, Any] = {
        "type": "function",
        "name": tool.name,
        "parameters": tool.parameters or {"type": "object", "properties": {}},
        "strict": False,
    }
    if tool.description:
        wire["description"] = tool.description
    return wire


def responses_tool_choice(choice: str | dict[str, Any]) -> str | dict[str, Any]:
    """``auto`` / ``none`` / ``required``, a tool's name, or a Chat Completions choice."""
    if isinstance(choice, dict):
        function = choice.get("function")
        if choice.get("type") == "function" and isinstance(function, dict):
            return {"type": "function", "name": function.get("name", "")}
        return choice
    if choice in _CHOICES:
        return choice
    return {"type": "function", "name": choice}


def responses_text_format(response_format: dict[str, Any]) -> dict[str, Any]:
    """A Chat Completions ``response_format`` as the Responses ``text.format``."""
    if response_format.get("type") == "json_schema" and "json_schema" in response_format:
        return {"type": "json_schema", **response_format["json_schema"]}
    return dict(response_format)


# -- response ------------------------------------------------------------------------------


def parse_responses_usage(usage: Mapping[str, Any] | None) -> Usage | None:
    """Responses usage: input (cached included), output (reasoning included), the split."""
    if not usage:
        return None
    prompt = int(usage.get("input_tokens") or 0)
    output = int(usage.get("output_tokens") or 0)
    details = usage.get("input_tokens_details") or {}
    out_details = usage.get("output_tokens_details") or {}
    return Usage(
        input_tokens=prompt,
        output_tokens=output,
        total_tokens=int(usage.get("total_tokens") or prompt + output),
        reasoning_tokens=out_details.get("reasoning_tokens"),
        cache_read_tokens=details.get("cached_tokens"),
        cache_write_tokens=details.get("cache_write_tokens"),
    )


_CODE_STATUS: Final = {
    "server_error": 500,
    "rate_limit_exceeded": 429,
    "vector_store_timeout": 504,
}
"""The failure codes that mean what an HTTP status would (the rest are bad requests)."""


def _failure(body: Mapping[str, Any], *, provider: str, model: str | None) -> LLMError:
    """The error of a ``failed`` response or an ``error`` event, classified by its code
    as the same failure over HTTP would be (a rate limit stays retryable)."""
    error = body.get("error") or {}
    code = str(error.get("code") or "")
    payload = {
        "error": {
            "message": error.get("message") or "the response failed",
            "code": code,
            "type": error.get("type") or code,
        }
    }
    status = _CODE_STATUS.get(code, 400 if code else None)
    return error_from_payload(
        payload, provider=provider, model=model, status_code=status, event=True
    )


def _item_blocks(item: Mapping[str, Any]) -> tuple[list[ContentBlock], bool]:
    """The blocks of one output item, and whether it was a refusal."""
    kind = item.get("type")
    if kind == "message":
        refused = False
        parts: list[str] = []
        for part in item.get("content") or []:
            if part.get("type") == "output_text":
                parts.append(text_field(part.get("text"), "output_text"))
            elif part.get("type") == "refusal":
                parts.append(text_field(part.get("refusal"), "refusal"))
                refused = True
        text = "".join(parts)
        return ([TextBlock(text=text)] if text else []), refused
    if kind == "reasoning":
        block = ReasoningBlock(
            id=text_field(item.get("id"), "a reasoning id") or None,
            summary=[dict(p) for p in item.get("summary") or []],
            content=[dict(p) for p in item.get("content") or []],
            encrypted_content=text_field(item.get("encrypted_content"), "encrypted_content")
            or None,
            visibility="internal",
        )
        return [block], False
    if kind == "function_call":
        call = ToolCallBlock(
            id=text_field(item.get("call_id"), "a function_call's call_id"),
            name=text_field(item.get("name"), "a function_call's name"),
            input=decode_tool_arguments(item.get("arguments")),
        )
        return [call], False
    if not isinstance(kind, str):
        raise TypeError(f"an output item's type is {type(kind).__name__}, not a string")
    # built-in tools' items (web_search_call…) are not ours to interpret: kept, sent back
    return [ProviderBlock(provider=PROVIDER_ID, data=dict(item))], False


def _finish(
    status: Any, incomplete: Mapping[str, Any] | None, *, calls: bool, refused: bool
) -> str | None:
    if status == "incomplete":
        reason = str((incomplete or {}).get("reason") or "incomplete")
        return _INCOMPLETE.get(reason, reason)
    if refused:
        return "refusal"
    if calls:
        return "tool_calls"
    return "stop" if status in ("completed", None) else str(status)


def _response_of(
    items: list[Mapping[str, Any]], body: Mapping[str, Any], raw_arguments: str | None = None
) -> ChatResponse:
    content: list[ContentBlock] = []
    refused = False
    for item in items:
        blocks, refusal = _item_blocks(item)
        content += blocks
        refused = refused or refusal
    calls = [b for b in content if isinstance(b, ToolCallBlock)]
    finish = _finish(
        body.get("status"), body.get("incomplete_details"), calls=bool(calls), refused=refused
    )
    if calls and finish in TRUNCATING_FINISH_REASONS:
        last = calls[-1]
        raw = raw_arguments if raw_arguments is not None else json.dumps(last.input)
        marked = ToolCallBlock(id=last.id, name=last.name, input=truncated_arguments(raw, finish))
        content[content.index(last)] = marked
        calls[-1] = marked
    meta = {k: body[s] for k, s in (("response_id", "id"), ("model", "model")) if body.get(s)}
    if body.get("prompt_cache_diagnostics"):
        meta["prompt_cache_diagnostics"] = dict(body["prompt_cache_diagnostics"])
    return ChatResponse(
        content=content,
        tool_calls=[ToolCall(id=c.id, name=c.name, arguments=c.input) for c in calls] or None,
        usage=parse_responses_usage(body.get("usage")),
        finish_reason=finish,
        metadata=meta or None,
    )


def parse_response(
    body: Mapping[str, Any], *, provider: str = PROVIDER_ID, model: str | None = None
) -> ChatResponse:
    """A ``response`` object as our ChatResponse; a ``failed`` one raises its error mapped
    to the [`LLMError`][amplifier_anyio.LLMError] taxonomy.

    Finish reasons: ``stop``, ``tool_calls``, ``refusal``, ``length`` (incomplete:
    ``max_output_tokens``; the last call, if cut, carries the truncation marker) and
    ``content_filter``.
    """
    if not isinstance(body, Mapping):
        raise TypeError(f"the body is {type(body).__name__}, not an object")
    if body.get("status") == "failed" or body.get("error"):
        raise _failure(body, provider=provider, model=model)
    output = body.get("output")
    if not isinstance(output, list):
        raise TypeError(f"output is {type(output).__name__}, not a list")
    return _response_of(output, body)


# -- streaming -----------------------------------------------------------------------------

_KINDS: Final = {"message": "text", "reasoning": "thinking", "function_call": "tool_call"}
_TERMINAL: Final = ("response.completed", "response.incomplete")


class _StreamState:
    """The output items as the events build them, by ``output_index``."""

    def __init__(self) -> None:
        self.ours: dict[int, int] = {}  # output_index -> our block index
        self.items: dict[int, dict[str, Any]] = {}  # as added, then as done
        self.done: set[int] = set()
        self.arguments: dict[int, list[str]] = {}
        self.texts: dict[int, list[str]] = {}
        self.final: Mapping[str, Any] | None = None

    def handle(self, data: Mapping[str, Any]) -> list[dict[str, Any]]:
        kind = data.get("type")
        if kind == "response.output_item.added":
            return self._added(int(data["output_index"]), dict(data.get("item") or {}))
        if kind == "response.output_item.done":
            return self._done(int(data["output_index"]), dict(data.get("item") or {}))
        if kind in ("response.output_text.delta", "response.refusal.delta"):
            return self._delta(data, "text", self.texts)
        if kind == "response.function_call_arguments.delta":
            return self._delta(data, "tool_call", self.arguments)
        if kind in ("response.reasoning_summary_text.delta", "response.reasoning_text.delta"):
            delta = text_field(data.get("delta"), "a reasoning delta")
            index = self.ours.get(int(data["output_index"]))
            if delta and index is not None:
                return [{"type": "thinking:delta", "index": index, "delta": delta}]
        elif kind in _TERMINAL:
            self.final = dict(data.get("response") or {})
        return []

    def _added(self, output_index: int, item: dict[str, Any]) -> list[dict[str, Any]]:
        index = len(self.ours)
        self.ours[output_index] = index
        self.items[output_index] = item
        kind = str(item.get("type"))
        event: dict[str, Any] = {
            "type": "content_block:start",
            "index": index,
            "block_type": _KINDS.get(kind, kind),
        }
        if kind == "function_call":
            event.update(id=item.get("call_id", ""), name=item.get("name", ""))
        return [event]

    def _delta(
        self, data: Mapping[str, Any], block_type: str, parts: dict[int, list[str]]
    ) -> list[dict[str, Any]]:
        output_index = int(data["output_index"])
        delta = text_field(data.get("delta"), "a delta")
        parts.setdefault(output_index, []).append(delta)
        index = self.ours.get(output_index)
        if not delta or index is None:
            return []
        event = {"type": "content_block:delta", "index": index, "block_type": block_type}
        if block_type == "tool_call":  # the call it builds, for a UI that shows it forming
            event["id"] = self.items[output_index].get("call_id", "")
        return [{**event, "delta": delta}]

    def _done(self, output_index: int, item: dict[str, Any]) -> list[dict[str, Any]]:
        if output_index not in self.ours:
            self._added(output_index, item)
        self.items[output_index] = item
        self.done.add(output_index)
        blocks, _ = _item_blocks(item)
        return [
            {"type": "content_block:end", "index": self.ours[output_index], "block": block}
            for block in blocks
        ]

    def _assembled(self, output_index: int) -> dict[str, Any]:
        """An item the stream never finished, from its deltas."""
        item = dict(self.items[output_index])
        if item.get("type") == "function_call":
            item["arguments"] = "".join(self.arguments.get(output_index, []))
        elif item.get("type") == "message":
            text = "".join(self.texts.get(output_index, []))
            item["content"] = [{"type": "output_text", "text": text}]
        return item

    def response(self) -> tuple[ChatResponse, list[dict[str, Any]]]:
        """The final response (the last event's output when it has one, as the SDK reads
        it, else the items as they were finished) and the end events of unfinished items."""
        final = self.final or {}
        ends: list[dict[str, Any]] = []
        for output_index in sorted(set(self.items) - self.done):
            ends += self._done(output_index, self._assembled(output_index))
        output = final.get("output")
        items = (
            output
            if isinstance(output, list) and output
            else [self.items[i] for i in sorted(self.items)]
        )
        calls = [i for i in sorted(self.items) if self.items[i].get("type") == "function_call"]
        raw = "".join(self.arguments.get(calls[-1], [])) if calls else None
        return _response_of(items, final, raw or None), ends


async def responses_stream_events(
    sse: AsyncIterator[SSEEvent], *, provider: str, model: str
) -> AsyncGenerator[dict[str, Any], None]:
    """Our stream events for a Responses event stream; the last is ``response``."""
    state = _StreamState()
    failure: LLMError | None = None
    async for event in sse:
        try:
            data = decode_stream_object(event.data, noun="event", provider=provider, model=model)
            kind = data.get("type")
            if kind == "error":
                raise _failure({"error": data}, provider=provider, model=model)
            if kind == "response.failed":
                raise _failure(data.get("response") or {}, provider=provider, model=model)
        except LLMError as exc:
            failure = exc
            break
        try:
            with malformed_guard(provider, model, "a stream event"):
                items = state.handle(data)
        except LLMError as exc:
            failure = exc
            break
        for item in items:
            yield item
        if state.final is not None:
            break
    await drain(sse)
    if failure is not None:
        raise failure
    if state.final is None:
        raise error_from_payload(
            {"error": {"message": "the stream ended before response.completed"}},
            provider=provider,
            model=model,
        )
    with malformed_guard(provider, model, "a stream"):
        response, ends = state.response()
    for item in [*ends, {"type": "response", "response": response}]:
        yield item
