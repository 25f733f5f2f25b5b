"""One-tool turns: a turn's fixed cost through a session and through loop-basic alone.

The ``turn`` suite (run only when named). Each timed job is ``turns`` consecutive turns of
one tool call: the scripted model asks for one call of the zero-delay sleep tool, then
answers. ``session`` runs them through
[`AmplifierSession.run`][amplifier_anyio.AmplifierSession.run] (loop-basic, context-simple, the
session open for the whole case; the history is cleared before each turn, inside the job, so that
the cost does not grow with it); ``loop`` runs prepared `FanoutTurn` turns of one call (loop-basic
with a `LeanContext`, no session). The result is microseconds per turn, median over repeats.
"""

from __future__ import annotations

from typing import Any

from amplifier_anyio import AmplifierSession, TurnStatus
from amplifier_anyio.bench.timing import time_variants
from amplifier_anyio.bench.workloads import FanoutTurn, Job, SleepTool
from amplifier_anyio.models import ChatRequest, ChatResponse, TextBlock, ToolCall
from amplifier_anyio.providers.scripted import ScriptedProvider

__all__ = ("turn_case",)

_ASK = ChatResponse(tool_calls=[ToolCall(id="call_0", name=SleepTool.name)])
_ANSWER = ChatResponse(content=[TextBlock(text="done")], finish_reason="stop")
_PLAN: dict[str, Any] = {
    "session": {"orchestrator": "loop-basic", "context": "context-simple"},
    "providers": [{"module": "provider-scripted", "config": {"responses": []}}],
}


def _reply(request: ChatRequest) -> ChatResponse:
    """Ask for the tool, then answer once its result is the last message."""
    return _ANSWER if request.messages[-1].role == "tool" else _ASK


async def turn_case(name: str, repeats: int, turns: int) -> dict[str, Any]:
    """``turns`` one-tool turns per timed job, through a session and through the loop."""
    async with AmplifierSession(_PLAN) as session:
        coordinator = session.coordinator
        await coordinator.mount("providers", ScriptedProvider(_reply), name="scripted")
        await coordinator.mount("tools", SleepTool(0.0))
        context = coordinator.get("context")
        last: list[Any] = []

        def through_session() -> Job:
            async def run() -> None:
                for _ in range(turns):
                    await context.clear()
                    last.append(await session.run("go"))

            return run

        def loop_alone() -> Job:
            prepared = [FanoutTurn(n=1, delay=0.0) for _ in range(turns)]
            jobs = [turn.prepare() for turn in prepared]

            async def run() -> None:
                for job in jobs:
                    result = await job()
                    last.append(result)

            return run

        def check() -> None:
            failed = [r for r in last if r.status is not TurnStatus.SUCCESS]
            if len(last) != turns or failed:
                msg = f"{len(failed)} of {len(last)} one-tool turns did not succeed"
                raise RuntimeError(msg)
            last.clear()

        await through_session()()  # untimed warm-up (first-call costs are not a turn's)
        last.clear()
        timings = await time_variants(
            {"session": through_session, "loop": loop_alone},
            repeats,
            {"session": check, "loop": check},
        )
    session_t, loop_t = timings["session"], timings["loop"]
    return {
        "backend": name,
        "turns": turns,
        "repeats": repeats,
        "session": session_t.to_dict(),
        "loop": loop_t.to_dict(),
        "session_us_per_turn": session_t.median / turns * 1e6,
        "loop_us_per_turn": loop_t.median / turns * 1e6,
    }
