"""``amplifier-anyio sessions list | show | rm`` over transcripts on the real file system.

Transcripts are written where context-persistent puts them (``default_path``), under an
``AMPLIFIER_HOME`` in a temporary directory; the commands run in-process (typer's
CliRunner) from a project directory, except ``rm``'s question, asked on a pseudo-terminal
(pexpect) as a person answers it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from _cli import console_script
from amplifier_anyio.cli import app
from amplifier_anyio.contexts import _store
from amplifier_anyio.contexts.persistent import amplifier_home, default_path
from tiers import needs, optional

pexpect = optional("pexpect")

IDS = {
    "older": "1111aaaa-0000-4000-8000-000000000001",
    "newer": "1111bbbb-0000-4000-8000-000000000002",
    "elsewhere": "2222cccc-0000-4000-8000-000000000003",
}


def write_transcript(path: Path, prompt: str, mtime: float) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": prompt},
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "Let me look."}],
            "tool_calls": [{"id": "c1", "name": "word_count", "arguments": {"text": prompt}}],
        },
        {"role": "tool", "tool_call_id": "c1", "name": "word_count", "content": '{"words": 2}'},
        {"role": "assistant", "content": "Two words."},
    ]
    path.write_text("".join(json.dumps(m) + "\n" for m in messages), encoding="utf-8")
    os.utime(path, (mtime, mtime))


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory with two sessions; a third belongs to another directory."""
    monkeypatch.setenv("AMPLIFIER_HOME", str(tmp_path / "home"))
    here, other = tmp_path / "project", tmp_path / "other"
    here.mkdir()
    other.mkdir()
    monkeypatch.chdir(here)
    write_transcript(default_path(IDS["older"], here), "older words", 1_700_000_000)
    write_transcript(default_path(IDS["newer"], here), "newer words", 1_700_000_100)
    write_transcript(default_path(IDS["elsewhere"], other), "other words", 1_700_000_200)
    return here


def invoke(*args: str) -> Result:
    return CliRunner().invoke(app, list(args))


def test_amplifier_home_moves_the_transcripts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("AMPLIFIER_HOME", str(tmp_path / "h"))
    assert amplifier_home() == tmp_path / "h"
    assert default_path("abc", tmp_path).is_relative_to(tmp_path / "h" / "projects")

    monkeypatch.delenv("AMPLIFIER_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert amplifier_home() == tmp_path / ".amplifier"


def test_list_shows_this_directorys_sessions_newest_first(project: Path) -> None:
    result = invoke("sessions", "list")

    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert [line.split()[0] for line in lines] == [IDS["newer"], IDS["older"]]
    assert lines[0].endswith("5 msgs  newer words")


def test_list_all_and_json(project: Path) -> None:
    result = invoke("sessions", "list", "--all", "--json")

    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["session_id"] for r in records] == [IDS["elsewhere"], IDS["newer"], IDS["older"]]
    assert records[0]["title"] == "other words"
    assert records[0]["messages"] == 5
    assert Path(records[0]["path"]).is_file()


def test_list_without_sessions_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AMPLIFIER_HOME", str(tmp_path / "empty"))
    monkeypatch.chdir(tmp_path)

    result = invoke("sessions", "list")

    assert result.exit_code == 0
    assert result.stdout == ""
    assert result.stderr.startswith("no saved sessions")


def test_show_prints_the_conversation_by_id_prefix_from_any_directory(project: Path) -> None:
    result = invoke("sessions", "show", "2222cccc")

    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        "system: Be brief.",
        "user: other words",
        "assistant: Let me look.",
        '  -> word_count({"text": "other words"})',
        '  <- word_count: {"words": 2}',
        "assistant: Two words.",
    ]
    assert IDS["elsewhere"] in result.stderr


def test_show_json_is_the_stored_messages(project: Path) -> None:
    result = invoke("sessions", "show", "--json", IDS["older"])

    assert result.exit_code == 0, result.output
    path = default_path(IDS["older"], project)
    stored = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert [json.loads(line) for line in result.stdout.splitlines()] == stored


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("1111", "error: '1111' names 2 sessions ("),
        ("nowhere", "error: no session 'nowhere' (amplifier-anyio sessions list --all shows"),
        ("../x", "error: not a session id: '../x'"),
        ("111", "error: no session '111'"),  # too short to be a prefix
    ],
)
@pytest.mark.parametrize("command", ["show", "rm"])
def test_an_unknown_or_ambiguous_id_is_one_line_and_exit_2(
    project: Path, command: str, name: str, message: str
) -> None:
    result = invoke("sessions", command, name)

    assert result.exit_code == 2
    [line] = result.stderr.splitlines()
    assert line.startswith(message), line
    assert result.stdout == ""


@pytest.mark.parametrize("yes", ["--yes", "-y"])
def test_rm_yes_deletes_the_session_directory(project: Path, yes: str) -> None:
    directory = default_path(IDS["older"], project).parent

    result = invoke("sessions", "rm", yes, IDS["older"][:8])

    assert result.exit_code == 0, result.output
    assert result.stderr.strip() == f"removed session {IDS['older']}"
    assert not directory.exists()
    assert directory.parent.is_dir()  # the other sessions stay
    listed = invoke("sessions", "list").stdout.split()
    assert IDS["older"] not in listed
    assert IDS["newer"] in listed


def test_rm_without_a_terminal_or_yes_refuses_and_deletes_nothing(project: Path) -> None:
    directory = default_path(IDS["older"], project).parent

    result = invoke("sessions", "rm", IDS["older"][:8])

    assert result.exit_code == 2
    assert result.stderr == (
        f"error: sessions rm {IDS['older']}: no terminal to ask on; add --yes to delete it\n"
    )
    assert directory.is_dir()


@needs("pexpect")
@pytest.mark.parametrize(("answer", "kept"), [("n", True), ("", True), ("y", False)])
def test_rm_on_a_terminal_asks_first(project: Path, answer: str, kept: bool) -> None:
    directory = default_path(IDS["older"], project).parent
    child = pexpect.spawn(
        console_script(),
        ["sessions", "rm", IDS["older"][:8]],
        cwd=str(project),
        env={k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")},
        encoding="utf-8",
        timeout=60,
        dimensions=(50, 250),
    )

    child.expect_exact(f"delete session {IDS['older']} (5 messages, ")
    child.expect_exact("'older words')? [y/N]: ")
    assert directory.is_dir()  # nothing happens before the answer
    child.sendline(answer)
    child.expect(pexpect.EOF)
    child.close()

    assert child.exitstatus == (1 if kept else 0)
    assert directory.is_dir() is kept
    said = "kept session" if kept else "removed session"
    assert f"{said} {IDS['older']}" in (child.before or "")


def test_chat_resume_of_an_unknown_session_is_one_line(project: Path) -> None:
    result = invoke("chat", "--resume", "nowhere")

    assert result.exit_code == 2
    assert result.stderr.strip().startswith("error: no session 'nowhere'")


def test_a_chat_in_which_nothing_was_said_leaves_no_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AMPLIFIER_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["chat"], input="/exit\n")
    assert result.exit_code == 0, result.output
    sessions = default_path("x", tmp_path).parent.parent
    assert list(sessions.iterdir()) == []  # no transcript, no lock, no metadata


def test_show_and_list_write_nothing(project: Path) -> None:
    transcript = default_path(IDS["newer"], project)
    torn = transcript.read_bytes() + b'{"role": "assistant", "conte'  # a crash's torn line
    transcript.write_bytes(torn)
    before = sorted(p.name for p in transcript.parent.iterdir())
    for command in (["sessions", "show", IDS["newer"]], ["sessions", "list", "--all"]):
        assert invoke(*command).exit_code == 0
    assert transcript.read_bytes() == torn  # not repaired: a read never writes
    assert sorted(p.name for p in transcript.parent.iterdir()) == before


def test_rm_refuses_a_session_a_process_has_open(project: Path) -> None:
    transcript = default_path(IDS["newer"], project)
    holder = _store.acquire_writer(transcript)  # as a running session holds it
    try:
        refused = invoke("sessions", "rm", "--yes", IDS["newer"])
    finally:
        _store.release_writer(holder)
    assert refused.exit_code == 2
    assert f"pid {os.getpid()}" in refused.stderr
    assert transcript.exists()
    assert invoke("sessions", "rm", "--yes", IDS["newer"]).exit_code == 0
    assert not transcript.parent.exists()
