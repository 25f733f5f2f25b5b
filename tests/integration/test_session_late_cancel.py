"""A cancel() that lands while the turn closes its events is recorded, not dropped."""

from __future__ import annotations

from typing import Any

import pytest

from amplifier_anyio import AmplifierSession, TurnStatus
from amplifier_anyio.testing import EventRecorder

pytestmark = pytest.mark.anyio

PLAN: dict[str, Any] = {
    "session": {"orchestrator": "loop-basic", "context": "context-simple"},
    "providers": [{"module": "provider-scripted", "config": {"demo": True}}],
    "tools": [{"module": "tool-demo", "config": {"delay": 0}}],
}


async def test_cancel_during_execution_end_is_emitted_after_the_turn() -> None:
    async with AmplifierSession(PLAN) as session:
        recorder = EventRecorder()
        recorder.attach(session.coordinator.hooks, events=["execution:end", "cancel:requested"])

        def late_cancel(_event: str, _data: dict[str, Any]) -> None:
            # Returns None: an answer that is no verdict (cancel()'s True) would deny.
            session.cancel()

        session.coordinator.hooks.register("execution:end", late_cancel, name="late-cancel")
        result = await session.run("hello")
    # The turn itself had already produced its answer.
    assert result.status is TurnStatus.SUCCESS
    assert recorder.names() == ["execution:end", "cancel:requested"]
    assert recorder.get_events("cancel:requested")[0][1]["level"] == "graceful"
