"""Cancel latency with N tool calls in flight, against the floor of cancelling N tasks.

The ``cancel`` suite (run only when named), per backend and N: *floor* is a bare anyio
task group of N tasks that each say they started and then sleep for an hour; once the last
has started, the group's cancel scope is cancelled, and the time from that call to the
``async with`` block's end is the floor. *ours* is a session (loop-basic, context-simple)
whose scripted model asks for N parallel calls of a tool that also says it started and
then sleeps for an hour; once the last call has started,
[`AmplifierSession.cancel(immediate=True)`][amplifier_anyio.AmplifierSession.cancel] is
called, and the time from that call to ``run()`` returning (the turn ``cancelled``, every
call answered in the context) is ours. Both are measured the same way, interleaved repeat
by repeat: median milliseconds and the ratio ours / floor.

Each is also measured with the garbage collector paused from the cancel to the end of the
window (``gc.disable()``, then ``gc.enable()``; the garbage is collected after the clock
stopped). On asyncio every cancelled task leaves a reference cycle behind (its
``CancelledError``'s traceback through the task's frames): the floor's window ends before
a collection runs, ours writes N results and so allocates enough to run one, which then
frees all N tasks' garbage inside our window. The paused numbers compare the work alone.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from amplifier_anyio import AmplifierSession, TurnStatus
from amplifier_anyio.bench.timing import Timing, ratio
from amplifier_anyio.bench.workloads import tool_calls
from amplifier_anyio.models import ChatRequest, ChatResponse, TextBlock, ToolResult
from amplifier_anyio.providers.scripted import ScriptedProvider

__all__ = ("cancel_case", "HOUR")

HOUR = 3600.0
"""How long each in-flight call would sleep if nothing cancelled it."""

_PLAN: dict[str, Any] = {
    "session": {"orchestrator": "loop-basic", "context": "context-simple"},
}

Latency = Callable[[], Awaitable[float]]


class _Started:
    """Counts started tasks; its event is set when the last one has started."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.count = 0
        self.all = anyio.Event()

    def one(self) -> None:
        self.count += 1
        if self.count == self.n:
            self.all.set()


async def _sleeper(started: _Started) -> None:
    started.one()
    await anyio.sleep(HOUR)


async def _floor(n: int, paused: bool) -> float:
    """Seconds from cancelling a task group of ``n`` sleepers to its block's end."""
    started = _Started(n)
    try:
        async with anyio.create_task_group() as tg:
            for _ in range(n):
                tg.start_soon(_sleeper, started)
            await started.all.wait()
            _pause(paused)
            begin = time.perf_counter_ns()
            tg.cancel_scope.cancel()
        return (time.perf_counter_ns() - begin) / 1e9
    finally:
        gc.enable()


def _pause(paused: bool) -> None:
    if paused:
        gc.disable()


class _HangingTool:
    """Says it started, then sleeps for an hour (until cancelled)."""

    name = "sleep"
    description = "Sleep until cancelled."
    input_schema: dict[str, Any] = {"type": "object", "properties": {}}  # noqa: RUF012

    def __init__(self) -> None:
        self.started: _Started | None = None

    async def execute(self, input: dict[str, Any]) -> ToolResult:
        """Count, then sleep."""
        assert self.started is not None
        self.started.one()
        await anyio.sleep(HOUR)
        return ToolResult(success=True, output="woke up")


async def cancel_case(name: str, repeats: int, n: int) -> dict[str, Any]:
    """Cancel latency at ``n`` calls in flight: ours (a session) against the floor."""
    ask = ChatResponse(tool_calls=tool_calls(n), finish_reason="tool_calls")
    answer = ChatResponse(content=[TextBlock(text="done")], finish_reason="stop")

    def reply(request: ChatRequest) -> ChatResponse:
        return answer if request.messages[-1].role == "tool" else ask

    tool = _HangingTool()
    async with AmplifierSession(_PLAN) as session:
        await session.coordinator.mount("providers", ScriptedProvider(reply), name="scripted")
        await session.coordinator.mount("tools", tool)
        variants: dict[str, Latency] = {
            "floor": lambda: _floor(n, paused=False),
            "ours": lambda: _cancel_turn(session, tool, n, paused=False),
            "floor_paused": lambda: _floor(n, paused=True),
            "ours_paused": lambda: _cancel_turn(session, tool, n, paused=True),
        }
        await _cancel_turn(session, tool, n, paused=False)  # untimed warm-up
        samples = await _interleaved(variants, repeats)
    return _summary(name, n, repeats, samples)


async def _cancel_turn(
    session: AmplifierSession, tool: _HangingTool, n: int, paused: bool
) -> float:
    """One timed cancel of ``session``'s turn once its ``n`` calls have all started: seconds
    from ``session.cancel(immediate=True)`` to ``run()`` returning, the turn checked after."""
    context = session.coordinator.get("context")
    await context.clear()
    tool.started = _Started(n)
    begin = 0
    result: Any = None

    async def run() -> None:
        nonlocal result
        result = await session.run("fan out")

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            await tool.started.all.wait()
            _pause(paused)
            begin = time.perf_counter_ns()
            session.cancel(immediate=True)
        elapsed = (time.perf_counter_ns() - begin) / 1e9
    finally:
        gc.enable()
    answered = sum(1 for m in await context.get_messages() if m.get("role") == "tool")
    if result is None or result.status is not TurnStatus.CANCELLED or answered != n:
        status = None if result is None else result.status
        msg = f"the cancelled turn ended {status} with {answered}/{n} calls answered"
        raise RuntimeError(msg)
    return elapsed


def _summary(name: str, n: int, repeats: int, samples: dict[str, list[float]]) -> dict[str, Any]:
    """The case's report entry: every variant's timing and ours over the floor."""
    timings = {variant: Timing(tuple(values)) for variant, values in samples.items()}
    floor, ours = timings["floor"], timings["ours"]
    floor_paused, ours_paused = timings["floor_paused"], timings["ours_paused"]
    return {
        "backend": name,
        "n": n,
        "repeats": repeats,
        **{variant: timing.to_dict() for variant, timing in timings.items()},
        "ratio": ratio(ours.median, floor.median),
        "ratio_min": ratio(ours.min, floor.min),
        "us_per_call": (ours.median - floor.median) / n * 1e6,
        "ratio_paused": ratio(ours_paused.median, floor_paused.median),
    }


async def _interleaved(variants: dict[str, Latency], repeats: int) -> dict[str, list[float]]:
    """Each variant ``repeats`` times, order rotated each repeat, ``gc.collect()`` first."""
    names = list(variants)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for repeat in range(repeats):
        shift = repeat % len(names)
        for name in names[shift:] + names[:shift]:
            gc.collect()
            samples[name].append(await variants[name]())
    return samples
