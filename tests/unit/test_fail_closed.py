"""ask_user answers fail closed when nobody can approve (no coordinator at all)."""

from __future__ import annotations

import pytest

from amplifier_anyio.kernel import HookRegistry
from amplifier_anyio.models import ChatResponse, HookResult, TextBlock, ToolCall
from amplifier_anyio.orchestrators import LoopBasicOrchestrator
from amplifier_anyio.providers import ScriptedProvider
from amplifier_anyio.testing import MockContextManager, MockTool

pytestmark = pytest.mark.anyio


def _ask(_event: str, _data: dict[str, object]) -> HookResult:
    return HookResult(action="ask_user", approval_prompt="Run it?")


def _script() -> ScriptedProvider:
    call = ToolCall(id="c1", name="danger", arguments={})
    return ScriptedProvider(
        [
            ChatResponse(content=[TextBlock(text="calling")], tool_calls=[call]),
            ChatResponse(content=[TextBlock(text="done")]),
        ]
    )


async def test_tool_pre_ask_user_without_coordinator_denies_the_tool() -> None:
    hooks = HookRegistry()
    hooks.register("tool:pre", _ask)
    tool = MockTool("danger", output="ran")
    context = MockContextManager()
    result = await LoopBasicOrchestrator().run_turn(
        "go", context, {"scripted": _script()}, {"danger": tool}, hooks
    )
    assert tool.call_count == 0
    tool_message = next(m for m in context.messages if m["role"] == "tool")
    assert tool_message["content"] == "Denied by hook: No approval system available"
    assert result.text == "done"


async def test_prompt_submit_ask_user_without_coordinator_denies_the_turn() -> None:
    hooks = HookRegistry()
    hooks.register("prompt:submit", _ask)
    provider = _script()
    result = await LoopBasicOrchestrator().run_turn(
        "go", MockContextManager(), {"scripted": provider}, {}, hooks
    )
    assert result.text == "Operation denied: No approval system available"
    assert provider.requests == []
