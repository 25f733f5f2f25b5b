"""The OpenAI Responses API's wire shapes, written from the ``openai`` SDK's own types.

Test-only (``openai`` is a test dependency; ``src/`` never imports it):

- `validate_request` checks a request body against ``openai.types.responses`` params (the
  shapes through pydantic, and no key the params do not name, top level and per item);
- `response_body` builds a ``response`` object through the SDK's ``Response`` model;
- `stream_events` writes the event sequence a server streams for a response, every event
  validated as a ``ResponseStreamEvent``; `sse` frames them;
- `sdk_final` runs the SDK's own stream accumulator over the events.
"""

from __future__ import annotations

import json
import typing
from collections.abc import Iterable, Sequence
from typing import Any

import pydantic
from openai import omit
from openai.lib.streaming.responses._responses import ResponseStreamState
from openai.types.responses import (
    FunctionToolParam,
    Response,
    ResponseInputItemParam,
    ResponseStreamEvent,
    response_create_params,
)
from openai.types.responses.easy_input_message_param import EasyInputMessageParam

_EVENTS = pydantic.TypeAdapter(ResponseStreamEvent)
_STREAMING = pydantic.TypeAdapter(response_create_params.ResponseCreateParamsStreaming)
_PLAIN = pydantic.TypeAdapter(response_create_params.ResponseCreateParamsNonStreaming)


def _keys(cls: Any) -> set[str]:
    return set(typing.get_type_hints(cls))


def _item_kinds() -> dict[str, set[str]]:
    """The keys each input item ``type`` may carry (a union of the params of that type)."""
    kinds: dict[str, set[str]] = {}
    for cls in (*typing.get_args(ResponseInputItemParam), EasyInputMessageParam):
        hints = typing.get_type_hints(cls)
        kind = hints.get("type")
        for literal in typing.get_args(kind):  # Required[Literal[...]] or Literal[...]
            for value in typing.get_args(literal) or (literal,):
                kinds.setdefault(value, set()).update(hints)
    return kinds


_ITEM_KEYS = _item_kinds()


def validate_request(body: dict[str, Any]) -> None:
    """Raise when ``body`` is not a valid ``responses.create`` body."""
    streaming = bool(body.get("stream"))
    params = (
        response_create_params.ResponseCreateParamsStreaming
        if streaming
        else response_create_params.ResponseCreateParamsNonStreaming
    )
    extra = set(body) - _keys(params)
    assert not extra, f"keys the SDK's params do not have: {sorted(extra)}"
    for item in body.get("input") or []:
        allowed = _ITEM_KEYS.get(item.get("type", "message"))
        assert allowed is not None, f"unknown input item type {item.get('type')!r}"
        assert set(item) <= allowed, f"{item.get('type')}: unknown keys {set(item) - allowed}"
    for tool in body.get("tools") or []:
        assert set(tool) <= _keys(FunctionToolParam), f"tool keys {set(tool)}"
    (_STREAMING if streaming else _PLAIN).validate_python(body)


def response_body(
    output: list[dict[str, Any]],
    *,
    status: str = "completed",
    usage: dict[str, Any] | None = None,
    response_id: str = "resp_1",
    model: str = "gpt-5-2026-06-01",
    **extra: Any,
) -> dict[str, Any]:
    """A ``response`` object, validated by the SDK's ``Response``, as JSON."""
    data = {
        "id": response_id,
        "object": "response",
        "created_at": 1_780_000_000,
        "model": model,
        "status": status,
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": usage
        or {
            "input_tokens": 120,
            "input_tokens_details": {"cached_tokens": 100, "cache_write_tokens": 0},
            "output_tokens": 30,
            "output_tokens_details": {"reasoning_tokens": 12},
            "total_tokens": 150,
        },
        **extra,
    }
    return Response.model_validate(data).model_dump(mode="json", exclude_unset=True)


def message(text: str, item_id: str = "msg_1") -> dict[str, Any]:
    return {
        "type": "message",
        "id": item_id,
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def reasoning(
    summary: str, item_id: str = "rs_1", encrypted: str | None = "gAAAA-enc"
) -> dict[str, Any]:
    item: dict[str, Any] = {
        "type": "reasoning",
        "id": item_id,
        "summary": [{"type": "summary_text", "text": summary}] if summary else [],
    }
    if encrypted is not None:
        item["encrypted_content"] = encrypted
    return item


def function_call(call_id: str, name: str, arguments: str, item_id: str = "") -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": item_id or f"fc_{call_id}",
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": "completed",
    }


def _pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or []


def stream_events(
    body: dict[str, Any], *, piece: int = 4, final_output: bool = True
) -> list[dict[str, Any]]:
    """The events a server streams for the response ``body``, in order, each validated as
    a ``ResponseStreamEvent``: created, each item added / its deltas / done, completed
    (with the output; ``final_output`` false drops it after validation, as some
    compatible servers send it: the SDK's types require it)."""
    seq = iter(range(10_000))
    started = {**body, "status": "in_progress", "output": [], "usage": None}
    events: list[dict[str, Any]] = [
        {"type": "response.created", "sequence_number": next(seq), "response": started},
        {"type": "response.in_progress", "sequence_number": next(seq), "response": started},
    ]
    for index, item in enumerate(body["output"]):
        events += _item_events(index, item, seq, piece)
    kind = "response.completed" if body["status"] == "completed" else f"response.{body['status']}"
    events.append({"type": kind, "sequence_number": next(seq), "response": body})
    written = [
        _EVENTS.validate_python(e).model_dump(mode="json", exclude_unset=True) for e in events
    ]
    if not final_output:
        written[-1]["response"].pop("output")
    return written


def _item_events(index: int, item: dict[str, Any], seq: Any, piece: int) -> list[dict[str, Any]]:
    kind = item["type"]
    base = {"output_index": index, "item_id": item["id"]}

    def event(name: str, /, **fields: Any) -> dict[str, Any]:
        return {"type": f"response.{name}", "sequence_number": next(seq), **fields}

    if kind == "message":
        added = {**item, "status": "in_progress", "content": []}
    elif kind == "reasoning":
        added = {**item, "summary": []}
    elif kind == "function_call":
        added = {**item, "status": "in_progress", "arguments": ""}
    else:
        added = item
    events = [event("output_item.added", output_index=index, item=added)]
    if kind == "message":
        for c, part in enumerate(item["content"]):
            empty = {**part, "text": ""}
            events.append(event("content_part.added", content_index=c, part=empty, **base))
            events.extend(
                event("output_text.delta", content_index=c, delta=d, logprobs=[], **base)
                for d in _pieces(part["text"], piece)
            )
            done = {"text": part["text"], "logprobs": []}
            events.append(event("output_text.done", content_index=c, **done, **base))
            events.append(event("content_part.done", content_index=c, part=part, **base))
    elif kind == "reasoning":
        for s, part in enumerate(item["summary"]):
            events.extend(
                event("reasoning_summary_text.delta", summary_index=s, delta=d, **base)
                for d in _pieces(part["text"], piece)
            )
    elif kind == "function_call":
        events.extend(
            event("function_call_arguments.delta", delta=d, **base)
            for d in _pieces(item["arguments"], piece)
        )
        done = {"arguments": item["arguments"], "name": item["name"]}
        events.append(event("function_call_arguments.done", **done, **base))
    events.append(event("output_item.done", output_index=index, item=item))
    return events


def sse(events: Iterable[dict[str, Any]]) -> bytes:
    """The events framed as a server sends them (``event:`` line and ``data:`` line)."""
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events).encode()


def sdk_final(events: Sequence[dict[str, Any]]) -> Response:
    """The response the SDK's own accumulator builds from ``events``."""
    state: ResponseStreamState[Any] = ResponseStreamState(input_tools=omit, text_format=omit)
    final: Response | None = None
    for data in events:
        for event in state.handle_event(_EVENTS.validate_python(data)):
            if event.type == "response.completed":
                final = event.response
    assert final is not None, "the SDK saw no response.completed"
    return final


def sdk_reasoning(response: Response) -> list[str]:
    """The summary texts of the reasoning items, as the SDK holds them."""
    return [
        part.text for item in response.output if item.type == "reasoning" for part in item.summary
    ]


def sdk_calls(response: Response) -> list[tuple[str, str, Any]]:
    """(call_id, name, decoded arguments) of the function calls, as the SDK holds them."""
    return [
        (item.call_id, item.name, json.loads(item.arguments))
        for item in response.output
        if item.type == "function_call"
    ]
