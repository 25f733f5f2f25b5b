"""The plans of durable sub-agents (no server): a child's plan is the in-process spawner's,
a worker mounts each plan its agents lead to once, within the depth limit."""

from __future__ import annotations

from typing import Any

import pytest

from amplifier_anyio.temporal._plans import child_plan, load_plan, plan_key, plan_tree, settings_of


def plan(**session: Any) -> dict[str, Any]:
    return {
        "session": {"orchestrator": "loop-basic", "context": "context-simple", **session},
        "providers": [{"module": "provider-scripted"}],
        "tools": [
            {"module": "tool-demo"},
            {"module": "tool-task", "config": {"exclude_tools": ["tool-demo"]}},
        ],
        "agents": {
            "coder": {"description": "Codes.", "instruction": "You code."},
            "writer": {"description": "Writes.", "tools": [{"module": "tool-demo"}]},
        },
    }


def test_a_childs_plan_is_the_overlay_with_tool_tasks_filters() -> None:
    parent = load_plan(plan(max_agent_depth=2))
    coder, writer = child_plan(parent, "coder"), child_plan(parent, "writer")
    assert [t.module for t in coder.tools] == ["tool-task"]  # tool-demo excluded
    assert [t.module for t in writer.tools] == ["tool-demo", "tool-task"]  # its own kept
    assert coder.session_settings["max_agent_depth"] == 2
    with pytest.raises(KeyError):
        child_plan(parent, "nobody")


def test_plan_tree_mounts_each_plan_once_within_the_depth_limit() -> None:
    parent = load_plan(plan())
    tree = plan_tree(parent)
    coder, writer = child_plan(parent, "coder"), child_plan(parent, "writer")
    assert {plan_key(parent), plan_key(coder), plan_key(writer)} <= set(tree)
    # a coder's writer has tool-demo back after tool-task: a plan of its own; a coder's
    # coder is the coder's plan again, there once
    assert plan_key(child_plan(coder, "coder")) == plan_key(coder)
    assert plan_key(child_plan(coder, "writer")) in tree
    assert len(tree) == len({plan_key(p) for p in tree.values()})
    flat = load_plan(plan(max_agent_depth=0))
    assert set(plan_tree(flat)) == {plan_key(flat)}


def test_settings_carry_the_budget_and_depth() -> None:
    settings = settings_of(plan(budget={"max_tool_calls": 3}, max_agent_depth=1))
    assert settings["budget"] == {"max_tokens": None, "max_cost_usd": None, "max_tool_calls": 3}
    assert (settings["max_agent_depth"], settings["depth"]) == (1, 0)
    assert settings["turn_timeout"] is None
