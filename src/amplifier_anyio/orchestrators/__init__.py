"""Orchestrators: the agent loops a session runs its turns with.

The names are imported on first use (PEP 562): a session that runs loop-basic does not
import the other loops.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .loop_basic import LoopBasicConfig, LoopBasicOrchestrator
    from .loop_events import LoopEventsConfig, LoopEventsOrchestrator
    from .loop_lifecycle import LoopLifecycleConfig, LoopLifecycleOrchestrator
    from .loop_streaming import LoopStreamingOrchestrator

__all__ = (
    "LoopBasicOrchestrator",
    "LoopStreamingOrchestrator",
    "LoopBasicConfig",
    "LoopLifecycleOrchestrator",
    "LoopLifecycleConfig",
    "LoopEventsOrchestrator",
    "LoopEventsConfig",
)

_LAZY: dict[str, str] = {
    "LoopBasicOrchestrator": "loop_basic",
    "LoopBasicConfig": "loop_basic",
    "LoopStreamingOrchestrator": "loop_streaming",
    "LoopLifecycleOrchestrator": "loop_lifecycle",
    "LoopLifecycleConfig": "loop_lifecycle",
    "LoopEventsOrchestrator": "loop_events",
    "LoopEventsConfig": "loop_events",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        msg = f"module {__name__!r} has no attribute {name!r}"
        raise AttributeError(msg)
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
