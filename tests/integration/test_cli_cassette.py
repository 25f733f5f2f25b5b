"""``run`` / ``chat`` with ``--record FILE`` and ``--replay FILE``: the installed console
script in a subprocess, as a user (or a CI job) runs it, on the offline demo plan."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = shutil.which("amplifier-anyio") or str(Path(sys.executable).with_name("amplifier-anyio"))


def cli(home: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "AMPLIFIER_HOME": str(home / "amplifier"), "NO_COLOR": "1"}
    env.pop("COLUMNS", None)
    return subprocess.run(
        [SCRIPT, *args],
        cwd=home,
        env=env,
        input=stdin if stdin is not None else "",
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_run_records_then_replays_and_names_drift_in_one_line(tmp_path: Path, backend: str) -> None:
    question = "How many words are in this question?"
    recorded = cli(tmp_path, "run", "--backend", backend, "--record", "turn.jsonl", question)
    assert recorded.returncode == 0, recorded.stderr
    assert (tmp_path / "turn.jsonl").read_text().count("\n") == 3  # header and two calls

    replayed = cli(tmp_path, "run", "--backend", backend, "--replay", "turn.jsonl", question)
    assert replayed.returncode == 0, replayed.stderr
    assert replayed.stdout == recorded.stdout

    drifted = cli(tmp_path, "run", "--backend", backend, "--replay", "turn.jsonl", "Other?")
    assert drifted.returncode == 1
    assert drifted.stdout == ""
    assert drifted.stderr.splitlines() == [
        "error: the turn failed: CassetteMismatchError: lane 'root', call 0: the request "
        "differs from the recording at messages[0].content "
        '(recorded "How many words are in this question?", got "Other?")'
    ]


def test_record_and_replay_flags_are_checked_before_anything_runs(tmp_path: Path) -> None:
    both = cli(tmp_path, "run", "--record", "a.jsonl", "--replay", "b.jsonl", "hi")
    assert (both.returncode, both.stderr.splitlines()) == (
        2,
        ["error: --record and --replay: give one of them"],
    )
    missing = cli(tmp_path, "run", "--replay", "none.jsonl", "hi")
    assert (missing.returncode, missing.stderr.splitlines()) == (
        2,
        ["error: --replay: none.jsonl: no such cassette (record it with --record)"],
    )
    assert not (tmp_path / "a.jsonl").exists()


def test_chat_replays_a_conversation_and_leaves_at_drift(tmp_path: Path) -> None:
    recorded = cli(tmp_path, "chat", "--record", "chat.jsonl", stdin="first words\nsecond\n")
    assert recorded.returncode == 0, recorded.stderr
    replayed = cli(tmp_path, "chat", "--replay", "chat.jsonl", stdin="first words\nsecond\n")
    assert replayed.returncode == 0, replayed.stderr
    assert replayed.stdout == recorded.stdout
    assert "This is prompt 2 of our conversation" in replayed.stdout

    drifted = cli(tmp_path, "chat", "--replay", "chat.jsonl", stdin="first words\nthird\nmore\n")
    assert drifted.returncode == 1
    errors = [line for line in drifted.stderr.splitlines() if line.startswith("error:")]
    assert errors == [
        "error: the turn failed: CassetteMismatchError: lane 'root', call 2: the request "
        'differs from the recording at messages[5].content (recorded "second", got "third")'
    ]
