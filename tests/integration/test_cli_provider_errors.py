"""What ``run`` says when a provider's address is wrong, as a user meets it.

The console script runs in subprocesses against a real HTTP server on 127.0.0.1 (a thread)
that answers the Messages API at ``/v1/messages`` and Chat Completions at
``/v1/chat/completions`` and 404s every other path, as a third-party server does; and
against a port where nothing listens. The commands are independent, so the module starts
them all at once and every test reads the outcome of its own.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from _cli import console_script

ANSWER = "Hello from the API root."
EVENTS = ("--events-jsonl", "events.jsonl")

ANTHROPIC_MESSAGE = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-5",
    "content": [{"type": "text", "text": ANSWER}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {"input_tokens": 3, "output_tokens": 5},
}

OPENAI_COMPLETION = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": ANSWER}, "finish_reason": "stop"}
    ],
    "usage": {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8},
}


class _Api(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", "0")))
        self.server.paths.append(self.path)  # type: ignore[attr-defined]
        answers = {"/v1/messages": ANTHROPIC_MESSAGE, "/v1/chat/completions": OPENAI_COMPLETION}
        if self.path in answers:
            self._send(200, json.dumps(answers[self.path]).encode(), "application/json")
        else:
            self._send(404, b"404 page not found", "text/plain")

    def _send(self, status: int, data: bytes, kind: str) -> None:
        self.send_response(status)
        self.send_header("content-type", kind)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet


@pytest.fixture(scope="module")
def server() -> Iterator[ThreadingHTTPServer]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Api)
    httpd.paths = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield httpd
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=10)


def closed_port() -> int:
    """A port on 127.0.0.1 where nothing listens (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("provider-errors")


@pytest.fixture(scope="module")
def runs(
    server: ThreadingHTTPServer, workdir: Path
) -> Mapping[str, subprocess.CompletedProcess[str]]:
    cwd = workdir
    root = f"http://127.0.0.1:{server.server_port}"
    unreachable = f"http://127.0.0.1:{closed_port()}/v1"
    (cwd / "unreachable.yaml").write_text(
        "session: {orchestrator: loop-basic, context: context-simple}\n"
        "providers:\n"
        "  - module: provider-openai\n"
        f"    config: {{base_url: '{unreachable}', max_retries: 2,"
        " retry_initial_delay: 0.05, retry_jitter: 0}\n",
        encoding="utf-8",
    )
    commands: dict[str, list[str]] = {
        "anthropic-v1": ["run", "--provider", "anthropic", "--base-url", f"{root}/v1", "hi"],
        "openai-no-v1": ["run", "--provider", "openai", "--base-url", root, "hi"],
        "unreachable": ["run", "--plan", "unreachable.yaml", "hi"],
        "model": ["run", "--provider", "openai", "--base-url", f"{root}/v1", *EVENTS, "hi"],
    }
    keys = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_BASE_URL")
    env = {k: v for k, v in os.environ.items() if k not in (*keys, "COLUMNS")}
    env["ANTHROPIC_API_KEY"] = "sk-ant-test-key"

    def run(args: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [console_script(), *args],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    with ThreadPoolExecutor(max_workers=len(commands)) as pool:
        return dict(zip(commands, pool.map(run, commands.values()), strict=True))


def test_an_anthropic_base_url_with_v1_is_cut_back_to_the_root_with_a_warning(
    runs: Mapping[str, subprocess.CompletedProcess[str]], server: ThreadingHTTPServer
) -> None:
    done = runs["anthropic-v1"]
    root = f"http://127.0.0.1:{server.server_port}"

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ANSWER
    assert done.stderr.splitlines() == [
        f"warning: provider-anthropic: base_url {root}/v1 ends in /v1; Anthropic's base URL is "
        f"the API root without it: using {root} (requests go to {root}/v1/messages)"
    ]
    assert "/v1/v1/messages" not in server.paths  # type: ignore[attr-defined]


def test_a_404_names_the_url_called_and_the_missing_v1(
    runs: Mapping[str, subprocess.CompletedProcess[str]], server: ThreadingHTTPServer
) -> None:
    done = runs["openai-no-v1"]
    root = f"http://127.0.0.1:{server.server_port}"

    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        "error: the turn failed: NotFoundError: openai returned HTTP 404: 404 page not found "
        f"(POST {root}/chat/completions; OpenAI-compatible servers serve the API under /v1: "
        f"use the base URL {root}/v1)"
    ]


def test_an_unreachable_server_reports_each_retry_as_it_happens(
    runs: Mapping[str, subprocess.CompletedProcess[str]],
) -> None:
    done = runs["unreachable"]

    assert done.returncode == 1
    *retries, last = done.stderr.splitlines()
    assert [line.split(" (")[0] for line in retries] == [
        "openai: retrying 1/2 in 0.1 s",
        "openai: retrying 2/2 in 0.1 s",
    ]
    assert all("(could not reach openai: " in line for line in retries), retries
    assert last.startswith("error: the turn failed: NetworkError: could not reach openai: ")


def test_llm_request_carries_the_model_asked_for(
    runs: Mapping[str, subprocess.CompletedProcess[str]], workdir: Path
) -> None:
    done = runs["model"]

    assert done.returncode == 0, done.stderr
    events = (workdir / "events.jsonl").read_text(encoding="utf-8").splitlines()
    [request] = [json.loads(line) for line in events if '"llm:request"' in line]
    assert request["data"]["model"] == "gpt-4o"  # the provider's default: the request names none
