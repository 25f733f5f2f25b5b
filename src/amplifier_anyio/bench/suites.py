"""The measurements of a run, one backend at a time: fan-out, emit, tool batch, compaction.

Each backend's cases run inside one ``anyio.run`` (after a small untimed warm-up); the
compaction benchmark is CPU work and runs once, on asyncio.
"""

from __future__ import annotations

import gc
import math
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import anyio

from ..contexts import SimpleContextManager, compact
from ..events import TOOL_PRE
from ..kernel._hooks import HookRegistry
from .config import BenchConfig, backend_spec
from .extension import Extension, Step, Variant
from .timing import Timing, peak_bytes, ratio, time_variants
from .workloads import (
    FanoutTurn,
    Job,
    noop_handler,
    plain_noop_handler,
    prepare_batch,
    prepare_floor,
)

__all__ = ("Step", "backend_suite", "compaction_suite", "conversation", "count_steps")


def count_steps(config: BenchConfig, backends: int, extension: Extension | None = None) -> int:
    """How many times a run with ``backends`` runnable backends calls its step callback."""
    per_backend = 0
    if "fanout" in config.suites or "peers" in config.suites:
        per_backend += len(config.sizes) * len(config.delays) * len(config.hook_counts)
    if "emit" in config.suites:
        per_backend += len(config.emit_handlers) + 1  # and one plain handler
    if "batch" in config.suites:
        per_backend += 1
    compaction = len(config.compaction_sizes) if "compaction" in config.suites else 0
    extra = extension.count_steps(config, backends) if extension is not None else 0
    return per_backend * backends + compaction + extra


def _ignore(_: str) -> None:
    """A step callback that shows nothing."""


async def backend_suite(
    name: str, config: BenchConfig, step: Step = _ignore, extension: Extension | None = None
) -> dict[str, Any]:
    """Every per-backend case of ``config`` on the running backend (named ``name``)."""
    on_asyncio = backend_spec(name)[0] == "asyncio"
    await _warm_up(on_asyncio, extension)
    results: dict[str, Any] = {"fanout": [], "emit": [], "batch": []}
    if "fanout" in config.suites or "peers" in config.suites:
        results["fanout"] = await _fanout_cases(name, config, step, extension, on_asyncio)
    if "emit" in config.suites:
        for handlers in config.emit_handlers:
            results["emit"].append(await _emit_case(name, config, handlers))
            step(f"{name}: emit with {handlers} handlers")
        results["emit"].append(await _emit_case(name, config, 1, plain=True))
        step(f"{name}: emit with 1 plain handler")
        _per_handler(results["emit"])
    if "batch" in config.suites:
        results["batch"].append(await _batch_case(name, config))
        step(f"{name}: tool batch N={config.batch_size}")
    if extension is not None:
        results.update(await extension.backend_cases(name, config, step))
    return results


async def _fanout_cases(
    name: str, config: BenchConfig, step: Step, extension: Extension | None, on_asyncio: bool
) -> list[dict[str, Any]]:
    """Every fan-out case (D, then K, then N), each with the extension's rows."""
    cases = []
    for delay in config.delays:
        for hooks in config.hook_counts:
            for n in config.sizes:
                extra: dict[str, Variant] = {}
                if extension is not None:
                    extra = extension.fanout_variants(
                        config, n=n, delay=delay, hooks=hooks, on_asyncio=on_asyncio
                    )
                case = await _fanout_case(name, config, n=n, delay=delay, hooks=hooks, extra=extra)
                cases.append(case)
                step(f"{name}: fan-out N={n} D={delay * 1000:g}ms K={hooks}")
    return cases


async def _warm_up(on_asyncio: bool, extension: Extension | None) -> None:
    """One small untimed run of each variant: first-call costs are not the runtime's."""
    turn = FanoutTurn(n=10, delay=0.0, hooks=1)
    prepare: dict[str, Callable[[], Job]] = {
        "floor": partial(prepare_floor, 10, 0.0),
        "ours": turn.prepare,
    }
    if extension is not None:
        warm = BenchConfig(repeats=1)  # the default suites: no peer rows
        extra = extension.fanout_variants(warm, n=10, delay=0.0, hooks=1, on_asyncio=on_asyncio)
        if "gather" in extra:
            prepare["gather"] = extra["gather"][0]
    await time_variants(prepare, 1, {"ours": turn.check})


async def _fanout_case(
    name: str,
    config: BenchConfig,
    *,
    n: int,
    delay: float,
    hooks: int,
    extra: dict[str, Variant],
) -> dict[str, Any]:
    """Ours against the floor, and against the extension's rows (``gather``, ``peer:*``)."""
    turn = FanoutTurn(n=n, delay=delay, hooks=hooks)
    prepare: dict[str, Callable[[], Job]] = {
        "floor": partial(prepare_floor, n, delay),
        "ours": turn.prepare,
    }
    checks = {"ours": turn.check}
    for variant, (job, check) in extra.items():
        prepare[variant] = job
        if check is not None:
            checks[variant] = check
    peers = [variant for variant in extra if variant != "gather"]
    timings = await time_variants(prepare, config.repeats, checks)
    floor, ours, gather = timings["floor"], timings["ours"], timings.get("gather")
    case: dict[str, Any] = {
        "backend": name,
        "n": n,
        "delay_ms": delay * 1000,
        "hooks": hooks,
        "repeats": config.repeats,
        "ours": ours.to_dict(),
        "floor": floor.to_dict(),
        "gather": gather.to_dict() if gather else None,
        **_comparison(ours, floor, n),
        "ratio_gather": ratio(ours.median, gather.median) if gather else None,
        "memory": None,
    }
    if peers:
        case["peers"] = {
            variant.removeprefix("peer:"): {
                **timings[variant].to_dict(),
                **_comparison(timings[variant], floor, n),
                "vs_ours": ratio(timings[variant].median, ours.median),
            }
            for variant in peers
        }
    if config.memory and delay > 0:
        case["memory"] = await _memory(turn, n, delay)
    return case


def _comparison(ours: Timing, floor: Timing, n: int) -> dict[str, float]:
    return {
        "ratio": ratio(ours.median, floor.median),
        "ratio_min": ratio(ours.min, floor.min),
        "overhead_us_per_call": (ours.median - floor.median) / n * 1e6,
    }


async def _memory(turn: FanoutTurn, n: int, delay: float) -> dict[str, float]:
    ours = await peak_bytes(turn.prepare)
    turn.check()
    floor = await peak_bytes(partial(prepare_floor, n, delay))
    return {
        "ours_peak_bytes": ours,
        "floor_peak_bytes": floor,
        "ours_bytes_per_call": ours / n,
        "floor_bytes_per_call": floor / n,
    }


async def _emit_case(
    name: str, config: BenchConfig, handlers: int, *, plain: bool = False
) -> dict[str, Any]:
    """``handlers`` no-op handlers on one event: async ones, or plain functions (inline)."""
    hooks = HookRegistry()
    for index in range(handlers):
        hooks.register(TOOL_PRE, plain_noop_handler if plain else noop_handler, name=f"b-{index}")
    data = {"tool_name": "sleep", "tool_call_id": "call_0", "tool_input": {}, "index": 0}
    iterations = config.emit_iterations

    def prepare() -> Job:
        async def run() -> None:
            for _ in range(iterations):
                await hooks.emit(TOOL_PRE, data)

        return run

    timing = (await time_variants({"emit": prepare}, config.repeats))["emit"]
    return {
        "backend": name,
        "handlers": handlers,
        "kind": "plain" if plain else "async",
        "iterations": iterations,
        "repeats": config.repeats,
        "emit": timing.to_dict(),
        "ns_per_emit": timing.median / iterations * 1e9,
        "ns_per_emit_min": timing.min / iterations * 1e9,
        "ns_per_handler": None,
    }


def _per_handler(cases: list[dict[str, Any]]) -> None:
    """Fill ``ns_per_handler``: the cost over the emit with no handler, per handler."""
    empty = next(
        (c["ns_per_emit"] for c in cases if c["handlers"] == 0 and c.get("kind") != "plain"), None
    )
    for case in cases:
        if empty is not None and case["handlers"] > 0:
            case["ns_per_handler"] = (case["ns_per_emit"] - empty) / case["handlers"]


async def _batch_case(name: str, config: BenchConfig) -> dict[str, Any]:
    n = config.batch_size
    prepare = {"floor": partial(prepare_floor, n, 0.0), "ours": partial(prepare_batch, n)}
    timings = await time_variants(prepare, config.repeats)
    ours, floor = timings["ours"], timings["floor"]
    return {
        "backend": name,
        "n": n,
        "repeats": config.repeats,
        "ours": ours.to_dict(),
        "floor": floor.to_dict(),
        **_comparison(ours, floor, n),
    }


# -- compaction -------------------------------------------------------------------------


def conversation(size: int) -> list[dict[str, Any]]:
    """A valid history of exactly ``size`` messages: system, user, then tool rounds."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a benchmark."}]
    text = "lorem ipsum dolor sit amet " * 8
    round_ = 0
    while len(messages) + 4 <= size:
        call_id = f"call_{round_}"
        messages += [
            {"role": "user", "content": f"question {round_}: {text}"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"id": call_id, "name": "sleep", "arguments": {}}],
            },
            {"role": "tool", "tool_call_id": call_id, "name": "sleep", "content": text},
            {"role": "assistant", "content": f"answer {round_}: {text}"},
        ]
        round_ += 1
    while len(messages) < size:
        messages.append({"role": "user", "content": text})
    return messages[:size]


def compaction_suite(sizes: tuple[int, ...], repeats: int, step: Step = _ignore) -> dict[str, Any]:
    """Time ``compact`` and ``get_messages_for_request`` on histories of each size.

    The budget is half the history's estimate, so both really drop messages;
    ``get_messages_for_request`` uses the context's cached per-message estimates, on a
    history just set (its first compaction, not the kept one of later requests). The
    result holds the cases and, per function, the log-log slope of time against size
    (``1.0`` is linear).
    """
    cases = []
    for size in sizes:
        cases.append(anyio.run(_compaction_case, size, repeats))
        step(f"compaction: {size} messages")
    exponents = {
        key: _slope(
            [math.log(c["messages"]) for c in cases],
            [math.log(max(c[key]["median_s"], 1e-9)) for c in cases],
        )
        for key in ("compact", "request_view")
    }
    return {"cases": cases, "scaling_exponent": exponents}


async def _compaction_case(size: int, repeats: int) -> dict[str, Any]:
    context = SimpleContextManager()
    messages = conversation(size)
    await context.set_messages(messages)
    budget = max(context.token_estimate // 2, 1)
    estimate = context.estimator
    compact_times, view_times = [], []
    for _ in range(repeats):
        gc.collect()
        start = time.perf_counter_ns()
        view = compact(messages, budget, estimate)
        compact_times.append((time.perf_counter_ns() - start) / 1e9)
        await context.set_messages(messages)  # a new history: the first, full compaction
        gc.collect()
        start = time.perf_counter_ns()
        request = await context.get_messages_for_request(token_budget=budget)
        view_times.append((time.perf_counter_ns() - start) / 1e9)
    compacted, viewed = Timing(tuple(compact_times)), Timing(tuple(view_times))
    return {
        "messages": size,
        "budget_tokens": budget,
        "kept_by_compact": len(view),
        "kept_by_request_view": len(request),
        "repeats": repeats,
        "compact": compacted.to_dict(),
        "request_view": viewed.to_dict(),
        "compact_us_per_message": compacted.median / size * 1e6,
        "request_view_us_per_message": viewed.median / size * 1e6,
    }


def _slope(xs: list[float], ys: list[float]) -> float | None:
    if len(xs) < 2:
        return None
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    spread = sum((x - mean_x) ** 2 for x in xs)
    if spread == 0:
        return None
    return sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / spread
