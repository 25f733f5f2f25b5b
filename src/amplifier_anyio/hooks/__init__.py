"""Hook modules shipped with amplifier_anyio.

- [`amplifier_anyio.hooks.logging`][amplifier_anyio.hooks.logging] (``hooks-logging``): a JSONL
  event log, secrets redacted, written by a module service off the event loop.
- [`amplifier_anyio.hooks.approval`][amplifier_anyio.hooks.approval] (``hooks-approval``):
  rule-based approval of tool calls and the approval systems that answer it (console, callback);
  fail closed.
- [`amplifier_anyio.hooks.otel`][amplifier_anyio.hooks.otel] (``hooks-otel``, extra ``[otel]``):
  OpenTelemetry spans and metrics for turns, provider calls and tool calls, per the GenAI semantic
  conventions. Its names are imported from that module, since it needs the optional
  ``opentelemetry-api``.
- `amplifier_anyio.hooks.schedulers` (``hooks-scheduler-cost``, ``hooks-scheduler-router``):
  the two example schedulers of the loop-events orchestrator (a per-turn cost budget that
  vetoes tools; a table that rewrites tool names and arguments).
"""

from __future__ import annotations

from .schedulers import CostScheduler, CostSchedulerConfig, RouterScheduler, RouterSchedulerConfig

__all__ = ("CostScheduler", "CostSchedulerConfig", "RouterScheduler", "RouterSchedulerConfig")
