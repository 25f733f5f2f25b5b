"""Hook modules a mount plan can list under ``hooks:``.

:mod:`amplifier_anyio.hooks.schedulers` holds the two example schedulers of the loop-events
orchestrator: ``hooks-scheduler-cost`` (a per-turn cost budget that vetoes tools) and
``hooks-scheduler-router`` (a table that rewrites tool names and arguments).
"""

from __future__ import annotations

from .schedulers import CostScheduler, CostSchedulerConfig, RouterScheduler, RouterSchedulerConfig

__all__ = ("CostScheduler", "CostSchedulerConfig", "RouterScheduler", "RouterSchedulerConfig")
