"""kernel/_foreign: amplifier-core's pydantic answers converted into ours, by shape.

The upstream values are built with amplifier-core itself (its pydantic models); the
converters never import it. What cannot be converted is an error naming its origin, and
the hook registry fails closed on it.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from amplifier_anyio.errors import ForeignModuleError
from amplifier_anyio.kernel import HookRegistry, ModuleCoordinator
from amplifier_anyio.kernel._foreign import (
    chat_response_of,
    hook_result_of,
    module_scope,
    plain_message,
    tool_calls_of,
    tool_result_of,
)
from amplifier_anyio.models import (
    ChatResponse,
    HookResult,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    ToolCallBlock,
    ToolResult,
)
from amplifier_anyio.runtime._tool_batch import ToolBatch
from tiers import needs, optional

core = optional("amplifier_core")
message_models = optional("amplifier_core.message_models")

pytestmark = [pytest.mark.anyio, *needs("amplifier_core")]


# -- conversions -----------------------------------------------------------------------------


def test_an_upstream_hook_result_keeps_every_field_we_know() -> None:
    upstream = core.HookResult(
        action="inject_context",
        context_injection="look",
        context_injection_role="user",
        ephemeral=True,
        append_to_last_tool_result=True,
        user_message="hi",
        user_message_level="warning",
    )

    ours = hook_result_of(upstream, origin="hook 'x'")

    assert ours == HookResult(
        action="inject_context",
        context_injection="look",
        context_injection_role="user",
        ephemeral=True,
        append_to_last_tool_result=True,
        user_message="hi",
        user_message_level="warning",
    )


def test_upstream_context_injections_fold_into_one_injection() -> None:
    upstream = core.HookResult(
        context_injections=[
            core.models.ContextInjection(content="one"),
            core.models.ContextInjection(content="two"),
        ]
    )

    ours = hook_result_of(upstream, origin="hook 'x'")

    assert ours is not None
    assert (ours.action, ours.context_injection) == ("inject_context", "one\n\ntwo")


@pytest.mark.parametrize("value", ["allow", 3, object(), {"reason": "no action"}])
def test_a_value_that_is_no_verdict_is_an_error_naming_its_origin(value: Any) -> None:
    with pytest.raises(ForeignModuleError, match="hook 'guard' of module 'hooks-guard'"):
        hook_result_of(value, origin="hook 'guard' of module 'hooks-guard'")


def test_an_unknown_action_is_an_error() -> None:
    with pytest.raises(ForeignModuleError, match="not valid here"):
        hook_result_of({"action": "maybe"}, origin="hook 'x'")


def test_an_upstream_failing_tool_result_keeps_its_output_and_error() -> None:
    upstream = core.ToolResult(
        success=False,
        output={"stdout": "out", "stderr": "err", "returncode": 1},
        error={"message": "exit status 1"},
    )

    ours = tool_result_of(upstream, origin="tool 'bash'")

    assert ours == ToolResult(
        success=False,
        output={"stdout": "out", "stderr": "err", "returncode": 1},
        error={"message": "exit status 1"},
    )
    assert json.loads(ours.get_serialized_output())["stderr"] == "err"


def test_an_upstream_failure_without_output_takes_the_message() -> None:
    ours = tool_result_of(
        core.ToolResult(success=False, error={"message": "nope"}), origin="tool 'x'"
    )

    assert (ours.success, ours.output) == (False, "nope")


@pytest.mark.parametrize("value", [{"success": False}, "text", [1, 2], None])
def test_plain_values_stay_the_output_of_a_success(value: Any) -> None:
    assert tool_result_of(value, origin="tool 'x'") == ToolResult(output=value)


def test_a_result_whose_success_is_not_a_bool_is_an_error() -> None:
    class Odd:
        success = "yes"
        output = None
        error = None

    with pytest.raises(ForeignModuleError, match="tool 'odd'"):
        tool_result_of(Odd(), origin="tool 'odd'")


def test_an_upstream_chat_response_becomes_ours() -> None:
    upstream = core.ChatResponse(
        content=[
            message_models.ThinkingBlock(thinking="t", signature="s"),
            core.TextBlock(text="hello"),
            message_models.ToolCallBlock(id="c1", name="echo", input={"a": 1}),
        ],
        tool_calls=[core.ToolCall(id="c1", name="echo", arguments={"a": 1})],
        usage=core.Usage(input_tokens=1, output_tokens=2, total_tokens=3),
        finish_reason="tool_calls",
        degradation=message_models.Degradation(requested="x", actual="y", reason="z"),
    )

    ours = chat_response_of(upstream, origin="provider 'p'")

    assert isinstance(ours, ChatResponse)
    assert ours.content == [
        ThinkingBlock(thinking="t", signature="s"),
        TextBlock(text="hello"),
        ToolCallBlock(id="c1", name="echo", input={"a": 1}),
    ]
    assert ours.text == "hello"
    assert ours.tool_calls == [ToolCall(id="c1", name="echo", arguments={"a": 1})]
    assert ours.usage is not None
    assert ours.usage.total_tokens == 3
    assert ours.metadata == {"degradation": {"requested": "x", "actual": "y", "reason": "z"}}


@pytest.mark.parametrize("value", ["hello", 42, {"text": "no content"}])
def test_a_value_that_is_no_chat_response_is_an_error(value: Any) -> None:
    with pytest.raises(ForeignModuleError, match="provider 'p'"):
        chat_response_of(value, origin="provider 'p'")


def test_tool_calls_of_every_shape_become_ours() -> None:
    calls = [
        core.ToolCall(id="a", name="x", arguments={"k": 1}),
        {"id": "b", "tool": "y", "arguments": '{"k": 2}'},
        ToolCall(id="c", name="z"),
    ]

    assert tool_calls_of(calls, origin="provider 'p'") == [
        ToolCall(id="a", name="x", arguments={"k": 1}),
        ToolCall(id="b", name="y", arguments={"k": 2}),
        ToolCall(id="c", name="z"),
    ]
    with pytest.raises(ForeignModuleError, match="not a tool call"):
        tool_calls_of([{"name": "no id"}], origin="provider 'p'")


def test_a_message_with_pydantic_blocks_becomes_plain_dicts() -> None:
    message = {"role": "assistant", "content": [core.TextBlock(text="hi")], "metadata": {"a": 1}}

    assert plain_message(message) == {
        "role": "assistant",
        "content": [{"type": "text", "text": "hi"}],
        "metadata": {"a": 1},
    }
    plain = {"role": "user", "content": [{"type": "text", "text": "hi"}]}
    assert plain_message(plain) is plain  # nothing to convert: no copy


# -- the registry ----------------------------------------------------------------------------


async def test_the_registry_honours_an_upstream_deny() -> None:
    hooks = HookRegistry()
    later: list[str] = []

    async def deny(event: str, data: dict[str, Any]) -> Any:
        return core.HookResult(action="deny", reason="policy")

    async def after(event: str, data: dict[str, Any]) -> None:
        later.append(event)

    hooks.register("tool:pre", deny)
    hooks.register("tool:pre", after, priority=1)

    result = await hooks.emit("tool:pre", {"tool_name": "bash"})

    assert (result.action, result.reason) == ("deny", "policy")
    assert later == []


async def test_an_upstream_modify_chains_and_is_returned() -> None:
    hooks = HookRegistry()

    async def modify(event: str, data: dict[str, Any]) -> Any:
        return core.HookResult(action="modify", data={**data, "tool_input": {"safe": True}})

    hooks.register("tool:pre", modify)

    result = await hooks.emit("tool:pre", {"tool_input": {}})

    assert result.action == "modify"
    assert result.data is not None
    assert result.data["tool_input"] == {"safe": True}


async def test_emit_and_collect_converts_upstream_answers_and_skips_junk() -> None:
    hooks = HookRegistry()

    async def vote(event: str, data: dict[str, Any]) -> Any:
        return core.HookResult(action="modify", data={"tool": "grep"})

    async def junk(event: str, data: dict[str, Any]) -> Any:
        return "deny"

    hooks.register("tool:selecting", vote)
    hooks.register("tool:selecting", junk)

    assert await hooks.emit_and_collect("tool:selecting", {}) == [{"tool": "grep"}]


async def test_junk_from_a_mounted_module_names_the_module_and_denies() -> None:
    hooks = HookRegistry()

    async def junk(event: str, data: dict[str, Any]) -> Any:
        return 42

    with module_scope("hooks-guard"):
        hooks.register("tool:pre", junk, name="guard")

    result = await hooks.emit("tool:pre", {})

    assert result.action == "deny"
    assert "hook 'guard' of module 'hooks-guard' on tool:pre" in (result.reason or "")


class Recorder:
    name = "probe"

    def __init__(self) -> None:
        self.inputs: list[dict[str, Any]] = []

    async def execute(self, tool_input: dict[str, Any]) -> Any:
        self.inputs.append(tool_input)
        return core.ToolResult(success=True, output={"ok": True})


class Context:
    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []

    async def add_message(self, message: dict[str, Any]) -> None:
        self.messages.append(message)


async def test_an_unconvertible_verdict_on_tool_pre_does_not_let_the_tool_run() -> None:
    coordinator = ModuleCoordinator()
    tool = Recorder()

    async def junk(event: str, data: dict[str, Any]) -> Any:
        return "allow"

    coordinator.hooks.register("tool:pre", junk, name="guard")
    batch = ToolBatch(
        calls=[ToolCall(id="c1", name="probe")],
        tools={"probe": tool},
        hooks=coordinator.hooks,
        coordinator=coordinator,
    )
    context = Context()

    await batch.run(context, {"role": "assistant", "content": "", "tool_calls": []})

    assert tool.inputs == []
    [answer] = context.messages[1:]
    assert answer["content"].startswith("Denied by hook: hook 'guard' on tool:pre returned")


async def test_the_batch_sends_an_upstream_result_as_json() -> None:
    tool = Recorder()
    batch = ToolBatch(
        calls=[ToolCall(id="c1", name="probe")], tools={"probe": tool}, hooks=HookRegistry()
    )
    context = Context()

    await batch.run(context, {"role": "assistant", "content": ""})

    assert json.loads(context.messages[1]["content"]) == {"ok": True}
    assert batch.succeeded == [True]


async def test_the_coordinator_processes_an_upstream_result_it_is_handed() -> None:
    coordinator = ModuleCoordinator()
    context = Context()
    await coordinator.mount("context", context)

    result = await coordinator.process_hook_result(
        core.HookResult(action="inject_context", context_injection="from upstream"),
        "tool:post",
        "audit",
    )

    assert isinstance(result, HookResult)
    assert [m["content"] for m in context.messages] == ["from upstream"]
    assert context.messages[0]["metadata"]["hook_name"] == "audit"
