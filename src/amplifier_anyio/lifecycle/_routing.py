"""RoutingDecision and the pure routing function behind make_routing_decision."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from ._frozen import FrozenDict, freeze

__all__ = ("RoutingDecision", "route")

_WORD = re.compile(r"[a-z0-9]+")


def _frozen(value: Mapping[str, Any] | None) -> FrozenDict:
    frozen = freeze(value or {}, "metadata")
    assert isinstance(frozen, FrozenDict)
    return frozen


@attrs.frozen
class RoutingDecision:
    """Where a step goes and why: ``target``, a human-readable ``reason``, read-only
    ``metadata`` and the ``fallback`` to use if the target fails (never the target)."""

    target: str
    reason: str
    metadata: FrozenDict = attrs.field(factory=FrozenDict, converter=_frozen)
    fallback: str | None = attrs.field(default=None)

    @fallback.validator
    def _check_fallback(self, _attribute: attrs.Attribute[Any], value: str | None) -> None:
        if value is not None and value == self.target:
            msg = f"fallback: must differ from the target {self.target!r}"
            raise ValueError(msg)


def _words(text: str) -> frozenset[str]:
    return frozenset(_WORD.findall(text.lower()))


def _score(task: str, task_words: frozenset[str], agent: str) -> tuple[int, list[str]]:
    """How well ``agent``'s name matches the task: its words found in the task, plus two
    when the whole name appears in it."""
    matched = sorted(_words(agent) & task_words)
    whole = 2 if agent.lower() in task.lower() else 0
    return len(matched) + whole, matched


def route(
    task: str, available_agents: Iterable[str], *, target: str | None = None
) -> RoutingDecision:
    """Pick an agent for ``task``: a pure function of its arguments.

    ``target`` (a step's explicit choice) wins when it is available. Otherwise each agent
    scores the words of its name found in the task (two more when the whole name is
    there); the best score wins and ties go to the name that sorts first, so neither the
    order of ``available_agents`` nor any earlier call changes the answer. The fallback
    is the runner-up. Raises `ValueError` when no agent is available.
    """
    agents = sorted(set(available_agents))
    if not agents:
        msg = f"no agent is available to route the task {task!r} to"
        raise ValueError(msg)
    task_words = _words(task)
    scored = sorted(
        ((*_score(task, task_words, agent), agent) for agent in agents),
        key=lambda item: (-item[0], item[2]),
    )
    if target is not None and target in agents:
        rest = [item for item in scored if item[2] != target]
        fallback = rest[0][2] if rest else None
        reason = f"the step names {target!r} as its target"
        return RoutingDecision(
            target, reason, {"score": None, "candidates": len(agents)}, fallback=fallback
        )
    best_score, matched, best = scored[0]
    runner_up = scored[1] if len(scored) > 1 else None
    if best_score > 0:
        reason = f"{best!r} matches the task (words: {', '.join(matched) or best})"
    else:
        reason = f"no agent name matches the task; {best!r} comes first in name order"
    if runner_up is not None:
        reason += f"; runner-up {runner_up[2]!r} scores {runner_up[0]} against {best_score}"
    if target is not None:
        reason = f"the step's target {target!r} is not available; " + reason
    return RoutingDecision(
        best,
        reason,
        {"score": best_score, "candidates": len(agents)},
        fallback=None if runner_up is None else runner_up[2],
    )
