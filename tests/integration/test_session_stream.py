"""session.stream(prompt): a turn's events as a stream the host reads while it runs."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from amplifier_anyio import AmplifierSession, TurnStatus

pytestmark = pytest.mark.anyio

PLAN: dict[str, Any] = {
    "session": {"orchestrator": "loop-basic", "context": "context-simple"},
    "providers": [{"module": "provider-scripted", "config": {"demo": True}}],
    "tools": [{"module": "tool-demo", "config": {"delay": 0.05}}],
}


async def test_events_arrive_in_order_and_the_stream_ends_with_the_turn() -> None:
    async with AmplifierSession(PLAN) as session:
        stream = session.stream("three little words")
        async with stream as events:
            names = [name async for name, _ in events]
        assert stream.result is not None
        assert stream.result.status is TurnStatus.SUCCESS
        assert "3 words" in stream.result.text
        assert session.last_result is stream.result
    assert names[0] == "session:start"
    assert names[-2:] == ["orchestrator:complete", "execution:end"]
    assert names.count("tool:pre") == 2
    assert names.count("tool:post") == 2


async def test_event_data_carry_the_session_and_turn_fields() -> None:
    trace_ids = set()
    async with AmplifierSession(PLAN) as session:
        async with session.stream("hi there") as events:
            async for name, data in events:
                assert data["session_id"] == session.session_id
                assert "timestamp" in data
                if name.startswith(("tool:", "provider:")):
                    trace_ids.add(data["trace_id"])
        assert session.last_result is not None
    assert trace_ids == {session.last_result.trace_id}


async def test_leaving_early_cancels_the_turn_and_closes_its_events() -> None:
    seen: list[str] = []
    async with AmplifierSession(PLAN) as session:
        session.coordinator.hooks.register("execution:end", lambda e, d: seen.append(e))
        stream = session.stream("stop me while the tools run")
        async with stream as events:
            async for name, _ in events:
                if name == "tool:pre":
                    break
        assert stream.result is not None
        assert stream.result.status is TurnStatus.CANCELLED
        context = session.coordinator.get("context")
        messages = await context.get_messages()
    assert seen == ["execution:end"]
    tool_messages = [m for m in messages if m["role"] == "tool"]
    assert len(tool_messages) == 2  # every call answered, with the cancelled result
    assert all('"cancelled": true' in m["content"] for m in tool_messages)


async def test_an_error_in_the_host_block_cancels_the_turn_and_propagates() -> None:
    async def consume(session: AmplifierSession) -> None:
        async with session.stream("boom") as events:
            async for name, _ in events:
                if name == "tool:pre":
                    raise KeyError(name)

    async with AmplifierSession(PLAN) as session:
        # The host's own exception, as raised: never wrapped in an ExceptionGroup.
        with pytest.raises(KeyError, match="tool:pre"):
            await consume(session)
        # the session is usable again afterwards
        result = await session.run("again")
        assert result.status is TurnStatus.SUCCESS


async def test_the_stream_works_inside_a_host_deadline() -> None:
    async with AmplifierSession(PLAN) as session:
        with anyio.fail_after(30):
            async with session.stream("quick") as events:
                async for _ in events:
                    pass
        assert session.last_result is not None
        assert session.last_result.status is TurnStatus.SUCCESS
