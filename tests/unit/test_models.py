"""Model behaviour a user notices: readable errors, closed fields, ToolResult rules, tags."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import attrs
import pytest

from amplifier_anyio.errors import AmplifierError, ValidationError
from amplifier_anyio.models import (
    BLOCK_TYPES,
    ChatRequest,
    ChatResponse,
    ContextInjection,
    HookResult,
    ImageBlock,
    Message,
    ModelInfo,
    ModuleInfo,
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
    structure,
    unstructure,
)


def errors_of(data: Any, cls: type) -> tuple[str, ...]:
    with pytest.raises(ValidationError) as info:
        structure(data, cls)
    return info.value.errors


# --- readable validation errors -------------------------------------------------------


def test_validation_error_is_an_amplifier_value_error() -> None:
    assert issubclass(ValidationError, AmplifierError)
    assert issubclass(ValidationError, ValueError)


def test_unknown_block_type_names_index_and_tag() -> None:
    data = {"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "txt"}]}
    assert errors_of(data, Message) == ("content[1]: unknown block type 'txt'",)
    with pytest.raises(ValidationError, match=r"content\[1\]: unknown block type 'txt'"):
        structure(data, Message)


def test_block_without_type_or_not_an_object() -> None:
    assert errors_of({"role": "user", "content": [{"text": "x"}]}, Message) == (
        "content[0]: missing block type",
    )
    assert errors_of({"role": "user", "content": ["x"]}, Message) == (
        "content[0]: expected a content block object, got str",
    )


def test_nested_path_reaches_the_field() -> None:
    data = {
        "messages": [
            {"role": "user", "content": "a"},
            {"role": "assistant", "content": "b"},
            {"role": "user", "content": [{"type": "text", "text": 3}]},
        ]
    }
    assert errors_of(data, ChatRequest) == ("messages[2].content[0].text: expected str, got int",)


def test_missing_field_is_named() -> None:
    data = {"role": "assistant", "tool_calls": [{"name": "read_file"}]}
    assert errors_of(data, Message) == ("tool_calls[0].id: required field missing",)
    data = {"role": "user", "content": [{"type": "text", "text": "x"}, {"type": "text"}]}
    assert errors_of(data, Message) == ("content[1].text: required field missing",)


def test_missing_closed_field_says_missing_not_invalid() -> None:
    # A payload without "role" lacks a field; "must be one of" sends the reader hunting
    # for a wrong value that is not there.
    assert errors_of({"content": "hi"}, Message) == ("role: required field missing",)


def test_every_problem_is_reported_at_once() -> None:
    data = {"role": "user", "content": [{"type": "text"}], "name": 5}
    assert set(errors_of(data, Message)) == {
        "content[0].text: required field missing",
        "name: expected str | NoneType, got int",
    }


@pytest.mark.parametrize(
    ("cls", "data", "error"),
    [
        (Usage, {"input_tokens": "3"}, "input_tokens: expected int, got str"),
        (Usage, {"input_tokens": 1.5}, "input_tokens: expected int, got float"),
        (HookResult, {"priority": True}, "priority: expected int, got bool"),
        (HookResult, {"approval_timeout": "3"}, "approval_timeout: expected float, got str"),
        (ToolResult, {"success": "yes"}, "success: expected bool, got str"),
        (ChatRequest, {"messages": [], "stream": 1}, "stream: expected bool, got int"),
        (
            ChatRequest,
            {"messages": [], "temperature": True},
            "temperature: expected float | NoneType, got bool",
        ),
        (Message, {"role": "user", "name": 3}, "name: expected str | NoneType, got int"),
        (TextBlock, {"text": 3}, "text: expected str, got int"),
        (
            Message,
            {"role": "user", "metadata": [1]},
            "metadata: expected dict | NoneType, got list",
        ),
        (
            ModelInfo,
            {"id": "m", "display_name": "M", "context_window": "5", "max_output_tokens": 1},
            "context_window: expected int, got str",
        ),
    ],
)
def test_wrong_scalar_types_are_not_coerced(cls: type, data: Any, error: str) -> None:
    assert errors_of(data, cls) == (error,)


def test_int_is_accepted_where_a_float_is_expected() -> None:
    # JSON writes 3.0 as 3 in many encoders; that is not a type error.
    assert structure({"approval_timeout": 3}, HookResult).approval_timeout == 3.0
    request = structure({"messages": [], "temperature": 1}, ChatRequest)
    assert request.temperature == 1.0
    assert isinstance(request.temperature, float)


def test_content_of_the_wrong_type_says_what_content_may_be() -> None:
    assert errors_of({"role": "user", "content": 3}, Message) == (
        "content: expected a string or a list of content blocks, got int",
    )


def test_a_string_is_not_taken_for_a_list_of_messages() -> None:
    # Iterating "hi" would report a bogus problem at messages[0] instead of the real one.
    (error,) = errors_of({"messages": "hi"}, ChatRequest)
    assert error.startswith("messages: ")
    assert "str" in error


def test_a_string_is_not_split_into_a_tuple_of_characters() -> None:
    data = {"id": "openai", "display_name": "OpenAI", "credential_env_vars": "OPENAI_API_KEY"}
    (error,) = errors_of(data, ProviderInfo)
    assert error.startswith("credential_env_vars: ")


def test_non_object_payload_is_an_error_at_the_root() -> None:
    for data in (None, "hello", 3):
        with pytest.raises(ValidationError):
            structure(data, Message)


# --- closed fields --------------------------------------------------------------------

CLOSED_FIELDS = [
    (HookResult, {}, "action", ("continue", "deny", "modify", "inject_context", "ask_user")),
    (HookResult, {}, "context_injection_role", ("system", "user", "assistant")),
    (HookResult, {}, "approval_default", ("allow", "deny")),
    (HookResult, {}, "user_message_level", ("info", "warning", "error")),
    (Message, {}, "role", ("system", "developer", "user", "assistant", "tool")),
    (ContextInjection, {"content": "c"}, "role", ("system", "user", "assistant")),
    (
        ModuleInfo,
        {"id": "x", "name": "x", "version": "1", "mount_point": "tools"},
        "type",
        ("orchestrator", "provider", "tool", "context", "hook", "resolver"),
    ),
    (TextBlock, {"text": "t"}, "visibility", ("internal", "developer", "user")),
]
CLOSED_IDS = [f"{cls.__name__}.{field}" for cls, _, field, _ in CLOSED_FIELDS]


@pytest.mark.parametrize(("cls", "base", "field", "allowed"), CLOSED_FIELDS, ids=CLOSED_IDS)
def test_closed_field_accepts_exactly_its_values(
    cls: type, base: dict[str, Any], field: str, allowed: tuple[str, ...]
) -> None:
    for value in allowed:
        assert getattr(cls(**base, **{field: value}), field) == value
        assert getattr(structure({**base, field: value}, cls), field) == value


@pytest.mark.parametrize(("cls", "base", "field", "allowed"), CLOSED_FIELDS, ids=CLOSED_IDS)
@pytest.mark.parametrize("bad", ["bogus", "", "CONTINUE", 1])
def test_closed_field_rejects_other_values_when_built(
    cls: type, base: dict[str, Any], field: str, allowed: tuple[str, ...], bad: Any
) -> None:
    with pytest.raises(ValueError, match=rf"{field} must be one of .*{allowed[0]!r}"):
        cls(**base, **{field: bad})


@pytest.mark.parametrize(("cls", "base", "field", "allowed"), CLOSED_FIELDS, ids=CLOSED_IDS)
def test_closed_field_rejects_other_values_when_structured(
    cls: type, base: dict[str, Any], field: str, allowed: tuple[str, ...]
) -> None:
    (error,) = errors_of({**base, field: "bogus"}, cls)
    assert error.startswith(f"{field}: ")
    assert all(repr(value) in error for value in allowed), error


def test_upstream_function_role_is_not_a_role() -> None:
    with pytest.raises(ValueError, match="role must be one of"):
        Message(role="function")  # type: ignore[arg-type]


def test_invalid_visibility_inside_a_message_names_path_and_choices() -> None:
    data = {"role": "user", "content": [{"type": "text", "text": "x", "visibility": "public"}]}
    (error,) = errors_of(data, Message)
    assert error.startswith("content[0].visibility: ")
    assert "'internal'" in error


# --- ToolResult (upstream rules) ------------------------------------------------------


def test_failure_without_output_takes_the_error_message() -> None:
    result = ToolResult(success=False, error={"message": "file not found", "code": 2})
    assert result.output == "file not found"
    assert result.get_serialized_output() == "file not found"


def test_error_message_does_not_replace_real_output_or_apply_to_success() -> None:
    assert ToolResult(success=False, output="partial", error={"message": "m"}).output == "partial"
    assert ToolResult(success=True, error={"message": "m"}).output is None
    assert ToolResult(success=False, error={"code": 1}).output is None


def test_structured_failure_fills_output_too() -> None:
    result = structure({"success": False, "error": {"message": "boom"}}, ToolResult)
    assert result.output == "boom"


@pytest.mark.parametrize(
    ("output", "text"),
    [
        ({"a": 1, "b": [True, None]}, '{"a": 1, "b": [true, null]}'),
        ([1, "two"], '[1, "two"]'),
        ({"cost": Decimal("1.10")}, '{"cost": "1.10"}'),
        ("plain text", "plain text"),
        (42, "42"),
        (Decimal("0.30"), "0.30"),
        (False, "False"),
    ],
)
def test_serialized_output(output: Any, text: str) -> None:
    assert ToolResult(output=output).get_serialized_output() == text


def test_serialized_dict_is_valid_json() -> None:
    output = {"nested": {"list": [1, 2.5, "x"]}, "unicode": "é"}
    assert json.loads(ToolResult(output=output).get_serialized_output()) == output


def test_serialized_output_drops_control_characters_and_lone_surrogates() -> None:
    raw = "a\x00b\x08c\td\ne\rf\x0bg\x1fh\x7fi\x9fj\ud800k\udfffl"
    assert ToolResult(output=raw).get_serialized_output() == "abc\td\ne\rfghijkl"


def test_serialized_output_when_empty() -> None:
    assert ToolResult().get_serialized_output() == "Success"
    failed = ToolResult(success=False, error={"code": 1})
    assert failed.get_serialized_output().startswith("Error")


def test_str() -> None:
    assert str(ToolResult()) == "Success"
    assert str(ToolResult(output={"a": 1})) == "{'a': 1}"
    assert str(ToolResult(success=False, error={"message": "boom"})) == "Error: boom"
    assert str(ToolResult(success=False)) == "Failed"


# --- blocks, tags and unstructured shape ----------------------------------------------

BLOCKS = [
    TextBlock(text="hi"),
    ThinkingBlock(thinking="hmm", signature="sig"),
    RedactedThinkingBlock(data="opaque"),
    ToolCallBlock(id="c1", name="read_file", input={"path": "a"}),
    ToolResultBlock(tool_call_id="c1", output={"ok": True}),
    ImageBlock(source={"type": "url", "url": "https://example.com/a.png"}),
    ReasoningBlock(content=[{"text": "r"}], summary=["s"]),
    ProviderBlock(
        provider="anthropic",
        data={"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}},
    ),
]


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: type(b).__name__)
def test_block_tag_is_written_and_read(block: Any) -> None:
    data = unstructure(block)
    assert data["type"] == type(block).type
    assert BLOCK_TYPES[data["type"]] is type(block)
    message = structure({"role": "assistant", "content": [data]}, Message)
    assert message.content == [block]


def test_block_tags_are_upstream_names() -> None:
    assert set(BLOCK_TYPES) == {
        "text",
        "thinking",
        "redacted_thinking",
        "tool_call",
        "tool_result",
        "image",
        "reasoning",
        "provider_block",  # ours: a provider's own block kept verbatim (server tools)
    }


def test_unstructure_omits_defaults_for_compact_wire_dicts() -> None:
    assert unstructure(Message(role="user", content="hi")) == {"role": "user", "content": "hi"}
    assert unstructure(HookResult()) == {}
    assert unstructure(Message(role="assistant", content=[TextBlock(text="a")])) == {
        "role": "assistant",
        "content": [{"type": "text", "text": "a"}],
    }


def test_assistant_message_with_tool_calls_as_upstream_writes_it() -> None:
    data = {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "c1", "name": "bash", "arguments": {"cmd": "ls"}}],
    }
    message = structure(data, Message)
    assert message.tool_calls == [ToolCall(id="c1", name="bash", arguments={"cmd": "ls"})]
    answer = structure({"role": "tool", "tool_call_id": "c1", "content": "a.txt"}, Message)
    assert answer.tool_call_id == "c1"


def test_request_with_tools_and_optional_settings() -> None:
    data = {
        "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
        "tools": [{"name": "bash", "parameters": {"type": "object"}, "description": "run"}],
        "tool_choice": {"type": "function", "function": {"name": "bash"}},
        "max_output_tokens": 100,
    }
    request = structure(data, ChatRequest)
    assert request.tools == [
        ToolSpec(name="bash", parameters={"type": "object"}, description="run")
    ]
    assert request.tool_choice == {"type": "function", "function": {"name": "bash"}}
    assert unstructure(request) == data


def test_models_are_frozen() -> None:
    message = Message(role="user", content="hi")
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        message.content = "changed"  # type: ignore[misc]


# --- ChatResponse.text and Usage ------------------------------------------------------


def test_response_text_never_includes_thinking() -> None:
    response = ChatResponse(
        content=[
            ThinkingBlock(thinking="secret plan"),
            TextBlock(text="Hello"),
            RedactedThinkingBlock(data="xyz"),
            ReasoningBlock(content=["more secret"]),
            TextBlock(text=""),
            TextBlock(text="world"),
        ]
    )
    assert response.text == "Hello\n\nworld"
    assert "secret" not in response.text


def test_response_text_is_empty_without_text_blocks() -> None:
    assert ChatResponse().text == ""
    assert ChatResponse(content=[ThinkingBlock(thinking="t")]).text == ""


def test_usage_add() -> None:
    a = Usage(input_tokens=10, output_tokens=5, total_tokens=15, reasoning_tokens=2)
    b = Usage(input_tokens=1, output_tokens=2, total_tokens=3, cache_read_tokens=7)
    total = a + b
    assert total == Usage(
        input_tokens=11,
        output_tokens=7,
        total_tokens=18,
        reasoning_tokens=2,
        cache_read_tokens=7,
        cache_write_tokens=None,
    )
    assert Usage() + Usage() == Usage()
    assert sum([a, b], Usage()) == total


# --- descriptions ---------------------------------------------------------------------


def test_provider_info_lists_become_tuples() -> None:
    info = structure(
        {"id": "p", "display_name": "P", "credential_env_vars": ["KEY"], "capabilities": []},
        ProviderInfo,
    )
    assert info.credential_env_vars == ("KEY",)
    assert unstructure(info) == {"id": "p", "display_name": "P", "credential_env_vars": ["KEY"]}
