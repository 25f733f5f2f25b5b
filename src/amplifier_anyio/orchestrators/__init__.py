"""Orchestrators: the agent loops a session runs its turns with.

The names are imported on first use (PEP 562): a session that runs loop-basic does not
import the other loops.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_names

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


__getattr__, __dir__ = lazy_names(__name__, globals(), _LAZY)
