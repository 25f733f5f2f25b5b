"""One overlay merge for plan dicts, upstream's precedence: used by bundles (an include
under its includer, a profile under the profile that extends it) and by sub-agents (an
agent's sections over its parent's plan).

The rules, the overlay winning at every level:

- ``providers`` / ``tools`` / ``hooks`` (`MODULE_LISTS`): entries are keyed by
  ``instance_id``, else ``id``, else ``module``; an entry whose key is already there is
  merged into it (its ``config`` and other tables key by key), a new one is appended in
  order. A string entry is a module id (``tool-bash`` is ``{module: tool-bash}``); an entry
  with no key is appended as it is; duplicates within one list merge the same way.
- ``context_files`` (a resolved bundle's): accumulate, each file once.
- Any other table merges key by key, recursively.
- Lists elsewhere: the overlay's replaces the base's (``lists="replace"``: profiles and
  agents), or the two concatenate without duplicates (``lists="concatenate"``: bundles).
- Any other value: the overlay's replaces the base's.

The merge is pure: neither input is changed. The result's tables and module entries are
new where they were merged; values the merge did not look into are shared (a plan may hold
live objects a host put there, which a merged plan shares rather than copies).
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Mapping
from typing import Any, Literal

__all__ = ("MODULE_LISTS", "ListRule", "merge_plan", "merge_value", "merge_entries", "entry_key")

MODULE_LISTS = ("providers", "tools", "hooks")
"""The plan sections whose entries merge by module id."""

ListRule = Literal["replace", "concatenate"]
"""How a list under a table merges: the overlay's replaces, or both concatenate once."""


def merge_plan(
    base: Mapping[str, Any], overlay: Mapping[str, Any], *, lists: ListRule
) -> dict[str, Any]:
    """``overlay`` laid over ``base``, section by section (the module docstring's rules)."""
    result = dict(base)
    for key, value in overlay.items():
        current = result.get(key)
        if key in MODULE_LISTS and isinstance(value, list):
            result[key] = merge_entries(current, value, lists=lists)
        elif key == "context_files" and isinstance(value, list) and isinstance(current, list):
            result[key] = [*current, *(item for item in value if item not in current)]
        elif key in result:
            result[key] = merge_value(current, value, lists=lists)
        else:
            result[key] = value
    return result


def merge_value(base: Any, overlay: Any, *, lists: ListRule) -> Any:
    """Two values of one key: tables key by key, lists by ``lists``, else the overlay."""
    if isinstance(base, Mapping) and isinstance(overlay, Mapping):
        result = dict(base)
        for key, value in overlay.items():
            result[key] = merge_value(result[key], value, lists=lists) if key in result else value
        return result
    if lists == "concatenate" and isinstance(base, list) and isinstance(overlay, list):
        merged: list[Any] = []
        seen: set[str] = set()
        for item in (*base, *overlay):
            identity = json.dumps(item, sort_keys=True, default=str)
            if identity not in seen:
                seen.add(identity)
                merged.append(item)
        return merged
    return overlay


def entry_key(entry: Any) -> Any:
    """A module entry's key: ``instance_id``, ``id`` or ``module`` (a string entry is its
    module); None for an entry with none."""
    if isinstance(entry, str):
        return entry
    if isinstance(entry, Mapping):
        key = entry.get("instance_id") or entry.get("id") or entry.get("module")
        return key if isinstance(key, Hashable) else None
    return None


def merge_entries(base: Any, overlay: Any, *, lists: ListRule) -> list[Any]:
    """Module entries merged by `entry_key`: one already there is merged (the later wins),
    a new one appended; a string entry becomes ``{module: …}``; an entry without a key is
    appended as it is. ``base`` may be anything (not a list: no entries)."""
    merged: dict[Any, Any] = {}
    for item in [*(base if isinstance(base, list) else ()), *(overlay or ())]:
        entry: Any = {"module": item} if isinstance(item, str) else item
        if isinstance(entry, Mapping):
            entry = dict(entry)
        key = entry_key(entry)
        if key is None:
            merged[("#", len(merged))] = entry
        elif key in merged and isinstance(merged[key], Mapping) and isinstance(entry, Mapping):
            merged[key] = merge_value(merged[key], entry, lists=lists)
        else:
            merged[key] = entry
    return list(merged.values())
