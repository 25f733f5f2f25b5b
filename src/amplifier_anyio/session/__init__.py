"""The application layer: the session and what a host drives it with.

`AmplifierSession` (mount a plan, run turns, cancel, close), the turn event stream,
sub-agents (DESIGN §14), bundles and plan validation. It sits above the kernel, the
runtime, the contexts and the test kit (the plan's cassette): nothing below imports it
(docs/architecture.md).
"""

from __future__ import annotations

from ._bundles import ResolvedPlan, resolve_plan_dict, resolve_plan_file
from ._event_stream import Event, TurnEventStream
from ._session import AmplifierSession, SessionState, SessionStatus
from ._validation import PlanReport, validate_plan

__all__ = (
    "AmplifierSession",
    "SessionState",
    "SessionStatus",
    "TurnEventStream",
    "Event",
    "resolve_plan_file",
    "resolve_plan_dict",
    "ResolvedPlan",
    "validate_plan",
    "PlanReport",
)
