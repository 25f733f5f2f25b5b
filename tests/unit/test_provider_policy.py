"""session.providers_policy: failover and hedged requests as structured races.

Providers here are in-process fakes whose answers are steps (answer, fail, hang until
cancelled, stream then break); what is asserted is order and outcome — who answered, who
was cancelled, which events said so, what landed in the context — never how long it took.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from decimal import Decimal
from typing import Any

import anyio
import pytest

from amplifier_anyio import AmplifierSession, TurnStatus
from amplifier_anyio.errors import (
    AuthenticationError,
    ConfigError,
    LLMTimeoutError,
    ProviderUnavailableError,
    RateLimitError,
    StreamError,
)
from amplifier_anyio.events import (
    CONTENT_BLOCK_DELTA,
    PROVIDER_FAILOVER,
    PROVIDER_HEDGE,
    PROVIDER_HEDGE_SETTLED,
)
from amplifier_anyio.kernel import MountPlan, ProvidersPolicy
from amplifier_anyio.models import ChatRequest, ChatResponse, ProviderInfo, TextBlock, Usage
from amplifier_anyio.testing import EventRecorder, install_cassette

pytestmark = pytest.mark.anyio

Step = Callable[["Fake"], Awaitable[ChatResponse]]


def answer(text: str, tokens: int = 10) -> ChatResponse:
    usage = Usage(input_tokens=tokens, output_tokens=1, total_tokens=tokens + 1)
    return ChatResponse(content=[TextBlock(text=text)], usage=usage, finish_reason="stop")


def says(text: str, tokens: int = 10) -> Step:
    async def step(_fake: Fake) -> ChatResponse:
        await anyio.lowlevel.checkpoint()
        return answer(text, tokens)

    return step


def fails(exc: Exception) -> Step:
    async def step(_fake: Fake) -> ChatResponse:
        await anyio.lowlevel.checkpoint()
        raise exc

    return step


def hangs() -> Step:
    async def step(_fake: Fake) -> ChatResponse:
        await anyio.sleep_forever()
        raise AssertionError

    return step


class Fake:
    """A provider answering each call with its next step; counts calls and cancellations.

    ``stream_parts``: with it, ``stream()`` relays the text in those parts and, when
    ``cut`` is set, breaks off after them with a StreamError (a cut stream)."""

    def __init__(
        self, name: str, *steps: Step, stream_parts: list[str] | None = None, cut: bool = False
    ) -> None:
        self.name = name
        self.steps = list(steps)
        self.calls = 0
        self.cancelled = 0
        self.closed = 0
        self.parts = stream_parts
        self.cut = cut
        if stream_parts is None:
            self.stream = None

    def get_info(self) -> ProviderInfo:
        return ProviderInfo(id=self.name, display_name=self.name)

    async def complete(self, request: ChatRequest, **kwargs: Any) -> ChatResponse:
        self.calls += 1
        try:
            return await self.steps.pop(0)(self)
        except anyio.get_cancelled_exc_class():
            self.cancelled += 1
            raise

    @asynccontextmanager
    async def stream(
        self, request: ChatRequest, **kwargs: Any
    ) -> AsyncIterator[AsyncIterator[dict[str, Any]]]:  # type: ignore[no-redef]
        self.calls += 1

        async def events() -> AsyncIterator[dict[str, Any]]:
            yield {"type": "content_block:start", "index": 0, "block_type": "text"}
            for part in self.parts or []:
                await anyio.lowlevel.checkpoint()
                yield {
                    "type": "content_block:delta",
                    "index": 0,
                    "block_type": "text",
                    "delta": part,
                }
            if self.cut:
                raise StreamError(f"the {self.name} stream broke off", provider=self.name)
            text = "".join(self.parts or [])
            yield {"type": "response", "response": answer(text)}

        try:
            yield events()
        except anyio.get_cancelled_exc_class():
            self.cancelled += 1
            raise
        finally:
            self.closed += 1


@asynccontextmanager
async def session_with(
    policy: dict[str, Any], *providers: Fake, orchestrator: str = "loop-basic"
) -> AsyncIterator[tuple[AmplifierSession, EventRecorder]]:
    plan = {
        "session": {
            "orchestrator": orchestrator,
            "context": "context-simple",
            "providers_policy": policy,
        }
    }
    async with AmplifierSession(plan) as session:
        recorder = EventRecorder()
        recorder.attach(session.coordinator.hooks)
        for priority, provider in enumerate(providers):
            provider.priority = priority  # type: ignore[attr-defined]
            await session.coordinator.mount("providers", provider, name=provider.name)
        yield session, recorder


async def assistant_messages(session: AmplifierSession) -> list[dict[str, Any]]:
    messages = await session.coordinator.get("context").get_messages()
    return [m for m in messages if m["role"] == "assistant"]


_STAMPS = ("session_id", "parent_id", "trace_id", "timestamp")


def payloads(recorder: EventRecorder, event: str) -> list[dict[str, Any]]:
    """The event's payloads without the registry's stamps."""
    return [
        {k: v for k, v in data.items() if k not in _STAMPS}
        for _, data in recorder.get_events(event)
    ]


# -- config ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"fallback": "backup", "retry": 1}, r"session\.providers_policy\.retry: unknown key"),
        ({"fallback": [1]}, r"session\.providers_policy\.fallback: expected a list"),
        ({"on": [429, "slow"]}, r"session\.providers_policy\.on\[1\]: expected an HTTP status"),
        ({"on": [200]}, r"session\.providers_policy\.on\[0\]"),
        ({"hedge_after": 0}, r"session\.providers_policy\.hedge_after: expected a number"),
        ({"hedge_after": True}, r"session\.providers_policy\.hedge_after"),
        ("backup", r"session\.providers_policy: expected a"),
    ],
)
def test_a_bad_policy_is_a_config_error_naming_the_key(value: Any, message: str) -> None:
    plan = {
        "session": {
            "orchestrator": "loop-basic",
            "context": "context-simple",
            "providers_policy": value,
        }
    }
    with pytest.raises(ConfigError, match=message):
        MountPlan.from_dict(plan)


def test_the_policy_reads_statuses_and_named_conditions() -> None:
    policy = ProvidersPolicy.from_value({"fallback": ["b"], "on": ["429", "5xx", "timeout"]})
    assert policy.on == (429, "5xx", "timeout")
    assert policy.reason(RateLimitError("x", status_code=429), partial=False) == "429"
    assert policy.reason(ProviderUnavailableError("x", status_code=529), partial=False) == "5xx"
    assert policy.reason(LLMTimeoutError("x"), partial=False) == "timeout"
    assert policy.reason(StreamError("x"), partial=True) is None  # stream_cut not asked for
    assert policy.reason(AuthenticationError("x", status_code=401), partial=False) is None
    assert policy.reason(ValueError("x"), partial=False) is None


# -- failover ---------------------------------------------------------------------------


async def test_a_429_fails_over_to_the_next_provider() -> None:
    primary = Fake("primary", fails(RateLimitError("slow down", status_code=429)))
    backup = Fake("backup", says("from the backup"))
    async with session_with({"fallback": ["backup"]}, primary, backup) as (session, recorder):
        result = await session.run("hi")
        assert result.status is TurnStatus.SUCCESS
        assert result.text == "from the backup"
        (failover,) = payloads(recorder, PROVIDER_FAILOVER)
        assert (failover["from"], failover["to"], failover["reason"]) == (
            "primary",
            "backup",
            "429",
        )
        assert failover["partial"] is False
        (message,) = await assistant_messages(session)
        assert message["metadata"]["provider"] == "backup"


async def test_a_failure_outside_on_is_the_turns_error() -> None:
    primary = Fake("primary", fails(AuthenticationError("bad key", status_code=401)))
    backup = Fake("backup", says("never"))
    async with session_with({"fallback": ["backup"]}, primary, backup) as (session, recorder):
        result = await session.run("hi")
    assert result.status is TurnStatus.ERROR
    assert isinstance(result.error, AuthenticationError)
    assert backup.calls == 0
    assert not payloads(recorder, PROVIDER_FAILOVER)


async def test_when_every_provider_fails_the_last_error_is_the_turns() -> None:
    primary = Fake("primary", fails(ProviderUnavailableError("down", status_code=503)))
    backup = Fake("backup", fails(RateLimitError("also busy", status_code=429)))
    async with session_with({"fallback": ["backup"]}, primary, backup) as (session, recorder):
        result = await session.run("hi")
        assert await assistant_messages(session) == []
    assert isinstance(result.error, RateLimitError)
    assert [p["reason"] for p in payloads(recorder, PROVIDER_FAILOVER)] == ["5xx"]


async def test_a_fallback_that_is_not_mounted_fails_the_call_naming_it() -> None:
    primary = Fake("primary", says("unused"))
    async with session_with({"fallback": ["nowhere"]}, primary) as (session, _):
        result = await session.run("hi")
    assert isinstance(result.error, ConfigError)
    assert "session.providers_policy.fallback: 'nowhere' is not mounted" in str(result.error)
    assert primary.calls == 0


async def test_a_stream_cut_after_partial_text_starts_over_on_the_next_provider() -> None:
    primary = Fake("primary", stream_parts=["The answ", "er is"], cut=True)
    backup = Fake("backup", stream_parts=["Forty", "-two."])
    policy = {"fallback": ["backup"]}
    async with session_with(policy, primary, backup, orchestrator="loop-streaming") as (
        session,
        recorder,
    ):
        result = await session.run("hi")
        (message,) = await assistant_messages(session)
    assert result.text == "Forty-two."
    assert message["content"] == [{"type": "text", "text": "Forty-two."}]
    (failover,) = payloads(recorder, PROVIDER_FAILOVER)
    assert (failover["reason"], failover["partial"]) == ("stream_cut", True)
    # the UI saw the cut text, then the failover, then the whole new answer
    deltas = [(p["provider"], p["delta"]) for p in payloads(recorder, CONTENT_BLOCK_DELTA)]
    assert deltas == [
        ("primary", "The answ"),
        ("primary", "er is"),
        ("backup", "Forty"),
        ("backup", "-two."),
    ]
    assert (primary.closed, backup.closed) == (1, 1)


# -- hedging ------------------------------------------------------------------------------


async def test_a_slow_provider_is_hedged_and_the_loser_cancelled() -> None:
    primary = Fake("primary", hangs())
    backup = Fake("backup", says("hedged answer", tokens=7))
    policy = {"fallback": ["backup"], "hedge_after": 0.01}
    async with session_with(policy, primary, backup) as (session, recorder):
        result = await session.run("hi")
        assert len(await assistant_messages(session)) == 1
    assert result.text == "hedged answer"
    assert (primary.calls, primary.cancelled) == (1, 1)
    assert payloads(recorder, PROVIDER_HEDGE) == [
        {"primary": "primary", "hedge": "backup", "after": 0.01}
    ]
    assert payloads(recorder, PROVIDER_HEDGE_SETTLED) == [
        {"winner": "backup", "counted": ["backup"]}
    ]
    assert result.usage.input_tokens == 7  # the cancelled request reported nothing


async def test_a_provider_that_answers_in_time_is_not_hedged() -> None:
    primary = Fake("primary", says("quick"))
    backup = Fake("backup", says("never"))
    policy = {"fallback": ["backup"], "hedge_after": 60}
    async with session_with(policy, primary, backup) as (session, recorder):
        result = await session.run("hi")
    assert result.text == "quick"
    assert backup.calls == 0
    assert not payloads(recorder, PROVIDER_HEDGE)


async def test_a_streaming_hedge_is_won_by_the_first_token_and_the_loser_stream_closed() -> None:
    slow = Fake("slow", stream_parts=["never"])
    slow_stream = slow.stream

    @asynccontextmanager
    async def hanging(request: ChatRequest, **kwargs: Any) -> AsyncIterator[Any]:
        async with slow_stream(request, **kwargs) as events:
            await anyio.sleep_forever()  # the server never sends a byte
            yield events

    slow.stream = hanging  # type: ignore[method-assign]
    fast = Fake("fast", stream_parts=["first ", "wins"])
    policy = {"fallback": ["fast"], "hedge_after": 0.01}
    async with session_with(policy, slow, fast, orchestrator="loop-streaming") as (
        session,
        recorder,
    ):
        result = await session.run("hi")
        assert len(await assistant_messages(session)) == 1
    assert result.text == "first wins"
    assert (slow.cancelled, slow.closed) == (1, 1)
    assert {p["provider"] for p in payloads(recorder, CONTENT_BLOCK_DELTA)} == {"fast"}


async def test_a_failing_hedge_leaves_the_primary_running() -> None:
    failed_over = anyio.Event()

    async def waits(_fake: Fake) -> ChatResponse:
        await failed_over.wait()  # answers once the hedge's failure was handled
        return answer("primary after all", tokens=3)

    primary = Fake("primary", waits)
    backup = Fake("backup", fails(ProviderUnavailableError("hedge down", status_code=502)))
    policy = {"fallback": ["backup"], "hedge_after": 0.01}
    async with session_with(policy, primary, backup) as (session, recorder):

        async def opened(_event: str, _data: dict[str, Any]) -> None:
            failed_over.set()

        session.coordinator.hooks.register(PROVIDER_FAILOVER, opened, name="test")
        result = await session.run("hi")
    assert result.text == "primary after all"
    (failover,) = payloads(recorder, PROVIDER_FAILOVER)
    assert (failover["from"], failover["to"]) == ("backup", "primary")
    assert primary.cancelled == 0


async def test_a_loser_that_also_answered_is_counted_once() -> None:
    both = anyio.Event()

    async def answers_together(fake: Fake) -> ChatResponse:
        # both requests are in flight, then both answers arrive in the same instant
        if fake.name == "backup":
            both.set()
        await both.wait()
        usage = Usage(input_tokens=5, output_tokens=1, total_tokens=6, cost_usd=Decimal("0.5"))
        return ChatResponse(content=[TextBlock(text=fake.name)], usage=usage)

    primary = Fake("primary", answers_together)
    backup = Fake("backup", answers_together)
    policy = {"fallback": ["backup"], "hedge_after": 0.01}
    async with session_with(policy, primary, backup) as (session, recorder):
        result = await session.run("hi")
        assert len(await assistant_messages(session)) == 1
    (settled,) = payloads(recorder, PROVIDER_HEDGE_SETTLED)
    if settled["counted"] == [settled["winner"]]:  # the loser's cancel came first
        assert result.usage.input_tokens == 5
    else:
        assert sorted(settled["counted"]) == ["backup", "primary"]
        assert result.usage.input_tokens == 10
        assert result.usage.cost_usd == Decimal("1.0")


async def test_with_a_cassette_hedging_is_off(
    tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    primary = Fake("primary", says("recorded"))
    backup = Fake("backup", says("never"))
    policy = {"fallback": ["backup"], "hedge_after": 0.01}
    async with session_with(policy, primary, backup) as (session, recorder):
        await install_cassette(
            session.coordinator, {"path": str(tmp_path / "c.jsonl"), "mode": "record"}
        )
        with caplog.at_level(logging.WARNING):
            result = await session.run("hi")
    assert result.text == "recorded"
    assert not payloads(recorder, PROVIDER_HEDGE)
    assert "hedging is off while a cassette records" in caplog.text


async def test_when_the_winner_breaks_off_the_provider_it_beat_is_asked_again() -> None:
    class SlowThenFine(Fake):
        asked: int

        @asynccontextmanager
        async def stream(self, request: ChatRequest, **kwargs: Any) -> AsyncIterator[Any]:  # type: ignore[override]
            self.asked += 1
            if self.asked == 1:  # the first request never answers: the hedge beats it
                try:
                    await anyio.sleep_forever()
                finally:
                    self.closed += 1
            async with Fake.stream(self, request, **kwargs) as events:
                yield events

    slow = SlowThenFine("slow", stream_parts=["steady ", "answer"])
    slow.asked = 0
    fast = Fake("fast", stream_parts=["quick but"], cut=True)
    policy = {"fallback": ["fast"], "hedge_after": 0.01}
    async with session_with(policy, slow, fast, orchestrator="loop-streaming") as (
        session,
        recorder,
    ):
        result = await session.run("hi")
        assert len(await assistant_messages(session)) == 1
    assert result.text == "steady answer"
    assert (slow.asked, slow.closed) == (2, 2)
    (failover,) = payloads(recorder, PROVIDER_FAILOVER)
    assert (failover["from"], failover["to"], failover["partial"]) == ("fast", "slow", True)
