"""Durable sessions on Temporal (extra ``[temporal]``; DESIGN §17, docs/durable-sessions.md).

A session is a Temporal workflow whose id is the session id; a turn is its update
``run(prompt)``; each provider call and each tool call is an activity, run by a
[`SessionWorker`][amplifier_anyio.temporal.SessionWorker] that mounts the plan's modules once
per process. [`TemporalSessions`][amplifier_anyio.temporal.TemporalSessions] is the client
(asyncio or trio) and [`DurableSession`][amplifier_anyio.temporal.DurableSession] one session.
"""

from __future__ import annotations

try:
    import temporalio  # noqa: F401 - the extra's one dependency
except ImportError as exc:  # pragma: no cover - depends on the installation
    msg = "durable sessions need the temporal extra: pip install 'amplifier-anyio[temporal]'"
    raise ImportError(msg) from exc

from ._client import DurableSession, TemporalSessions, turn_result
from ._worker import SessionWorker

__all__ = ("SessionWorker", "TemporalSessions", "DurableSession", "turn_result")
