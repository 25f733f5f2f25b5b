"""Properties of compact() and of the managers' views over random conversations."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amplifier_anyio.contexts import SimpleContextManager, compact, is_compaction_notice
from amplifier_anyio.contexts._messages import estimate_tokens
from amplifier_anyio.contexts.compaction import compaction_notice
from amplifier_anyio.testing.strategies import conversations
from tiers import examples

pytestmark = pytest.mark.anyio

FRACTIONS = st.integers(min_value=0, max_value=1200).map(lambda permille: permille / 1000)


def _units(messages: list[dict[str, Any]]) -> list[list[int]]:
    """The test's own grouping: an assistant with tool_calls plus the results naming its ids."""
    owner: dict[str, int] = {}
    unit_of: dict[int, int] = {}
    for index, message in enumerate(messages):
        for call in message.get("tool_calls") or ():
            owner[call["id"]] = index
        if message.get("role") == "tool":
            unit_of[index] = owner[message["tool_call_id"]]
    units: dict[int, list[int]] = {}
    for index in range(len(messages)):
        units.setdefault(unit_of.get(index, index), []).append(index)
    return [units[root] for root in sorted(units)]


def _protected(messages: list[dict[str, Any]]) -> set[int]:
    first_user = next((i for i, m in enumerate(messages) if m["role"] == "user"), None)
    return {i for i, m in enumerate(messages) if m["role"] == "system" or i == first_user}


def _split(view: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    notices = [m for m in view if is_compaction_notice(m)]
    return [m for m in view if not is_compaction_notice(m)], notices


def _kept_indices(messages: list[dict[str, Any]], kept: list[dict[str, Any]]) -> list[int]:
    """Positions in ``messages`` of the kept objects; fails unless they form a subsequence."""
    positions = []
    cursor = 0
    for item in kept:
        while cursor < len(messages) and messages[cursor] is not item:
            cursor += 1
        assert cursor < len(messages), "the view is not a subsequence of the input"
        positions.append(cursor)
        cursor += 1
    return positions


def _cost(messages: list[dict[str, Any]]) -> int:
    return sum(estimate_tokens(m) for m in messages)


def _assert_subsequence_plus_one_notice(messages, view) -> None:
    kept, notices = _split(view)
    _kept_indices(messages, kept)
    assert len(notices) <= 1
    if notices:
        assert notices[0]["metadata"]["dropped"] == len(messages) - len(kept) > 0
        assert notices[0]["role"] == "user"


def _assert_protected_kept(messages, view) -> None:
    kept = set(_kept_indices(messages, _split(view)[0]))
    assert _protected(messages) <= kept


def _assert_tool_pairs_together_and_adjacent(messages, view) -> None:
    kept = set(_kept_indices(messages, _split(view)[0]))
    for unit in _units(messages):
        assert {i in kept for i in unit} in ({True}, {False})
    _assert_results_follow_their_calls(view)


def _assert_results_follow_their_calls(view) -> None:
    for position, message in enumerate(view):
        ids = [call["id"] for call in message.get("tool_calls") or ()]
        following = view[position + 1 : position + 1 + len(ids)]
        assert [m.get("tool_call_id") for m in following] == ids


def _assert_fits_when_protected_fit(messages, view, budget) -> None:
    protected_cost = _cost([messages[i] for i in _protected(messages)])
    if protected_cost <= budget:
        assert _cost(view) <= budget


def _assert_oldest_dropped_first_and_newest_kept(messages, view, budget) -> None:
    kept = set(_kept_indices(messages, _split(view)[0]))
    protected = _protected(messages)
    free = [u for u in _units(messages) if not protected.intersection(u)]
    dropped = [u for u in free if u[0] not in kept]
    survivors = [u for u in free if u[0] in kept]
    if dropped and survivors:
        assert max(u[0] for u in dropped) < min(u[0] for u in survivors)
    protected_cost = _cost([messages[i] for i in protected])
    reserve = estimate_tokens(compaction_notice(len(messages)))
    if dropped and protected_cost + reserve <= budget:
        # the newest dropped unit did not fit next to what was kept
        used = protected_cost + _cost([messages[i] for u in survivors for i in u])
        assert used + _cost([messages[i] for i in dropped[-1]]) + reserve > budget


def _assert_notice_stands_where_messages_were_dropped(messages, view) -> None:
    for position, message in enumerate(view):
        if not is_compaction_notice(message):
            continue
        before = _kept_indices(messages, view[:position])
        after = _kept_indices(messages, view[position + 1 :])
        gap_start = before[-1] + 1 if before else 0
        gap_end = after[0] if after else len(messages)
        assert gap_end > gap_start, "the notice sits where nothing was dropped"


# conversations() is costly to draw (~0.1 s an example), so one test checks every
# guarantee of compact() on each drawn conversation.
@given(conversations(), FRACTIONS)
def test_compact_keeps_its_guarantees_for_any_budget(
    messages: list[dict[str, Any]], fraction: float
) -> None:
    budget = int(_cost(messages) * fraction)
    before = copy.deepcopy(messages)
    objects = list(messages)
    estimates = 0

    def counting(message: Any) -> int:
        nonlocal estimates
        estimates += 1
        return estimate_tokens(message)

    view = compact(messages, budget, counting)

    assert messages == before, "compact changed its input"
    assert all(a is b for a, b in zip(messages, objects, strict=True))
    assert estimates <= len(messages) + 2, "messages were estimated more than once"
    _assert_subsequence_plus_one_notice(messages, view)
    _assert_protected_kept(messages, view)
    _assert_tool_pairs_together_and_adjacent(messages, view)
    _assert_fits_when_protected_fit(messages, view, budget)
    _assert_oldest_dropped_first_and_newest_kept(messages, view, budget)
    _assert_notice_stands_where_messages_were_dropped(messages, view)
    estimates = 0
    costs = [estimate_tokens(m) for m in messages]
    assert compact(messages, budget, counting, costs=costs) == view
    assert estimates <= 2, "compact re-estimated messages although costs were given"


@given(conversations(), st.integers(min_value=0, max_value=500))
@settings(max_examples=examples(30))
def test_compact_returns_everything_unchanged_when_it_fits(
    messages: list[dict[str, Any]], slack: int
) -> None:
    view = compact(messages, _cost(messages) + slack, estimate_tokens)
    assert view == messages
    assert all(a is b for a, b in zip(view, messages, strict=True))


@given(
    conversations(),
    st.integers(min_value=0, max_value=30_000),
    st.lists(st.integers(min_value=0, max_value=20_000), max_size=4),
)
@settings(max_examples=examples(30))
async def test_manager_view_fits_and_history_survives_any_number_of_requests(
    messages: list[dict[str, Any]], budget: int, more_budgets: list[int]
) -> None:
    manager = SimpleContextManager(max_tokens=5_000, compaction_threshold=0.8, target_usage=0.5)
    for message in messages:
        await manager.add_message(message)
    view = await manager.get_messages_for_request(token_budget=budget)
    if _cost([messages[i] for i in _protected(messages)]) <= budget:
        assert _cost(view) <= budget
    _assert_results_follow_their_calls(view)
    for other in [*more_budgets, None]:
        for item in await manager.get_messages_for_request(token_budget=other):
            item["content"] = "scribbled"  # a caller editing the view must not reach history
    assert await manager.get_messages() == messages
