"""``amplifier-anyio run``'s options, run by the installed console script in subprocesses.

The offline demo plan answers most commands; ``--provider openai`` talks to a real HTTP
server on 127.0.0.1 that a fixture starts (a small Chat Completions server in a thread,
which records every request body). The commands are independent, so the module starts
them all at once and every test reads the outcome of its own.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from _cli import console_script
from amplifier_anyio.cli import app

SERVER_ANSWER = "Bonjour from the local server."
SERVER_STREAM = ["Bonjour ", "from ", "the ", "stream."]


class _ChatCompletions(BaseHTTPRequestHandler):
    """POST /v1/chat/completions: a fixed answer, as JSON or as an SSE stream."""

    bodies: list[dict[str, Any]]

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length", "0"))
        body = json.loads(self.rfile.read(length))
        self.server.bodies.append(  # type: ignore[attr-defined]
            {"path": self.path, "auth": self.headers.get("authorization"), "body": body}
        )
        if body.get("stream"):
            chunks = [{"choices": [{"index": 0, "delta": {"content": d}}]} for d in SERVER_STREAM]
            chunks.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
            data = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
            self._send(data.encode(), "text/event-stream")
            return
        answer = {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "model": body.get("model"),
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": SERVER_ANSWER},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 11, "completion_tokens": 5, "total_tokens": 16},
        }
        self._send(json.dumps(answer).encode(), "application/json")

    def _send(self, data: bytes, kind: str) -> None:
        self.send_response(200)
        self.send_header("content-type", kind)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet


@pytest.fixture(scope="module")
def server() -> Iterator[ThreadingHTTPServer]:
    """A Chat Completions server on 127.0.0.1; ``server.bodies`` holds what it received."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _ChatCompletions)
    httpd.bodies = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield httpd
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=10)


BASH_PLAN = """\
session: {orchestrator: loop-basic, context: context-simple}
providers:
  - module: provider-scripted
    config:
      responses:
        - content: []
          tool_calls: [{id: c1, name: bash, arguments: {command: "touch made-by-bash"}}]
        - content: [{type: text, text: "done"}]
"""

GOOD_PLAN = """\
session: {orchestrator: loop-basic, context: context-simple}
providers: [{module: provider-scripted, config: {demo: true}}]
tools: [{module: tool-demo, config: {delay: 0}}]
"""

FILES = {
    "prompt.txt": "count these five words please\n",
    "system.txt": "You answer in French.\n",
    "empty.txt": "  \n",
    "bash.yaml": BASH_PLAN,
    "good.yaml": GOOD_PLAN,
    "a-folder/keep": "",
}

# name: (arguments, stdin, extra environment)
COMMANDS: dict[str, tuple[list[str], str | None, dict[str, str]]] = {
    "json-asyncio": (["run", "--json", "count these four words"], None, {}),
    "json-trio": (["run", "--backend", "trio", "--json", "count these four words"], None, {}),
    "plain": (["run", "count these four words"], None, {}),
    "events-asyncio": (
        ["run", "--events", "--events-jsonl", "out/events.jsonl", "two words"],
        None,
        {},
    ),
    "events-trio": (
        ["run", "--backend", "trio", "--events", "--events-jsonl", "trio.jsonl", "two words"],
        None,
        {},
    ),
    "tools-no-tty": (
        ["run", "--plan", "bash.yaml", "--tools", "bash", "--events-jsonl", "bash.jsonl", "go"],
        "",
        {},
    ),
}

KEYS = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_BASE_URL")


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cwd = tmp_path_factory.mktemp("run-options")
    for name, content in FILES.items():
        (cwd / name).parent.mkdir(parents=True, exist_ok=True)
        (cwd / name).write_text(content, encoding="utf-8")
    return cwd


def base_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in (*KEYS, "COLUMNS")}
    env["COLUMNS"] = "1000"  # one event a line
    return env


def run_cli(
    cwd: Path, args: list[str], stdin: str | None = None, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [console_script(), *args],
        cwd=cwd,
        env={**base_env(), **(env or {})},
        input=stdin,
        stdin=None if stdin is not None else subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture(scope="module")
def runs(workdir: Path) -> Mapping[str, subprocess.CompletedProcess[str]]:
    def one(item: tuple[list[str], str | None, dict[str, str]]) -> Any:
        args, stdin, env = item
        return run_cli(workdir, args, stdin, env)

    with ThreadPoolExecutor(max_workers=8) as pool:
        return dict(zip(COMMANDS, pool.map(one, COMMANDS.values()), strict=True))


IN_PROCESS: dict[str, tuple[list[str], str | None]] = {
    "stdin": (["run", "-"], "words from standard input\n"),
    "at-file": (["run", "@prompt.txt"], None),
    "at-at": (["run", "@@literal at sign"], None),
    "max-iterations": (["run", "--json", "--max-iterations", "1", "two words"], None),
    "plan-wins": (["run", "--plan", "good.yaml", "--provider", "openai", "hi there"], None),
    # bad values: one line, exit 2
    "bad-provider": (["run", "--provider", "gemini", "hi"], None),
    "bad-max-iterations": (["run", "--max-iterations", "0", "hi"], None),
    "bad-max-iterations-text": (["run", "--max-iterations", "lots", "hi"], None),
    "bad-tools": (["run", "--tools", "filesystem,shell", "hi"], None),
    "bad-base-url": (["run", "--provider", "openai", "--base-url", "ftp://x", "hi"], None),
    "model-with-scripted": (["run", "--model", "gpt-4o", "hi"], None),
    "no-key": (["run", "--provider", "anthropic", "hi"], None),
    "missing-file": (["run", "@nowhere.txt"], None),
    "empty-prompt": (["run", "@empty.txt"], None),
    "events-jsonl-folder": (["run", "--events-jsonl", "a-folder", "hi"], None),
}


def invoke(workdir: Path, monkeypatch: pytest.MonkeyPatch, command: str) -> Result:
    """An IN_PROCESS command, run in this process (typer's CliRunner) from ``workdir``."""
    monkeypatch.chdir(workdir)
    args, stdin = IN_PROCESS[command]
    return CliRunner().invoke(app, args, input=stdin, env=dict.fromkeys(KEYS))


EVENT_START = re.compile(r"^\d\d:\d\d:\d\d\.\d{3} (\S+) ", re.MULTILINE)


def one_line_error(done: Result) -> str:
    assert done.exit_code == 2, done.output
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("error: ")
    assert done.stdout == ""
    return " ".join(lines[0].split())


# -- --json ----------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_json_is_one_object_that_matches_the_turn(
    runs: Mapping[str, subprocess.CompletedProcess[str]], backend: str
) -> None:
    done = runs[f"json-{backend}"]

    assert done.returncode == 0, done.stderr
    [line] = done.stdout.splitlines()
    result = json.loads(line)
    assert result["status"] == "success"
    assert result["text"] == runs["plain"].stdout.rstrip("\n")
    assert "Your prompt has 4 words and 22 characters." in result["text"]
    assert result["turn_count"] == 2  # the tool round, then the answer
    assert result["error"] is None
    assert result["finish_reason"] == "stop"
    assert set(result["usage"]) >= {"input_tokens", "output_tokens", "total_tokens"}
    assert len(result["session_id"]) == 36
    assert result["trace_id"]


def test_max_iterations_ends_the_turn_incomplete(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    done = invoke(workdir, monkeypatch, "max-iterations")

    assert done.exit_code == 0, done.output
    result = json.loads(done.stdout)
    assert result["status"] == "incomplete"
    assert "Your prompt has" not in result["text"]  # the demo never got its tool results back
    assert "(turn ended with status incomplete)" in done.stderr


# -- --events-jsonl --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("backend", "file"), [("asyncio", "out/events.jsonl"), ("trio", "trio.jsonl")]
)
def test_events_jsonl_has_one_valid_line_per_event_with_its_ids(
    runs: Mapping[str, subprocess.CompletedProcess[str]], workdir: Path, backend: str, file: str
) -> None:
    done = runs[f"events-{backend}"]
    assert done.returncode == 0, done.stderr

    lines = (workdir / file).read_text(encoding="utf-8").splitlines()
    records = [json.loads(line) for line in lines]

    # the same events, in the same order, as --events printed on stderr
    assert [r["event"] for r in records] == EVENT_START.findall(done.stderr)
    assert records[0]["event"] == "session:start"
    assert records[-1]["event"] == "session:end"
    assert len({r["session_id"] for r in records}) == 1
    turn = [r for r in records if r["event"] not in ("session:start", "session:end")]
    assert len({r["trace_id"] for r in turn}) == 1
    assert all(r["trace_id"] for r in turn)
    assert all(r["timestamp"] for r in records)
    # untruncated: the whole answer is in the orchestrator's closing event
    [end] = [r for r in records if r["event"] == "execution:end"]
    assert end["data"]["response"] == done.stdout.rstrip("\n")
    assert len(json.dumps(end["data"])) > 160  # --events shows 160 characters of it


# -- the prompt ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "words", "characters"),
    [("stdin", 4, 25), ("at-file", 5, 29), ("at-at", 3, 16)],
)
def test_the_prompt_comes_from_stdin_a_file_or_the_argument(
    workdir: Path, monkeypatch: pytest.MonkeyPatch, command: str, words: int, characters: int
) -> None:
    done = invoke(workdir, monkeypatch, command)

    assert done.exit_code == 0, done.output
    assert f"Your prompt has {words} words and {characters} characters." in done.stdout


# -- plans -----------------------------------------------------------------------------------


def test_a_plan_file_wins_over_provider_with_a_warning(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    done = invoke(workdir, monkeypatch, "plan-wins")

    assert done.exit_code == 0, done.output
    assert "Your prompt has 2 words" in done.stdout
    [warning] = done.stderr.splitlines()
    assert warning == "warning: --provider ignored: the plan file good.yaml names the providers"


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_provider_openai_with_model_base_url_and_system(
    server: ThreadingHTTPServer, workdir: Path, backend: str
) -> None:
    base_url = f"http://127.0.0.1:{server.server_port}/v1"
    before = len(server.bodies)  # type: ignore[attr-defined]
    args = ["run", "--backend", backend, "--provider", "openai", "--base-url", base_url]
    args += ["--model", f"local-{backend}", "--system", "@system.txt", "--json", "Say hello"]

    done = run_cli(workdir, args)

    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["text"] == SERVER_ANSWER
    assert result["usage"]["input_tokens"] == 11
    [request] = server.bodies[before:]  # type: ignore[attr-defined]
    assert request["path"] == "/v1/chat/completions"
    assert request["auth"] is None  # a local server needs no key; none was sent
    body = request["body"]
    assert body["model"] == f"local-{backend}"
    assert body["messages"] == [
        {"role": "system", "content": "You answer in French."},
        {"role": "user", "content": "Say hello"},
    ]


def test_provider_openai_reads_the_key_from_the_environment(
    server: ThreadingHTTPServer, workdir: Path
) -> None:
    before = len(server.bodies)  # type: ignore[attr-defined]
    env = {
        "OPENAI_API_KEY": "sk-test-from-env",
        "OPENAI_BASE_URL": f"http://127.0.0.1:{server.server_port}/v1",
    }

    done = run_cli(workdir, ["run", "--provider", "openai", "Say hello"], env=env)

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == SERVER_ANSWER
    [request] = server.bodies[before:]  # type: ignore[attr-defined]
    assert request["auth"] == "Bearer sk-test-from-env"
    assert request["body"]["model"] == "gpt-4o"  # the provider's default
    assert "sk-test-from-env" not in done.stdout + done.stderr


# -- --tools ---------------------------------------------------------------------------------


def test_tools_without_a_terminal_deny_what_needs_approval(
    runs: Mapping[str, subprocess.CompletedProcess[str]], workdir: Path
) -> None:
    done = runs["tools-no-tty"]

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "done"
    assert not (workdir / "made-by-bash").exists()  # nobody approved: it never ran
    records = [json.loads(line) for line in (workdir / "bash.jsonl").read_text().splitlines()]
    *_, last_request = [r for r in records if r["event"] == "llm:request"]
    tool_message = last_request["data"]["request"]["messages"][-1]
    assert tool_message["role"] == "tool"
    assert tool_message["content"] == "Denied by hook: No approval system available"
    assert done.stderr.strip() == (
        "warning: hooks-approval: the session has no approval system; "
        "calls that need approval are denied"
    )


# -- bad values ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "message"),
    [
        ("bad-provider", "error: --provider: must be one of openai, anthropic, scripted, not"),
        ("bad-max-iterations", "error: --max-iterations: expected a whole number of at least 1"),
        ("bad-max-iterations-text", "error: --max-iterations: expected a whole number"),
        ("bad-tools", "error: --tools: expected a comma-separated list of filesystem, bash;"),
        ("bad-base-url", "error: --base-url: expected an http:// or https:// URL, not 'ftp://x'"),
        ("model-with-scripted", "error: --model: only with --provider openai or anthropic"),
        ("no-key", "error: --provider anthropic: no API key (set ANTHROPIC_API_KEY)"),
        ("missing-file", "error: @nowhere.txt: cannot read: No such file or directory"),
        ("empty-prompt", "error: empty.txt: the prompt is empty"),
        ("events-jsonl-folder", "error: --events-jsonl a-folder: Is a directory"),
    ],
)
def test_a_bad_value_is_one_line_and_exit_2(
    workdir: Path, monkeypatch: pytest.MonkeyPatch, command: str, message: str
) -> None:
    assert one_line_error(invoke(workdir, monkeypatch, command)).startswith(message)


# -- chat against the server: tokens streamed as they arrive --------------------------------


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_chat_streams_tokens_from_a_streaming_provider(
    server: ThreadingHTTPServer, workdir: Path, tmp_path: Path, backend: str
) -> None:
    base_url = f"http://127.0.0.1:{server.server_port}/v1"
    before = len(server.bodies)  # type: ignore[attr-defined]
    events = tmp_path / "chat.jsonl"
    args = ["chat", "--backend", backend, "--provider", "openai", "--base-url", base_url]
    args += ["--events-jsonl", str(events)]

    done = run_cli(
        workdir, args, stdin="first\nsecond\n", env={"AMPLIFIER_HOME": str(tmp_path / "home")}
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout.count("Bonjour from the stream.") == 2  # printed once per turn
    first, second = server.bodies[before:]  # type: ignore[attr-defined]
    assert first["body"]["stream"] is True  # chat's plan streams (loop-streaming)
    assert [m["content"] for m in second["body"]["messages"]] == [
        "first",
        "Bonjour from the stream.",
        "second",
    ]
    records = [json.loads(line) for line in events.read_text(encoding="utf-8").splitlines()]
    deltas = [r["data"]["delta"] for r in records if r["event"] == "content_block:delta"]
    assert deltas == SERVER_STREAM * 2
    assert {r["session_id"] for r in records} == {records[0]["session_id"]}
