"""Approvals of a transcript from outside a running session (the CLI's ``sessions approve``).

A turn whose tool call was deferred ends ``awaiting_approval``; its transcript (a
context-persistent file and its journal) keeps the held calls. These functions read and
decide them without running anything, and without writing the transcript or its journal:
they open it read-only, and a decision is appended to the transcript's decisions file
(``<name>.decisions.jsonl``), which its writer — the running session, or the next one to
open it — takes into its journal and acts on when the turn resumes. So they are safe
while a session has the transcript open.

Every decision is bound to the call as it was shown: the digest of its tool name and
arguments (a resume that would run the call with other arguments denies it instead) and
the deferral it answers (a call deferred again needs a new decision). Each is taken once.

A CLI wires them as:

```text
amplifier-anyio sessions approve SESSION_ID CALL_ID allow|deny
    -> await approve_session(SESSION_ID, {CALL_ID: "allow"})
chat, after a turn that ended awaiting_approval
    -> result.pending_approvals (or await pending_approvals(path) for a stored one)
```
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import anyio
import anyio.to_thread

from ..errors import SessionError
from ..kernel._turns import PendingApproval
from . import _journal, _store
from .persistent import (
    PersistentContextManager,
    _decision_records,
    decisions_path_for,
    default_path,
)

__all__ = ("PendingApproval", "pending_approvals", "approve", "approve_session")


async def pending_approvals(path: str | os.PathLike[str]) -> list[PendingApproval]:
    """The calls of the transcript at ``path`` that wait for a decision (oldest first).

    Read-only: nothing is written, locked or repaired on disk.
    """
    async with PersistentContextManager(path, read_only=True) as manager:
        return manager.pending_approvals()


async def approve(
    path: str | os.PathLike[str], approvals: Mapping[str, str]
) -> list[PendingApproval]:
    """Record ``approvals`` (call id → ``"allow"`` | ``"deny"``) for the transcript at
    ``path`` in its decisions file (one write, fsynced); nothing runs, and the transcript
    and its journal are not touched. Returns the calls still waiting for a decision.

    A decision may be changed until the session resumes (the last one wins). Raises
    [`SessionError`][amplifier_anyio.SessionError] naming a call id that is not held, or a
    decision that is neither allow nor deny (then nothing is recorded), and
    [`ContextFileError`][amplifier_anyio.errors.ContextFileError] when a file cannot be read
    or written.
    """
    async with PersistentContextManager(path, read_only=True) as manager:
        try:
            records = _decision_records(
                manager._messages, manager._states, dict(approvals), outside=True
            )
        except ValueError as exc:
            raise SessionError(str(exc)) from exc
        if records:
            await anyio.to_thread.run_sync(
                _store.append_decisions, decisions_path_for(path), records
            )
        for record in records:
            _journal.apply_record(manager._states, record)
        return manager.pending_approvals()


async def approve_session(
    session_id: str, approvals: Mapping[str, str], *, cwd: Path | None = None
) -> list[PendingApproval]:
    """[`approve`][amplifier_anyio.contexts.approve] on the transcript Amplifier keeps for
    ``session_id`` (see `default_path`; ``cwd`` picks the project)."""
    return await approve(default_path(session_id, cwd), approvals)
