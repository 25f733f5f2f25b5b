"""The plans of durable sessions: parsing, their keys among a worker's plans, what the
workflow needs of one (``settings_of``), and the plans of their sub-agents.

A sub-agent's plan is the parent's with the agent's overlay laid over it, by the same code
the in-process spawner uses (``session/_agents.py``: the overlay merge, the depth limit
never above the parent's, tool-task's inheritance filters). A worker mounts a plan and
every plan its agents lead to (`plan_tree`), so any worker of the task queue can run any
child session's activities; a child's plan key is the digest of its own plan, the same in
every process.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from ..kernel._mount_plan import DurableSpec, MountPlan
from ..runtime._progress import no_progress_repeats
from ..session._agents import (
    SessionLimits,
    _child_config,
    _filtered,
    _modules_of,
    agents_of,
    child_transcript_path,
)
from ..tools.task import _policy

__all__ = (
    "PlanLike",
    "load_plan",
    "plan_key",
    "durable_of",
    "settings_of",
    "child_plan",
    "plan_tree",
    "TASK_MODULE",
)

PlanLike = MountPlan | Mapping[str, Any] | str | Path
"""A plan as the durable API takes it: parsed, a dict, or a YAML/TOML file path."""

TASK_MODULE = "tool-task"
"""The module whose ``task`` calls a durable session runs as child workflows."""


def load_plan(plan: PlanLike) -> MountPlan:
    """``plan`` parsed (a file is read here: call it before the loop is busy)."""
    if isinstance(plan, MountPlan):
        return plan
    if isinstance(plan, Mapping):
        return MountPlan.from_dict(dict(plan))
    return MountPlan.from_file(plan)


def plan_key(plan: MountPlan) -> str:
    """A plan's name among a worker's plans: the digest of its canonical JSON."""
    text = json.dumps(plan.to_dict(), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def durable_of(plan: MountPlan) -> DurableSpec:
    """The plan's ``session.durable`` settings (defaults when it has none)."""
    return plan.durable or DurableSpec()


def settings_of(plan: PlanLike) -> dict[str, Any]:
    """What the workflow needs of a plan: the loop's iteration limit, the activities'
    options, when to continue as new, the budget and depth limit of §14, and the plan's
    key among a worker's plans."""
    parsed = load_plan(plan)
    spec = durable_of(parsed)
    config = parsed.orchestrator.config or {}
    limit = config.get("max_iterations", -1)
    field = f"{parsed.orchestrator.module}.no_progress"
    limits = SessionLimits.from_settings(parsed.session_settings)
    budget = limits.budget
    timeout = config.get("turn_timeout")
    return {
        "plan": plan_key(parsed),
        "max_iterations": int(limit),
        "no_progress": no_progress_repeats(config.get("no_progress"), field),
        "turn_timeout": None if timeout is None else float(timeout),
        "orchestrator": parsed.orchestrator.module,
        "provider": spec.provider.to_dict(),
        "tools": spec.tools.to_dict(),
        "continue_as_new_after_turns": spec.continue_as_new_after_turns,
        "workflow_task_timeout": spec.workflow_task_timeout,
        "budget": {
            "max_tokens": budget.max_tokens,
            "max_cost_usd": budget.max_cost_usd,
            "max_tool_calls": budget.max_tool_calls,
        },
        "max_agent_depth": limits.max_agent_depth,
        "depth": 0,
    }


def _task_config(plan: MountPlan) -> dict[str, Any]:
    for spec in plan.tools:
        if spec.module == TASK_MODULE:
            return dict(spec.config or {})
    return {}


def child_plan(plan: MountPlan, agent_name: str) -> MountPlan:
    """The plan of a child of agent ``agent_name`` of ``plan``, as the in-process spawner
    makes it (KeyError: no such agent)."""
    agent = agents_of(plan.raw)[agent_name]
    parent = SimpleNamespace(
        config=plan.raw, limits=SessionLimits.from_settings(plan.session_settings)
    )
    config = _child_config(parent, agent)
    task = _task_config(plan)
    _filtered(config, "tools", _policy(task, "tools"), _modules_of(agent, "tools"))
    _filtered(config, "hooks", _policy(task, "hooks"), _modules_of(agent, "hooks"))
    # a worker mounts the child's plan beside the parent's: a context-persistent file of
    # its own (the durable turn's history is the workflow's, never this file's)
    child_transcript_path(config, f"agent-{agent_name}")
    return MountPlan.from_dict(config)


def plan_tree(plan: MountPlan) -> dict[str, MountPlan]:
    """``plan`` and every plan its agents lead to within its depth limit, by key (a plan
    reached twice, an agent delegating to itself, is there once)."""
    found = {plan_key(plan): plan}
    limit = SessionLimits.from_settings(plan.session_settings).max_agent_depth
    level = [plan]
    for _ in range(limit):
        following: list[MountPlan] = []
        for parent in level:
            if not any(spec.module == TASK_MODULE for spec in parent.tools):
                continue
            for name in agents_of(parent.raw):
                child = child_plan(parent, name)
                key = plan_key(child)
                if key not in found:
                    found[key] = child
                    following.append(child)
        level = following
    return found
