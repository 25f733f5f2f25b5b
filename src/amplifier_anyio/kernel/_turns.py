"""How a turn ended: [`TurnStatus`][amplifier_anyio.TurnStatus] and
[`TurnResult`][amplifier_anyio.TurnResult]; a call held for an approval
([`PendingApproval`][amplifier_anyio.PendingApproval]) and the placeholder results that
stand in the history for a call without its real result yet.

A placeholder is a complete ``role: tool`` message, so a history never has an orphaned
call: `pending_result` for a call waiting for an approval, `resumable_result` for an
idempotent call a crash interrupted (``session.resume()`` replaces both with the real
result), `interrupted_result` for one that may or may not have had its effect. The tool
batch writes them, context-persistent's journal settles a reloaded history with them
(``contexts/_journal``), and an approval binds to a call by its `call_digest`.
"""

from __future__ import annotations

import enum
import hashlib
import json
from collections.abc import Mapping
from typing import Any

import attrs

from ..models import Usage

__all__ = (
    "TurnStatus",
    "TurnResult",
    "PendingApproval",
    "PENDING_MESSAGE",
    "INTERRUPTED_ERROR",
    "call_digest",
    "pending_result",
    "interrupted_result",
    "resumable_result",
    "finished_result",
    "is_placeholder",
)

PENDING_MESSAGE = "Tool call is awaiting approval"
"""The error text of a held call's placeholder."""
INTERRUPTED_ERROR = "Tool execution was interrupted"
"""The error text of a call whose process died while it ran."""


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


def call_digest(tool: str, arguments: Any) -> str:
    """What an approval binds to: SHA-256 of the tool name and the arguments' canonical
    JSON (sorted keys, no spaces)."""
    text = json.dumps(
        arguments, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str
    )
    return hashlib.sha256(f"{tool}\0{text}".encode()).hexdigest()


def _tool_message(
    call_id: str, name: str, content: str, metadata: dict[str, Any]
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "tool", "tool_call_id": call_id}
    if name:
        message["name"] = name
    message["content"] = content
    message["metadata"] = metadata
    return message


def pending_result(call_id: str, name: str, prompt: str) -> dict[str, Any]:
    """The placeholder of a call that waits for an approval (what the model sees if the
    conversation goes on without a decision)."""
    payload = {"error": PENDING_MESSAGE, "awaiting_approval": True, "tool": name, "prompt": prompt}
    return _tool_message(
        call_id, name, json.dumps(payload, ensure_ascii=False), {"pending_approval": True}
    )


def interrupted_result(
    call_id: str, name: str, resume: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The final result of a call the process died during (see context-persistent's);
    ``resume``: what its tool noted to pick the work up (``ToolCallContext.note_resume``),
    beside the fixed keys, never replacing them."""
    payload: dict[str, Any] = {"error": INTERRUPTED_ERROR, "interrupted": True, "tool": name}
    for key, value in (resume or {}).items():
        payload.setdefault(key, value)
    return _tool_message(
        call_id, name, json.dumps(payload, ensure_ascii=False), {"interrupted": True}
    )


def resumable_result(
    call_id: str, name: str, resume: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The placeholder of an idempotent call that was running at a crash: the interrupted
    result, marked so that ``session.resume()`` runs the call again."""
    message = interrupted_result(call_id, name, resume)
    message["metadata"] = {"interrupted": True, "resumable": True}
    return message


def finished_result(call_id: str, name: str, content: str) -> dict[str, Any]:
    """The result a journal's ``finished`` record kept."""
    return _tool_message(call_id, name, content, {"recovered": True})


def is_placeholder(message: Mapping[str, Any]) -> bool:
    """Whether ``message`` is a pending or resumable placeholder."""
    metadata = message.get("metadata")
    if message.get("role") != "tool" or not isinstance(metadata, Mapping):
        return False
    return bool(metadata.get("pending_approval") or metadata.get("resumable"))
