"""The store's files are named from the transcript's whole file name, so two transcripts
with one stem (``run.jsonl`` and ``run.txt``) are two sessions; the stem-named files an
earlier version left are taken over when they can only be that transcript's.

The app (``_durable_app.py``) holds ``guarded`` (c1-1) for approval on a prompt starting
with ``approve``; every real run of a tool appends its call id to a side-effect file.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from amplifier_anyio import SessionError, TurnStatus
from amplifier_anyio.contexts import PersistentContextManager, approve, pending_approvals
from amplifier_anyio.contexts.persistent import (
    decisions_path_for,
    journal_path_for,
    lock_path_for,
)

sys.path.insert(0, str(Path(__file__).parent))

import _durable_app as app

pytestmark = pytest.mark.anyio


def runs(side_effects: Path) -> list[str]:
    if not side_effects.exists():
        return []
    return [line.split()[-1] for line in side_effects.read_text("utf-8").splitlines()]


async def held_turn(transcript: Path, side_effects: Path) -> None:
    session, _ = await app.open_session(transcript, side_effects)
    async with session:
        held = await session.run("approve the plan")
    assert held.status is TurnStatus.AWAITING_APPROVAL


def test_the_names_come_from_the_whole_file_name(tmp_path: Path) -> None:
    run = tmp_path / "run.jsonl"
    assert lock_path_for(run).name == "run.jsonl.lock"
    assert journal_path_for(run).name == "run.jsonl.journal.jsonl"
    assert decisions_path_for(run).name == "run.jsonl.decisions.jsonl"
    other = tmp_path / "run.txt"
    for name_for in (lock_path_for, journal_path_for, decisions_path_for):
        assert name_for(run) != name_for(other)


@pytest.mark.parametrize("other_name", ["run.txt", "run.json"])
async def test_two_transcripts_with_one_stem_are_two_sessions(
    tmp_path: Path, other_name: str
) -> None:
    """Before: they shared ``run.lock`` and ``run.journal.jsonl``; the session on the other
    file locked this one out, and deleted its journal: the held call was lost."""
    transcript, other = tmp_path / "run.jsonl", tmp_path / other_name
    side_effects = tmp_path / "side-effects.txt"
    await held_turn(transcript, side_effects)
    async with PersistentContextManager(transcript) as first:
        async with PersistentContextManager(other) as second:  # both write at once
            await second.add_message({"role": "user", "content": "another session"})
        assert [p.call_id for p in first.pending_approvals()] == ["c1-1"]
    assert [p.call_id for p in await pending_approvals(transcript)] == ["c1-1"]
    await approve(transcript, {"c1-1": "allow"})
    assert not decisions_path_for(other).exists()
    session, _ = await app.open_session(transcript, side_effects)
    async with session:
        result = await session.resume()
    assert result.text == "answer: ok c1-0 | ok c1-1 | ok c1-2"
    assert sorted(runs(side_effects)) == ["c1-0", "c1-1", "c1-2"]


def rename_to_old_names(transcript: Path) -> None:
    """What an earlier version left: the journal (and decisions) named from the stem."""
    for new in (journal_path_for(transcript), decisions_path_for(transcript)):
        if new.exists():
            os.replace(new, new.with_name(transcript.stem + new.name[len(transcript.name) :]))
    lock_path_for(transcript).unlink(missing_ok=True)


@pytest.mark.parametrize("decided", [False, True], ids=["held", "decided-outside"])
async def test_a_session_of_an_earlier_version_is_taken_over(tmp_path: Path, decided: bool) -> None:
    transcript, side_effects = tmp_path / "run.jsonl", tmp_path / "side-effects.txt"
    await held_turn(transcript, side_effects)
    if decided:
        await approve(transcript, {"c1-1": "allow"})
    rename_to_old_names(transcript)
    old_journal = tmp_path / "run.journal.jsonl"
    assert old_journal.exists()
    # a reader sees the old files without renaming them
    expected = [] if decided else ["c1-1"]
    assert [p.call_id for p in await pending_approvals(transcript)] == expected
    assert old_journal.exists()
    session, _ = await app.open_session(transcript, side_effects)
    async with session:
        result = await session.resume(approvals=None if decided else {"c1-1": "allow"})
    assert result.text == "answer: ok c1-0 | ok c1-1 | ok c1-2"
    assert not old_journal.exists()
    assert not (tmp_path / "run.decisions.jsonl").exists()


async def test_stem_named_files_two_transcripts_could_own_are_left_alone(
    tmp_path: Path,
) -> None:
    transcript, side_effects = tmp_path / "run.jsonl", tmp_path / "side-effects.txt"
    await held_turn(transcript, side_effects)
    rename_to_old_names(transcript)
    (tmp_path / "run.txt").write_text("", encoding="utf-8")  # whose journal is it?
    old_journal = tmp_path / "run.journal.jsonl"
    before = old_journal.read_bytes()
    for path in (transcript, tmp_path / "run.txt"):
        with pytest.raises(SessionError, match=r"rename it to <transcript file name>\.journal"):
            await PersistentContextManager(path).load()
        assert await PersistentContextManager(path, read_only=True).get_messages() is not None
    assert old_journal.read_bytes() == before  # neither took it nor deleted it
    os.replace(old_journal, journal_path_for(transcript))  # the user says whose it is
    assert [p.call_id for p in await pending_approvals(transcript)] == ["c1-1"]
