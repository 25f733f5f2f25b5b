"""The reference orchestrator against the clock: parallel waves, chains, retry backoff.

trio runs on a fresh ``MockClock(autojump_threshold=0)`` (the conftest's
``virtual_backend``), so the durations asserted there are virtual and exact to a small
tolerance; asyncio runs the same scenarios on the real clock scaled down by ``s``, and
asserts what does not depend on the machine's speed (how many steps ran at once, that a
backoff never waited less than its lower bound).
"""

from __future__ import annotations

import itertools
import random
from typing import Any

import anyio
import pytest

from amplifier_anyio.lifecycle import (
    ErrorPropagation,
    ExecutionContext,
    LifecycleStage,
    OrchestrationResult,
    Planner,
    ReferenceOrchestrator,
    RetryPolicy,
    Step,
)

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend(virtual_backend: tuple[str, dict[str, object]]) -> tuple[str, dict[str, object]]:
    return virtual_backend


@pytest.fixture
def virtual(anyio_backend: tuple[str, dict[str, object]]) -> bool:
    return anyio_backend[0] == "trio"


@pytest.fixture
def s(virtual: bool) -> float:
    """Seconds per scenario second: 1 on virtual time, 1/10 on the real clock (its windows,
    100 ms and more, hold on a loaded machine; at 1/50 a 20 ms call once missed its
    100 ms window while two suites ran at once)."""
    return 1.0 if virtual else 0.1


class Sleeper:
    """A worker that sleeps ``seconds`` and records how many steps ran at once."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.in_flight = 0
        self.peak = 0
        self.finished: list[str] = []

    async def __call__(self, step: Step, context: ExecutionContext) -> str:
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            await anyio.sleep(self.seconds)
        finally:
            self.in_flight -= 1
        self.finished.append(step.id)
        return step.id


def planned(steps: list[Step]) -> Planner:
    async def plan(goal: str, context: ExecutionContext) -> list[Step]:
        await anyio.lowlevel.checkpoint()
        return steps

    return plan


async def timed(
    orchestrator: ReferenceOrchestrator, **kwargs: Any
) -> tuple[float, OrchestrationResult]:
    start = anyio.current_time()
    result = await orchestrator.run("goal", ExecutionContext(trace_id="t"), **kwargs)
    return anyio.current_time() - start, result


async def test_ten_independent_steps_of_one_second_take_one_second(s: float, virtual: bool) -> None:
    worker = Sleeper(1 * s)
    steps = [Step(f"s{n}", "work") for n in range(10)]
    orchestrator = ReferenceOrchestrator({"w": worker}, planner=planned(steps))

    elapsed, result = await timed(orchestrator)

    assert result.stage is LifecycleStage.COMPLETE
    assert worker.peak == 10
    assert result.metrics.total_steps == result.metrics.successful_steps == 10
    if virtual:
        assert elapsed == pytest.approx(1.0, abs=0.01)
        assert result.metrics.average_step_duration_ms == pytest.approx(1000.0, abs=10.0)
    else:
        assert result.metrics.average_step_duration_ms >= 1000.0 * s


async def test_a_chain_of_ten_steps_of_one_second_takes_ten_seconds(
    s: float, virtual: bool
) -> None:
    worker = Sleeper(1 * s)
    steps = [Step("s0", "work")] + [
        Step(f"s{n}", "work", depends_on=[f"s{n - 1}"]) for n in range(1, 10)
    ]
    orchestrator = ReferenceOrchestrator({"w": worker}, planner=planned(steps))

    elapsed, result = await timed(orchestrator)

    assert result.stage is LifecycleStage.COMPLETE
    assert worker.peak == 1
    assert worker.finished == [f"s{n}" for n in range(10)]
    if virtual:
        assert elapsed == pytest.approx(10.0, abs=0.01)


async def test_max_parallel_bounds_a_wave(s: float, virtual: bool) -> None:
    worker = Sleeper(1 * s)
    steps = [Step(f"s{n}", "work") for n in range(10)]
    orchestrator = ReferenceOrchestrator(
        {"w": worker},
        planner=planned(steps),
        max_parallel=3,
    )

    elapsed, _ = await timed(orchestrator)

    assert worker.peak == 3
    if virtual:
        assert elapsed == pytest.approx(4.0, abs=0.01)  # ceil(10 / 3) rounds


async def test_a_step_timeout_is_a_failure_of_that_step(s: float, virtual: bool) -> None:
    orchestrator = ReferenceOrchestrator({"w": Sleeper(3600 * s)}, step_timeout=2 * s)

    elapsed, result = await timed(orchestrator, error_strategy=ErrorPropagation.CONTINUE)

    assert result.failed_steps == ("step-1",)
    assert "timed out" in result.events[-3]["data"]["error"]
    if virtual:
        assert elapsed == pytest.approx(2.0, abs=0.01)


async def test_retry_backs_off_exponentially_with_jitter_within_the_bounds(
    s: float, virtual: bool
) -> None:
    policy = RetryPolicy(
        max_attempts=5, base_delay=1 * s, multiplier=2.0, jitter=0.25, max_delay=6 * s
    )
    attempts: list[float] = []

    async def flaky(step: Step, context: ExecutionContext) -> str:
        await anyio.lowlevel.checkpoint()
        attempts.append(anyio.current_time())
        if len(attempts) < 5:
            raise ConnectionError("try again")
        return "ok"

    orchestrator = ReferenceOrchestrator({"w": flaky}, retry=policy, rng=random.Random(7))

    _, result = await timed(orchestrator, error_strategy=ErrorPropagation.RETRY)

    assert result.stage is LifecycleStage.COMPLETE
    assert result.metrics.retries == 4
    # The one step's duration covers all five attempts and the four backoffs between them.
    assert result.metrics.average_step_duration_ms >= (attempts[-1] - attempts[0]) * 1000.0
    waits = [b - a for a, b in itertools.pairwise(attempts)]
    for attempt, waited in enumerate(waits, start=1):
        low, high = policy.bounds(attempt)
        assert waited >= low - 0.001
        if virtual:
            assert waited <= high + 0.001
    if virtual:
        # Jitter really moves the delays: not all of them are the nominal value.
        nominal = [min(2 ** (n - 1), 6) for n in range(1, 5)]
        assert any(abs(w - n) > 0.01 for w, n in zip(waits, nominal, strict=True))


async def test_the_timeout_cancels_a_wave_at_its_deadline(s: float, virtual: bool) -> None:
    worker = Sleeper(3600 * s)
    orchestrator = ReferenceOrchestrator({"w": worker})

    elapsed, result = await timed(orchestrator, timeout=5 * s)

    assert result.stage is LifecycleStage.CANCELLED
    if virtual:
        assert elapsed == pytest.approx(5.0, abs=0.01)
