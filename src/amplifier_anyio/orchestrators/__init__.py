"""Orchestrators: the agent loops a session runs its turns with."""

from __future__ import annotations

from .loop_basic import LoopBasicConfig, LoopBasicOrchestrator

__all__ = ("LoopBasicOrchestrator", "LoopBasicConfig")
