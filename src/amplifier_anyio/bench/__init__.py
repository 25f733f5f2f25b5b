"""Benchmarks of the runtime: parallel tool fan-out through the full loop against its floors.

The one code path behind ``amplifier-anyio bench`` and ``python -m benchmarks``. A run
times a loop-basic turn that fans out N tool calls (each sleeping D, with K no-op hooks on
``tool:pre`` / ``tool:post``) against a bare task group doing the same sleeps and, on
asyncio, ``asyncio.gather`` of them, on asyncio, asyncio + uvloop and trio; plus the cost
of ``HookRegistry.emit`` per handler, of a ``ToolBatch`` per call, and of compaction against
history size. `run_benchmarks` returns the JSON-ready report; see
``docs/benchmarks.md`` for how to read it.
"""

from __future__ import annotations

from .command import make_config, run_command
from .config import BACKENDS, SUITES, BenchConfig
from .report import render_tables, write_json, write_plot
from .runner import SCHEMA, run_benchmarks
from .suites import compaction_suite, conversation
from .targets import TARGETS, evaluate_targets
from .workloads import FanoutTurn, LeanContext, SleepTool, taskgroup_floor

__all__ = (
    "BenchConfig",
    "BACKENDS",
    "SUITES",
    "SCHEMA",
    "TARGETS",
    "run_benchmarks",
    "make_config",
    "run_command",
    "render_tables",
    "write_json",
    "write_plot",
    "evaluate_targets",
    "compaction_suite",
    "conversation",
    "FanoutTurn",
    "LeanContext",
    "SleepTool",
    "taskgroup_floor",
)
