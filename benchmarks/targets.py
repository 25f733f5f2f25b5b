"""The targets, judged on a run's results: each with its measured value and verdict.

A target belongs to a backend (the fan-out, emit, memory and turn numbers are measured on
each) or to the run (the long-conversation and start-up suites run once): the latter are
judged once, with the backend ``"-"``. A target whose suite did not run is reported with
``measured`` None and ``met`` None.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

__all__ = ("TARGETS", "Target", "evaluate_targets")


@attrs.frozen(kw_only=True)
class Target:
    """A number the runtime should stay under, and how to read it from a run
    (``per_backend``: judged on each backend, else once per run)."""

    name: str
    label: str
    description: str
    threshold: float
    unit: str
    measure: Callable[[dict[str, Any], str], tuple[float, dict[str, Any]] | None]
    per_backend: bool = True

    def judge(self, report: dict[str, Any], backend: str) -> dict[str, Any]:
        """The JSON entry for ``backend``: measured value (or None) and whether it is met."""
        found = self.measure(report, backend)
        measured, case = found if found is not None else (None, None)
        return {
            "name": self.name,
            "label": self.label,
            "description": self.description,
            "backend": backend,
            "threshold": self.threshold,
            "unit": self.unit,
            "measured": measured,
            "met": None if measured is None else measured < self.threshold,
            "case": case,
        }


def _fanout(report: dict[str, Any], backend: str, n: int, delay_ms: float) -> dict[str, Any] | None:
    for case in report.get("fanout", ()):
        if (case["backend"], case["n"], case["delay_ms"], case["hooks"]) == (
            backend,
            n,
            delay_ms,
            0,
        ):
            return case  # type: ignore[no-any-return]
    return None


def _ratio_1000(report: dict[str, Any], backend: str) -> tuple[float, dict[str, Any]] | None:
    case = _fanout(report, backend, 1_000, 10.0)
    if case is None:
        return None
    return case["ratio"], {"n": 1_000, "delay_ms": 10.0, "hooks": 0}


def _seconds_10000(report: dict[str, Any], backend: str) -> tuple[float, dict[str, Any]] | None:
    case = _fanout(report, backend, 10_000, 0.0)
    if case is None:
        return None
    return case["ours"]["median_s"], {"n": 10_000, "delay_ms": 0.0, "hooks": 0}


def _overhead_1000(report: dict[str, Any], backend: str) -> tuple[float, dict[str, Any]] | None:
    case = _fanout(report, backend, 1_000, 0.0)
    if case is None:
        return None
    return case["overhead_us_per_call"], {"n": 1_000, "delay_ms": 0.0, "hooks": 0}


def _emit(handlers: int) -> Callable[[dict[str, Any], str], tuple[float, dict[str, Any]] | None]:
    def measure(report: dict[str, Any], backend: str) -> tuple[float, dict[str, Any]] | None:
        for case in report.get("emit", ()):
            if case["backend"] == backend and case["handlers"] == handlers:
                return case["ns_per_emit"] / 1000, {"handlers": handlers}
        return None

    return measure


_emit_one = _emit(1)


def _turn(report: dict[str, Any], backend: str) -> tuple[float, dict[str, Any]] | None:
    for case in report.get("turn", ()):
        if case["backend"] == backend:
            return case["session_us_per_turn"], {"turns": case["turns"]}
    return None


def _request(context: str) -> Callable[[dict[str, Any], str], tuple[float, dict[str, Any]] | None]:
    """The dearer of compaction off / on for one request at the largest history >= 100 000."""

    def measure(report: dict[str, Any], backend: str) -> tuple[float, dict[str, Any]] | None:
        cases = [
            case
            for case in (report.get("history") or {}).get("cases", ())
            if case["context"] == context and case["messages"] >= 100_000
        ]
        if not cases:
            return None
        size = max(case["messages"] for case in cases)
        worst = max((c for c in cases if c["messages"] == size), key=lambda c: c["request_ms"])
        return worst["request_ms"], {"messages": size, "compaction": worst["compaction"]}

    return measure


def _growth(report: dict[str, Any], backend: str) -> tuple[float, dict[str, Any]] | None:
    runs = (report.get("history") or {}).get("runs", ())
    if not runs:
        return None
    worst = max(runs, key=lambda run: run["growth"])
    return worst["growth"], {
        "context": worst["context"],
        "iterations": worst["iterations"],
        "compaction": worst["compaction"],
    }


def _load(report: dict[str, Any], backend: str) -> tuple[float, dict[str, Any]] | None:
    load = (report.get("history") or {}).get("load")
    if not load or load["messages"] < 100_000:
        return None
    return load["load_ms"], {"messages": load["messages"]}


def _startup(command: str) -> Callable[[dict[str, Any], str], tuple[float, dict[str, Any]] | None]:
    def measure(report: dict[str, Any], backend: str) -> tuple[float, dict[str, Any]] | None:
        for case in (report.get("startup") or {}).get("cases", ()):
            if case["command"] == command:
                return case["median_ms"], {"command": command}
        return None

    return measure


def _memory(report: dict[str, Any], backend: str) -> tuple[float, dict[str, Any]] | None:
    measured = [
        case
        for case in report.get("fanout", ())
        if case["backend"] == backend and case["hooks"] == 0 and case["memory"] is not None
    ]
    if not measured:
        return None
    case = max(measured, key=lambda c: (c["n"], c["delay_ms"]))
    memory = case["memory"]
    value = (memory["ours_bytes_per_call"] - memory["floor_bytes_per_call"]) / 1024
    return value, {"n": case["n"], "delay_ms": case["delay_ms"], "hooks": 0}


def _open_close(report: dict[str, Any], backend: str) -> tuple[float, dict[str, Any]] | None:
    """The dearest plan's open + close."""
    cases = [case for case in report.get("session_open", ()) if case["backend"] == backend]
    if not cases:
        return None
    worst = max(cases, key=lambda case: case["us_per_session"])
    return worst["us_per_session"] / 1000, {"plan": worst["plan"]}


def _session_path(report: dict[str, Any], backend: str) -> tuple[float, dict[str, Any]] | None:
    for case in report.get("session_path", ()):
        if case["backend"] == backend:
            value = case["session_over_loop_us_per_call"]
            return value, {"n": case["n"], "delay_ms": case["delay_ms"]}
    return None


def _cancel(key: str) -> Callable[[dict[str, Any], str], tuple[float, dict[str, Any]] | None]:
    """The cancel suite's ``key`` ratio at the largest N >= 10 000."""

    def measure(report: dict[str, Any], backend: str) -> tuple[float, dict[str, Any]] | None:
        cases = [
            case
            for case in report.get("cancel", ())
            if case["backend"] == backend and case["n"] >= 10_000
        ]
        if not cases:
            return None
        case = max(cases, key=lambda c: c["n"])
        return case[key], {"n": case["n"]}

    return measure


TARGETS = (
    Target(
        name="fanout_ratio",
        label="fan-out 1 000 x 10 ms / floor",
        description="full-loop fan-out, N = 1 000 x 10 ms, K = 0: median time / task-group floor",
        threshold=1.5,
        unit="x floor",
        measure=_ratio_1000,
    ),
    Target(
        name="fanout_10000_seconds",
        label="fan-out 10 000 x 0 ms",
        description="full-loop fan-out, N = 10 000 x 0 ms, K = 0: median wall time",
        threshold=1.0,
        unit="s",
        measure=_seconds_10000,
    ),
    Target(
        name="overhead_per_call",
        label="fan-out 1 000 x 0 ms over floor",
        description="full-loop fan-out, N = 1 000 x 0 ms, K = 0: (ours - floor) / N",
        threshold=8.0,
        unit="us/call",
        measure=_overhead_1000,
    ),
    Target(
        name="emit_one_handler",
        label="emit, 1 handler",
        description="HookRegistry.emit with one no-op async handler",
        threshold=1.0,
        unit="us",
        measure=_emit_one,
    ),
    Target(
        name="emit_no_handler",
        label="emit, no handler",
        description="HookRegistry.emit with no handler",
        threshold=0.3,
        unit="us",
        measure=_emit(0),
    ),
    Target(
        name="memory_per_call",
        label="memory per call over floor",
        description="peak traced memory of a turn / N over the task-group floor's, largest N "
        "with D > 0, K = 0",
        threshold=0.7,
        unit="KiB",
        measure=_memory,
    ),
    Target(
        name="turn_through_session",
        label="one-tool turn, session",
        description="AmplifierSession.run of a one-tool turn: median wall time per turn",
        threshold=250.0,
        unit="us",
        measure=_turn,
    ),
    Target(
        name="session_open_close",
        label="session open + close",
        description="async with AmplifierSession(plan): pass, the dearest of the sessions "
        "suite's plans (modules loaded once in the process before)",
        threshold=1.0,
        unit="ms",
        measure=_open_close,
    ),
    Target(
        name="session_path",
        label="session path over loop",
        description="fan-out N = 1 000 x 10 ms through AmplifierSession (context-simple) "
        "over loop-basic alone (LeanContext): (session - loop) / N",
        threshold=4.0,
        unit="us/call",
        measure=_session_path,
    ),
    Target(
        name="cancel_10000",
        label="cancel, 10 000 in flight",
        description="immediate cancel with 10 000 calls in flight, to run() returning, over "
        "a task group of 10 000 sleepers cancelled by its scope",
        threshold=2.0,
        unit="x floor",
        measure=_cancel("ratio"),
    ),
    Target(
        name="cancel_10000_paused",
        label="cancel, 10 000, GC paused",
        description="the same with the garbage collector paused in both windows (the work "
        "alone: on asyncio each cancelled task leaves a cycle that a collection in our "
        "window frees, and none in the floor's)",
        threshold=2.0,
        unit="x floor",
        measure=_cancel("ratio_paused"),
    ),
    Target(
        name="request_simple_100k",
        label="request, simple, 100 000",
        description="one provider request at 100 000 messages, context-simple (dearer of "
        "compaction off / on)",
        threshold=5.0,
        unit="ms",
        measure=_request("simple"),
        per_backend=False,
    ),
    Target(
        name="request_persistent_100k",
        label="request, persistent, 100 000",
        description="one provider request at 100 000 messages, context-persistent (dearer "
        "of compaction off / on)",
        threshold=5.0,
        unit="ms",
        measure=_request("persistent"),
        per_backend=False,
    ),
    Target(
        name="request_growth",
        label="agent run, last / first tenth",
        description="an agent run's median request of its last tenth over its first "
        "(worst context and compaction); linear total cost keeps it near 1",
        threshold=2.0,
        unit="x",
        measure=_growth,
        per_backend=False,
    ),
    Target(
        name="load_persistent_100k",
        label="load 100 000 persistent",
        description="loading 100 000 context-persistent messages",
        threshold=500.0,
        unit="ms",
        measure=_load,
        per_backend=False,
    ),
    Target(
        name="import_time",
        label="import amplifier_anyio",
        description="a fresh interpreter importing amplifier_anyio (wall, median)",
        threshold=150.0,
        unit="ms",
        measure=_startup("import amplifier_anyio"),
        per_backend=False,
    ),
    Target(
        name="demo_run_time",
        label="amplifier-anyio run (demo)",
        description="a fresh amplifier-anyio run of the demo plan, tool delay 0 (wall, median)",
        threshold=500.0,
        unit="ms",
        measure=_startup("cli run (demo, no delay)"),
        per_backend=False,
    ),
)
"""The targets of issues 7, 20 and 32 (where two name one, the later issue's)."""


RUN_WIDE = "-"
"""The backend of a target judged once per run."""


def evaluate_targets(report: dict[str, Any], backends: list[str]) -> list[dict[str, Any]]:
    """Every per-backend target on every backend that ran, every run-wide target once
    (measured None where the run had no case)."""
    return [
        target.judge(report, backend)
        for target in TARGETS
        for backend in (backends if target.per_backend else [RUN_WIDE])
    ]
