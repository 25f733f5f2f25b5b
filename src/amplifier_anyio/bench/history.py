"""Long conversations and start-up: what a request costs as the history grows, and how long
``import amplifier_anyio`` and the CLI take to start.

Both suites report, never assert: the numbers depend on the machine. ``history`` is CPU
work and runs on asyncio; ``startup`` starts fresh interpreters.
"""

from __future__ import annotations

import gc
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

from ..contexts import SimpleContextManager
from ..runtime._requests import answer_orphaned_calls, apply_injections, build_request
from .timing import Timing

__all__ = ("history_suite", "startup_suite", "request_cost")

_VIEW = 1_000
"""With compaction on, the budget is sized so that a request keeps about this many messages."""


def _ignore(_: str) -> None:
    """A step callback that shows nothing."""


async def request_cost(context: Any) -> int:
    """Build one provider request as the turn engine does; the number of messages sent.

    The same calls as a loop turn's request (the context's view, the orphaned-call repair,
    the injections, the ``ChatRequest``), without a provider.
    """
    messages = await context.get_messages_for_request()
    messages, _ = answer_orphaned_calls(messages)
    request = build_request(apply_injections(messages, []), None)
    return len(request.messages)


def _round(index: int) -> list[dict[str, Any]]:
    """One tool round: the assistant's call and the tool's answer."""
    call_id = f"call_{index}"
    text = "lorem ipsum dolor sit amet " * 8
    return [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": call_id, "name": "sleep", "arguments": {"i": index}}],
        },
        {"role": "tool", "tool_call_id": call_id, "name": "sleep", "content": text},
    ]


def _context(compaction: bool, per_message: int) -> SimpleContextManager:
    if not compaction:
        return SimpleContextManager(max_tokens=10**12)
    # compact above ~_VIEW messages, down to half of that
    return SimpleContextManager(max_tokens=per_message * _VIEW)


async def _request_case(
    size: int, compaction: bool, repeats: int, history: list[dict[str, Any]]
) -> dict[str, Any]:
    probe = SimpleContextManager()
    await probe.set_messages(history[:100])
    per_message = max(probe.token_estimate // 100, 1)
    context = _context(compaction, per_message)
    await context.set_messages(history[:size])
    await request_cost(context)  # untimed: as in a running agent, not its first request
    times, sent = [], 0
    for _ in range(repeats):
        gc.collect()
        start = time.perf_counter_ns()
        sent = await request_cost(context)
        times.append((time.perf_counter_ns() - start) / 1e9)
    timing = Timing(tuple(times))
    return {
        "messages": size,
        "compaction": compaction,
        "sent": sent,
        "repeats": repeats,
        "request": timing.to_dict(),
        "request_ms": timing.median * 1e3,
        "us_per_message": timing.median / size * 1e6,
    }


async def _run_case(iterations: int, compaction: bool, history: list[dict[str, Any]]) -> Any:
    """An agent run of ``iterations`` tool rounds: add the round, build the next request."""
    probe = SimpleContextManager()
    await probe.set_messages(history[:100])
    context = _context(compaction, max(probe.token_estimate // 100, 1))
    await context.set_messages(history[:2])  # system, user
    costs = []
    gc.collect()
    for index in range(iterations):
        await context.add_messages(_round(index))
        start = time.perf_counter_ns()
        await request_cost(context)
        costs.append((time.perf_counter_ns() - start) / 1e9)
    tenth = max(len(costs) // 10, 1)
    first, last = sorted(costs[:tenth]), sorted(costs[-tenth:])
    return {
        "iterations": iterations,
        "compaction": compaction,
        "total_s": sum(costs),
        "first_tenth_median_ms": first[len(first) // 2] * 1e3,
        "last_tenth_median_ms": last[len(last) // 2] * 1e3,
        "growth": last[len(last) // 2] / max(first[len(first) // 2], 1e-9),
    }


def history_suite(
    sizes: tuple[int, ...], iterations: int, repeats: int, step: Any = _ignore
) -> dict[str, Any]:
    """Per-request cost at each history size (context-simple, compaction off and on), and
    the request cost summed over an agent run of ``iterations`` tool rounds.

    ``slope`` is the log-log slope of request time against size (0: constant, 1: linear);
    ``growth`` is the last tenth's median request over the first tenth's.
    """
    from .suites import conversation  # noqa: PLC0415 - suites imports this module's callers

    history = conversation(max(*sizes, 100))
    cases: list[dict[str, Any]] = []
    for compaction in (False, True):
        for size in sizes:
            cases.append(anyio.run(_request_case, size, compaction, repeats, history))
            step(f"history: request at {size} messages, compaction {'on' if compaction else 'off'}")
    runs = []
    for compaction in (False, True):
        runs.append(anyio.run(_run_case, iterations, compaction, history))
        step(f"history: {iterations}-round run, compaction {'on' if compaction else 'off'}")
    slopes = {}
    for compaction in (False, True):
        own = [c for c in cases if c["compaction"] is compaction]
        slopes["on" if compaction else "off"] = _slope(
            [math.log(c["messages"]) for c in own],
            [math.log(max(c["request"]["median_s"], 1e-9)) for c in own],
        )
    return {"cases": cases, "runs": runs, "slope": slopes}


def _slope(xs: list[float], ys: list[float]) -> float | None:
    if len(xs) < 2:
        return None
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    spread = sum((x - mean_x) ** 2 for x in xs)
    if spread == 0:
        return None
    return sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / spread


_DEMO_PLAN = """\
session: {orchestrator: loop-basic, context: context-simple}
orchestrator: {config: {max_iterations: 8}}
providers: [{module: provider-scripted, config: {demo: true}}]
tools: [{module: tool-demo, config: {delay: 0}}]
"""
"""The CLI's embedded demo plan with the demo tools' deliberate 0.3 s delay set to 0."""


def _commands(plan: Path) -> dict[str, list[str]]:
    python = sys.executable
    # the console script beside this interpreter (a venv's bin/), else the same entry point
    script = Path(python).with_name("amplifier-anyio")
    if not script.exists():
        script = Path(shutil.which("amplifier-anyio") or script)
    cli = (
        [str(script)]
        if script.exists()
        else [python, "-c", "from amplifier_anyio.cli import main; main()"]
    )
    return {
        "python -c pass": [python, "-c", "pass"],
        "import amplifier_anyio": [python, "-c", "import amplifier_anyio"],
        "import AmplifierSession": [python, "-c", "from amplifier_anyio import AmplifierSession"],
        "cli --help": [*cli, "--help"],
        "cli run (demo, no delay)": [*cli, "run", "--plan", str(plan), "hi"],
    }


def startup_suite(repeats: int, step: Any = _ignore) -> dict[str, Any]:
    """Wall time of fresh interpreters: bare Python, the import, the CLI; median of
    ``repeats`` runs interleaved command by command, and each over ``python -c pass``."""
    with tempfile.TemporaryDirectory() as directory:
        plan = Path(directory) / "demo.yaml"
        plan.write_text(_DEMO_PLAN, encoding="utf-8")
        commands = _commands(plan)
        env = {**os.environ, "NO_COLOR": "1"}
        times: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(repeats):
            for name, command in commands.items():
                start = time.perf_counter_ns()
                subprocess.run(  # noqa: S603 - our own interpreter and script
                    command, env=env, check=True, capture_output=True, timeout=60
                )
                times[name].append((time.perf_counter_ns() - start) / 1e9)
        step("startup")
    bare = Timing(tuple(times["python -c pass"])).median  # the first command
    cases = []
    for name, values in times.items():
        timing = Timing(tuple(values))
        cases.append(
            {
                "command": name,
                "repeats": repeats,
                "wall": timing.to_dict(),
                "median_ms": timing.median * 1e3,
                "over_python_ms": (timing.median - bare) * 1e3,
            }
        )
    return {"cases": cases}
