"""A model-based test of the tool-call journal: no interleaving of records and kill points
ever runs a finished call again.

The machine plays a writer on real files (context-persistent's messages and journal,
written with the same functions): it opens batches of calls, starts, finishes and defers
them in any order, records decisions, writes a batch's results, and resumes (runs what
``resume_work`` says, then replaces the placeholders). At any point it may crash: the
last write is torn at a random byte, and the files are loaded the way a new process loads
them. The model counts every real run of a call (its side effect happens between its
``started`` record and its ``finished`` record). Invariants after every load: every call
has exactly one result right after its assistant message; a call whose ``finished`` record
is durable has that result and ran exactly once; only an idempotent call ever runs twice;
a call nobody allowed never runs after its deferral.
"""

from __future__ import annotations

import collections
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from amplifier_anyio.contexts import _journal, _jsonl
from amplifier_anyio.contexts._messages import calls, estimate_tokens, result_ids
from amplifier_anyio.contexts.persistent import _load, journal_path_for
from tiers import examples

Key = tuple[int, str]
ACTIONS = ("finish", "start", "defer", "none")


class JournalMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        shm = Path("/dev/shm")
        self.directory = Path(tempfile.mkdtemp(dir=shm if shm.is_dir() else None))
        self.path = self.directory / "context-messages.jsonl"
        self.journal = journal_path_for(self.path)
        self.batches = 0
        self.batch_closed = True  # the last write (if any) closed a batch
        self.idempotent: dict[Key, bool] = {}
        self.runs: collections.Counter[Key] = collections.Counter()
        self.finished: dict[Key, str] = {}  # durable finished records
        self.runs_when_finished: dict[Key, int] = {}
        self.allowed: set[Key] = set()
        self.deferred: set[Key] = set()
        self.last_write: tuple[Path, int] | None = None  # file and its size before the write
        self.last_record: tuple[str, Key] | None = None  # the journal record written last
        self.messages: list[dict[str, Any]] = []  # as loaded last
        self.states: dict[Key, _journal.CallState] = {}

    def teardown(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)

    # -- writing ---------------------------------------------------------------------------

    def _append(self, path: Path, lines: list[dict[str, Any]]) -> None:
        size = path.stat().st_size if path.exists() else 0
        _jsonl.append_line(path, b"".join(_jsonl.encode(line) for line in lines))
        self.last_write = (path, size)
        self.last_record = None
        self.batch_closed = False

    def _message_count(self) -> int:
        return len(_jsonl.read_messages(self.path)[0])

    def _record(self, kind: str, key: Key, **fields: Any) -> None:
        self._append(self.journal, [{"type": kind, "at": key[0], "call_id": key[1], **fields}])
        self.last_record = (kind, key)

    def _start(self, key: Key, tool: str) -> None:
        self._record(_journal.STARTED, key, tool=tool, idempotent=self.idempotent[key])
        self.runs[key] += 1  # the side effect happens once the started record is durable

    def _finish(self, key: Key) -> None:
        content = f"result of {key[1]} run {self.runs[key]}"
        self._record(_journal.FINISHED, key, content=content, success=True)
        self.finished[key] = content
        self.runs_when_finished[key] = self.runs[key]

    # -- the batch -------------------------------------------------------------------------

    @precondition(lambda self: self.last_write is None or self.batch_closed)
    @rule(
        data=st.data(),
        plan=st.lists(st.tuples(st.sampled_from(ACTIONS), st.booleans()), min_size=1, max_size=3),
        kill=st.none() | st.integers(min_value=0, max_value=9),
        cut=st.floats(min_value=0, max_value=1),
    )
    def batch(
        self,
        data: st.DataObject,
        plan: list[tuple[str, bool]],
        kill: int | None,
        cut: float,
    ) -> None:
        """One batch: the prompt, the assistant message, every call's records in a random
        interleaving, the results; killed after ``kill`` writes (the last one torn at
        ``cut``), else the process goes on (and maybe ends: ``kill`` None then loads)."""
        self.batches += 1
        ids = [f"b{self.batches}-{j}" for j in range(len(plan))]
        self._append(self.path, [{"role": "user", "content": f"turn {self.batches}"}])
        tool_calls = [{"id": i, "name": "work", "arguments": {}} for i in ids]
        self._append(self.path, [{"role": "assistant", "content": "", "tool_calls": tool_calls}])
        at = self._message_count()
        steps: dict[str, list[str]] = {}
        for call_id, (action, idempotent) in zip(ids, plan, strict=True):
            self.idempotent[(at, call_id)] = idempotent
            steps[call_id] = {
                "finish": ["start", "finish"],
                "start": ["start"],
                "defer": ["defer"],
                "none": [],
            }[action]
        writes = 0
        while any(steps.values()):
            if kill is not None and writes == kill:
                self.crash(cut)
                return
            call_id = data.draw(st.sampled_from([i for i in ids if steps[i]]))
            step = steps[call_id].pop(0)
            key = (at, call_id)
            if step == "start":
                self._start(key, "work")
            elif step == "finish":
                self._finish(key)
            else:
                self._record(_journal.DEFERRED, key, tool="work", input={}, prompt=f"ok {call_id}?")
                self.deferred.add(key)
            writes += 1
        if kill is not None and writes == kill:
            self.crash(cut)
            return
        self._write_results(at, ids, [action for action, _ in plan])
        if kill is not None:
            self.crash(cut)

    def _write_results(self, at: int, ids: list[str], actions: list[str]) -> None:
        """What the batch writes once its group closed: finished results, placeholders of
        held calls, the cancelled result for the others (a cancel ended them)."""
        results = []
        for call_id, action in zip(ids, actions, strict=True):
            key = (at, call_id)
            if action == "defer":
                results.append(_journal.pending_result(call_id, "work", f"ok {call_id}?"))
            elif key in self.finished:
                results.append(
                    {"role": "tool", "tool_call_id": call_id, "content": self.finished[key]}
                )
            else:
                results.append({"role": "tool", "tool_call_id": call_id, "content": "cancelled"})
        self._append(self.path, results)
        self.batch_closed = True

    # -- crash, load, decide, resume -------------------------------------------------------

    @precondition(lambda self: self.last_write is not None)
    @rule(cut=st.floats(min_value=0, max_value=1))
    def crash(self, cut: float) -> None:
        """SIGKILL: the last write may be torn anywhere; then a new process loads."""
        assert self.last_write is not None
        path, before = self.last_write
        size = path.stat().st_size
        keep = before + int((size - before) * cut)
        if keep < size:
            with path.open("r+b") as handle:
                handle.truncate(keep)
            self._forget_torn_record()
        self._load()

    def _forget_torn_record(self) -> None:
        """A record the crash cut off was never durable: a torn ``started`` means the tool
        never ran, a torn ``finished`` that the result was never kept."""
        if self.last_record is None:
            return
        kind, key = self.last_record
        if kind == _journal.STARTED:
            self.runs[key] -= 1
        elif kind == _journal.FINISHED:
            del self.finished[key]
        elif kind == _journal.DEFERRED:
            self.deferred.discard(key)
        elif kind == _journal.DECIDED:
            self.allowed.discard(key)

    def _load(self) -> None:
        self.messages, _, _, records = _load(self.path, self.journal, estimate_tokens)
        self.states = _journal.fold(records)
        self.last_write = None
        self.check_loaded()

    @precondition(lambda self: self.last_write is None and self._undecided())
    @rule(
        data=st.data(),
        allow=st.booleans(),
        then_resume=st.none() | st.integers(min_value=0, max_value=4),
    )
    def decide(self, data: st.DataObject, allow: bool, then_resume: int | None) -> None:
        pending = data.draw(st.sampled_from(self._undecided()))
        at = _journal.owners(self.messages)[pending.call_id]
        decision = "allow" if allow else "deny"
        self._record(_journal.DECIDED, (at, pending.call_id), decision=decision)
        if allow:
            self.allowed.add((at, pending.call_id))
        self._load()
        if then_resume is not None:
            self._resume(then_resume)

    def _work(self) -> bool:
        work = _journal.resume_work(self.messages, self.states)
        return bool(work.run or work.denied)

    def _undecided(self) -> list[Any]:
        if not self.messages or self.last_write is not None:
            return []
        return _journal.pending_of(self.messages, self.states, undecided=True)

    @precondition(lambda self: self.last_write is None and self._work())
    @rule(kill_after=st.integers(min_value=0, max_value=4))
    def resume(self, kill_after: int) -> None:
        self._resume(kill_after)

    def _resume(self, kill_after: int) -> None:
        """Run what resume_work names, replace the placeholders; killed after some writes."""
        work = _journal.resume_work(self.messages, self.states)
        owner = _journal.owners(self.messages)
        writes = 0
        replacements: dict[str, dict[str, Any]] = {}
        for call_id in work.run:
            key = (owner[call_id], call_id)
            assert key not in self.finished, f"resume runs {call_id}, which had finished"
            if writes == kill_after:
                self._load()
                return
            self._start(key, "work")
            writes += 1
            if writes == kill_after:
                self._load()
                return
            self._finish(key)
            writes += 1
            replacements[call_id] = {
                "role": "tool",
                "tool_call_id": call_id,
                "content": self.finished[key],
            }
        for call_id, prompt in work.denied.items():
            replacements[call_id] = {
                "role": "tool",
                "tool_call_id": call_id,
                "content": f"Denied by user: {prompt}",
            }
        if replacements:
            replaced = [
                replacements.get(str(m.get("tool_call_id")), m) if _journal.is_placeholder(m) else m
                for m in self.messages
            ]
            _jsonl.rewrite(self.path, [_jsonl.encode(m) for m in replaced])
        self._load()

    # -- the invariants --------------------------------------------------------------------

    def check_loaded(self) -> None:
        messages = self.messages
        answered: dict[str, dict[str, Any]] = {}
        for index, message in enumerate(messages):
            ids = [call_id for call_id, _ in calls(message)]
            following = messages[index + 1 : index + 1 + len(ids)]
            assert [result_ids(m) for m in following] == [[i] for i in ids], "not answered once"
            for call_id, result in zip(ids, following, strict=True):
                answered[call_id] = result
                key = (index + 1, call_id)
                if key in self.finished:
                    assert result["content"] == self.finished[key], "a finished result was lost"
                    assert not _journal.is_placeholder(result), "a finished call is held"
        assert len(answered) == sum(len(calls(m)) for m in messages)
        # the file says the same as what we loaded
        stored = self.path.read_bytes().splitlines() if self.path.exists() else []
        assert [json.loads(line) for line in stored] == messages

    @invariant()
    def side_effects_at_most_once(self) -> None:
        for key, count in self.runs.items():
            if key in self.finished:
                assert count == self.runs_when_finished[key], f"{key} ran after it finished"
            if not self.idempotent[key]:
                assert count <= 1, f"{key} is not idempotent and ran {count} times"
            if key in self.deferred and key not in self.allowed:
                assert count == 0, f"{key} ran without an approval"


JournalMachine.TestCase.settings = settings(
    max_examples=examples(100), stateful_step_count=30, deadline=None
)
TestJournal = JournalMachine.TestCase
