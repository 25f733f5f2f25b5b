"""Sub-agent overhead: ``python -m benchmarks.bench_agents``.

One reply of the root model asks for N ``task`` calls (default 100); each child session
(an agent of the plan, its overlay giving it its own scripted provider) answers with K
parallel tool calls (default 10) of a no-op tool, then with its answer. Three variants,
interleaved repeat by repeat with the rules of :mod:`amplifier_anyio.bench.timing`:

* ``bare`` — N sessions of the child's plan, each opened, run once and closed, all at
  once in one task group: the same work without delegation. Each starts from a module
  loader that has found the modules already, as a child's does (it shares its parent's
  findings); ``bare-cold`` is the same with fresh loaders (every session searches the
  entry points again, in worker threads), for reference;
* ``agents`` — one root session whose turn delegates to the N children through tool-task
  (the children run concurrently inside the root's tool batch);
* ``root`` — the root session alone, its N task calls answered by a tool that returns at
  once (what delegation adds to the root's own turn, for reference).

Per-agent overhead = (agents - bare - root) / N: what spawning, running and closing a child
through tool-task costs beyond a bare session doing the same work (plan merge, the child's
session and loader, the events, the budget meters, the task tool's result). Options:
``--backend asyncio|trio`` (repeatable), ``--agents N``, ``--calls K``, ``--repeats R``.
Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import Any

import anyio

from amplifier_anyio import AmplifierSession, ToolResult, TurnStatus
from amplifier_anyio.bench.timing import time_variants
from amplifier_anyio.kernel import ModuleLoader
from amplifier_anyio.session._agents import merge_overlay

VARIANTS = ("bare", "bare-cold", "agents", "root")


def _reply(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "finish_reason": "stop"}


def _calls(name: str, count: int, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "content": [],
        "tool_calls": [
            {"id": f"{name}-{i}", "name": name, "arguments": arguments} for i in range(count)
        ],
        "finish_reason": "tool_calls",
    }


def plan(agents: int, calls: int) -> dict[str, Any]:
    """The root's plan: N task calls then an answer; agent ``worker``: K calls then one."""
    task = {"agent": "worker", "instruction": "count the words of 'a b c'"}
    return {
        "session": {"orchestrator": "loop-basic", "context": "context-simple"},
        "providers": [
            {
                "module": "provider-scripted",
                "config": {"responses": [_calls("task", agents, task), _reply("all done")]},
            }
        ],
        "tools": [{"module": "tool-demo", "config": {"delay": 0}}, {"module": "tool-task"}],
        "agents": {
            "worker": {
                "description": "Counts words.",
                "instruction": "You count words.",
                "providers": [
                    {
                        "module": "provider-scripted",
                        "config": {
                            "responses": [
                                _calls("word_count", calls, {"text": "a b c"}),
                                _reply("3 words"),
                            ]
                        },
                    }
                ],
            }
        },
    }


class InstantTask:
    """Stands in for tool-task in the ``root`` variant: answers at once."""

    name = "task"
    description = "instant"
    input_schema: dict[str, Any] = {"type": "object", "properties": {}}  # noqa: RUF012

    async def execute(self, input: dict[str, Any]) -> ToolResult:
        await anyio.lowlevel.checkpoint()
        return ToolResult(output={"response": "3 words", "session_id": "x"})


def prepare(variant: str, agents: int, calls: int, warm: ModuleLoader) -> Callable[[], Any]:
    root_plan = plan(agents, calls)
    child_plan = merge_overlay(root_plan, root_plan["agents"]["worker"])

    def loader() -> ModuleLoader | None:
        if variant == "bare-cold":
            return None
        seeded = ModuleLoader()
        seeded.share_found(warm)
        return seeded

    async def bare() -> None:
        async def one() -> None:
            async with AmplifierSession(child_plan, loader=loader()) as session:
                result = await session.run("count the words of 'a b c'")
            assert result.status is TurnStatus.SUCCESS

        async with anyio.create_task_group() as tg:
            for _ in range(agents):
                tg.start_soon(one)

    async def delegated() -> None:
        async with AmplifierSession(root_plan, loader=loader()) as session:
            result = await session.run("count, many times")
        assert result.status is TurnStatus.SUCCESS, result
        assert result.text == "all done"

    async def root_only() -> None:
        async with AmplifierSession(root_plan, loader=loader()) as session:
            await session.coordinator.mount("tools", InstantTask(), name="task")
            result = await session.run("count, many times")
        assert result.status is TurnStatus.SUCCESS

    jobs = {"bare": bare, "bare-cold": bare, "agents": delegated, "root": root_only}
    return lambda: jobs[variant]


async def measure(agents: int, calls: int, repeats: int) -> dict[str, tuple[float, float]]:
    """(median, fastest) seconds per variant."""
    root_plan = plan(agents, calls)
    warm = ModuleLoader()
    async with AmplifierSession(root_plan, loader=warm):  # imports, entry points: found once
        pass
    await prepare("agents", agents, calls, warm)()()  # and the first delegation's imports
    timings = await time_variants(
        {name: prepare(name, agents, calls, warm) for name in VARIANTS}, repeats
    )
    return {name: (timing.median, timing.min) for name, timing in timings.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", action="append", choices=("asyncio", "trio"))
    parser.add_argument("--agents", type=int, default=100)
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=5)
    options = parser.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(
        "| backend | agents x calls | statistic | bare ms | agents ms | root ms |"
        " per-agent overhead ms | bare ms/session | bare-cold ms/session |"
    )
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|")
    for backend in options.backend or ["asyncio", "trio"]:
        measured = anyio.run(
            measure, options.agents, options.calls, options.repeats, backend=backend
        )
        n = options.agents
        for column, statistic in ((0, "median"), (1, "fastest")):
            times = {name: values[column] for name, values in measured.items()}
            overhead = (times["agents"] - times["bare"] - times["root"]) / n
            print(
                f"| {backend} | {n} x {options.calls} | {statistic} | {times['bare'] * 1e3:.1f} | "
                f"{times['agents'] * 1e3:.1f} | {times['root'] * 1e3:.1f} | "
                f"{overhead * 1e3:.2f} | {times['bare'] / n * 1e3:.2f} | "
                f"{times['bare-cold'] / n * 1e3:.2f} |"
            )
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
