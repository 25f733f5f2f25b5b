"""The budget tree (kernel/_budget): limits from the plan, charges that flow up, the
turn that owns a reached limit is the one told."""

from __future__ import annotations

from decimal import Decimal

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from amplifier_anyio import ConfigError, Usage
from amplifier_anyio.kernel import Budget, BudgetMeter, TurnHandle
from amplifier_anyio.models import PriceTable


def usage(tokens: int) -> Usage:
    return Usage(input_tokens=tokens, output_tokens=0, total_tokens=tokens)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"max_tokens": 0}, "session.budget.max_tokens: expected an integer > 0, got 0"),
        ({"max_tokens": 1.5}, "session.budget.max_tokens: expected an integer > 0, got 1.5"),
        ({"max_tool_calls": True}, "session.budget.max_tool_calls: expected an integer > 0"),
        ({"max_cost_usd": float("nan")}, "session.budget.max_cost_usd: expected a finite number"),
        ({"max_dollars": 3}, "session.budget: unknown key 'max_dollars'"),
        ([1], "session.budget: expected a table, got list"),
    ],
)
def test_a_bad_limit_is_a_config_error_naming_the_key(config: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(".", r"\.")):
        Budget.from_config(config)


def test_limits_parse() -> None:
    budget = Budget.from_config({"max_tokens": 10, "max_cost_usd": 2, "max_tool_calls": 3})
    assert budget == Budget(max_tokens=10, max_cost_usd=2.0, max_tool_calls=3)
    assert Budget.from_config(None).unlimited


def test_a_childs_usage_flows_up_and_is_kept_apart_as_below() -> None:
    root = BudgetMeter()
    child = BudgetMeter(parent=root)
    grandchild = BudgetMeter(parent=child)
    root.charge_usage(usage(1))
    child.charge_usage(usage(10))
    grandchild.charge_usage(usage(100))
    assert (root.tokens, child.tokens, grandchild.tokens) == (111, 110, 100)
    assert (root.below.total_tokens, child.below.total_tokens) == (110, 100)
    assert grandchild.below.total_tokens == 0


def test_the_highest_reached_limit_cancels_its_own_turn_once() -> None:
    told: list[str] = []
    root = BudgetMeter(limits=Budget(max_tokens=100), on_exhausted=lambda: told.append("root"))
    child = BudgetMeter(parent=root, on_exhausted=lambda: told.append("child"))
    assert child.charge_usage(usage(60))
    assert not child.charge_usage(usage(40))  # 100 reached: the root's limit
    assert not child.charge_usage(usage(1))
    assert told == ["root"]
    assert root.exhausted == "max_tokens: 100 reached (100 spent)"
    assert child.exhausted is None
    assert child.over == root.exhausted


def test_tool_calls_that_would_go_over_are_not_charged() -> None:
    root = BudgetMeter(limits=Budget(max_tool_calls=3))
    child = BudgetMeter(parent=root)
    assert child.charge_tool_calls(2)
    assert not child.charge_tool_calls(2)
    assert (root.tool_calls, child.tool_calls) == (2, 2)
    assert root.exhausted is not None
    assert "max_tool_calls: 3" in root.exhausted


def test_remaining_is_the_least_left_anywhere_above() -> None:
    root = BudgetMeter(limits=Budget(max_tokens=100, max_tool_calls=10))
    child = BudgetMeter(parent=root, limits=Budget(max_tokens=80))
    child.charge_usage(usage(30))
    root.charge_usage(usage(50))
    assert child.remaining() == Budget(max_tokens=20, max_cost_usd=None, max_tool_calls=10)


def test_dollars_from_prices_per_million_tokens() -> None:
    """A budget charges what ``Usage.cost_usd`` says: one price parser for both (cached
    input at the cache price, not twice)."""
    spent = Usage(input_tokens=2_000_000, output_tokens=1_000_000, total_tokens=3_000_000)
    table = PriceTable.from_config({"input_per_mtok": 3, "output_per_mtok": 15})
    assert table.priced(spent, None).cost_usd == Decimal(21)
    cached = attrs.evolve(spent, cache_read_tokens=1_000_000)
    priced = PriceTable.from_config(
        {"input_per_mtok": 3, "output_per_mtok": 15, "cache_read_per_mtok": "0.3"}
    )
    assert priced.priced(cached, None).cost_usd == Decimal("18.3")
    assert PriceTable.from_config(None).priced(spent, None) is spent
    with pytest.raises(ConfigError, match=r"pricing\.input_per_mtok"):
        PriceTable.from_config({"input_per_mtok": -1, "output_per_mtok": 1})


def test_a_child_handle_charges_its_parents_meter_and_exhaustion_cancels_the_parent() -> None:
    parent = TurnHandle()
    parent.budget.limits = Budget(max_tokens=10)
    child = TurnHandle(parent=parent)
    child.budget.charge_usage(usage(10))
    assert parent.token.is_immediate
    assert child.token.is_immediate
    assert parent.budget.exhausted is not None
    assert child.budget.exhausted is None


@given(
    parents=st.lists(st.integers(min_value=0, max_value=20), min_size=1, max_size=12),
    charges=st.lists(
        st.tuples(st.integers(min_value=0, max_value=12), st.integers(0, 50)), max_size=30
    ),
    limit=st.integers(min_value=1, max_value=400),
)
def test_every_meter_counts_its_whole_subtree_and_runs_out_exactly_at_its_limit(
    parents: list[int], charges: list[tuple[int, int]], limit: int
) -> None:
    # meter i's parent is an earlier meter (a random tree rooted at meter 0)
    meters = [BudgetMeter(limits=Budget(max_tokens=limit))]
    for i, p in enumerate(parents, start=1):
        meters.append(BudgetMeter(parent=meters[p % i], limits=Budget(max_tokens=limit)))
    spent = [0] * len(meters)
    for index, tokens in charges:
        meter = meters[index % len(meters)]
        meter.charge_usage(usage(tokens))
        for above in meter.chain():
            spent[meters.index(above)] += tokens
    for meter, total in zip(meters, spent, strict=True):
        assert meter.tokens == total
        assert (meter.exhausted is not None) == (total >= limit)
