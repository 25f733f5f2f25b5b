"""Public test kit for module authors.

Real, small stand-ins for the parts of a session a module talks to (a real coordinator
and hook registry, an in-memory context, a configurable tool, an event recorder). The
hypothesis strategies live in :mod:`amplifier_anyio.testing.strategies` (they need the
``test`` extra). :mod:`~amplifier_anyio.testing.cassette` records a session's provider calls
and replays them; :mod:`~amplifier_anyio.testing.faults` applies seeded fault plans;
:mod:`~amplifier_anyio.testing.conformance` has the contract checks a module author runs.
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
