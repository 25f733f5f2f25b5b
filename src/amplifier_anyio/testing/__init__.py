"""Public test kit for module authors.

Real, small stand-ins for the parts of a session a module talks to (a real coordinator
and hook registry, an in-memory context, a configurable tool, an event recorder). The
hypothesis strategies live in `amplifier_anyio.testing.strategies` (they need the
``test`` extra). The cassette, which records a session's provider calls and replays
them, lives in the runtime (the plan's ``session.cassette`` uses it) and its names are
re-exported here; `amplifier_anyio.testing.faults` applies seeded fault plans;
`amplifier_anyio.testing.conformance` has the contract checks a module author runs.
"""

from __future__ import annotations

from ..runtime._cassette import (
    ROOT_LANE,
    Cassette,
    CassetteStatistics,
    child_lane,
    first_difference,
    install_cassette,
    lane_of,
    lock_path_for,
    normalise_request,
    open_cassette,
)
from ._kit import (
    EventRecorder,
    MockContextManager,
    MockCoordinator,
    MockTool,
    RecordingDisplaySystem,
    ScriptedApprovalSystem,
    ScriptedOrchestrator,
)

__all__ = (
    "MockCoordinator",
    "MockTool",
    "MockContextManager",
    "EventRecorder",
    "ScriptedOrchestrator",
    "ScriptedApprovalSystem",
    "RecordingDisplaySystem",
    "Cassette",
    "CassetteStatistics",
    "open_cassette",
    "install_cassette",
    "lane_of",
    "child_lane",
    "ROOT_LANE",
    "lock_path_for",
    "normalise_request",
    "first_difference",
)
