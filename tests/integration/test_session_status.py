"""SessionStatus tells a failed turn from a cancelled one."""

from __future__ import annotations

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
