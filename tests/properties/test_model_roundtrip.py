"""Every model survives unstructure -> JSON -> structure, and conversations are valid."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis.errors import InvalidArgument
from hypothesis.strategies import SearchStrategy

from amplifier_anyio import models as m
from amplifier_anyio.models import Message, structure, unstructure
from amplifier_anyio.testing import strategies as ast
from tiers import examples

# strategy name -> (strategy, the model it draws)
MODEL_STRATEGIES: dict[str, tuple[Callable[[], SearchStrategy[Any]], type]] = {
    "text_blocks": (ast.text_blocks, m.TextBlock),
    "thinking_blocks": (ast.thinking_blocks, m.ThinkingBlock),
    "redacted_thinking_blocks": (ast.redacted_thinking_blocks, m.RedactedThinkingBlock),
    "tool_call_blocks": (ast.tool_call_blocks, m.ToolCallBlock),
    "tool_result_blocks": (ast.tool_result_blocks, m.ToolResultBlock),
    "image_blocks": (ast.image_blocks, m.ImageBlock),
    "reasoning_blocks": (ast.reasoning_blocks, m.ReasoningBlock),
    "provider_blocks": (ast.provider_blocks, m.ProviderBlock),
    "tool_calls": (ast.tool_calls, m.ToolCall),
    "tool_specs": (ast.tool_specs, m.ToolSpec),
    "messages": (ast.messages, m.Message),
    "usages": (ast.usages, m.Usage),
    "prices": (ast.prices, m.Price),
    "price_tables": (ast.price_tables, m.PriceTable),
    "chat_requests": (ast.chat_requests, m.ChatRequest),
    "chat_responses": (ast.chat_responses, m.ChatResponse),
    "tool_results": (ast.tool_results, m.ToolResult),
    "hook_results": (ast.hook_results, m.HookResult),
    "context_injections": (ast.context_injections, m.ContextInjection),
    "provider_infos": (ast.provider_infos, m.ProviderInfo),
    "model_infos": (ast.model_infos, m.ModelInfo),
    "module_infos": (ast.module_infos, m.ModuleInfo),
}


def test_every_model_has_a_strategy() -> None:
    # A model added to amplifier_anyio.models without a strategy would escape the round trip.
    model_classes = {
        obj for name in m.__all__ if isinstance(obj := getattr(m, name), type) and attrs.has(obj)
    }
    assert model_classes == {cls for _, cls in MODEL_STRATEGIES.values()}


@pytest.mark.parametrize("name", sorted(MODEL_STRATEGIES))
def test_round_trip_through_json(name: str) -> None:
    strategy, cls = MODEL_STRATEGIES[name]

    @given(strategy())
    def check(model: Any) -> None:
        assert type(model) is cls
        wire = json.loads(json.dumps(unstructure(model), allow_nan=False))
        assert structure(wire, cls) == model

    check()


@given(ast.models())
def test_any_model_round_trips_without_json(model: Any) -> None:
    assert structure(unstructure(model), type(model)) == model


@given(ast.content_blocks())
def test_unstructured_block_carries_its_type_tag(block: Any) -> None:
    assert unstructure(block)["type"] == type(block).type


@given(ast.message_dicts())
def test_message_dicts_are_json_and_structure(data: dict[str, Any]) -> None:
    json.dumps(data, allow_nan=False)
    assert unstructure(structure(data, Message)) == data


def _check_tool_pairs(conversation: list[dict[str, Any]]) -> None:
    seen: set[str] = set()
    i = 0
    while i < len(conversation):
        data = conversation[i]
        assert data["role"] != "tool", f"message {i}: a tool result with no call right before it"
        calls = data.get("tool_calls") or []
        assert not calls or data["role"] == "assistant"
        answers = conversation[i + 1 : i + 1 + len(calls)]
        assert [a["role"] for a in answers] == ["tool"] * len(calls)
        assert [a["tool_call_id"] for a in answers] == [c["id"] for c in calls]
        assert all(set(a) == {"role", "tool_call_id", "content"} for a in answers)
        assert all(set(c) == {"id", "name", "arguments"} for c in calls)
        ids = [c["id"] for c in calls]
        assert len(set(ids)) == len(ids)
        assert not seen.intersection(ids)
        seen.update(ids)
        i += 1 + len(calls)


@settings(max_examples=examples(50))  # each example is a history of ~40 messages
@given(ast.conversations())
def test_conversations_are_valid_histories(conversation: list[dict[str, Any]]) -> None:
    json.dumps(conversation, allow_nan=False)
    for data in conversation:
        structure(data, Message)
    _check_tool_pairs(conversation)


@given(ast.conversations(min_turns=2, max_turns=3, max_tool_calls=2))
def test_conversation_shape_honours_its_arguments(conversation: list[dict[str, Any]]) -> None:
    users = [d for d in conversation if d["role"] == "user"]
    assert 2 <= len(users) <= 3
    assert all(len(d.get("tool_calls") or ()) <= 2 for d in conversation)
    first_non_system = next(d for d in conversation if d["role"] != "system")
    assert first_non_system["role"] == "user"


def test_conversations_reach_big_and_small_contents() -> None:
    lengths: list[int] = []

    @settings(max_examples=30, database=None)  # enough draws to reach both ends
    @given(ast.conversations())
    def collect(conversation: list[dict[str, Any]]) -> None:
        lengths.extend(len(d["content"]) for d in conversation)

    collect()
    assert min(lengths) == 0
    assert max(lengths) >= 2000


@pytest.mark.parametrize(
    "kwargs", [{"min_turns": -1}, {"min_turns": 3, "max_turns": 2}, {"max_tool_calls": 0}]
)
def test_conversations_reject_bad_arguments(kwargs: dict[str, int]) -> None:
    with pytest.raises(InvalidArgument):
        ast.conversations(**kwargs)


def test_documented_example_runs() -> None:
    # docs/testing-strategies.md promises a working example; run its first python block.
    doc = Path(__file__).parents[2] / "docs" / "testing-strategies.md"
    block = re.search(r"```python\n(.*?)```", doc.read_text(encoding="utf-8"), re.S)
    assert block is not None
    namespace: dict[str, Any] = {"__name__": "docs_example"}
    exec(compile(block.group(1), str(doc), "exec"), namespace)
    tests = [f for name, f in namespace.items() if name.startswith("test_") and callable(f)]
    assert tests
    for test in tests:
        test()
