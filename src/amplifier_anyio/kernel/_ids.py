"""Session ids: what a sub-agent's id says about the agent it runs.

A child session's id is ``{parent id}-{span}_{agent}`` (upstream's format, DESIGN §14), so
a tool or a display can name a child's agent from its id alone, below the session layer
that makes the ids.
"""

from __future__ import annotations

import re

__all__ = ("agent_of_child_id", "parent_of_child_id")

_LAST_SPAN = re.compile(r"(.*)-[0-9a-f]{16}_(.+)$", re.DOTALL)


def agent_of_child_id(child_id: str) -> str | None:
    """The agent a child id ``{parent}-{span}_{agent}`` names, whole (``code_reviewer``,
    never ``reviewer``; a grandchild's own agent, not its parent's); None for an id of
    another shape."""
    match = _LAST_SPAN.match(child_id)
    return match.group(2) if match is not None else None


def parent_of_child_id(child_id: str) -> str | None:
    """The parent id a child id ``{parent}-{span}_{agent}`` starts with (a grandchild's
    own parent, the child); None for an id of another shape."""
    match = _LAST_SPAN.match(child_id)
    return match.group(1) if match is not None else None
