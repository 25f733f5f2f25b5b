"""HookRegistry under time: per-handler timeouts of emit_and_collect and deadlines around emit.

On trio these run on an autojump ``MockClock``, so durations are virtual and exact; asyncio
runs the same scenarios on the real clock and only checks outcomes, with durations chosen so
that no outcome depends on how busy the machine is: a handler meant to finish within a
timeout takes no time at all (or a small share of it), one meant to outlast it sleeps for
an hour (``span``).
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from amplifier_anyio.kernel import HookRegistry
from amplifier_anyio.models import HookResult

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend(virtual_backend: tuple[str, dict[str, object]]) -> tuple[str, dict[str, object]]:
    return virtual_backend


@pytest.fixture
def unit(anyio_backend: tuple[str, dict[str, object]]) -> float:
    """One second of the scenario: virtual on trio, a tenth of a real one on asyncio."""
    return 1.0 if "clock" in anyio_backend[1] else 0.1


@pytest.fixture
def span(virtual: bool) -> Any:
    """``span(exact, real)``: the exact virtual duration on trio, ``real`` on asyncio."""
    return lambda exact, real: exact if virtual else real


@pytest.fixture
def virtual(anyio_backend: tuple[str, dict[str, object]]) -> bool:
    """Whether elapsed time is virtual (and so can be asserted exactly)."""
    return "clock" in anyio_backend[1]


def sleeper(seconds: float, label: str, finished: list[str] | None = None) -> Any:
    """A handler that sleeps, then answers with ``{"label": label}``."""

    async def handler(event: str, data: dict[str, Any]) -> HookResult:
        await anyio.sleep(seconds)
        if finished is not None:
            finished.append(label)
        return HookResult(data={"label": label})

    return handler


async def test_emit_and_collect_times_out_each_handler_on_its_own(
    span: Any, virtual: bool, caplog: pytest.LogCaptureFixture
) -> None:
    hooks = HookRegistry()
    hooks.register("e", sleeper(span(0.5, 0), "quick"))
    hooks.register("e", sleeper(span(2, 3600), "slow"), priority=1, name="slow-hook")
    hooks.register("e", sleeper(span(0.5, 0), "quick-too"), priority=2)

    start = anyio.current_time()
    collected = await hooks.emit_and_collect("e", {}, timeout=span(1, 0.2))
    elapsed = anyio.current_time() - start

    assert collected == [{"label": "quick"}, {"label": "quick-too"}]
    assert "slow-hook" in caplog.text
    if virtual:
        # 0.5 + 1 (the slow one abandoned at its timeout) + 0.5.
        assert elapsed == pytest.approx(2.0, abs=1e-9)


async def test_emit_and_collect_timeout_is_not_a_shared_budget(span: Any, virtual: bool) -> None:
    hooks = HookRegistry()
    for index in range(3):
        hooks.register("e", sleeper(span(0.8, 0.1), f"h{index}"), priority=index)

    start = anyio.current_time()
    # On asyncio each handler has 25 times its sleep: the sum (0.3) still exceeds a budget
    # of 0.25 that a shared timeout would be, were the timeout shared.
    collected = await hooks.emit_and_collect("e", {}, timeout=span(1, 2.5))
    elapsed = anyio.current_time() - start

    # 2.4 s in total is more than the timeout, yet each handler stayed within its own.
    assert collected == [{"label": "h0"}, {"label": "h1"}, {"label": "h2"}]
    if virtual:
        assert elapsed == pytest.approx(2.4, abs=1e-9)


async def test_timed_out_handler_does_not_keep_running(unit: float) -> None:
    hooks = HookRegistry()
    finished: list[str] = []
    hooks.register("e", sleeper(3 * unit, "slow", finished))

    await hooks.emit_and_collect("e", {}, timeout=1 * unit)
    # Give a leaked background handler every chance to finish.
    await anyio.sleep(4 * unit)

    assert finished == []


async def test_outer_deadline_around_emit_and_collect_propagates(span: Any, virtual: bool) -> None:
    hooks = HookRegistry()
    finished: list[str] = []
    # On asyncio h0 and h1 take no time and h2 outlasts the outer deadline by far.
    durations = [0.5] * 4 if virtual else [0, 0, 3600, 0]
    for index, seconds in enumerate(durations):
        hooks.register("e", sleeper(seconds, f"h{index}", finished), priority=index)
    collected: list[dict[str, Any]] | None = None

    start = anyio.current_time()
    with anyio.move_on_after(span(1.25, 0.2)) as scope:
        collected = await hooks.emit_and_collect("e", {}, timeout=span(1, 3600))
    elapsed = anyio.current_time() - start

    # The caller's deadline is not mistaken for a handler's own timeout.
    assert scope.cancelled_caught
    assert collected is None
    assert finished == ["h0", "h1"]
    if virtual:
        assert elapsed == pytest.approx(1.25, abs=1e-9)


async def test_emit_has_no_timeout_of_its_own(unit: float, virtual: bool) -> None:
    hooks = HookRegistry()
    finished: list[str] = []
    # Longer than emit_and_collect's default timeout: emit waits for it all the same.
    hooks.register("e", sleeper(3 * unit, "patient", finished))

    start = anyio.current_time()
    await hooks.emit("e", {})
    elapsed = anyio.current_time() - start

    assert finished == ["patient"]
    if virtual:
        assert elapsed == pytest.approx(3.0, abs=1e-9)


async def test_deadline_around_emit_interrupts_the_handler_at_the_deadline(
    span: Any, virtual: bool
) -> None:
    hooks = HookRegistry()
    finished: list[str] = []
    hooks.register("e", sleeper(span(0.5, 0), "first", finished))
    hooks.register("e", sleeper(span(10, 3600), "slow", finished), priority=1)
    hooks.register("e", sleeper(span(0.5, 0), "never", finished), priority=2)

    start = anyio.current_time()
    with anyio.move_on_after(span(2, 0.2)) as scope:
        await hooks.emit("e", {})
    elapsed = anyio.current_time() - start

    assert scope.cancelled_caught
    assert finished == ["first"]
    if virtual:
        assert elapsed == pytest.approx(2.0, abs=1e-9)
