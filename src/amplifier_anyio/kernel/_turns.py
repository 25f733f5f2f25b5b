"""How a turn ended: [`TurnStatus`][amplifier_anyio.TurnStatus] and
[`TurnResult`][amplifier_anyio.TurnResult]."""

from __future__ import annotations

import enum
from typing import Any

import attrs

from ..models import Usage

__all__ = ("TurnStatus", "TurnResult", "PendingApproval")


class TurnStatus(enum.StrEnum):
    """The terminal state of one turn."""

    SUCCESS = "success"
    """The model gave its final answer."""
    INCOMPLETE = "incomplete"
    """The iteration limit was reached (the text is the model's wrap-up), a hook denied, or
    the final answer was cut by the token limit, refused or filtered (``finish_reason``
    says which)."""
    ERROR = "error"
    """A provider or module failed; ``TurnResult.error`` holds the exception."""
    CANCELLED = "cancelled"
    """Cancelled through the session or coordinator, or the turn timeout passed."""
    AWAITING_APPROVAL = "awaiting_approval"
    """A tool call waits for an approval that outlives the turn: the batch's other calls
    ran, ``TurnResult.pending_approvals`` lists the held ones, and
    ``session.resume(approvals=...)`` continues the turn (``docs/durable.md``)."""


@attrs.frozen(kw_only=True)
class PendingApproval:
    """A tool call held until someone allows or denies it."""

    call_id: str
    tool: str
    input: Any
    """The call's input as the tool would get it (after ``tool:pre`` hooks)."""
    prompt: str
    """The question for the approver."""


@attrs.frozen(kw_only=True)
class TurnResult:
    """What one turn produced.

    ``turn_count`` is the number of provider calls; ``usage`` their summed token usage;
    ``finish_reason`` the last response's. ``problems`` lists what went wrong without
    ending the turn on its own: a terminal event whose observers outlasted their bound, a
    context write that failed or gave up (each also logged at error level).
    ``pending_approvals`` is set when the status is ``awaiting_approval``.
    """

    text: str
    status: TurnStatus
    turn_count: int = 0
    usage: Usage = attrs.field(factory=Usage)
    error: BaseException | None = attrs.field(default=None, eq=False)
    trace_id: str | None = None
    finish_reason: str | None = None
    problems: tuple[str, ...] = ()
    pending_approvals: tuple[PendingApproval, ...] = ()
    """With status ``awaiting_approval``: the calls that wait for a decision."""
