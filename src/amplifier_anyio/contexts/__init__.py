"""Context managers: the pure compaction function, context-simple and context-persistent."""

from __future__ import annotations

from ._jsonl import ContextFileError
from ._view import RequestView
from .compaction import Estimator, compact, compaction_notice, is_compaction_notice
from .durable import approve, approve_session, pending_approvals
from .persistent import (
    PersistentContextManager,
    close_interrupted_tool_calls,
    interrupted_result,
)
from .simple import SimpleContextManager

__all__ = (
    "compact",
    "compaction_notice",
    "is_compaction_notice",
    "Estimator",
    "SimpleContextManager",
    "RequestView",
    "PersistentContextManager",
    "ContextFileError",
    "interrupted_result",
    "close_interrupted_tool_calls",
    "approve",
    "approve_session",
    "pending_approvals",
)
