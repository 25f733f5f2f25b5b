"""The web pattern of docs/session.md: a turn is cancelled when its client disconnects.

The function under test is the one the page documents: it is read from the page's
```python block and run here, on asyncio and trio, against real sessions (offline plans,
tool-demo's slow tools), with order-based waits: the client "disconnects" once a tool has
started, so the disconnect always lands mid-turn.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest

from amplifier_anyio import AmplifierSession, SessionError, TurnResult, TurnStatus

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
FUNCTION = "run_unless_disconnected"

RunUnlessDisconnected = Callable[..., Awaitable[TurnResult | None]]


def documented_function() -> RunUnlessDisconnected:
    """``run_unless_disconnected`` as docs/session.md defines it (its demo does not run)."""
    page = (ROOT / "docs" / "session.md").read_text(encoding="utf-8")
    blocks = re.findall(r"^```python\n(.*?)^```", page, flags=re.DOTALL | re.MULTILINE)
    (code,) = [block for block in blocks if f"async def {FUNCTION}(" in block]
    namespace: dict[str, Any] = {"__name__": "session_md_disconnect"}
    exec(compile(code, "docs/session.md", "exec"), namespace)
    function: RunUnlessDisconnected = namespace[FUNCTION]
    return function


run_unless_disconnected = documented_function()


def plan(tool_delay: float, provider_latency: float = 0.0) -> dict[str, Any]:
    return {
        "session": {"orchestrator": "loop-basic", "context": "context-simple"},
        "providers": [
            {"module": "provider-scripted", "config": {"demo": True, "latency": provider_latency}}
        ],
        "tools": [{"module": "tool-demo", "config": {"delay": tool_delay}}],
    }


class Client:
    """An ``is_disconnected`` callable that says yes once ``leave()`` was called."""

    def __init__(self) -> None:
        self.gone = anyio.Event()
        self.polls = 0

    def leave(self, *_: object) -> None:
        self.gone.set()

    async def is_disconnected(self) -> bool:
        await anyio.lowlevel.checkpoint()
        self.polls += 1
        return self.gone.is_set()


async def tool_results(session: AmplifierSession) -> list[Any]:
    messages = await session.coordinator.get("context").get_messages()
    return [json.loads(m["content"]) for m in messages if m["role"] == "tool"]


async def test_a_disconnect_mid_turn_cancels_the_turn_and_returns_nothing() -> None:
    client = Client()
    async with AmplifierSession(plan(tool_delay=3600)) as session:
        session.coordinator.hooks.register("tool:pre", client.leave)  # leave once tools run

        answer = await run_unless_disconnected(
            session, "count my words", client.is_disconnected, poll_interval=0.01
        )

        assert answer is None
        assert session.last_result is not None
        assert session.last_result.status is TurnStatus.CANCELLED
        cancelled = {"error": "Tool execution was cancelled", "cancelled": True}
        assert [{k: r[k] for k in cancelled} for r in await tool_results(session)] == [
            cancelled,
            cancelled,
        ]
        # the turn stopped there: the model was never asked again
        assert len(session.coordinator.get("providers")["scripted"].requests) == 1


async def test_a_client_gone_before_the_model_answers_cancels_the_provider_call() -> None:
    client = Client()
    client.leave()
    async with AmplifierSession(plan(tool_delay=0, provider_latency=3600)) as session:
        answer = await run_unless_disconnected(
            session, "count my words", client.is_disconnected, poll_interval=0.01
        )

        assert answer is None
        assert session.last_result is not None
        assert session.last_result.status is TurnStatus.CANCELLED
        assert await tool_results(session) == []


async def test_a_client_that_stays_gets_the_answer() -> None:
    client = Client()
    async with AmplifierSession(plan(tool_delay=0)) as session:
        answer = await run_unless_disconnected(session, "count my words", client.is_disconnected)

        assert answer is not None
        assert answer.status is TurnStatus.SUCCESS
        assert "3 words" in answer.text
        assert client.polls >= 1  # it was watched
        # the session goes on: a later request is answered as well
        again = await run_unless_disconnected(session, "and now?", client.is_disconnected)
        assert again is not None
        assert again.status is TurnStatus.SUCCESS


async def test_a_broken_disconnect_check_is_logged_and_the_turn_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def broken() -> bool:
        await anyio.lowlevel.checkpoint()
        raise RuntimeError("receive channel closed")

    async with AmplifierSession(plan(tool_delay=0)) as session:
        with caplog.at_level(logging.ERROR):
            answer = await run_unless_disconnected(session, "count my words", broken)

    assert answer is not None
    assert answer.status is TurnStatus.SUCCESS
    assert "cannot tell whether the client is still there" in caplog.text


async def test_a_session_error_is_raised_as_it_is_never_in_a_group() -> None:
    first, second = Client(), Client()
    async with AmplifierSession(plan(tool_delay=3600)) as session:
        tools_started = anyio.Event()
        session.coordinator.hooks.register("tool:pre", lambda *_: tools_started.set())
        async with anyio.create_task_group() as tg:
            watched = partial(run_unless_disconnected, poll_interval=0.01)
            tg.start_soon(watched, session, "first", first.is_disconnected)
            await tools_started.wait()

            with pytest.raises(SessionError, match="already running"):
                await run_unless_disconnected(session, "second", second.is_disconnected)
            first.leave()

        assert session.last_result is not None
        assert session.last_result.status is TurnStatus.CANCELLED
