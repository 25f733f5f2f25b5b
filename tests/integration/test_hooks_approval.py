"""hooks-approval in real sessions: rules, the callback system, fail-closed paths.

Every turn here asks the scripted model for both demo tools at once (``word_count`` and
``reverse_words``); what each call got is read back from the context. The console system
is tested on a pseudo-terminal, running the real CLI in a subprocess.
"""

from __future__ import annotations

import io
import os
import pty
import select
import subprocess
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from _cli import console_script
from amplifier_anyio import AmplifierSession, ConfigError
from amplifier_anyio.hooks.approval import (
    ALLOW_ALWAYS,
    ALLOW_ONCE,
    DEFER,
    DENY,
    OPTIONS,
    ApprovalConfig,
    ApprovalHook,
    ApprovalRequest,
    CallbackApprovalSystem,
    ConsoleApprovalSystem,
)

pytestmark = pytest.mark.anyio

TEXT = "the secret plan"


def both_tools_reply() -> dict[str, Any]:
    calls = [
        {"id": "call-0", "name": "word_count", "arguments": {"text": TEXT}},
        {"id": "call-1", "name": "reverse_words", "arguments": {"text": TEXT}},
    ]
    return {"content": [{"type": "text", "text": "using tools"}], "tool_calls": calls}


def text_reply(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}]}


def make_plan(approval: dict[str, Any], turns: int = 1) -> dict[str, Any]:
    replies = []
    for _ in range(turns):
        replies += [both_tools_reply(), text_reply("done")]
    return {
        "session": {"orchestrator": "loop-basic", "context": "context-simple"},
        "orchestrator": {"config": {"tool_timeout": 30}},
        "providers": [{"module": "provider-scripted", "config": {"responses": replies}}],
        "tools": [{"module": "tool-demo", "config": {}}],
        "hooks": [{"module": "hooks-approval", "config": approval}],
    }


class Recorder:
    """A callback approval: answers from a dict by tool, records every request."""

    def __init__(self, answers: dict[str, Any]) -> None:
        self.answers = answers
        self.requests: list[ApprovalRequest] = []

    def __call__(self, request: ApprovalRequest) -> Any:
        self.requests.append(request)
        tool = request.prompt.split("'")[1]
        answer = self.answers[tool]
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def tools_asked(self) -> list[str]:
        return [r.prompt.split("'")[1] for r in self.requests]


async def outcomes(session: AmplifierSession) -> dict[str, list[str]]:
    """What each tool's calls got, in order: ``ran`` or the denial text."""
    messages = await session.coordinator.get("context").get_messages()
    names = {}
    for message in messages:
        for call in message.get("tool_calls") or ():
            names[call["id"]] = call["name"]
    got: dict[str, list[str]] = {}
    for message in messages:
        if message["role"] == "tool":
            content = str(message["content"])
            outcome = content if content.startswith("Denied") else "ran"
            got.setdefault(names[message["tool_call_id"]], []).append(outcome)
    return got


async def run_turns(
    approval: dict[str, Any], system: Any, turns: int = 1
) -> tuple[dict[str, list[str]], AmplifierSession]:
    session = AmplifierSession(make_plan(approval, turns), approval_system=system)
    async with session:
        for _ in range(turns):
            await session.run("go")
        return await outcomes(session), session


async def test_rules_allow_and_deny_without_asking() -> None:
    asked = Recorder({})
    got, _ = await run_turns(
        {"allow": ["word_count"], "deny": ["reverse_*"]}, CallbackApprovalSystem(asked)
    )
    assert got["word_count"] == ["ran"]
    assert got["reverse_words"] == ["Denied by hook: reverse_words: denied by rule reverse_*"]
    assert asked.requests == []


async def test_argument_rules_match_the_configured_argument() -> None:
    asked = Recorder({"word_count": ALLOW_ONCE})
    config = {
        "argument_keys": ["text"],
        "deny": [{"tool": "*", "argument": "*secret*"}],
        "allow": ["word_count:*plan"],
    }
    got, _ = await run_turns(config, CallbackApprovalSystem(asked))
    # deny wins over allow: both calls carry the secret.
    assert got == {
        "word_count": ["Denied by hook: word_count: denied by rule *:*secret*"],
        "reverse_words": ["Denied by hook: reverse_words: denied by rule *:*secret*"],
    }


async def test_tools_without_a_rule_are_asked_with_the_configured_terms() -> None:
    asked = Recorder({"word_count": ALLOW_ONCE, "reverse_words": DENY})
    config = {"timeout": 7, "default": "deny", "argument_keys": ["text"]}
    got, _ = await run_turns(config, CallbackApprovalSystem(asked))
    assert got["word_count"] == ["ran"]
    assert got["reverse_words"][0].startswith("Denied by hook: User denied")
    assert sorted(asked.tools_asked()) == ["reverse_words", "word_count"]
    request = asked.requests[0]
    assert request.options == (ALLOW_ONCE, ALLOW_ALWAYS, DENY, DEFER)
    assert request.timeout == 7
    assert request.default == "deny"
    assert request.prompt.endswith(f"\n  {TEXT}")


async def test_only_the_configured_tools_ask() -> None:
    asked = Recorder({"reverse_words": DENY})
    got, _ = await run_turns({"tools": ["reverse_*"]}, CallbackApprovalSystem(asked))
    assert got["word_count"] == ["ran"]
    assert got["reverse_words"][0].startswith("Denied")
    assert asked.tools_asked() == ["reverse_words"]


async def test_allow_always_is_remembered_for_the_tool() -> None:
    asked = Recorder({"word_count": ALLOW_ALWAYS, "reverse_words": ALLOW_ONCE})
    got, _ = await run_turns({}, CallbackApprovalSystem(asked), turns=2)
    assert got == {"word_count": ["ran", "ran"], "reverse_words": ["ran", "ran"]}
    assert sorted(asked.tools_asked()) == ["reverse_words", "reverse_words", "word_count"]


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param(RuntimeError("the UI crashed"), id="raises"),
        pytest.param("maybe", id="not-an-option"),
        pytest.param(None, id="none"),
        pytest.param(False, id="false"),
    ],
)
async def test_anything_but_an_allow_denies(answer: Any) -> None:
    asked = Recorder({"word_count": answer, "reverse_words": True})
    got, _ = await run_turns({}, CallbackApprovalSystem(asked))
    assert got["word_count"][0].startswith("Denied")
    assert got["reverse_words"] == ["ran"]


async def test_no_approval_system_denies() -> None:
    got, _ = await run_turns({"allow": ["word_count"]}, None)
    assert got["word_count"] == ["ran"]
    assert got["reverse_words"] == ["Denied by hook: No approval system available"]


@pytest.mark.parametrize(("default", "expected"), [("deny", "Denied"), ("allow", "ran")])
async def test_a_slow_answer_takes_the_default(default: str, expected: str) -> None:
    async def never(request: ApprovalRequest) -> str:
        await anyio.sleep_forever()
        raise AssertionError

    got, _ = await run_turns({"timeout": 0.05, "default": default}, CallbackApprovalSystem(never))
    assert got["word_count"][0].startswith(expected)
    assert got["reverse_words"][0].startswith(expected)


async def test_the_hook_itself_fails_closed() -> None:
    hook = ApprovalHook(ApprovalConfig.from_dict({"allow": ["*"]}))
    assert (await hook("tool:pre", {"tool_name": "x", "tool_input": "not a mapping"})).action == (
        "deny"
    )
    assert (await hook("tool:pre", {"tool_input": {}})).action == "deny"

    class Exploding(dict[str, Any]):
        def get(self, key: str, default: Any = None) -> Any:
            raise RuntimeError("boom")

    result = await hook("tool:pre", Exploding())
    assert result.action == "deny"
    assert "boom" in (result.reason or "")


@pytest.mark.parametrize(
    ("config", "key"),
    [
        ({"timeout": 0}, "timeout"),
        ({"default": "maybe"}, "default"),
        ({"allow": "word_count"}, "allow"),
        ({"deny": ["ok", {"tool": "x", "argument": 3}]}, "deny[1]"),
        ({"tool": "x"}, "tool"),
    ],
)
def test_bad_config_is_one_line_naming_the_key(config: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError) as info:
        ApprovalConfig.from_dict(config)
    assert f"{key}:" in str(info.value)
    assert "\n" not in str(info.value)


# -- the console system on a pseudo-terminal --------------------------------------------------
# The CLI in a subprocess on a pty (a second or two each): the full tier (marked slow).

CONSOLE_PLAN = """\
session: {orchestrator: loop-basic, context: context-simple}
providers:
  - module: provider-scripted
    config:
      responses:
        - content: [{type: text, text: counting}]
          tool_calls: [{id: c1, name: word_count, arguments: {text: hello there}}]
        - content: [{type: text, text: finished}]
tools: [{module: tool-demo}]
hooks:
  - module: hooks-approval
    config: {timeout: %s, default: deny}
"""


class Terminal:
    """The CLI in a subprocess whose stdin, stdout and stderr are a pseudo-terminal."""

    def __init__(self, args: list[str], cwd: Path) -> None:
        self.master, slave = pty.openpty()
        env = {**os.environ, "NO_COLOR": "1", "TERM": "dumb", "COLUMNS": "200"}
        self.process = subprocess.Popen(
            [console_script(), *args], stdin=slave, stdout=slave, stderr=slave, cwd=cwd, env=env
        )
        os.close(slave)
        self.output = b""

    def read_until(self, marker: bytes, limit: float = 60.0) -> bytes:
        """Read until ``marker`` shows (or the process ends); a generous safety limit only."""
        deadline = time.monotonic() + limit
        while marker not in self.output and time.monotonic() < deadline:
            ready, _, _ = select.select([self.master], [], [], 0.5)
            if ready:
                try:
                    chunk = os.read(self.master, 4096)
                except OSError:  # the child closed the terminal
                    break
                if not chunk:
                    break
                self.output += chunk
        return self.output

    def send(self, text: str) -> None:
        os.write(self.master, text.encode())

    def finish(self) -> int:
        self.read_until(b"\x00 never")  # drain to the end
        try:
            return self.process.wait(timeout=60)
        finally:
            os.close(self.master)


@pytest.fixture
def console(tmp_path: Path) -> Any:
    terminals: list[Terminal] = []

    def start(timeout: float, *extra: str) -> Terminal:
        (tmp_path / "plan.yaml").write_text(CONSOLE_PLAN % timeout)
        terminal = Terminal(["run", "--plan", "plan.yaml", "--events", *extra, "count"], tmp_path)
        terminals.append(terminal)
        return terminal

    yield start
    for terminal in terminals:
        if terminal.process.poll() is None:
            terminal.process.kill()
            terminal.process.wait()


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_console_allow_once_on_a_terminal(console: Any, backend: str) -> None:
    terminal = console(300, "--backend", backend)
    shown = terminal.read_until(b"> ")
    assert b"Allow the tool 'word_count'?" in shown
    assert b"[1] Allow once" in shown
    assert b"[3] Deny" in shown
    assert b"default deny in 300s" in shown
    terminal.send("1\n")
    assert terminal.finish() == 0
    assert b"tool:post" in terminal.output  # the tool ran
    assert b"finished" in terminal.output


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_console_deny_on_a_terminal(console: Any, backend: str) -> None:
    terminal = console(300, "--backend", backend)
    terminal.read_until(b"> ")
    terminal.send("n\n")
    assert terminal.finish() == 0
    assert b"tool:post" not in terminal.output  # denied: never ran
    assert b"finished" in terminal.output


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_console_unclear_answer_denies(console: Any, backend: str) -> None:
    terminal = console(300, "--backend", backend)
    terminal.read_until(b"> ")
    terminal.send("perhaps\n")
    assert terminal.finish() == 0
    assert b"tool:post" not in terminal.output


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_console_silence_takes_the_default(console: Any, backend: str) -> None:
    terminal = console(0.5, "--backend", backend)
    terminal.read_until(b"> ")
    assert terminal.finish() == 0  # nobody answers
    assert b"(no answer" in terminal.output
    assert b"tool:post" not in terminal.output


@pytest.mark.slow
def test_without_a_terminal_approvals_fail_closed(tmp_path: Path) -> None:
    (tmp_path / "plan.yaml").write_text(CONSOLE_PLAN % 300)
    done = subprocess.run(
        [console_script(), "run", "--plan", "plan.yaml", "--events", "count"],
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert b"no approval system" in done.stderr
    assert b"tool:post" not in done.stderr


@pytest.mark.parametrize(
    ("typed", "chosen"),
    [
        ("1\n", ALLOW_ONCE),
        ("y\n", ALLOW_ONCE),
        ("2\n", ALLOW_ALWAYS),
        ("allow always\n", ALLOW_ALWAYS),
        ("3\n", DENY),
        ("4\n", DEFER),
        ("d\n", DEFER),
        ("defer\n", DEFER),
        ("5\n", DENY),
        ("", DENY),  # end of input
        ("whatever\n", DENY),
    ],
)
async def test_console_answers_on_a_plain_stream(typed: str, chosen: str) -> None:
    out = io.StringIO()
    system = ConsoleApprovalSystem(stdin=io.StringIO(typed), stdout=out)
    answer = await system.request_approval("Allow the tool 'x'?", list(OPTIONS), 5.0, "deny")
    assert answer == chosen
    assert "[2] Allow always" in out.getvalue()


async def test_console_remembers_allow_always_per_tool() -> None:
    system = ConsoleApprovalSystem(stdin=io.StringIO("2\n"), stdout=io.StringIO())
    first = await system.request_approval("Allow the tool 'x'?\n  a", list(OPTIONS), 5.0, "deny")
    again = await system.request_approval("Allow the tool 'x'?\n  b", list(OPTIONS), 5.0, "deny")
    other = await system.request_approval("Allow the tool 'y'?", list(OPTIONS), 5.0, "deny")
    assert (first, again, other) == (ALLOW_ALWAYS, ALLOW_ALWAYS, DENY)  # y: end of input
