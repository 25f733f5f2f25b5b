"""Public test kit for module authors.

Real, small stand-ins for the parts of a session a module talks to (a real coordinator
and hook registry, an in-memory context, a configurable tool, an event recorder). The
hypothesis strategies live in `amplifier_anyio.testing.strategies` (they need the
``test`` extra). `amplifier_anyio.testing.cassette` records a session's provider calls
and replays them; `amplifier_anyio.testing.faults` applies seeded fault plans;
`amplifier_anyio.testing.conformance` has the contract checks a module author runs.
"""

from __future__ import annotations

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
)
