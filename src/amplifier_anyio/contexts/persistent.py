"""context-persistent: context-simple whose history survives the process.

Every message is one JSON line of the file, appended and fsynced in a worker thread before
[`add_message`][amplifier_anyio.contexts.PersistentContextManager.add_message] returns;
`set_messages` and `clear` rewrite the file atomically. Loading (lazily on first use, or through
[`load`][amplifier_anyio.contexts.PersistentContextManager.load]) drops a torn last line, rejects
any other bad line with [`ContextFileError`][amplifier_anyio.errors.ContextFileError], and closes
every tool call that has no result (the process died while the tool ran) with an *interrupted*
result — see [`interrupted_result`][amplifier_anyio.contexts.interrupted_result] — so a resumed
conversation never sends an orphaned tool call. A repaired file is rewritten at once.

Beside the messages it keeps a journal of tool calls (``<name>.journal.jsonl``; see
`_journal` and ``docs/durable.md``): the tool batch records each call as started
before it runs and as finished with its result, fsynced, so a load after a crash gives a
finished call its real result (it never runs twice), answers one that was running as
interrupted (or leaves it to ``session.resume()`` when its tool is idempotent), and keeps
calls that wait for an approval.

An append that fails (a full disk) fails whole: the file is cut back to what it was and
the messages are not added to the history either; the error is a
[`ContextFileError`][amplifier_anyio.errors.ContextFileError].

One writer per file (DESIGN §15): a writing manager takes an OS lock beside the file
(``<name>.lock``, holding its pid) when it loads, and keeps it until ``aclose()`` (the
module's cleanup); a second writer — another process, or another manager in this one —
gets [`SessionError`][amplifier_anyio.SessionError] naming the holder. ``read_only=True``
opens the file without the lock and never writes anything: it repairs only in memory,
which is what every inspecting path (``sessions show``,
[`pending_approvals`][amplifier_anyio.contexts.pending_approvals], ``validate``) uses.
Approvals decided from outside reach the writer through an append-only decisions file
(``<name>.decisions.jsonl``) that it takes into its journal. ``<name>`` is the transcript's
whole file name (``run.jsonl.lock``), so ``run.jsonl`` and ``run.txt`` are two sessions; an
earlier version's stem-named files are taken over at the writer's load (`_store.migrate`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import uuid
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread

from ..config_schema import ConfigSchema, Setting
from ..errors import ConfigError, SessionError
from ..kernel._offload import BlockingLane
from ..kernel._turns import PendingApproval
from . import _journal, _jsonl, _store
from ._journal import ResumeWork
from ._jsonl import ContextFileError
from ._messages import calls
from .compaction import Estimator
from .simple import CONFIG_SCHEMA as SIMPLE_SCHEMA
from .simple import DEFAULTS, SimpleContextManager, settings_from_config

if TYPE_CHECKING:
    from ..interfaces import Cleanup

__all__ = (
    "PersistentContextManager",
    "ContextFileError",
    "interrupted_result",
    "close_interrupted_tool_calls",
    "mount",
    "default_path",
    "amplifier_home",
    "CONTEXT_MESSAGES_FILENAME",
    "AMPLIFIER_HOME_ENV",
    "journal_path_for",
    "lock_path_for",
    "decisions_path_for",
    "ResumeWork",
    "line_estimate",
)

logger = logging.getLogger(__name__)

CONTEXT_MESSAGES_FILENAME = "context-messages.jsonl"
"""The file name Amplifier uses inside a session directory."""

AMPLIFIER_HOME_ENV = "AMPLIFIER_HOME"
"""The environment variable that moves `amplifier_home` (default ``~/.amplifier``)."""

INTERRUPTED_ERROR = _journal.INTERRUPTED_ERROR

MODULE_ID = "context-persistent"


DECISION_SETTLE = 10.0
"""Seconds a cancelled ``journal_decide`` waits for a decision write already under way."""

JOURNAL_COMPACT_AT = 512
"""Journal records after which a batch's results, once written, drop the journal (when no
call waits for a resume)."""


def journal_path_for(path: str | os.PathLike[str]) -> Path:
    """The tool-call journal beside a messages file: ``<name>.journal.jsonl``
    (``run.jsonl`` → ``run.jsonl.journal.jsonl``)."""
    return _store.journal_path_for(Path(path))


def lock_path_for(path: str | os.PathLike[str]) -> Path:
    """The writer lock beside a messages file: ``<name>.lock`` (it holds the writer's pid)."""
    return _store.lock_path_for(Path(path))


def decisions_path_for(path: str | os.PathLike[str]) -> Path:
    """The decisions from outside beside a messages file: ``<name>.decisions.jsonl``."""
    return _store.decisions_path_for(Path(path))


def interrupted_result(call_id: str, name: str) -> dict[str, Any]:
    """The result that closes a tool call the process died during.

    ``content`` is the JSON of ``{"error": "Tool execution was interrupted",
    "interrupted": true, "tool": name}``, the same shape as the cancelled result of the
    orchestrators; ``metadata.interrupted`` marks it.
    """
    return _journal.interrupted_result(call_id, name)


def close_interrupted_tool_calls(
    messages: list[dict[str, Any]],
) -> tuple[list[dict[str, Any]], int]:
    """Close every assistant tool call no later message answers; return (messages, count).

    The closing results go right after the results the assistant message already has
    (the messages directly after it that answer its calls), in call order. The input list
    is not changed; when nothing is missing it is returned as is.
    """
    return _journal.close_open_calls(
        messages, lambda _index, call_id, name: interrupted_result(call_id, name)
    )


class PersistentContextManager(SimpleContextManager):
    """A [`SimpleContextManager`][amplifier_anyio.contexts.SimpleContextManager] that keeps its
    history in a JSON-lines file.

    Same view, budget, compaction and events as the parent. After it loaded a non-empty
    history from its own file,
    [`set_messages`][amplifier_anyio.contexts.PersistentContextManager.set_messages] is ignored
    (Amplifier's rule: on resume the file is the full history, and what a host passes back is a
    filtered copy); [`clear`][amplifier_anyio.contexts.PersistentContextManager.clear] ends that,
    since the file is then empty.

    A writing manager holds the file's writer lock from its load until
    [`aclose`][amplifier_anyio.contexts.PersistentContextManager.aclose] (or until it is
    garbage-collected); ``read_only=True`` never locks and never writes — every method that
    would write raises [`SessionError`][amplifier_anyio.SessionError]. ``async with`` loads
    and closes it.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        max_tokens: int = DEFAULTS["max_tokens"],
        compaction_threshold: float = DEFAULTS["compaction_threshold"],
        target_usage: float = DEFAULTS["target_usage"],
        safety_margin: int = DEFAULTS["safety_margin"],
        estimator: Estimator | None = None,
        hooks: Any | None = None,
        read_only: bool = False,
    ) -> None:
        super().__init__(
            max_tokens=max_tokens,
            compaction_threshold=compaction_threshold,
            target_usage=target_usage,
            safety_margin=safety_margin,
            estimator=estimator or line_estimate,
            hooks=hooks,
        )
        self._estimates_from_lines = estimator is None
        self.path = Path(path)
        self._lock = anyio.Lock()
        # Every write, fsync, rename and unlink of the file (and of the journal) runs on a
        # lane: a caller whose bound expires stops waiting, and the next write waits for
        # the stuck one instead of interleaving with it (DESIGN §3, bounded OS waits).
        self._file_lane = BlockingLane()
        self._journal_lane = BlockingLane()
        self._loaded = False
        self._loaded_from_file = False
        self._undo_to: int | None = None  # where torn bytes of a failed append start
        self.interrupted_calls_closed = 0
        """How many open tool calls the load closed (interrupted, recovered or held)."""
        self.read_only = read_only
        """Opened only to read: no lock, no write, repairs in memory only."""
        self.journal_path = journal_path_for(self.path)
        self.decisions_path = decisions_path_for(self.path)
        self._writer_lock: weakref.finalize[Any, Any] | None = None
        self._closed = False
        self._records: list[dict[str, Any]] = []
        self._states: dict[tuple[int, str], _journal.CallState] = {}
        self._journal_lock = anyio.Lock()
        self._journal_queue: list[dict[str, Any]] = []
        self._journal_enqueued = 0
        self._journal_flushed = 0
        self._journal_undo: int | None = None

    @property
    def loaded_from_file(self) -> bool:
        """Whether the history came from a non-empty file (``set_messages`` is then ignored)."""
        return self._loaded_from_file

    async def load(self) -> None:
        """Read the file now (once; later calls only checkpoint). A writing manager takes
        the writer lock first: [`SessionError`][amplifier_anyio.SessionError] names the
        holder if another has it."""
        await self._ready()

    @property
    def holds_lock(self) -> bool:
        """Whether this manager holds the file's writer lock now."""
        return self._writer_lock is not None and self._writer_lock.alive

    async def aclose(self) -> None:
        """Let the writer lock go; the manager writes nothing after this (idempotent)."""
        self._closed = True
        if self._writer_lock is not None:
            self._writer_lock()  # closes the lock's descriptor: no blocking I/O
        await anyio.lowlevel.checkpoint()

    async def __aenter__(self) -> PersistentContextManager:
        await self.load()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def _writable(self) -> None:
        if self.read_only:
            msg = f"{self.path} is open read-only: nothing is written"
            raise SessionError(msg)
        if self._closed:
            msg = f"the context of {self.path} is closed: nothing is written"
            raise SessionError(msg)

    async def add_message(self, message: dict[str, Any]) -> None:
        """Append a copy of ``message`` to the file (fsynced) and to the history.

        If writing fails, [`ContextFileError`][amplifier_anyio.errors.ContextFileError] is raised
        and neither the file nor the history has the message. If the caller stops waiting (a bounded
        write gave up, a cancel), the message is withdrawn from both: the history does not get it,
        and its line is cut off the file again — by the stuck write's thread as soon as it lands,
        or, when it had landed already, by the next append. (The turn engine writes under a
        shield, so only its ``write_timeout`` can make it stop waiting.)
        """
        self._writable()
        stored, cost = self._prepare(message)
        line = _jsonl.encode(stored)
        withdrawal = _jsonl.Withdrawal()
        async with self._lock:
            await self._load_locked()
            try:
                await self._append_locked(line, withdrawal)
            except anyio.get_cancelled_exc_class():
                landed_at = withdrawal.give_up()
                if landed_at is not None:  # written just before the give-up: cut it next
                    self._undo_to = landed_at
                raise
            self._append(stored, cost)

    async def add_messages(self, messages: list[dict[str, Any]]) -> None:
        """Append several messages with one write and one fsync (one tool batch's results).

        All or none: if writing fails, [`ContextFileError`][amplifier_anyio.errors.ContextFileError]
        is raised and neither the file nor the history has any of them. A crash mid-write leaves at
        most a torn last line, which loading ignores; calls whose results were lost are then closed
        as interrupted.

        If the caller stops waiting while the write is under way (a bounded write gave up,
        a cancel), the messages are kept in the live history all the same: they are a
        batch's results, and the history the turn goes on with must answer every call.
        The file catches up when the stuck write lands; if it never does, a reload closes
        those calls as interrupted.
        """
        self._writable()
        prepared = [self._prepare(message) for message in messages]
        lines = b"".join(_jsonl.encode(stored) for stored, _ in prepared)
        async with self._lock:
            await self._load_locked()
            try:
                await self._append_locked(lines)
            except anyio.get_cancelled_exc_class():
                if self._file_lane.busy:  # given up on mid-write: answered in memory
                    for stored, cost in prepared:
                        self._append(stored, cost)
                raise
            for stored, cost in prepared:
                self._append(stored, cost)
        if len(self._records) >= JOURNAL_COMPACT_AT:
            await self._compact_journal()

    async def _compact_journal(self) -> None:
        """Drop the journal once the history answers every call for good (its records are
        then never read again): it stays small in a long-lived process too."""
        async with self._journal_lock:
            if self._journal_queue or _journal.placeholders(self._messages):
                return
            await self._journal_lane.run(_unlink, self.journal_path)
            self._records, self._states, self._journal_undo = [], {}, None

    async def set_messages(self, messages: list[dict[str, Any]]) -> None:
        """Replace history and file, unless the history was loaded from the file."""
        self._writable()
        prepared = [self._prepare(message) for message in messages]
        async with self._lock:
            await self._load_locked()
            if self._loaded_from_file:
                logger.info(
                    "ignoring set_messages(%d messages): history was loaded from %s",
                    len(messages),
                    self.path,
                )
                return
            await self._rewrite_locked(prepared)

    async def clear(self) -> None:
        """Forget every message and empty the file."""
        self._writable()
        async with self._lock:
            await self._load_locked()
            await self._rewrite_locked([])
            self._loaded_from_file = False

    async def _ready(self) -> None:
        if self._loaded:
            await anyio.lowlevel.checkpoint()
            return
        async with self._lock:
            await self._load_locked()

    async def _load_locked(self) -> None:
        if self._loaded:
            return
        if not self.read_only and not self._closed:
            fd = await anyio.to_thread.run_sync(_store.acquire_writer, self.path)
            self._writer_lock = weakref.finalize(self, _store.release_writer, fd)
        estimator = None if self._estimates_from_lines else self.estimator
        try:
            # The garbage collector is the host's: a load never pauses it (the pause was
            # process-wide, and a host's own setting made meanwhile could not be restored).
            messages, costs, closed, records = await anyio.to_thread.run_sync(
                _load, self.path, self.journal_path, estimator, self.read_only or self._closed
            )
        except BaseException:
            if self._writer_lock is not None:
                self._writer_lock()
            raise
        self._reset(messages, costs)
        self._records = records
        self._states = _journal.fold(records)
        self._loaded = True
        self._loaded_from_file = bool(messages)
        self.interrupted_calls_closed = closed
        if closed:
            logger.warning("%s: closed %d interrupted tool call(s)", self.path, closed)
        await self._take_decisions()

    async def _take_decisions(self) -> None:
        """Take the decisions made from outside (``sessions approve``) into the journal; a
        read-only manager only folds them into what it shows."""
        only_read = self.read_only or self._closed
        read = await anyio.to_thread.run_sync(
            _read_decisions, self.path, self.decisions_path, only_read
        )
        records, size = read
        if not size:
            return
        taken = _journal.outside_decisions(records, self._messages, self._states)
        if self.read_only or self._closed:
            for record in taken:
                _journal.apply_record(self._states, record)
            return
        if taken:
            try:
                await self._journal_append(*taken)
            except ContextFileError as exc:  # they stay in the file for the next try
                logger.warning("%s: cannot take the decisions from outside: %s", self.path, exc)
                return
        try:
            await anyio.to_thread.run_sync(_store.drop_decisions, self.decisions_path, size)
        except OSError as exc:  # taken ones are known by id: reading them again is harmless
            logger.warning("%s: cannot empty the decisions file: %s", self.path, exc)

    async def _append_locked(
        self, data: bytes, withdrawal: _jsonl.Withdrawal | None = None
    ) -> None:
        # Abandoned only when the caller's bound expires: until then what the thread
        # reports (written, or not written at all) is what the history follows.
        try:
            await self._file_lane.run(
                _jsonl.append_line, self.path, data, self._undo_to, withdrawal
            )
        except _jsonl.AppendError as exc:
            self._undo_to = exc.undo_to
            raise
        self._undo_to = None

    async def _rewrite_locked(
        self, prepared: list[tuple[dict[str, Any], int]], *, keep_journal: bool = False
    ) -> None:
        lines = [_jsonl.encode(stored) for stored, _ in prepared]
        await self._file_lane.run(_jsonl.rewrite, self.path, lines)
        self._undo_to = None  # the new file has no torn bytes
        self._replace(prepared)
        if not keep_journal:  # a new history: positions of the old one mean nothing now
            async with self._journal_lock:
                await self._journal_lane.run(_unlink, self.journal_path)
                self._records, self._states, self._journal_undo = [], {}, None

    # -- the tool-call journal (the tool batch's optional protocol) -------------------------

    def _at_of(self, call_id: str) -> int:
        """The position right after the assistant message that makes ``call_id``."""
        for index in range(len(self._messages) - 1, -1, -1):
            if call_id in {cid for cid, _ in calls(self._messages[index])}:
                return index + 1
        return len(self._messages)

    async def journal_started(
        self, call_id: str, tool: str, arguments: Any, *, idempotent: bool = False
    ) -> str:
        """Record, fsynced, that a call is about to run; returns its idempotency key.

        An allowed call whose tool or arguments are not what the decision was made on
        raises `ArgumentsChangedError` (nothing is
        recorded; the batch answers the call as denied and does not run it).
        """
        self._writable()
        await self._ready()
        at = self._at_of(call_id)
        _journal.check_approved(self._states.get((at, call_id)), tool, arguments)
        digest = _journal.arguments_hash(arguments)
        key = _journal.idempotency_key(str(self.path.resolve()), at, call_id, digest)
        record = {
            "type": _journal.STARTED,
            "at": at,
            "call_id": call_id,
            "tool": tool,
            "args_hash": digest,
            "key": key,
            "idempotent": idempotent,
        }
        await self._journal_append(record)
        return key

    async def journal_finished(self, call_id: str, content: str, *, success: bool = True) -> None:
        """Record, fsynced, the result of a call (the last record of a call wins)."""
        self._writable()
        await self._ready()
        record = {
            "type": _journal.FINISHED,
            "at": self._at_of(call_id),
            "call_id": call_id,
            "content": content,
            "success": success,
        }
        await self._journal_append(record)

    async def journal_deferred(self, call_id: str, tool: str, tool_input: Any, prompt: str) -> None:
        """Record, fsynced, that a call waits for an approval (a new deferral: a decision
        on an earlier one does not answer it)."""
        self._writable()
        await self._ready()
        record = {
            "type": _journal.DEFERRED,
            "at": self._at_of(call_id),
            "call_id": call_id,
            "tool": tool,
            "input": tool_input,
            "prompt": prompt,
            "hold": uuid.uuid4().hex,
        }
        await self._journal_append(record)

    async def journal_noted(self, call_id: str, fields: dict[str, Any]) -> None:
        """Record, fsynced, what a running call's tool noted to resume its work
        (``ToolCallContext.note_resume``): a crash's interrupted result carries it."""
        self._writable()
        await self._ready()
        record = {
            "type": _journal.NOTED,
            "at": self._at_of(call_id),
            "call_id": call_id,
            "fields": fields,
        }
        await self._journal_append(record)

    async def journal_decide(self, approvals: dict[str, str]) -> None:
        """Record approvals (``call id → "allow" | "deny"``) of the pending calls, each bound
        to the tool and arguments its call was deferred with.

        All or nothing: one write, fsynced; a cancel before it starts records nothing, and
        nothing of it is written later. Raises ``ValueError`` naming a call id that is not
        pending, or a decision that is neither allow nor deny; then nothing is recorded.
        """
        self._writable()
        await self._ready()
        await self._take_decisions()  # older than these: they must not win over them
        records = _decision_records(self._messages, self._states, approvals)
        if records:  # begun, the write is waited for: a cancel then comes after it landed
            await self._journal_append(*records, settle=DECISION_SETTLE)

    def held_calls(self) -> list[tuple[str, str]]:
        """``(call id, tool)`` of the last batch's held calls that a resume would run or
        still waits on (not those denied): each needs its tool mounted to resume."""
        work = _journal.resume_work(self._messages, self._states)
        if work.assistant is None:
            return []
        tools = dict(calls(work.assistant))
        wanted = [*work.run, *(p.call_id for p in work.waiting)]
        return [(call_id, tools.get(call_id, "")) for call_id in wanted]

    def pending_approvals(self) -> list[PendingApproval]:
        """The calls of the last tool batch that wait for a decision (after a load)."""
        return _journal.pending_of(self._messages, self._states, undecided=True)

    async def resume_work(self) -> ResumeWork:
        """What resuming the last tool batch involves (see `ResumeWork`), with the
        decisions made from outside taken first."""
        await self._ready()
        if not self.read_only and not self._closed:
            await self._take_decisions()
        return _journal.resume_work(self._messages, self._states)

    async def replace_results(self, messages: list[dict[str, Any]]) -> None:
        """Put ``messages`` (tool results) in place of the placeholders of their calls, in
        one atomic rewrite. A message whose call has no placeholder is ignored."""
        self._writable()
        by_id = {str(m.get("tool_call_id")): m for m in messages}
        async with self._lock:
            await self._load_locked()
            replaced = False
            prepared = []
            for stored, cost in zip(self._messages, self._costs, strict=True):
                new = by_id.get(str(stored.get("tool_call_id")))
                if new is not None and _journal.is_placeholder(stored):
                    prepared.append(self._prepare(new))
                    replaced = True
                else:
                    prepared.append((stored, cost))
            if replaced:
                await self._rewrite_locked(prepared, keep_journal=True)

    async def _journal_append(self, *records: dict[str, Any], settle: float | None = None) -> None:
        """Append records, fsynced, all in one write; records queued meanwhile share it.

        Records whose caller is cancelled before they are written are withdrawn, and
        those of a failed write are not tried again for a caller that got the error: a
        record is written while its caller waits for it, or never. ``settle``: once the
        write has started, a cancel waits up to that many seconds for it to land (so the
        caller knows it did), instead of abandoning it.
        """
        self._journal_queue.extend(records)
        self._journal_enqueued += len(records)
        ticket = self._journal_enqueued
        try:
            await self._journal_lock.acquire()
        except anyio.get_cancelled_exc_class():
            self._withdraw(records)
            raise
        try:
            if self._journal_flushed >= ticket:
                return
            batch, self._journal_queue = self._journal_queue, []
            upto = self._journal_enqueued
            data = b"".join(_jsonl.encode(r) for r in batch)
            try:
                with anyio.CancelScope(shield=settle is not None) as bound:
                    if settle is not None:
                        bound.deadline = anyio.current_time() + settle
                    await self._journal_lane.run(
                        _jsonl.append_line, self.journal_path, data, self._journal_undo
                    )
                if bound.cancelled_caught:
                    msg = f"the journal write did not land within {settle} s"
                    raise _jsonl.ContextFileError(self.journal_path, None, msg)
            except _jsonl.AppendError as exc:
                self._journal_undo = exc.undo_to
                # the other waiters' records: their next writer tries them again
                self._journal_queue[:0] = [r for r in batch if not _among(r, records)]
                raise
            self._journal_undo = None
            self._journal_flushed = upto
            self._records.extend(batch)
            for written in batch:
                _journal.apply_record(self._states, written)
        finally:
            self._journal_lock.release()

    def _withdraw(self, records: tuple[dict[str, Any], ...]) -> None:
        self._journal_queue = [r for r in self._journal_queue if not _among(r, records)]


def _among(record: dict[str, Any], records: tuple[dict[str, Any], ...]) -> bool:
    return any(record is mine for mine in records)


def _decision_records(
    messages: list[dict[str, Any]],
    states: Mapping[tuple[int, str], _journal.CallState],
    approvals: Mapping[str, str],
    *,
    outside: bool = False,
) -> list[dict[str, Any]]:
    """The ``decided`` records of ``approvals``; ``ValueError`` naming a call that does not
    wait for a decision, or a decision that is neither allow nor deny."""
    pending = {
        (at, str(m.get("tool_call_id")))
        for at, m in _journal.placeholders(messages)
        if (m.get("metadata") or {}).get("pending_approval")
    }
    by_id = {call_id: (at, call_id) for at, call_id in pending}
    records = []
    for call_id, decision in approvals.items():
        key = by_id.get(call_id)
        state = states.get(key) if key is not None else None
        if state is None or state.deferred is None:
            msg = f"approvals[{call_id!r}]: no call with this id waits for an approval"
            raise ValueError(msg)
        if decision not in ("allow", "deny"):
            msg = f"approvals[{call_id!r}]: expected 'allow' or 'deny', got {decision!r}"
            raise ValueError(msg)
        decision_id = uuid.uuid4().hex if outside else None
        records.append(_journal.decision_record(state, decision, decision_id=decision_id))
    return records


def _load(
    path: Path, journal: Path, estimator: Estimator | None, read_only: bool = False
) -> tuple[list[dict[str, Any]], list[int], int, list[dict[str, Any]]]:
    """Read, settle against the journal, repair (rewriting the files if needed, unless
    ``read_only``: then in memory only) and estimate (``estimator`` None: from the length
    of each message's line, see `line_estimate`); runs in a worker thread. Returns the
    journal records still needed."""
    if not read_only:  # the writer holds the lock: any temp file is a dead writer's
        _store.migrate(path)  # an earlier version's stem-named journal and decisions
        _jsonl.remove_stale_temp_files(path)
        _jsonl.remove_stale_temp_files(journal)
    else:
        journal = _store.readable(path, journal)
    messages, lengths, torn = _jsonl.read_lines(path)
    try:
        raw = journal.read_bytes()
    except FileNotFoundError:
        raw = b""
    except OSError as exc:
        raise ContextFileError(journal, None, f"cannot read: {exc.strerror or exc}") from exc
    records = _journal.read_records(raw)
    repaired, closed, changed = _journal.recover(messages, _journal.fold(records))
    if (torn or changed) and not read_only:
        _jsonl.rewrite(path, [_jsonl.encode(message) for message in repaired])
    held = {(at, str(m.get("tool_call_id"))) for at, m in _journal.placeholders(repaired)}
    kept = [r for r in records if (r.get("at"), r.get("call_id")) in held]
    if read_only:
        pass
    elif not kept and raw:
        _unlink(journal)
    elif raw and (len(kept) != len(records) or not raw.endswith(b"\n")):
        _jsonl.rewrite(journal, [_jsonl.encode(record) for record in kept])
    if estimator is not None:
        costs = [estimator(message) for message in repaired]
    elif not changed:  # the lines read give the estimates
        costs = [(length + 3) // 4 or 1 for length in lengths]
    else:  # a message the repair made is encoded
        length_of = {id(message): length for message, length in zip(messages, lengths, strict=True)}
        costs = [
            _tokens(length_of[id(message)]) if id(message) in length_of else line_estimate(message)
            for message in repaired
        ]
    return repaired, costs, closed, kept


def _read_decisions(
    path: Path, decisions: Path, read_only: bool
) -> tuple[list[dict[str, Any]], int]:
    """The decisions file's records and size; a reader also sees an earlier version's
    stem-named file (the writer has renamed it at its load, `_store.migrate`)."""
    return _store.read_decisions(_store.readable(path, decisions) if read_only else decisions)


def _tokens(characters: int) -> int:
    return max(1, (characters + 3) // 4)


def line_estimate(message: Mapping[str, Any]) -> int:
    """context-persistent's default estimate: about one token per four characters of the
    message's line in the file (its JSON), so a load reads estimates off the lines."""
    return _tokens(len(json.dumps(message, ensure_ascii=False)))


def _unlink(path: Path) -> None:
    try:
        path.unlink(missing_ok=True)
    except OSError as exc:
        raise ContextFileError(path, None, f"cannot remove: {exc.strerror or exc}") from exc


def _check_path(path: Path, key: str, dry_run: bool = False) -> None:
    """Fail with a one-line ConfigError unless ``path`` can be this module's file; create
    its directory unless ``dry_run``."""
    try:
        if path.is_dir():
            raise ConfigError(f"{key}: {path} is a directory")
        if dry_run:
            _check_creatable(path.parent, key)
            return
        path.parent.mkdir(parents=True, exist_ok=True)
    except FileExistsError as exc:  # a file (or a dangling link) where a directory is needed
        raise ConfigError(
            f"{key}: cannot create the directory {path.parent}: it exists and is not a directory"
        ) from exc
    except OSError as exc:
        problem = exc.strerror or str(exc)
        raise ConfigError(f"{key}: cannot create the directory {path.parent}: {problem}") from exc


def _check_creatable(directory: Path, key: str) -> None:
    """The directory exists, or its nearest existing ancestor is a writable directory."""
    probe = directory
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if not probe.is_dir():
        msg = f"{key}: cannot create the directory {directory}: {probe} is not a directory"
        raise ConfigError(msg)
    if probe != directory and not os.access(probe, os.W_OK | os.X_OK):
        msg = f"{key}: cannot create the directory {directory}: {probe} is not writable"
        raise ConfigError(msg)


def amplifier_home() -> Path:
    """Where transcripts live: ``$AMPLIFIER_HOME`` when set (``~`` expanded), else
    ``~/.amplifier`` (Amplifier's own directory)."""
    configured = os.environ.get(AMPLIFIER_HOME_ENV, "").strip()
    if configured:
        return Path(configured).expanduser()
    return Path.home() / ".amplifier"


def default_path(session_id: str, cwd: Path | None = None) -> Path:
    """Amplifier's location: ``<home>/projects/<slug>/sessions/<id>/context-messages.jsonl``.

    ``<home>`` is `amplifier_home` (``~/.amplifier`` unless ``AMPLIFIER_HOME`` is
    set); ``<slug>`` is the working directory's name, ``-``, and the first 8 hex digits of
    the SHA-256 of its full path.
    """
    cwd = cwd or Path.cwd()
    digest = hashlib.sha256(str(cwd).encode()).hexdigest()[:8]
    slug = f"{cwd.name or 'root'}-{digest}"
    return (
        amplifier_home() / "projects" / slug / "sessions" / session_id
    ) / CONTEXT_MESSAGES_FILENAME


async def mount(coordinator: Any, config: dict[str, Any] | None = None) -> Cleanup | None:
    """Entry point of ``context-persistent``: build, load and mount at ``context``; the
    cleanup it returns lets the writer lock go.

    The file is ``config["path"]`` (or Amplifier's key ``transcript_path``), else
    `default_path` of the coordinator's ``session_id``. Its directory is created
    now; a path that is a directory, or whose directory cannot be created, is a
    [`ConfigError`][amplifier_anyio.ConfigError] naming the key.
    """
    config = config or {}
    settings = settings_from_config(config, module=MODULE_ID)
    key = "path" if "path" in config else "transcript_path"
    path = config.get(key)
    if not path:
        session_id = getattr(coordinator, "session_id", None)
        if not session_id:
            raise ConfigError(f"{MODULE_ID}.path: required when there is no session id")
        path = default_path(str(session_id))
    if not isinstance(path, str | os.PathLike):
        raise ConfigError(f"{MODULE_ID}.{key}: expected a path, got {path!r}")
    validating = bool(getattr(coordinator, "validating", False))
    await anyio.to_thread.run_sync(_check_path, Path(path), f"{MODULE_ID}.{key}", validating)
    manager = PersistentContextManager(
        path, **settings, hooks=getattr(coordinator, "hooks", None), read_only=validating
    )
    if validating:  # validate_plan: the file is neither created, locked nor repaired
        await coordinator.mount("context", manager)
        return None
    await manager.load()  # takes the writer lock: a second writer fails here
    try:
        await coordinator.mount("context", manager)
    except BaseException:
        await manager.aclose()
        raise
    return manager.aclose


CONFIG_SCHEMA = ConfigSchema(
    MODULE_ID,
    {
        **SIMPLE_SCHEMA.settings,
        "path": Setting((str,), "the JSONL file (default: under ~/.amplifier)"),
    },
    aliases={**SIMPLE_SCHEMA.aliases, "transcript_path": "path"},
)
"""The keys context-persistent accepts: context-simple's and the file's ``path``."""
