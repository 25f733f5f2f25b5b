"""What a benchmark run measures: sizes, delays, hook counts, backends, repeats."""

from __future__ import annotations

import importlib.util
from typing import Any

import attrs

from ..errors import ConfigError

__all__ = (
    "BACKENDS",
    "SUITES",
    "ALL_SUITES",
    "BenchConfig",
    "backend_problem",
    "backend_spec",
)

BACKENDS: dict[str, tuple[str, dict[str, Any]]] = {
    "asyncio": ("asyncio", {}),
    "asyncio+uvloop": ("asyncio", {"use_uvloop": True}),
    "trio": ("trio", {}),
}
"""Every backend the benchmark knows: name -> (anyio backend, backend options)."""

SUITES = ("fanout", "emit", "batch", "compaction")
"""The parts of a default run: full-loop fan-out, hook emit, tool batch, compaction."""

ALL_SUITES = (
    *SUITES,
    "executors",
    "history",
    "startup",
    "peers",
    "turn",
    "sessions",
    "cancel",
)
"""Every suite ``--suite`` accepts; ``executors`` (CPU-bound calls through each executor,
worker processes and a Dask cluster), ``history`` (request cost against conversation
length), ``startup`` (import and CLI start-up time), ``peers`` (other agent stacks as
extra rows of the fan-out cases, asyncio only: ``benchmarks.peers``), ``turn`` (one-tool turns
through a session and through loop-basic alone: ``benchmarks.turns``), ``sessions`` (open +
close, the fan-out through a session, many sessions at once, an idle session's memory:
``benchmarks.sessions``) and ``cancel`` (cancel latency with N calls in flight:
``benchmarks.cancel``) run only when asked for, from the checkout's ``benchmarks`` package."""

_NEEDS = {"asyncio+uvloop": "uvloop", "trio": "trio"}


def backend_spec(name: str) -> tuple[str, dict[str, Any]]:
    """The anyio backend name and a fresh copy of its options."""
    backend, options = BACKENDS[name]
    return backend, dict(options)


def backend_problem(name: str) -> str | None:
    """Why ``name`` cannot run on this machine (a missing package), or None."""
    package = _NEEDS.get(name)
    if package is not None and importlib.util.find_spec(package) is None:
        return f"{package} is not installed"
    return None


def _positive_ints(name: str) -> Any:
    def check(_: Any, __: Any, value: tuple[int, ...]) -> None:
        if not value or any(v < 1 for v in value):
            raise ConfigError(f"{name}: expected positive integers, got {value!r}")

    return check


def _known(choices: tuple[str, ...] | dict[str, Any], name: str) -> Any:
    def check(_: Any, __: Any, value: tuple[str, ...]) -> None:
        unknown = [v for v in value if v not in choices]
        if not value or unknown:
            raise ConfigError(f"{name}: expected some of {', '.join(choices)}, got {value!r}")

    return check


def _delays(_: Any, __: Any, value: tuple[float, ...]) -> None:
    if not value or any(v < 0 for v in value):
        raise ConfigError(f"delays: expected non-negative seconds, got {value!r}")


def _hook_counts(_: Any, __: Any, value: tuple[int, ...]) -> None:
    if not value or any(v < 0 for v in value):
        raise ConfigError(f"hook_counts: expected non-negative integers, got {value!r}")


@attrs.frozen(kw_only=True)
class BenchConfig:
    """The parameters of one benchmark run (the full run by default; see `quick`).

    ``sizes``: tool calls per fan-out (N); ``delays``: seconds each tool sleeps (D);
    ``hook_counts``: no-op handlers on ``tool:pre`` and on ``tool:post`` (K);
    ``repeats``: timed runs per case (R); ``emit_handlers`` / ``emit_iterations``: the
    emit micro-benchmark; ``batch_size``: calls in the tool-batch micro-benchmark;
    ``compaction_sizes``: history lengths of the compaction benchmark; ``memory``: also
    measure peak memory per in-flight call (a separate, traced run per case);
    ``executor_calls`` / ``executor_cost``: the executors suite's N calls of that many
    seconds of CPU work each; ``history_sizes`` / ``history_iterations``: the history
    suite's conversation lengths and the tool rounds of its agent run.
    """

    sizes: tuple[int, ...] = attrs.field(
        default=(1, 10, 100, 1_000, 10_000), converter=tuple, validator=_positive_ints("sizes")
    )
    delays: tuple[float, ...] = attrs.field(default=(0.0, 0.01), converter=tuple, validator=_delays)
    hook_counts: tuple[int, ...] = attrs.field(
        default=(0, 4), converter=tuple, validator=_hook_counts
    )
    backends: tuple[str, ...] = attrs.field(
        default=tuple(BACKENDS), converter=tuple, validator=_known(BACKENDS, "backends")
    )
    suites: tuple[str, ...] = attrs.field(
        default=SUITES, converter=tuple, validator=_known(ALL_SUITES, "suites")
    )
    repeats: int = attrs.field(default=7)
    emit_handlers: tuple[int, ...] = attrs.field(
        default=(0, 1, 10), converter=tuple, validator=_hook_counts
    )
    emit_iterations: int = 20_000
    batch_size: int = 1_000
    compaction_sizes: tuple[int, ...] = attrs.field(
        default=(100, 1_000, 10_000, 100_000),
        converter=tuple,
        validator=_positive_ints("compaction_sizes"),
    )
    history_sizes: tuple[int, ...] = attrs.field(
        default=(100, 1_000, 10_000, 100_000),
        converter=tuple,
        validator=_positive_ints("history_sizes"),
    )
    history_iterations: int = attrs.field(default=1_000)
    memory: bool = True
    session_path_size: int = attrs.field(default=1_000)
    concurrent_sessions: int = attrs.field(default=1_000)
    cancel_sizes: tuple[int, ...] = attrs.field(
        default=(1_000, 10_000), converter=tuple, validator=_positive_ints("cancel_sizes")
    )
    executor_calls: int = attrs.field(default=40)
    executor_cost: float = attrs.field(default=0.05)
    quick: bool = False

    @repeats.validator
    def _check_repeats(self, _: Any, value: int) -> None:
        if value < 1:
            raise ConfigError(f"repeats: expected at least 1, got {value}")

    @history_iterations.validator
    def _check_history_iterations(self, _: Any, value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"history_iterations: expected at least 1, got {value!r}")

    @session_path_size.validator
    @concurrent_sessions.validator
    def _check_sessions(self, attribute: Any, value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{attribute.name}: expected at least 1, got {value!r}")

    @executor_calls.validator
    def _check_executor_calls(self, _: Any, value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"executor_calls: expected at least 1, got {value!r}")

    @executor_cost.validator
    def _check_executor_cost(self, _: Any, value: float) -> None:
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 10:
            raise ConfigError(f"executor_cost: expected seconds in (0, 10), got {value!r}")

    @classmethod
    def full(cls, **changes: Any) -> BenchConfig:
        """The full run (several minutes on two cores)."""
        return cls(**changes)

    @classmethod
    def quick_run(cls, **changes: Any) -> BenchConfig:
        """The CI run: N up to 1 000, three repeats, smaller micro-benchmarks (< 1 min)."""
        settings: dict[str, Any] = {
            "sizes": (1, 10, 100, 1_000),
            "repeats": 3,
            "emit_iterations": 5_000,
            "batch_size": 500,
            "compaction_sizes": (100, 1_000, 10_000),
            "history_sizes": (100, 1_000, 10_000),
            "history_iterations": 100,
            "executor_calls": 16,
            "executor_cost": 0.02,
            "concurrent_sessions": 100,
            "cancel_sizes": (1_000,),
            "quick": True,
        }
        settings.update(changes)
        return cls(**settings)

    def parameters(self) -> dict[str, Any]:
        """The parameters as JSON-ready values (delays in milliseconds too)."""
        data = attrs.asdict(self)
        data["delays_ms"] = [d * 1000 for d in self.delays]
        return {k: list(v) if isinstance(v, tuple) else v for k, v in data.items()}
