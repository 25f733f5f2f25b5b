"""One overlay merge (`kernel._overlay`) for bundles and agents: a profile's ``extends``
and an agent's overlay give the same plan for the same sections.

Pure dict functions, no event loop: no backend to vary.
"""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from amplifier_anyio.kernel._overlay import merge_entries, merge_plan
from amplifier_anyio.session._agents import merge_overlay
from amplifier_anyio.session._bundles import compose, extend

PARENT: dict[str, Any] = {
    "session": {"orchestrator": "loop-basic", "context": "context-simple"},
    "providers": [{"module": "provider-scripted", "config": {"latency": 0}}],
    "tools": ["tool-bash", {"module": "tool-demo", "config": {"delay": 0.5, "tags": [1]}}],
}
OVERLAY: dict[str, Any] = {
    "tools": [
        {"module": "tool-bash", "config": {"profile": "strict"}},
        {"module": "tool-demo", "config": {"tags": [2]}},
        "tool-filesystem",
    ],
    "session": {"max_agent_depth": 1},
}


def test_an_agent_overlay_and_a_profile_extends_agree() -> None:
    child = merge_overlay(PARENT, OVERLAY)

    assert child == extend(PARENT, OVERLAY)
    # a string entry is its module: the agent's config lands on the parent's tool-bash
    assert child["tools"] == [
        {"module": "tool-bash", "config": {"profile": "strict"}},
        {"module": "tool-demo", "config": {"delay": 0.5, "tags": [2]}},
        {"module": "tool-filesystem"},
    ]
    assert child["session"] == {
        "orchestrator": "loop-basic",
        "context": "context-simple",
        "max_agent_depth": 1,
    }


def test_a_bundle_include_merges_entries_by_the_same_keys() -> None:
    tools = compose(PARENT, OVERLAY)["tools"]
    assert [t["module"] for t in tools] == ["tool-bash", "tool-demo", "tool-filesystem"]
    assert tools[1]["config"] == {"delay": 0.5, "tags": [1, 2]}  # an include concatenates


def test_unkeyed_and_duplicate_entries() -> None:
    entries = merge_entries(
        [{"module": "a", "config": {"x": 1}}, {"config": {}}, {"module": "a", "config": {"y": 2}}],
        [{"config": {}}],
        lists="replace",
    )
    assert entries == [{"module": "a", "config": {"x": 1, "y": 2}}, {"config": {}}, {"config": {}}]


modules = st.sampled_from(["tool-a", "tool-b", "tool-c"])
leaves = st.one_of(st.integers(0, 3), st.text("xy", max_size=2), st.lists(st.integers(0, 3)))
tables = st.dictionaries(st.sampled_from(["k", "m", "n"]), leaves, max_size=3)
entries = st.one_of(
    modules,
    st.fixed_dictionaries({"module": modules}, optional={"config": tables}),
    st.fixed_dictionaries(
        {"module": modules, "instance_id": st.sampled_from(["one", "two"])},
        optional={"config": tables},
    ),
)
plans = st.fixed_dictionaries(
    {},
    optional={
        "session": st.dictionaries(st.sampled_from(["orchestrator", "max_agent_depth"]), leaves),
        "providers": st.lists(entries, max_size=3),
        "tools": st.lists(entries, max_size=4),
        "hooks": st.lists(entries, max_size=2),
        "orchestrator": st.fixed_dictionaries({}, optional={"config": tables}),
    },
)


@given(plans, plans)
def test_both_users_give_one_plan_for_any_overlay(parent: dict[str, Any], overlay: Any) -> None:
    before = copy.deepcopy((parent, overlay))

    assert merge_overlay(parent, overlay) == extend(parent, overlay)
    assert merge_overlay(parent, overlay) == merge_plan(parent, overlay, lists="replace")
    assert (parent, overlay) == before  # neither input is changed
