"""Fit a conversation into a token budget, without touching it.

[`compact`][amplifier_anyio.contexts.compact] is a pure function over plain message dicts. What it
keeps, always:

- every ``system`` (and ``developer``) message and the first ``user`` message, together
  with any tool-pair group they belong to ("protected" messages);
- an assistant message that makes tool calls and every message answering those calls (by
  id, wherever they are) as one unit: kept or dropped together;
- the input order.

Of the other units it keeps the newest ones that fit and drops the older ones, oldest
first (the kept units are always a suffix of the unprotected units). Where something was
dropped it puts one notice message, built by
[`compaction_notice`][amplifier_anyio.contexts.compaction_notice]: role ``user`` (a
``<system-reminder>``, as Amplifier's own compaction notice, because every provider accepts a user
message at any point of a conversation), marked with ``metadata`` ``{"compaction_notice": True,
"dropped": n, "source": "context-compaction", "ephemeral": True}``. The notice is only added when it
fits the budget too.

The result is the input's own dict objects (plus the notice); when everything fits it is
an equal list of the same objects. The work is one pass to group the messages (union-find
over tool call ids) and one pass to choose: O(n log n) at worst, O(n) in practice.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from ._messages import call_ids, result_ids

__all__ = ("Estimator", "compact", "compaction_notice", "is_compaction_notice", "PROTECTED_ROLES")

Estimator = Callable[[Mapping[str, Any]], int]
"""A per-message token estimator: ``estimate(message) -> int``."""

PROTECTED_ROLES: tuple[str, ...] = ("system", "developer")
"""Roles whose messages [`compact`][amplifier_anyio.contexts.compact] never drops."""

_NOTICE_SOURCE = "context-compaction"


def compaction_notice(dropped: int) -> dict[str, Any]:
    """The notice message that stands where ``dropped`` messages were left out."""
    noun = "message was" if dropped == 1 else "messages were"
    text = (
        f'<system-reminder source="{_NOTICE_SOURCE}">{dropped} earlier {noun} left out '
        "of this request to fit the context window. The conversation history still "
        "holds them.</system-reminder>"
    )
    return {
        "role": "user",
        "content": text,
        "metadata": {
            "compaction_notice": True,
            "dropped": dropped,
            "source": _NOTICE_SOURCE,
            "ephemeral": True,
        },
    }


def is_compaction_notice(message: Mapping[str, Any]) -> bool:
    """Whether ``message`` is a notice made by
    [`compaction_notice`][amplifier_anyio.contexts.compaction_notice]."""
    metadata = message.get("metadata")
    return isinstance(metadata, Mapping) and metadata.get("compaction_notice") is True


def compact(
    messages: Sequence[dict[str, Any]],
    budget: int,
    estimate: Estimator,
    *,
    costs: Sequence[int] | None = None,
) -> list[dict[str, Any]]:
    """Return the view of ``messages`` that fits ``budget`` tokens (see the module doc).

    ``costs``, when given, are the estimates of ``messages`` (same length, same order),
    so that a caller keeping them cached does not pay for a re-count; ``estimate`` is then
    only used for the notice.
    """
    return _compact(messages, budget, estimate, costs).messages


@attrs.frozen(kw_only=True)
class _Outcome:
    messages: list[dict[str, Any]]
    dropped: int
    tokens: int
    protected_tokens: int
    kept: list[int] | None = None
    """The indices of the history's messages in ``messages`` (None: all of them)."""


def _compact(
    messages: Sequence[dict[str, Any]],
    budget: int,
    estimate: Estimator,
    costs: Sequence[int] | None = None,
) -> _Outcome:
    if costs is None:
        costs = [estimate(message) for message in messages]
    elif len(costs) != len(messages):
        raise ValueError(f"costs has {len(costs)} entries for {len(messages)} messages")
    total = sum(costs)
    units = _units(messages)
    unit_cost, protected = _tally(messages, units, costs)
    protected_tokens = sum(cost for root, cost in unit_cost.items() if root in protected)
    if total <= budget:
        return _Outcome(
            messages=list(messages), dropped=0, tokens=total, protected_tokens=protected_tokens
        )
    reserve = estimate(compaction_notice(len(messages)))
    if protected_tokens + reserve > budget:
        reserve = 0
    kept = _choose(unit_cost, protected, budget - protected_tokens - reserve)
    return _assemble(
        messages,
        units,
        kept=kept,
        costs=costs,
        budget=budget,
        estimate=estimate,
        protected_tokens=protected_tokens,
    )


def _units(messages: Sequence[Mapping[str, Any]]) -> list[int]:
    """For each message, the index of the first message of its unit (union-find)."""
    parent = list(range(len(messages)))

    def find(index: int) -> int:
        while parent[index] != index:
            parent[index] = parent[parent[index]]
            index = parent[index]
        return index

    caller: dict[str, int] = {}
    for index, message in enumerate(messages):
        for call_id in call_ids(message):
            caller[call_id] = index
        for answered in result_ids(message):
            origin = caller.get(answered)
            if origin is None:
                continue
            # the smaller index becomes the root, so a root is its unit's first message
            low, high = sorted((find(origin), find(index)))
            parent[high] = low
    return [find(index) for index in range(len(messages))]


def _tally(
    messages: Sequence[Mapping[str, Any]], units: list[int], costs: Sequence[int]
) -> tuple[dict[int, int], set[int]]:
    unit_cost: dict[int, int] = {}
    protected: set[int] = set()
    first_user_seen = False
    for index, message in enumerate(messages):
        root = units[index]
        unit_cost[root] = unit_cost.get(root, 0) + costs[index]
        role = message.get("role")
        if role in PROTECTED_ROLES or (role == "user" and not first_user_seen):
            protected.add(root)
        first_user_seen = first_user_seen or role == "user"
    return unit_cost, protected


def _choose(unit_cost: dict[int, int], protected: set[int], room: int) -> set[int]:
    """The newest unprotected units whose total fits ``room`` (a suffix), plus the protected."""
    kept = set(protected)
    used = 0
    for root in sorted(unit_cost, reverse=True):
        if root in protected:
            continue
        used += unit_cost[root]
        if used > room:
            break
        kept.add(root)
    return kept


def _assemble(
    messages: Sequence[dict[str, Any]],
    units: list[int],
    *,
    kept: set[int],
    costs: Sequence[int],
    budget: int,
    estimate: Estimator,
    protected_tokens: int,
) -> _Outcome:
    view: list[dict[str, Any]] = []
    indices: list[int] = []
    tokens = 0
    last_dropped = -1
    for index, message in enumerate(messages):
        if units[index] in kept:
            view.append(message)
            indices.append(index)
            tokens += costs[index]
        else:
            last_dropped = index
    dropped = len(messages) - len(view)
    if dropped:
        notice = compaction_notice(dropped)
        notice_cost = estimate(notice)
        if tokens + notice_cost <= budget:
            view.insert(_notice_position(units, kept, last_dropped), notice)
            tokens += notice_cost
    return _Outcome(
        messages=view,
        dropped=dropped,
        tokens=tokens,
        protected_tokens=protected_tokens,
        kept=indices,
    )


def _notice_position(units: list[int], kept: set[int], last_dropped: int) -> int:
    """Index in the view of the first unit that starts after the last dropped message.

    Putting the notice before a unit's first message keeps it out of any tool-pair group.
    """
    position = sum(1 for index in range(last_dropped) if units[index] in kept)
    for index in range(last_dropped + 1, len(units)):
        if units[index] == index:
            return position
        position += 1
    return position
