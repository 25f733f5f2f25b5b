"""How a turn ended: :class:`TurnStatus` and :class:`TurnResult`."""

from __future__ import annotations

import enum

import attrs

from ..models import Usage

__all__ = ("TurnStatus", "TurnResult")


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


@attrs.frozen(kw_only=True)
class TurnResult:
    """What one turn produced.

    ``turn_count`` is the number of provider calls; ``usage`` their summed token usage;
    ``finish_reason`` the last response's. ``problems`` lists what went wrong without
    ending the turn on its own: a terminal event whose observers outlasted their bound, a
    context write that failed or gave up (each also logged at error level).
    """

    text: str
    status: TurnStatus
    turn_count: int = 0
    usage: Usage = attrs.field(factory=Usage)
    error: BaseException | None = attrs.field(default=None, eq=False)
    trace_id: str | None = None
    finish_reason: str | None = None
    problems: tuple[str, ...] = ()
