"""The issue's targets, judged on a run's results: each with its measured value and verdict."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

__all__ = ("TARGETS", "Target", "evaluate_targets")


@attrs.frozen(kw_only=True)
class Target:
    """A number the runtime should stay under, and how to read it from a run."""

    name: str
    label: str
    description: str
    threshold: float
    unit: str
    measure: Callable[[dict[str, Any], str], tuple[float, dict[str, Any]] | None]

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


def _emit_one(report: dict[str, Any], backend: str) -> tuple[float, dict[str, Any]] | None:
    for case in report.get("emit", ()):
        if case["backend"] == backend and case["handlers"] == 1:
            return case["ns_per_emit"] / 1000, {"handlers": 1}
    return None


def _memory(report: dict[str, Any], backend: str) -> tuple[float, dict[str, Any]] | None:
    measured = [
        case
        for case in report.get("fanout", ())
        if case["backend"] == backend and case["hooks"] == 0 and case["memory"] is not None
    ]
    if not measured:
        return None
    case = max(measured, key=lambda c: (c["n"], c["delay_ms"]))
    value = case["memory"]["ours_bytes_per_call"] / 1024
    return value, {"n": case["n"], "delay_ms": case["delay_ms"], "hooks": 0}


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
        name="emit_one_handler",
        label="emit, 1 handler",
        description="HookRegistry.emit with one no-op async handler",
        threshold=2.0,
        unit="us",
        measure=_emit_one,
    ),
    Target(
        name="memory_per_call",
        label="memory per call",
        description="peak traced memory of a turn / N, largest N with D > 0, K = 0",
        threshold=8.0,
        unit="KiB",
        measure=_memory,
    ),
)
"""The targets of issue 7."""


def evaluate_targets(report: dict[str, Any], backends: list[str]) -> list[dict[str, Any]]:
    """Every target on every backend that ran (measured None where the run had no case)."""
    return [target.judge(report, backend) for target in TARGETS for backend in backends]
