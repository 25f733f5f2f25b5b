"""The tool-call journal of context-persistent: its records, their fold, and the recovery of
a history from messages plus journal (pure functions; the file work is in `_jsonl`).

The journal is a JSON-lines file beside the messages. Every record names its call by
``call_id`` and ``at``: the position in the history right after the assistant message that
made the call (so an id a provider reuses in a later turn is another call). Records:

- ``started`` (``tool``, ``args_hash``, ``key``, ``idempotent``): written, fsynced, before
  the tool runs;
- ``finished`` (``content``, ``success``): the call's result as soon as it exists;
- ``deferred`` (``tool``, ``input``, ``prompt``, ``hold``): the call waits for an approval
  (``hold`` names this deferral; a later deferral of the same call forgets the decision
  of an earlier one);
- ``decided`` (``decision``: ``allow`` | ``deny``, ``digest``: `call_digest` of the
  tool and arguments decided on, ``hold``, ``id``: the decision's own id when it came from
  the decisions file): the approval's answer, bound to the call as it was shown;
- ``noted`` (``fields``): what the running tool noted to resume its work
  (``ToolCallContext.note_resume``); the interrupted result of the call carries them.

A call without a result in the history is settled from its records on load: ``finished``
gives that result (the call never runs again); ``deferred`` gives a *pending* placeholder;
``started`` alone gives the interrupted result, or a *resumable* placeholder when its tool
declared itself idempotent; no record gives the interrupted result. A placeholder is a
complete tool message (so the history never has an orphaned call) that
``session.resume()`` replaces with the real result. The placeholders, `call_digest` and
their texts live beside `PendingApproval` (``kernel/_turns``), since the engine writes
them too; `ArgumentsChangedError` is in ``errors``. Both are re-exported here.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs

from ..errors import ArgumentsChangedError
from ..kernel._turns import (
    INTERRUPTED_ERROR,
    PENDING_MESSAGE,
    PendingApproval,
    call_digest,
    finished_result,
    interrupted_result,
    is_placeholder,
    pending_result,
    resumable_result,
)
from ._messages import calls, result_ids

__all__ = (
    "STARTED",
    "FINISHED",
    "DEFERRED",
    "DECIDED",
    "NOTED",
    "CallState",
    "fold",
    "apply_record",
    "recover",
    "tail_batch",
    "read_records",
    "placeholders",
    "owners",
    "finished_result",
    "pending_of",
    "ResumeWork",
    "resume_work",
    "arguments_hash",
    "call_digest",
    "idempotency_key",
    "pending_result",
    "resumable_result",
    "is_placeholder",
    "PENDING_MESSAGE",
    "INTERRUPTED_ERROR",
    "interrupted_result",
    "ArgumentsChangedError",
    "outside_decisions",
    "decision_record",
    "check_approved",
)

STARTED = "started"
FINISHED = "finished"
DEFERRED = "deferred"
DECIDED = "decided"
NOTED = "noted"


@attrs.define
class CallState:
    """What the journal knows of one call (the fold of its records)."""

    call_id: str
    at: int
    tool: str = ""
    started: bool = False
    idempotent: bool = False
    content: str | None = None
    """The result's content once a ``finished`` record exists."""
    success: bool | None = None
    deferred: PendingApproval | None = None
    hold: str | None = None
    """The id of the deferral the call waits in (None in a journal older than holds)."""
    decision: str | None = None
    digest: str | None = None
    """The `call_digest` the decision was made on."""
    decision_ids: set[str] = attrs.field(factory=set)
    """Ids of the outside decisions already taken into this journal."""
    resume: dict[str, Any] = attrs.field(factory=dict)
    """What the tool noted to resume its work (``noted`` records, the later winning)."""


def fold(records: Iterable[Mapping[str, Any]]) -> dict[tuple[int, str], CallState]:
    """Each call's state, by ``(at, call_id)``; records of unknown types are ignored."""
    states: dict[tuple[int, str], CallState] = {}
    for record in records:
        apply_record(states, record)
    return states


def apply_record(states: dict[tuple[int, str], CallState], record: Mapping[str, Any]) -> None:
    """Fold one more record into ``states``."""
    at, call_id = record.get("at"), record.get("call_id")
    if not isinstance(at, int) or not isinstance(call_id, str):
        return
    state = states.get((at, call_id))
    if state is None:
        state = states[(at, call_id)] = CallState(call_id=call_id, at=at)
    kind = record.get("type")
    if kind == STARTED:
        state.started = True
        state.tool = str(record.get("tool", state.tool))
        state.idempotent = bool(record.get("idempotent", False))
    elif kind == FINISHED and isinstance(record.get("content"), str):
        state.content = record["content"]
        state.success = bool(record.get("success", True))
    elif kind == DEFERRED:
        state.started = False  # the run (if any) ended in the deferral
        state.decision = state.digest = None  # a decision answers one deferral only
        hold = record.get("hold")
        state.hold = hold if isinstance(hold, str) else None
        state.tool = str(record.get("tool", state.tool))
        state.deferred = PendingApproval(
            call_id=call_id,
            tool=state.tool,
            input=record.get("input"),
            prompt=str(record.get("prompt", "")),
        )
    elif kind == DECIDED and record.get("decision") in ("allow", "deny"):
        state.decision = record["decision"]
        digest = record.get("digest")
        state.digest = digest if isinstance(digest, str) else None
        if isinstance(record.get("id"), str):
            state.decision_ids.add(record["id"])
    elif kind == NOTED and isinstance(record.get("fields"), dict):
        state.resume.update(record["fields"])


def read_records(data: bytes) -> list[dict[str, Any]]:
    """The journal's records; a line that does not parse (torn by a crash) is skipped."""
    records = []
    for raw in data.split(b"\n"):
        if not raw.strip():
            continue
        try:
            value = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            continue
        if isinstance(value, dict):
            records.append(value)
    return records


def arguments_hash(arguments: Any) -> str:
    """SHA-256 of the arguments' canonical JSON (sorted keys)."""
    text = json.dumps(arguments, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def idempotency_key(scope: str, at: int, call_id: str, args_hash: str) -> str:
    """A key that is the same every time this call runs, and differs between calls."""
    digest = hashlib.sha256(f"{scope}\0{at}\0{call_id}\0{args_hash}".encode())
    return digest.hexdigest()[:32]


def _settle_open(state: CallState | None, call_id: str, name: str) -> dict[str, Any]:
    if state is None:
        return interrupted_result(call_id, name)
    if state.content is not None:
        return finished_result(call_id, name, state.content)
    if state.deferred is not None and not state.started:
        return pending_result(call_id, name, state.deferred.prompt)
    if state.started and state.idempotent:
        return resumable_result(call_id, name, state.resume)
    return interrupted_result(call_id, name, state.resume)


def _settle_placeholder(
    message: dict[str, Any], state: CallState | None, call_id: str, name: str
) -> dict[str, Any]:
    if state is None:
        return message
    if state.content is not None:
        return finished_result(call_id, name, state.content)
    if state.started and not state.idempotent:
        # ran again, died again: never a third time
        return interrupted_result(call_id, name, state.resume)
    if state.started and (message.get("metadata") or {}).get("pending_approval"):
        return resumable_result(call_id, name, state.resume)
    return message


def owners(messages: list[dict[str, Any]]) -> dict[str, int]:
    """For each call id, the ``at`` of the (latest) assistant message that makes it."""
    found: dict[str, int] = {}
    for index, message in enumerate(messages):
        for call_id, _ in calls(message):
            found[call_id] = index + 1
    return found


def recover(
    messages: list[dict[str, Any]], states: Mapping[tuple[int, str], CallState]
) -> tuple[list[dict[str, Any]], int, bool]:
    """Settle the history against the journal: (messages, calls closed, changed).

    Placeholders whose call moved on (finished, or died while re-run) are replaced in
    place; every call without a result gets one (see the module docstring), right after
    the results its assistant message already has, in call order. The input is not
    changed.
    """
    settled = list(messages)
    changed = False
    owner: dict[str, int] = {}
    held = any(m.get("role") == "tool" and is_placeholder(m) for m in messages)
    for index, message in enumerate(messages if held else ()):  # (no placeholder: no work)
        role = message.get("role")
        if role == "assistant":
            for call_id, _ in calls(message):
                owner[call_id] = index + 1
        elif role == "tool" and is_placeholder(message):
            call_id = str(message.get("tool_call_id"))
            at = owner.get(call_id)
            state = states.get((at, call_id)) if at is not None else None
            new = _settle_placeholder(message, state, call_id, str(message.get("name", "")))
            if new is not message:
                settled[index], changed = new, True
    repaired, closed = close_open_calls(
        settled,
        lambda index, call_id, name: _settle_open(states.get((index + 1, call_id)), call_id, name),
    )
    return repaired, closed, changed or closed > 0


def close_open_calls(
    messages: list[dict[str, Any]], closing: Callable[[int, str, str], dict[str, Any]]
) -> tuple[list[dict[str, Any]], int]:
    """Answer every assistant tool call no later message answers; (messages, count).

    ``closing(index, call_id, name)`` builds the answer of a call of the assistant message
    at ``index``. Answers go right after the results that message already has (the
    messages directly after it that answer its calls), in call order. The input list is
    not changed; when nothing is missing it is returned as is.
    """
    missing = _missing_results(messages)
    if not missing:
        return messages, 0
    inserts: dict[int, list[dict[str, Any]]] = {}
    for index, open_calls in missing.items():
        own = {call_id for call_id, _ in calls(messages[index])}
        position = index + 1
        while position < len(messages) and own.intersection(result_ids(messages[position])):
            position += 1
        answers = [closing(index, call_id, name) for call_id, name in open_calls]
        inserts.setdefault(position, []).extend(answers)
    repaired: list[dict[str, Any]] = []
    for position, message in enumerate(messages):
        repaired.extend(inserts.get(position, ()))
        repaired.append(message)
    repaired.extend(inserts.get(len(messages), ()))
    return repaired, sum(len(answers) for answers in inserts.values())


def _missing_results(messages: list[dict[str, Any]]) -> dict[int, list[tuple[str, str]]]:
    answered_later: set[str] = set()
    missing: dict[int, list[tuple[str, str]]] = {}
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        role, blocks = message.get("role"), message.get("content").__class__ is not str
        # only an assistant message makes calls (in tool_calls or in content blocks)
        if role == "assistant" and (blocks or message.get("tool_calls")):
            open_calls = [call for call in calls(message) if call[0] not in answered_later]
            if open_calls:
                missing[index] = open_calls
        # only a tool message or a message with content blocks answers calls
        if role == "tool" or blocks:
            answered_later.update(result_ids(message))
    return missing


def tail_batch(messages: list[dict[str, Any]]) -> int | None:
    """The index of the assistant message whose calls end the history (only their results
    and hook injections after it), or None."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if calls(message):
            return index
        metadata = message.get("metadata")
        from_hook = isinstance(metadata, Mapping) and metadata.get("source") == "hook"
        if message.get("role") != "tool" and not from_hook:
            return None
    return None


def placeholders(messages: list[dict[str, Any]]) -> list[tuple[int, dict[str, Any]]]:
    """``(at, message)`` of the tail batch's placeholders, in history order."""
    index = tail_batch(messages)
    if index is None:
        return []
    return [(index + 1, m) for m in messages[index + 1 :] if is_placeholder(m)]


def pending_of(
    messages: list[dict[str, Any]],
    states: Mapping[tuple[int, str], CallState],
    *,
    undecided: bool = False,
) -> list[PendingApproval]:
    """The tail batch's calls held for an approval (only those without a decision yet
    when ``undecided``)."""
    pending = []
    for at, message in placeholders(messages):
        if not (message.get("metadata") or {}).get("pending_approval"):
            continue
        state = states.get((at, str(message.get("tool_call_id"))))
        if state is None or state.deferred is None:
            continue
        if not (undecided and state.decision is not None):
            pending.append(state.deferred)
    return pending


@attrs.frozen(kw_only=True)
class ResumeWork:
    """What ``session.resume()`` has to do with the tail batch of a history."""

    assistant: dict[str, Any] | None
    """The assistant message whose calls are held (None: nothing held)."""
    run: tuple[str, ...] = ()
    """Call ids to run: idempotent calls a crash interrupted, and allowed calls."""
    approved: frozenset[str] = frozenset()
    """Of ``run``, the calls someone allowed."""
    denied: dict[str, str] = attrs.field(factory=dict)
    """Call id → prompt of the calls someone denied."""
    waiting: tuple[PendingApproval, ...] = ()
    """Calls still without a decision."""


def resume_work(
    messages: list[dict[str, Any]], states: Mapping[tuple[int, str], CallState]
) -> ResumeWork:
    """What resuming the tail batch of ``messages`` involves."""
    index = tail_batch(messages)
    if index is None:
        return ResumeWork(assistant=None)
    run: list[str] = []
    approved: set[str] = set()
    denied: dict[str, str] = {}
    waiting: list[PendingApproval] = []
    for at, message in placeholders(messages):
        call_id = str(message.get("tool_call_id"))
        state = states.get((at, call_id))
        if (message.get("metadata") or {}).get("resumable"):
            run.append(call_id)
        elif state is None or state.deferred is None:
            continue  # a placeholder the journal no longer knows: it stays as it is
        elif state.decision == "allow":
            run.append(call_id)
            approved.add(call_id)
        elif state.decision == "deny":
            denied[call_id] = state.deferred.prompt
        else:
            waiting.append(state.deferred)
    return ResumeWork(
        assistant=dict(messages[index]),
        run=tuple(run),
        approved=frozenset(approved),
        denied=denied,
        waiting=tuple(waiting),
    )


def decision_record(
    state: CallState, decision: str, *, decision_id: str | None = None
) -> dict[str, Any]:
    """The ``decided`` record of ``decision`` on the deferral ``state`` waits in, bound to
    the tool and arguments it was deferred with."""
    assert state.deferred is not None
    record: dict[str, Any] = {
        "type": DECIDED,
        "at": state.at,
        "call_id": state.call_id,
        "decision": decision,
        "digest": call_digest(state.deferred.tool, state.deferred.input),
        "hold": state.hold,
    }
    if decision_id is not None:
        record["id"] = decision_id
    return record


def outside_decisions(
    records: Iterable[Mapping[str, Any]],
    messages: list[dict[str, Any]],
    states: Mapping[tuple[int, str], CallState],
) -> list[dict[str, Any]]:
    """Of the decisions file's records, those still to take: well formed, on a call that
    waits now (the same deferral it was decided on), and not taken before (by id)."""
    waiting = {
        (at, str(m.get("tool_call_id")))
        for at, m in placeholders(messages)
        if (m.get("metadata") or {}).get("pending_approval")
    }
    taken = {i for state in states.values() for i in state.decision_ids}
    found = []
    for record in records:
        key = (record.get("at"), record.get("call_id"))
        state = states.get(key) if key in waiting else None
        if state is None or state.deferred is None or record.get("type") != DECIDED:
            continue
        if record.get("decision") not in ("allow", "deny"):
            continue
        if not isinstance(record.get("id"), str) or record["id"] in taken:
            continue
        if state.hold is not None and record.get("hold") != state.hold:
            continue  # decided on an earlier deferral of the call
        found.append(dict(record))
        taken.add(record["id"])
    return found


def check_approved(state: CallState | None, tool: str, arguments: Any) -> None:
    """Raise `ArgumentsChangedError` when ``state`` is an allowed call and ``tool`` /
    ``arguments`` are not what the decision was made on."""
    if state is None or state.deferred is None or state.decision != "allow":
        return
    if state.digest is not None and state.digest == call_digest(tool, arguments):
        return
    msg = (
        f"the arguments of {tool} call {state.call_id} changed after it was approved; "
        "it was not run"
    )
    raise ArgumentsChangedError(msg)
