"""Benchmarks of the runtime: parallel tool fan-out through the full loop against its floor.

The code path behind ``amplifier-anyio bench``. A run times a loop-basic turn that fans out
N tool calls (each sleeping D, with K no-op hooks on ``tool:pre`` / ``tool:post``) against
a bare task group doing the same sleeps, on asyncio, asyncio + uvloop and trio; plus the
cost of ``HookRegistry.emit`` per handler, of a ``ToolBatch`` per call, and of compaction
against history size. `run_benchmarks` returns the JSON-ready report; see
``docs/benchmarks.md`` for how to read it.

The rest — the ``asyncio.gather`` floor, the peers, the turn, sessions, cancel, executors,
history and start-up suites, the targets and the plot — is in the repository's
``benchmarks`` package (``python -m benchmarks``), which joins a run as an `Extension`.
"""

from __future__ import annotations

from .command import make_config, run_command
from .config import BACKENDS, SUITES, BenchConfig
from .extension import Extension, checkout_extension
from .report import render_tables, write_json
from .runner import SCHEMA, run_benchmarks
from .suites import compaction_suite, conversation
from .workloads import FanoutTurn, LeanContext, SleepTool, taskgroup_floor

__all__ = (
    "BenchConfig",
    "BACKENDS",
    "SUITES",
    "SCHEMA",
    "Extension",
    "checkout_extension",
    "run_benchmarks",
    "make_config",
    "run_command",
    "render_tables",
    "write_json",
    "compaction_suite",
    "conversation",
    "FanoutTurn",
    "LeanContext",
    "SleepTool",
    "taskgroup_floor",
)
