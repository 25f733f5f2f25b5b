"""Orchestrators: the agent loops a session runs its turns with."""

from __future__ import annotations

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
