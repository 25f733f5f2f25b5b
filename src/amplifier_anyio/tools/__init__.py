"""Tools shipped with amplifier_anyio (the offline demo tools)."""

from __future__ import annotations

from .demo import ReverseWordsTool, WordCountTool

__all__ = ("WordCountTool", "ReverseWordsTool")
