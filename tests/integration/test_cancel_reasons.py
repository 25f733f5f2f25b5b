"""Every cancel says why: the reason given to a cancel scope reaches the cancelled code's
exception (asyncio's ``CancelledError`` message, trio's ``Cancelled``) and a debug log
line, so a hedge's loser, a spent budget and ``session.cancel()`` are told apart."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

from amplifier_anyio import AmplifierSession, TurnStatus
from amplifier_anyio.models import ChatRequest, ChatResponse, ProviderInfo, TextBlock, Usage

pytestmark = pytest.mark.anyio

HANG_GUARD = 30.0  # seconds: only a broken build waits this long


def answer(text: str, tokens: int = 1) -> ChatResponse:
    usage = Usage(input_tokens=tokens, output_tokens=0, total_tokens=tokens)
    return ChatResponse(content=[TextBlock(text=text)], usage=usage, finish_reason="stop")


class Provider:
    """Answers ``text`` at once, or (``text`` None) hangs until cancelled, keeping the
    message of the cancellation it got."""

    def __init__(self, name: str, text: str | None = None, tokens: int = 1) -> None:
        self.name = name
        self.text = text
        self.tokens = tokens
        self.asked = anyio.Event()
        self.cancelled: list[str] = []

    def get_info(self) -> ProviderInfo:
        return ProviderInfo(id=self.name, display_name=self.name)

    async def complete(self, request: ChatRequest, **kwargs: Any) -> ChatResponse:
        self.asked.set()
        if self.text is not None:
            await anyio.lowlevel.checkpoint()
            return answer(self.text, self.tokens)
        try:
            await anyio.sleep(HANG_GUARD)
        except anyio.get_cancelled_exc_class() as exc:
            self.cancelled.append(str(exc))
            raise
        raise AssertionError("never cancelled")


@asynccontextmanager
async def session_with(
    *providers: Provider, orchestrator: str = "loop-basic", **session: Any
) -> AsyncIterator[AmplifierSession]:
    plan = {"session": {"orchestrator": orchestrator, "context": "context-simple", **session}}
    async with AmplifierSession(plan) as started:
        for priority, provider in enumerate(providers):
            provider.priority = priority  # type: ignore[attr-defined]
            await started.coordinator.mount("providers", provider, name=provider.name)
        yield started


def reasons(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.DEBUG and "cancelled" in r.getMessage()
    ]


async def test_a_hedge_loser_hears_who_answered_first(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="amplifier_anyio")
    slow, fast = Provider("slow"), Provider("fast", "hedged answer")
    policy = {"fallback": ["fast"], "hedge_after": 0.01}
    async with session_with(slow, fast, providers_policy=policy) as session:
        result = await session.run("hi")
    assert result.text == "hedged answer"
    [message] = slow.cancelled
    assert "hedge: 'fast' answered first" in message
    assert "provider attempt 'slow' cancelled: hedge: 'fast' answered first" in reasons(caplog)
    assert not any("session.cancel" in line for line in reasons(caplog))


@pytest.mark.parametrize("orchestrator", ["loop-basic", "loop-streaming", "loop-lifecycle"])
async def test_session_cancel_names_itself(
    caplog: pytest.LogCaptureFixture, orchestrator: str
) -> None:
    """loop-lifecycle binds its own cancel target to the token (the orchestration while it
    runs): the reason goes through it too."""
    caplog.set_level(logging.DEBUG, logger="amplifier_anyio")
    slow = Provider("slow")
    async with (
        session_with(slow, orchestrator=orchestrator) as session,
        anyio.create_task_group() as tg,
    ):

        async def cancel_when_asked() -> None:
            await slow.asked.wait()
            session.cancel(immediate=True)

        tg.start_soon(cancel_when_asked)
        result = await session.run("hi")
    assert result.status is TurnStatus.CANCELLED
    [message] = slow.cancelled
    assert "session.cancel(immediate=True)" in message
    assert "hedge" not in message
    assert "turn cancelled immediately: session.cancel(immediate=True)" in reasons(caplog)


async def test_a_host_reason_reaches_the_cancelled_call(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="amplifier_anyio")
    slow = Provider("slow")
    async with session_with(slow) as session, anyio.create_task_group() as tg:

        async def cancel_when_asked() -> None:
            await slow.asked.wait()
            session.cancel(immediate=True, reason="host: the user closed the tab")

        tg.start_soon(cancel_when_asked)
        await session.run("hi")
    [message] = slow.cancelled
    assert "host: the user closed the tab" in message
    assert "turn cancelled immediately: host: the user closed the tab" in reasons(caplog)


async def test_a_spent_budget_says_which_limit(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="amplifier_anyio")
    costly = Provider("costly", "expensive", tokens=50)
    async with session_with(costly, budget={"max_tokens": 10}) as session:
        await session.run("hi")
    assert "turn cancelled immediately: budget spent: max_tokens: 10 reached (50 spent)" in (
        reasons(caplog)
    )
