"""SessionStatus tells a failed turn from a cancelled one."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import anyio
import pytest

from amplifier_anyio import AmplifierSession, SessionError

pytestmark = pytest.mark.anyio

PLAN: dict[str, Any] = {
    "session": {"orchestrator": "loop-basic", "context": "context-simple"},
    "providers": [{"module": "provider-scripted", "config": {"demo": True}}],
    "tools": [{"module": "tool-demo", "config": {"delay": 0.5}}],
}


async def test_an_error_raised_by_run_marks_the_session_failed() -> None:
    async with AmplifierSession(PLAN) as session:
        await session.coordinator.unmount("orchestrator")
        with pytest.raises(SessionError, match="No orchestrator"):
            await session.run("hello")
        assert session.status.status == "failed"
        assert session.status.last_error == {
            "type": "SessionError",
            "message": "No orchestrator module mounted",
        }


async def test_a_host_cancel_marks_the_session_cancelled() -> None:
    async with AmplifierSession(PLAN) as session:
        with anyio.move_on_after(0.1) as scope:
            await session.run("hello")
        assert scope.cancelled_caught
        assert session.status.status == "cancelled"
        assert session.status.last_error is None


def _reply(text: str, calls: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    reply: dict[str, Any] = {
        "content": [{"type": "text", "text": text}],
        "usage": {"input_tokens": 1000, "output_tokens": 100, "total_tokens": 1100},
    }
    if calls:
        reply["tool_calls"] = calls
        reply["content"] += [{"type": "tool_call", **c, "input": c["arguments"]} for c in calls]
        for block in reply["content"][1:]:
            block.pop("arguments")
    return reply


async def test_cost_is_summed_per_turn_and_per_session() -> None:
    # input $2 and output $10 per million tokens: each call costs 0.002 + 0.001
    call = {"id": "c1", "name": "word_count", "arguments": {"text": "two words"}}
    plan = {
        "session": {"orchestrator": "loop-basic", "context": "context-simple"},
        "providers": [
            {
                "module": "provider-scripted",
                "config": {
                    "responses": [_reply("calling", [call]), _reply("one"), _reply("two")],
                    "pricing": {"input_per_mtok": 2, "output_per_mtok": 10},
                },
            }
        ],
        "tools": [{"module": "tool-demo"}],
    }
    async with AmplifierSession(plan) as session:
        first = await session.run("first")
        second = await session.run("second")
        assert first.usage.cost_usd == Decimal("0.006")  # two provider calls
        assert second.usage.cost_usd == Decimal("0.003")
        assert session.status.cost_usd == Decimal("0.009")
        assert session.status.total_input_tokens == 3000
