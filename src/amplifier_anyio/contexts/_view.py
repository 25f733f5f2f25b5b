"""The request view of context-simple, kept from one request to the next.

A request used to cost O(history): every message copied, converted to a ``Message``,
scanned for unanswered tool calls, and (above the threshold) the whole history compacted
again. Here each piece is kept and only extended by what was added since:

- `Units` groups the history into compaction units (a tool call with its answers)
  as messages arrive, the same grouping as [`compact`][amplifier_anyio.contexts.compact] (union-find
  over tool call ids; a unit's root is its first message), with each unit's estimate and the
  protected units (system and developer messages, the first user message);
- `Cut` is the sticky compaction decision: every unprotected unit whose root is
  below `Cut.root` is left out. New messages extend the view; the cut moves only
  when the view's estimate exceeds the threshold again, and then only forward, by
  dropping the oldest kept units (each message is dropped at most once);
- `Repair` answers unanswered tool calls over the view, as
  [`answer_orphaned_calls`][amplifier_anyio.runtime.answer_orphaned_calls] does over dicts;
  everything before the last still-open tool run is final and kept.

A late answer to a call of a unit that was left out, or a message that joins two older
units, changes an older unit: then the view is rebuilt from the cut (O(history), once).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from ..models import Message
from ._messages import call_ids, lost_result, result_ids, to_model
from .compaction import PROTECTED_ROLES

__all__ = ("RequestView", "Units", "Cut", "Repair", "NOTICE")

NOTICE = -1
"""The key of the compaction notice in a view's keys (the others are history indices)."""


@attrs.frozen(kw_only=True)
class RequestView:
    """What one provider request sends, as the context keeps it.

    ``messages`` are the context's own converted models (frozen, shared from one request
    to the next: never change them); the list is new for each request, so a caller may
    append to it. ``repaired`` are the ids of the tool calls no message answered, which
    ``messages`` answers with the lost-result message (see
    [`answer_orphaned_calls`][amplifier_anyio.runtime.answer_orphaned_calls]).
    """

    messages: list[Message]
    repaired: tuple[str, ...] = ()


class Units:
    """The compaction units of a history, built one message at a time."""

    def __init__(self) -> None:
        self.parent: list[int] = []
        self.caller: dict[str, int] = {}
        self.cost: dict[int, int] = {}
        """root → the unit's estimate."""
        self.roots: list[int] = []
        """Every message that started a unit, in order (a merged one stays listed)."""
        self.protected: set[int] = set()
        self.protected_tokens = 0
        self.first_user_seen = False

    def __len__(self) -> int:
        return len(self.parent)

    def find(self, index: int) -> int:
        """The root of the unit of the message at ``index``."""
        parent = self.parent
        while parent[index] != index:
            parent[index] = parent[parent[index]]
            index = parent[index]
        return index

    def add(self, message: Mapping[str, Any], cost: int) -> bool:
        """Add the next message; True when an older unit changed (merged or protected)."""
        index = len(self.parent)
        self.parent.append(index)
        self.cost[index] = cost
        self.roots.append(index)
        for call_id in call_ids(message):
            self.caller[call_id] = index
        reshaped = False
        for answered in result_ids(message):
            origin = self.caller.get(answered)
            if origin is not None:
                reshaped = self._union(origin, index) or reshaped
        role = message.get("role")
        if role in PROTECTED_ROLES or (role == "user" and not self.first_user_seen):
            root = self.find(index)
            if root not in self.protected:  # (joining a protected unit was counted)
                self.protected.add(root)
                self.protected_tokens += self.cost[root]
                reshaped = reshaped or root != index
        self.first_user_seen = self.first_user_seen or role == "user"
        return reshaped

    def _union(self, origin: int, index: int) -> bool:
        low, high = sorted((self.find(origin), self.find(index)))
        if low == high:
            return False
        self.parent[high] = low
        low_cost, high_cost = self.cost[low], self.cost.pop(high)
        self.cost[low] = low_cost + high_cost
        low_protected, high_protected = low in self.protected, high in self.protected
        self.protected.discard(high)
        if high_protected and not low_protected:
            self.protected.add(low)
            self.protected_tokens += low_cost
        elif low_protected and not high_protected:
            self.protected_tokens += high_cost
        # the newest message joining a unit is the common case; anything else changes
        # an older unit
        return high != index or (high_protected and not low_protected)

    def is_root(self, index: int) -> bool:
        """Whether the message at ``index`` starts its unit."""
        return self.parent[index] == index


@attrs.define(eq=False)
class Cut:
    """The sticky compaction decision and the view it gives (see the module doc)."""

    root: int = 0
    """Unprotected units whose root is below this are left out."""
    roots_from: int = 0
    """Where in `Units.roots` the next unit to drop is looked for."""
    target: int = 0
    """The target of the last compaction (the notice is added when it fits it)."""
    keys: list[int] = attrs.field(factory=list)
    """History indices of the view, in order, and `NOTICE` once it is placed."""
    upto: int = 0
    kept_tokens: int = 0
    dropped: int = 0
    last_dropped: int = -1
    notice: bool = False
    """Whether the view has the notice (placed in `keys`, or else at its end)."""
    placed: bool = False


@attrs.define(eq=False)
class Repair:
    """The view's messages with unanswered calls answered: the final part, kept."""

    done: int = 0
    """View positions whose output is final."""
    out: list[Message] = attrs.field(factory=list)
    ids: list[str] = attrs.field(factory=list)

    def reset(self) -> None:
        """Forget everything (the view changed other than by appending)."""
        self.done, self.out, self.ids = 0, [], []

    def view(
        self,
        length: int,
        dict_at: Callable[[int], Mapping[str, Any]],
        model_at: Callable[[int], Message],
        trailer: Sequence[Message] = (),
    ) -> RequestView:
        """Extend the final part over positions up to ``length``; the whole view.

        The output is that of ``answer_orphaned_calls`` over the view's dicts, converted:
        an assistant message with ``tool_calls``, the ``role: tool`` messages right after
        it, then a lost-result answer for each of its calls they do not answer. A run
        that reaches the end of the view may still grow, so it is redone each time.
        ``trailer`` (the notice, when it stands at the end) follows everything.
        """
        out, ids = self.out, self.ids
        tail: list[Message] = []
        tail_ids: list[str] = []
        position = self.done
        while position < length:
            message = dict_at(position)
            listed = message.get("tool_calls") if message.get("role") == "assistant" else None
            if not listed:
                out.append(model_at(position))
                position += 1
                self.done = position
                continue
            end = position + 1
            answered = set()
            while end < length:
                following = dict_at(end)
                if following.get("role") != "tool":
                    break
                answered.add(following.get("tool_call_id"))
                end += 1
            missing = [c for c in listed if isinstance(c, dict) and c.get("id") not in answered]
            block = [model_at(index) for index in range(position, end)]
            block.extend(to_model(lost_result(call)) for call in missing)
            block_ids = [str(call.get("id")) for call in missing]
            if end < length:  # closed by a later message: final
                out.extend(block)
                ids.extend(block_ids)
                self.done = end
            else:
                tail, tail_ids = block, block_ids
            position = end
        return RequestView(messages=[*out, *tail, *trailer], repaired=(*ids, *tail_ids))
