"""Sessions as a service embedding them meets them: opened and closed per request, many at
once, idle in memory, and the fan-out turn through one.

The ``sessions`` suite (run only when named), per backend:

- **open + close**: ``async with AmplifierSession(plan): pass``, one after another, for
  three plans (loop-basic + context-simple; + provider-scripted; the CLI's demo plan:
  + the demo script and tool-demo); microseconds per session, median over repeats of
  `OPENS_PER_JOB` sessions each. The process has loaded each plan's modules once before
  (an untimed open), as a service has after its first request.
- **session path**: the fan-out turn (N calls of the sleep tool, `FanoutTurn`'s script)
  through [`AmplifierSession.run`][amplifier_anyio.AmplifierSession.run] with context-simple,
  against loop-basic driven alone with `LeanContext`, and the task-group floor, interleaved; the
  difference per call is what a session adds to the loop.
- **concurrent sessions**: C sessions of the demo plan (tool delay 0) opened at once, each
  running one turn (the scripted model calls both demo tools in parallel, then answers)
  and closing; milliseconds for all of them, microseconds per session.
- **memory per idle session**: C demo-plan sessions held open at once (entered, no turn
  yet), traced bytes per session.
"""

from __future__ import annotations

import contextlib
import copy
import gc
import tracemalloc
from typing import Any

import anyio

from amplifier_anyio import AmplifierSession, TurnStatus
from amplifier_anyio.bench.timing import time_variants, traced
from amplifier_anyio.bench.workloads import FanoutTurn, Job, SleepTool, prepare_floor, tool_calls
from amplifier_anyio.models import ChatRequest, ChatResponse, TextBlock
from amplifier_anyio.providers.scripted import ScriptedProvider

__all__ = (
    "OPEN_PLANS",
    "OPENS_PER_JOB",
    "open_close_cases",
    "session_path_case",
    "concurrent_sessions_case",
    "idle_memory_case",
)

_BASIC: dict[str, Any] = {"session": {"orchestrator": "loop-basic", "context": "context-simple"}}
_SCRIPTED: dict[str, Any] = {
    **_BASIC,
    "providers": [{"module": "provider-scripted", "config": {"responses": []}}],
}
_DEMO: dict[str, Any] = {
    **_BASIC,
    "orchestrator": {"config": {"max_iterations": 8}},
    "providers": [{"module": "provider-scripted", "config": {"demo": True}}],
    "tools": [{"module": "tool-demo", "config": {"delay": 0}}],
}

OPEN_PLANS: dict[str, dict[str, Any]] = {
    "loop-basic + context-simple": _BASIC,
    "+ provider-scripted": _SCRIPTED,
    "demo plan (+ tool-demo)": _DEMO,
}
"""The plans whose open + close is timed, by label."""

OPENS_PER_JOB = 50
"""Sessions opened and closed one after another in one timed job."""


def _plan(name: str) -> dict[str, Any]:
    return copy.deepcopy(OPEN_PLANS[name])  # a session may keep what it is given


async def open_close_cases(name: str, repeats: int) -> list[dict[str, Any]]:
    """Open + close of each plan in `OPEN_PLANS`, interleaved plan by plan."""
    plans = {label: _plan(label) for label in OPEN_PLANS}
    for plan in plans.values():  # first use: imports, the entry-point index (not timed)
        async with AmplifierSession(copy.deepcopy(plan)):
            pass

    def opener(plan: dict[str, Any]) -> Any:
        def prepare() -> Job:
            fresh = [copy.deepcopy(plan) for _ in range(OPENS_PER_JOB)]

            async def run() -> None:
                for each in fresh:
                    async with AmplifierSession(each):
                        pass

            return run

        return prepare

    timings = await time_variants({label: opener(plan) for label, plan in plans.items()}, repeats)
    return [
        {
            "backend": name,
            "plan": label,
            "sessions": OPENS_PER_JOB,
            "repeats": repeats,
            "open_close": timing.to_dict(),
            "us_per_session": timing.median / OPENS_PER_JOB * 1e6,
            "us_per_session_min": timing.min / OPENS_PER_JOB * 1e6,
        }
        for label, timing in timings.items()
    ]


async def session_path_case(name: str, repeats: int, n: int, delay: float) -> dict[str, Any]:
    """The fan-out turn through a session (context-simple) against the loop alone."""
    ask = ChatResponse(tool_calls=tool_calls(n), finish_reason="tool_calls")
    answer = ChatResponse(content=[TextBlock(text="done")], finish_reason="stop")

    def reply(request: ChatRequest) -> ChatResponse:
        return answer if request.messages[-1].role == "tool" else ask

    loop = FanoutTurn(n=n, delay=delay)
    async with AmplifierSession(_plan("loop-basic + context-simple")) as session:
        coordinator = session.coordinator
        await coordinator.mount("providers", ScriptedProvider(reply), name="scripted")
        await coordinator.mount("tools", SleepTool(delay))
        context = coordinator.get("context")
        results: list[Any] = []

        def through_session() -> Job:
            async def run() -> None:
                await context.clear()  # one checkpoint; the history does not grow
                results.append(await session.run("fan out"))

            return run

        def check() -> None:
            result = results.pop()
            if result.status is not TurnStatus.SUCCESS:
                msg = f"the session's fan-out turn ended {result.status}"
                raise RuntimeError(msg)

        await through_session()()  # untimed warm-up
        check()
        timings = await time_variants(
            {
                "floor": lambda: prepare_floor(n, delay),
                "loop": loop.prepare,
                "session": through_session,
            },
            repeats,
            {"loop": loop.check, "session": check},
        )
    floor, loop_t, session_t = timings["floor"], timings["loop"], timings["session"]
    return {
        "backend": name,
        "n": n,
        "delay_ms": delay * 1000,
        "repeats": repeats,
        "floor": floor.to_dict(),
        "loop": loop_t.to_dict(),
        "session": session_t.to_dict(),
        "loop_us_per_call": (loop_t.median - floor.median) / n * 1e6,
        "session_us_per_call": (session_t.median - floor.median) / n * 1e6,
        "session_over_loop_us_per_call": (session_t.median - loop_t.median) / n * 1e6,
    }


async def _one_session_turn(plan: dict[str, Any], failures: list[str]) -> None:
    async with AmplifierSession(plan) as session:
        result = await session.run("count the words")
    if result.status is not TurnStatus.SUCCESS:
        failures.append(str(result.status))


async def concurrent_sessions_case(name: str, repeats: int, count: int) -> dict[str, Any]:
    """``count`` demo-plan sessions opened at once, each running one turn."""
    failures: list[str] = []

    def prepare() -> Job:
        plans = [_plan("demo plan (+ tool-demo)") for _ in range(count)]

        async def run() -> None:
            async with anyio.create_task_group() as tg:
                for plan in plans:
                    tg.start_soon(_one_session_turn, plan, failures)

        return run

    def check() -> None:
        if failures:
            msg = f"{len(failures)} of {count} concurrent session turns failed: {failures[0]}"
            raise RuntimeError(msg)

    await _one_session_turn(_plan("demo plan (+ tool-demo)"), failures)  # warm-up
    check()
    timing = (await time_variants({"sessions": prepare}, repeats, {"sessions": check}))["sessions"]
    return {
        "backend": name,
        "sessions": count,
        "repeats": repeats,
        "all": timing.to_dict(),
        "us_per_session": timing.median / count * 1e6,
    }


async def idle_memory_case(name: str, count: int) -> dict[str, Any]:
    """Traced bytes per demo-plan session held open and idle (``count`` at once)."""
    plans = [_plan("demo plan (+ tool-demo)") for _ in range(count)]
    with traced() as base:
        async with contextlib.AsyncExitStack() as stack:
            for plan in plans:
                await stack.enter_async_context(AmplifierSession(plan))
            gc.collect()
            held, _ = tracemalloc.get_traced_memory()
    return {
        "backend": name,
        "sessions": count,
        "bytes_per_session": max(held - base, 0) / count,
    }
