"""``amplifier-anyio chat`` driven through a pseudo-terminal (pexpect), as a person types.

Each test spawns the installed console script on a pty with ``AMPLIFIER_HOME`` in a
temporary directory, waits for what the REPL prints (the ``you> `` prompt, the answer, a
marker the gate tool prints while it runs) before it types or presses Ctrl-C — never a
sleep — and reads the saved transcript back with ``sessions show --json``.

The gate tool stands in for the demo's ``word_count``: it prints ``GATE WAITING`` and
waits until the test creates its gate file, so a Ctrl-C always lands while the turn's
tool runs, however loaded the machine is.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from _cli import console_script
from amplifier_anyio.cli import app
from amplifier_anyio.cli.chat import transcript_markdown
from amplifier_anyio.cli.sessions import list_sessions
from tiers import needs, optional

pexpect = optional("pexpect")
pytestmark = needs("pexpect")

PROMPT = "you> "
TIMEOUT = 60  # seconds for any one thing to appear: generous on a loaded 2-core machine

GATE_TOOL = """\
import sys

import anyio

from amplifier_anyio.models import ToolResult


class Gate:
    name = "word_count"
    description = "Count words, once the gate opens."
    input_schema = {"type": "object", "properties": {"text": {"type": "string"}}}

    def __init__(self, gate):
        self.gate = anyio.Path(gate)

    async def execute(self, input):
        print("GATE WAITING", file=sys.stderr, flush=True)
        while not await self.gate.exists():
            await anyio.sleep(0.02)
        await self.gate.unlink()
        return ToolResult(output={"words": 3, "characters": 17})


async def mount(coordinator, config):
    await coordinator.mount("tools", Gate(config["gate"]), name="word_count")
"""


@pytest.fixture
def home(tmp_path: Path) -> Path:
    work = tmp_path / "project"
    work.mkdir()
    return tmp_path


def environment(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env.update(AMPLIFIER_HOME=str(home / "amplifier"), TERM="dumb", NO_COLOR="1")
    return env


def spawn(home: Path, *args: str, columns: int = 250) -> Any:
    return pexpect.spawn(
        console_script(),
        list(args),
        cwd=str(home / "project"),
        env=environment(home),
        encoding="utf-8",
        timeout=TIMEOUT,
        dimensions=(50, columns),
    )


def finish(child: Any) -> int:
    """Wait for the process to end; its exit code."""
    child.expect(pexpect.EOF)
    child.close()
    assert child.signalstatus is None, child.signalstatus
    code: int = child.exitstatus
    return code


def session_id_of(child: Any) -> str:
    child.expect(r"chat: session ([0-9a-f-]{36}) \(")
    found: str = child.match.group(1)
    return found


def stored(home: Path, session_id: str) -> list[dict[str, Any]]:
    done = subprocess.run(
        [console_script(), "sessions", "show", "--json", session_id],
        cwd=home / "project",
        env=environment(home),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return [json.loads(line) for line in done.stdout.splitlines()]


def gate_plan(home: Path) -> tuple[Path, Path]:
    modules = home / "modules" / "amplifier_module_tool_gate"
    modules.mkdir(parents=True)
    (modules / "__init__.py").write_text(GATE_TOOL, encoding="utf-8")
    gate = home / "gate.open"
    plan = home / "gate.yaml"
    plan.write_text(
        "session: {orchestrator: loop-basic, context: context-simple}\n"
        "providers: [{module: provider-scripted, config: {demo: true}}]\n"
        f"tools: [{{module: tool-gate, source: '{modules.parent}', config: {{gate: '{gate}'}}}}]\n",
        encoding="utf-8",
    )
    return plan, gate


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_two_prompts_share_one_session_and_resume_restores_it(home: Path, backend: str) -> None:
    child = spawn(home, "chat", "--backend", backend)
    session_id = session_id_of(child)
    child.expect_exact(PROMPT)
    child.sendline("hello there")
    child.expect_exact("Your prompt has 2 words and 11 characters.")
    child.expect_exact(PROMPT)
    child.sendline("and now this")
    # the second turn sees the first: the demo recalls the prompt before
    child.expect_exact("This is prompt 2 of our conversation; the one before was 'hello there'.")
    child.expect_exact(PROMPT)
    child.sendline("/exit")
    child.expect_exact(f"amplifier-anyio chat --resume {session_id}")
    assert finish(child) == 0

    resumed = spawn(home, "chat", "--backend", backend, "--resume", session_id[:8])
    resumed.expect_exact("user: and now this")  # the conversation so far is shown
    assert session_id_of(resumed) == session_id
    resumed.expect_exact(PROMPT)
    resumed.sendline("third")
    resumed.expect_exact("This is prompt 3 of our conversation; the one before was 'and now this'.")
    resumed.expect_exact(PROMPT)
    resumed.sendeof()  # Ctrl-D leaves
    assert finish(resumed) == 0

    users = [m["content"] for m in stored(home, session_id) if m["role"] == "user"]
    assert users == ["hello there", "and now this", "third"]


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_answers_wrap_at_word_boundaries_at_the_terminals_edge(home: Path, backend: str) -> None:
    child = spawn(home, "chat", "--backend", backend, columns=30)
    child.expect_exact(PROMPT)
    child.sendline("hello there")
    child.expect_exact("Your prompt has")
    child.expect_exact(PROMPT)
    answer = ("Your prompt has" + child.before).replace("\r\n", "\n")
    child.sendline("/exit")
    assert finish(child) == 0

    # the terminal would have cut "characters." after "charac"
    assert "Your prompt has 2 words and 11\ncharacters." in answer
    assert all(len(line) <= 30 for line in answer.split("\n"))


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_ctrl_c_cancels_the_turn_and_the_repl_goes_on(home: Path, backend: str) -> None:
    plan, gate = gate_plan(home)
    child = spawn(home, "chat", "--backend", backend, "--plan", str(plan))
    session_id = session_id_of(child)

    # at the prompt: Ctrl-C drops the half-typed line, and the REPL asks again
    child.expect_exact(PROMPT)
    child.send("half a line")
    child.sendintr()
    child.expect_exact("(Ctrl-C again, Ctrl-D or /exit to leave)")
    child.expect_exact(PROMPT)

    # one Ctrl-C: graceful, the running tool finishes and keeps its result
    child.sendline("count these words")
    child.expect_exact("GATE WAITING")
    child.sendintr()
    child.expect_exact("(cancelling: the running tools finish first")
    gate.touch()
    child.expect_exact("(turn cancelled)")
    child.expect_exact(PROMPT)

    # two Ctrl-C: immediate, the tool is interrupted
    child.sendline("again please")
    child.expect_exact("GATE WAITING")
    child.sendintr()
    child.expect_exact("(cancelling:")
    child.sendintr()
    child.expect_exact("(stopping now; Ctrl-C again to leave)")
    child.expect_exact("(turn cancelled)")
    child.expect_exact(PROMPT)

    # the third Ctrl-C leaves
    child.sendintr()
    child.expect_exact("interrupted")
    assert finish(child) == 130
    assert "Traceback" not in (child.before or "")

    messages = stored(home, session_id)
    users = [m["content"] for m in messages if m["role"] == "user"]
    assert users == ["count these words", "again please"]  # "half a line" was dropped
    results = [m["content"] for m in messages if m["role"] == "tool"]
    assert json.loads(results[0]) == {"words": 3, "characters": 17}
    assert json.loads(results[1])["cancelled"] is True
    assert not any("Your prompt has" in json.dumps(m) for m in messages)  # no answers


def test_tools_ask_on_the_terminal_before_bash_runs(home: Path) -> None:
    plan = home / "bash.yaml"
    plan.write_text(
        "session: {orchestrator: loop-basic, context: context-simple}\n"
        "providers:\n"
        "  - module: provider-scripted\n"
        "    config:\n"
        "      responses:\n"
        "        - content: []\n"
        "          tool_calls: [{id: c1, name: bash, arguments: {command: 'touch approved'}}]\n"
        "        - content: [{type: text, text: 'made it'}]\n",
        encoding="utf-8",
    )
    child = spawn(home, "run", "--plan", str(plan), "--tools", "filesystem,bash", "make a file")
    child.expect_exact("Allow the tool 'bash'?")
    child.expect_exact("touch approved")
    child.expect_exact("> ")
    child.sendline("y")
    child.expect_exact("made it")
    assert finish(child) == 0
    assert (home / "project" / "approved").is_file()


STALLING_HOOK = """\
import anyio


async def mount(coordinator, config):
    print("mounting", flush=True)
    await anyio.sleep(3600)
"""


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_ctrl_c_while_the_session_starts_leaves_with_130(home: Path, backend: str) -> None:
    package = home / "modules" / "amplifier_module_hooks_stall"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(STALLING_HOOK, encoding="utf-8")
    plan = home / "stall.yaml"
    plan.write_text(
        "session: {orchestrator: loop-basic, context: context-simple}\n"
        "providers: [{module: provider-scripted, config: {demo: true}}]\n"
        f"hooks: [{{module: hooks-stall, source: '{package.parent}'}}]\n",
        encoding="utf-8",
    )
    child = spawn(home, "chat", "--backend", backend, "--plan", str(plan))
    child.expect_exact("mounting")

    child.sendintr()

    child.expect_exact("interrupted")
    assert finish(child) == 130
    assert "Traceback" not in (child.before or "")
    assert not (home / "amplifier" / "projects").exists() or not any(
        (home / "amplifier" / "projects").rglob("context-messages.jsonl")
    )


# -- slash commands, in-process (lines piped in, no terminal) --------------------------------


def test_slash_commands(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AMPLIFIER_HOME", str(home / "amplifier"))
    monkeypatch.chdir(home / "project")
    lines = [
        "first words",
        "/save talk.md",
        "/save talk.jsonl",
        "/save talk.txt",
        "/events on",
        "second",
        "/events off",
        "/events maybe",
        "/bogus",
        "/reset",
        "after the reset",
        "/exit",
        "never read",
    ]
    result = CliRunner().invoke(
        app, ["chat", "--system", "Be brief.", "--backend", "trio"], input="\n".join(lines)
    )

    assert result.exit_code == 0, result.output
    assert "(saved 6 messages to talk.md)" in result.stderr
    stored = [json.loads(line) for line in Path("talk.jsonl").read_text().splitlines()]
    assert stored[0] == {"role": "system", "content": "Be brief."}
    assert stored[1] == {"role": "user", "content": "first words"}
    markdown = Path("talk.md").read_text()
    assert markdown.startswith("# Chat session ")
    assert "\n\n## System\n\nBe brief.\n\n## User\n\nfirst words\n\n## Assistant\n\n" in markdown
    call = 'Tool call `word_count` (call `demo-1`):\n\n```json\n{\n  "text": "first words"\n}\n```'
    assert call in markdown
    assert (
        "## Tool result: `reverse_words` (call `demo-2`)\n\n```text\nwords first\n```" in markdown
    )
    text = Path("talk.txt").read_text()
    assert text.startswith("system: Be brief.\nuser: first words\n")
    events = [line for line in result.stderr.splitlines() if " tool:pre " in line]
    assert len(events) == 2  # printed for "second" only
    assert "usage: /events on|off" in result.stderr
    assert "unknown command /bogus (/help lists them)" in result.stderr
    sessions = list_sessions()
    assert [s.title for s in sessions] == ["after the reset", "first words"]
    assert [s.messages for s in sessions] == [6, 11]  # /reset left the old one as it was
    assert "never read" not in result.stdout


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_chat_that_cannot_start_is_one_line_and_leaves_no_session(
    home: Path, monkeypatch: pytest.MonkeyPatch, backend: str
) -> None:
    monkeypatch.setenv("AMPLIFIER_HOME", str(home / "amplifier"))
    monkeypatch.chdir(home / "project")
    plan = home / "misspelt.yaml"
    plan.write_text(
        "session: {orchestrator: loop-basic, context: context-simple}\n"
        "providers: [{module: provider-scripted, config: {demo: true}}]\n"
        "tools: [{module: tool-dmeo}]\n",
        encoding="utf-8",
    )

    result = CliRunner().invoke(
        app, ["chat", "--backend", backend, "--plan", str(plan)], input="hello\n"
    )

    assert result.exit_code == 2, result.output
    [line] = result.stderr.splitlines()
    assert line.startswith("error: module 'tool-dmeo' not found")
    assert list_sessions(every_project=True) == []


def test_saved_markdown_fences_outlast_the_backticks_inside() -> None:
    messages = [
        {"role": "user", "content": "show me a fence"},
        {"role": "tool", "name": "bash", "tool_call_id": "c1", "content": "```\nls\n```"},
    ]

    markdown = transcript_markdown(messages, "s1")

    assert markdown == (
        "# Chat session s1\n\n## User\n\nshow me a fence\n\n"
        "## Tool result: `bash` (call `c1`)\n\n````text\n```\nls\n```\n````\n"
    )
