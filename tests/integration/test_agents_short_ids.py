"""Short ids once a session has sub-agents: a child's id begins with its parent's, so a
prefix is read against the root sessions first (``sessions show``, ``chat --resume``,
``run --resume``), and ``sessions list`` shows one row per root with its children counted.

The commands run in-process (typer's runner) against ``AMPLIFIER_HOME`` in a temporary
directory, each on asyncio and trio.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from amplifier_anyio.cli import app

PLAN = textwrap.dedent(
    """
    session: {orchestrator: loop-basic, context: context-simple}
    providers:
      - module: provider-scripted
        config:
          responses:
            - tool_calls:
                - {id: t0, name: task, arguments: {agent: researcher, instruction: dig}}
                - {id: t1, name: task, arguments: {agent: researcher, instruction: dig more}}
            - content: [{type: text, text: "root answer"}]
    tools: [{module: tool-task}]
    agents:
      researcher:
        description: Finds facts.
        providers:
          - module: provider-scripted
            config:
              responses: [{content: [{type: text, text: "facts"}]}]
    """
)


@pytest.fixture(params=["asyncio", "trio"])
def backend(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, backend: str) -> dict[str, Any]:
    """One chat turn that spawned two children, saved; the root's ``list --json`` row."""
    monkeypatch.setenv("AMPLIFIER_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "plan.yaml").write_text(PLAN, encoding="utf-8")
    chat = ["chat", "--plan", "plan.yaml", "--backend", backend]
    result = CliRunner().invoke(app, chat, input="go\n/exit\n")
    assert result.exit_code == 0, result.output
    listed = CliRunner().invoke(app, ["sessions", "list", "--json"])
    rows = [json.loads(line) for line in listed.stdout.splitlines()]
    row: dict[str, Any] = next(row for row in rows if row["title"] == "go")
    row["rows"] = len(rows)
    return row


def test_list_shows_the_root_with_its_children_counted(root: dict[str, Any]) -> None:
    assert root["rows"] == 1  # one row per root session, not one per child
    children = root["sub_sessions"]
    assert root["title"] == "go"
    assert sorted(c["title"] for c in children) == ["dig", "dig more"]
    assert all(c["session_id"].startswith(f"{root['session_id']}-") for c in children)
    assert {c["parent_id"] for c in children} == {root["session_id"]}
    assert {c["agent"] for c in children} == {"researcher"}
    text = CliRunner().invoke(app, ["sessions", "list"]).stdout.splitlines()
    assert len(text) == 1
    assert text[0].startswith(root["session_id"])
    assert "+2 sub-agents  go" in text[0]


def test_a_prefix_of_the_root_names_the_root(root: dict[str, Any]) -> None:
    shown = CliRunner().invoke(app, ["sessions", "show", root["session_id"][:4]])
    assert shown.exit_code == 0, shown.output
    assert shown.stderr.startswith(f"session {root['session_id']}: ")
    assert "names 3 sessions" not in shown.output


def test_run_resume_and_chat_resume_take_the_roots_prefix(
    root: dict[str, Any], backend: str
) -> None:
    session_id = root["session_id"]
    run = ["run", "--backend", backend, "--resume", session_id[:8], "again"]
    resumed = CliRunner().invoke(app, run)
    assert resumed.exit_code == 0, resumed.output
    assert resumed.stdout.strip() == "root answer"
    chat = ["chat", "--backend", backend, "--resume", session_id[:4]]
    again = CliRunner().invoke(app, chat, input="/exit\n")
    assert again.exit_code == 0, again.output
    assert f"chat: session {session_id} (resumed" in again.stderr

    shown = CliRunner().invoke(app, ["sessions", "show", "--json", session_id])
    users = [
        m["content"] for m in map(json.loads, shown.stdout.splitlines()) if m["role"] == "user"
    ]
    assert users == ["go", "again"]


def test_a_prefix_past_the_roots_id_names_a_child(root: dict[str, Any]) -> None:
    listed = CliRunner().invoke(app, ["sessions", "list", "--json"])
    (row,) = [json.loads(line) for line in listed.stdout.splitlines()]
    child = row["sub_sessions"][0]["session_id"]
    shown = CliRunner().invoke(app, ["sessions", "show", child[: len(root["session_id"]) + 6]])
    assert shown.exit_code == 0, shown.output
    assert shown.stderr.startswith(f"session {child}: ")
    assert f"sub-agent session of {root['session_id']}" in shown.stdout
