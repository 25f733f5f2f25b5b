"""The turn policy: the deterministic decisions of one turn, written once.

Two drivers run a turn: the in-process engine ([`Turn`][amplifier_anyio.runtime.Turn], on
anyio) and the durable workflow (``amplifier_anyio.temporal``, in Temporal's deterministic
loop). Both ask this module what to do, so they cannot drift:

- whether another provider call is allowed (``within_limit``)
  and the reminder of the one last call at the limit (``limit_reminder``);
- what a response means (``next_step``): the answer,
  a server pause to go on from, or a batch of tool calls;
- the status an answer gives (``answer_status``), and the text and status of a turn a
  hook denied (``denial``);
- the order the results of a batch are appended in (call order, whatever finished first:
  ``ordered_results``) and how a call
  without a result is answered: *cancelled* when a cancel stopped it, *interrupted* when
  its attempt was lost with its process.

- what the finished calls of a batch mean for the turn (``watch_progress``): a reminder
  for the next request when the same call keeps failing the same way, or the turn stopped
  ``incomplete`` / ``no_progress`` (``runtime/_progress``).

Everything here is a pure function of plain data (and the turn's own
[`ProgressWatch`][amplifier_anyio.runtime.ProgressWatch], itself pure): no I/O, no clock,
no randomness, no anyio.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..kernel._turns import TurnStatus, interrupted_result
from ..models import HookResult
from ._progress import ProgressVerdict, ProgressWatch
from ._requests import LOOP_LIMIT_REMINDER
from ._tool_batch import cancelled_result

__all__ = (
    "INCOMPLETE_FINISH_REASONS",
    "PAUSE_TURN",
    "MAX_PAUSES",
    "Step",
    "within_limit",
    "next_step",
    "answer_status",
    "denial",
    "limit_reminder",
    "execution_status",
    "ordered_results",
    "cancelled_message",
    "interrupted_message",
    "CallOutcome",
    "ProgressStep",
    "watch_progress",
    "halted_status",
)

INCOMPLETE_FINISH_REASONS = frozenset(
    {"length", "max_tokens", "content_filter", "refusal", "model_context_window_exceeded"}
)
"""Finish reasons of an answer that was cut, refused or filtered: the turn ends
``incomplete`` with that reason, never a silent ``success``."""

PAUSE_TURN = "pause_turn"
"""Anthropic's finish reason for a long server-side turn it paused: the turn goes on."""

MAX_PAUSES = 8
"""Consecutive ``pause_turn`` answers before the turn ends ``incomplete``."""

_EXECUTION_STATUS = {
    TurnStatus.SUCCESS: "completed",
    TurnStatus.INCOMPLETE: "incomplete",
    TurnStatus.ERROR: "error",
    TurnStatus.CANCELLED: "cancelled",
    TurnStatus.AWAITING_APPROVAL: "awaiting_approval",
}


class Step(enum.Enum):
    """What a provider response asks of the turn."""

    ANSWER = "answer"
    """No tool calls: the response is the answer and the turn ends."""
    PAUSE = "pause"
    """The server paused its own long turn: store what it said, call again."""
    TOOLS = "tools"
    """Run the response's tool calls as one batch, then call again."""


def within_limit(iterations: int, max_iterations: int) -> bool:
    """Whether another provider call with tools is allowed (``-1``: unlimited)."""
    return max_iterations == -1 or iterations < max_iterations


def next_step(calls: int, finish_reason: str | None, pauses: int) -> Step:
    """What a response with ``calls`` tool calls and ``finish_reason`` asks for, after
    ``pauses`` consecutive server pauses."""
    if calls:
        return Step.TOOLS
    if finish_reason == PAUSE_TURN and pauses < MAX_PAUSES:
        return Step.PAUSE
    return Step.ANSWER


def answer_status(finish_reason: str | None, *, at_limit: bool = False) -> TurnStatus:
    """The status of a turn that ends with an answer: ``incomplete`` when the answer was
    cut, refused or filtered, still paused, or the wrap-up at the iteration limit."""
    if at_limit or finish_reason in INCOMPLETE_FINISH_REASONS or finish_reason == PAUSE_TURN:
        return TurnStatus.INCOMPLETE
    return TurnStatus.SUCCESS


def denial(result: HookResult) -> tuple[str, TurnStatus]:
    """The text and status of a turn that ``result``, a hook's deny, ended."""
    return f"Operation denied: {result.reason or 'no reason given'}", TurnStatus.INCOMPLETE


def limit_reminder() -> dict[str, Any]:
    """The ephemeral user message of the one last call (without tools) at the limit."""
    return {"role": "user", "content": LOOP_LIMIT_REMINDER}


def execution_status(status: TurnStatus) -> str:
    """The ``status`` of ``execution:end`` for a turn status."""
    return _EXECUTION_STATUS[status]


def cancelled_message(
    call_id: str, name: str, resume: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The ``role: tool`` answer of a call a cancel stopped before it finished (the same
    content as the tool batch's ``cancelled_result``); ``resume``: what its tool noted to
    pick the work up again (a sub-agent's ``session_id``)."""
    content = cancelled_result(name, resume).get_serialized_output()
    return {"role": "tool", "tool_call_id": call_id, "name": name, "content": content}


def interrupted_message(
    call_id: str, name: str, resume: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The ``role: tool`` answer of a call whose attempt was lost with its process (the
    journal's interrupted result): it may or may not have had its effect."""
    return interrupted_result(call_id, name, resume)


def ordered_results(
    calls: Sequence[Mapping[str, Any]],
    results: Mapping[str, Mapping[str, Any]],
    unfinished: Callable[[str, str], dict[str, Any]],
) -> list[dict[str, Any]]:
    """One ``role: tool`` message per call, in call order: the call's result when it has
    one, else ``unfinished(call_id, name)`` (``cancelled_message`` or
    ``interrupted_message``). ``calls`` are tool call dicts (``id``, ``name``)."""
    found = []
    for call in calls:
        call_id, name = str(call["id"]), str(call["name"])
        result = results.get(call_id)
        found.append(dict(result) if result is not None else unfinished(call_id, name))
    return found


CallOutcome = tuple[str, Any, bool | None, str | None]
"""A finished call as the no-progress watch sees it: tool name, arguments, whether it
succeeded (None: no result, such as a cancelled or held call) and its result content."""


class ProgressStep:
    """What a batch's finished calls mean for the turn (``watch_progress``)."""

    __slots__ = ("injections", "problem")

    def __init__(self, injections: list[dict[str, Any]], problem: str | None) -> None:
        self.injections = injections
        """Ephemeral reminders for the next request (appended to the last tool result)."""
        self.problem = problem
        """The problem line when the turn must stop ``no_progress``, else None."""


def watch_progress(watch: ProgressWatch | None, outcomes: Sequence[CallOutcome]) -> ProgressStep:
    """Feed a batch's finished calls to the turn's no-progress watch, in call order (calls
    without a result are skipped): the reminders to send and whether the turn stops."""
    step = ProgressStep([], None)
    if watch is None:
        return step
    for name, arguments, succeeded, content in outcomes:
        if succeeded is None or content is None:
            continue
        verdict = watch.observe(name, arguments, None if succeeded else content)
        if verdict is ProgressVerdict.REMIND:
            step.injections.append(
                {"role": "user", "content": watch.reminder(), "append_to_last_tool_result": True}
            )
        elif verdict is ProgressVerdict.STOP and step.problem is None:
            step.problem = watch.problem()
    return step


def halted_status(
    status: TurnStatus, halted: str | None, finish_reason: str | None
) -> tuple[TurnStatus, str | None]:
    """The status and finish reason of a turn its engine stopped (``halted``: the no-progress
    watch's ``no_progress``): ``incomplete`` unless it ended in an error."""
    if halted is not None and status is not TurnStatus.ERROR:
        return TurnStatus.INCOMPLETE, halted
    return status, finish_reason
