"""The workflow's outlet for session-level events (``execution:start``, ``execution:end``…).

Workflow code must not run hooks (they do I/O and run on anyio); it posts an event here,
only when it is not replaying, and the worker that runs it hands the event to the hooks of
its mounted plan on its own loop, in the order posted. A replay (another worker taking the
session over, a cache eviction) therefore never fires an event twice. The registry is
shared between the workflow sandbox and the worker because this module is passed through.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ("Post", "outlet_key", "register", "unregister", "post")

Post = Callable[[str, dict[str, Any], str | None], None]
"""Thread-safe: queue ``(event, data, trace root)`` for the worker's hooks (the trace root:
the trace id of the turn's OpenTelemetry trace, or None)."""

_OUTLETS: dict[str, Post] = {}


def outlet_key(task_queue: str, plan: str) -> str:
    """The outlet of the worker serving ``plan`` (its key) on ``task_queue``."""
    return f"{task_queue}/{plan}"


def register(key: str, sink: Post) -> None:
    """Route the events posted for ``key`` to ``sink`` (the latest worker in this process)."""
    _OUTLETS[key] = sink


def unregister(key: str, sink: Post) -> None:
    """Stop routing ``key`` to ``sink`` (a later registration stays)."""
    if _OUTLETS.get(key) is sink:
        del _OUTLETS[key]


def post(key: str, event: str, data: dict[str, Any], root: str | None = None) -> None:
    """Queue ``event`` for the worker's hooks (nothing when no worker here serves ``key``);
    ``root`` is the trace id of its turn's OpenTelemetry trace."""
    sink = _OUTLETS.get(key)
    if sink is not None:
        sink(event, data, root)
