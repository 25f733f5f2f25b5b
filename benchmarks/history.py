"""Long conversations and start-up: what a request costs as the history grows, how long
loading a long persistent history takes, and how long ``import amplifier_anyio`` and the
CLI take to start.

Both suites report, never assert: the numbers depend on the machine. ``history`` is CPU
work (and, for context-persistent, file work outside the timed regions except the load)
and runs on asyncio; ``startup`` starts fresh interpreters.
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

from amplifier_anyio.bench.timing import Timing
from amplifier_anyio.contexts import PersistentContextManager, SimpleContextManager
from amplifier_anyio.runtime import _requests

__all__ = ("history_suite", "startup_suite", "request_cost", "CONTEXTS")

_VIEW = 1_000
"""With compaction on, the budget is sized so that a request keeps about this many messages."""

CONTEXTS = ("simple", "persistent")
"""The contexts the history suite measures: context-simple and context-persistent."""


def _ignore(_: str) -> None:
    """A step callback that shows nothing."""


async def request_cost(context: Any) -> int:
    """Build one provider request as the turn engine does; the number of messages sent.

    The same calls as a loop turn's request (the context's view with every tool call
    answered, the injections, the ``ChatRequest``), without a provider.
    """
    fast = getattr(_requests, "request_messages", None)
    if fast is not None:
        messages, _ = await fast(context)
        request = _requests.chat_request(_requests.inject(messages, []), None)
    else:  # a tree before the request view (for before / after runs of this suite)
        dicts = await context.get_messages_for_request()
        dicts, _ = _requests.answer_orphaned_calls(dicts)
        request = _requests.build_request(_requests.apply_injections(dicts, []), None)
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


async def _per_message(history: list[dict[str, Any]]) -> int:
    probe = SimpleContextManager()
    await probe.set_messages(history[:100])
    return max(probe.token_estimate // 100, 1)


def _context(kind: str, compaction: bool, per_message: int, directory: Path) -> Any:
    # without compaction a budget no history reaches; with it, compact above ~_VIEW
    # messages, down to half of that
    max_tokens = per_message * _VIEW if compaction else 10**12
    if kind == "persistent":
        return PersistentContextManager(directory / "context-messages.jsonl", max_tokens=max_tokens)
    return SimpleContextManager(max_tokens=max_tokens)


async def _request_case(
    kind: str, size: int, compaction: bool, repeats: int, history: list[dict[str, Any]]
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as directory:
        context = _context(kind, compaction, await _per_message(history), Path(directory))
        await context.set_messages(history[:size])
        await request_cost(context)  # untimed: as in a running agent, not its first request
        times: list[float] = []
        sent = 0
        for _ in range(repeats):
            # as in a running agent: one tool round added since the last request
            await context.add_messages(_round(10**6 + len(times)))
            gc.collect()
            start = time.perf_counter_ns()
            sent = await request_cost(context)
            times.append((time.perf_counter_ns() - start) / 1e9)
    timing = Timing(tuple(times))
    return {
        "context": kind,
        "messages": size,
        "compaction": compaction,
        "sent": sent,
        "repeats": repeats,
        "request": timing.to_dict(),
        "request_ms": timing.median * 1e3,
        "us_per_message": timing.median / size * 1e6,
    }


async def _run_case(
    kind: str, iterations: int, compaction: bool, history: list[dict[str, Any]]
) -> Any:
    """An agent run of ``iterations`` tool rounds: add the round, build the next request."""
    with tempfile.TemporaryDirectory() as directory:
        context = _context(kind, compaction, await _per_message(history), Path(directory))
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
        "context": kind,
        "iterations": iterations,
        "compaction": compaction,
        "total_s": sum(costs),
        "first_tenth_median_ms": first[len(first) // 2] * 1e3,
        "last_tenth_median_ms": last[len(last) // 2] * 1e3,
        "growth": last[len(last) // 2] / max(first[len(first) // 2], 1e-9),
    }


async def _load_case(size: int, repeats: int, history: list[dict[str, Any]]) -> dict[str, Any]:
    """Loading a context-persistent file of ``size`` messages (a new manager each time)."""
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "context-messages.jsonl"
        async with PersistentContextManager(path) as writer:
            await writer.set_messages(history[:size])
        times, loaded = [], 0
        for _ in range(repeats):
            context = PersistentContextManager(path)
            gc.collect()
            start = time.perf_counter_ns()
            await context.load()
            times.append((time.perf_counter_ns() - start) / 1e9)
            loaded = len(await context.get_messages())
            await context.aclose()  # one writer at a time: the next load is another one
    timing = Timing(tuple(times))
    return {
        "messages": size,
        "loaded": loaded,
        "repeats": repeats,
        "load": timing.to_dict(),
        "load_ms": timing.median * 1e3,
    }


def history_suite(
    sizes: tuple[int, ...], iterations: int, repeats: int, step: Any = _ignore
) -> dict[str, Any]:
    """Per-request cost at each history size (context-simple and context-persistent,
    compaction off and on), the request cost summed over an agent run of ``iterations``
    tool rounds, and the time to load a context-persistent file of the largest size.

    Each timed request follows one tool round added since the previous request, as in a
    running agent. ``slope`` is the log-log slope of request time against size (0:
    constant, 1: linear), per context and compaction; ``growth`` is the last tenth's
    median request over the first tenth's.
    """
    from amplifier_anyio.bench.suites import conversation  # noqa: PLC0415 - suites imports this module's callers

    history = conversation(max(*sizes, 100))
    cases: list[dict[str, Any]] = []
    for kind in CONTEXTS:
        for compaction in (False, True):
            for size in sizes:
                cases.append(anyio.run(_request_case, kind, size, compaction, repeats, history))
                step(
                    f"history: context-{kind}, request at {size} messages, "
                    f"compaction {'on' if compaction else 'off'}"
                )
    runs = []
    for kind in CONTEXTS:
        for compaction in (False, True):
            runs.append(anyio.run(_run_case, kind, iterations, compaction, history))
            step(
                f"history: context-{kind}, {iterations}-round run, "
                f"compaction {'on' if compaction else 'off'}"
            )
    load = anyio.run(_load_case, max(sizes), repeats, history)
    step(f"history: loading {max(sizes)} persistent messages")
    slopes = {}
    for kind in CONTEXTS:
        for compaction in (False, True):
            own = [c for c in cases if c["compaction"] is compaction and c["context"] == kind]
            slopes[f"{kind} {'on' if compaction else 'off'}"] = _slope(
                [math.log(c["messages"]) for c in own],
                [math.log(max(c["request"]["median_s"], 1e-9)) for c in own],
            )
    return {"cases": cases, "runs": runs, "load": load, "slope": slopes}


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
                subprocess.run(command, env=env, check=True, capture_output=True, timeout=60)
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
