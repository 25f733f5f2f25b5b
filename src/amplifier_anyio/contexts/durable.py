"""Approvals of a transcript from outside a running session (the CLI's ``sessions approve``).

A turn whose tool call was deferred ends ``awaiting_approval``; its transcript (a
context-persistent file and its journal) keeps the held calls. These functions read and
decide them without running anything: the next ``session.resume()`` on the transcript —
in any process — runs the allowed calls, answers the denied ones and continues the turn.
They open the transcript as its one writer: call them while no session has it open.

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

from ..errors import SessionError
from ..kernel._turns import PendingApproval
from .persistent import PersistentContextManager, default_path

__all__ = ("PendingApproval", "pending_approvals", "approve", "approve_session")


async def pending_approvals(path: str | os.PathLike[str]) -> list[PendingApproval]:
    """The calls of the transcript at ``path`` that wait for a decision (oldest first)."""
    manager = PersistentContextManager(path)
    await manager.load()
    return manager.pending_approvals()


async def approve(
    path: str | os.PathLike[str], approvals: Mapping[str, str]
) -> list[PendingApproval]:
    """Record ``approvals`` (call id → ``"allow"`` | ``"deny"``) in the transcript at
    ``path``, fsynced; nothing runs. Returns the calls still waiting for a decision.

    A decision may be changed until the session resumes. Raises
    [`SessionError`][amplifier_anyio.SessionError] naming a call id that is not held, or a decision
    that is neither allow nor deny (then nothing is recorded), and
    [`ContextFileError`][amplifier_anyio.errors.ContextFileError] when the transcript cannot be read
    or written.
    """
    manager = PersistentContextManager(path)
    await manager.load()
    try:
        await manager.journal_decide(dict(approvals))
    except ValueError as exc:
        raise SessionError(str(exc)) from exc
    return manager.pending_approvals()


async def approve_session(
    session_id: str, approvals: Mapping[str, str], *, cwd: Path | None = None
) -> list[PendingApproval]:
    """[`approve`][amplifier_anyio.contexts.approve] on the transcript Amplifier keeps for
    ``session_id`` (see `default_path`; ``cwd`` picks the project)."""
    return await approve(default_path(session_id, cwd), approvals)
