"""Real servers for tests: a subprocess on a free port of 127.0.0.1, stopped by its pid.

``ServerProcess`` starts a command that listens on the port it is given, waits until the
port accepts a connection, and stops the process with SIGTERM (SIGKILL after 10 s). A
third-party server that this machine cannot start is a skip naming why (``skip=True``);
a server of our own that does not start is a failure.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

START_TIMEOUT = 30.0


def free_port() -> int:
    """A port of 127.0.0.1 nothing listened on a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def accepts(port: int) -> bool:
    """Whether something listens on ``port`` of 127.0.0.1."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


class ServerProcess:
    """``command(port)`` run in ``home`` with its output in ``home/server.log``."""

    def __init__(
        self, command: Callable[[int], list[str]], home: Path, *, what: str, skip: bool = False
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = home / "server.log"
        self._log = self.log_path.open("wb")
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.process = subprocess.Popen(
            command(self.port), cwd=home, stdout=self._log, stderr=subprocess.STDOUT, env=env
        )
        deadline = time.monotonic() + START_TIMEOUT
        while not accepts(self.port):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                output = self.log_path.read_text(errors="replace")[-2000:]
                reason = f"this machine cannot start {what} on 127.0.0.1:{self.port}: {output}"
                if skip:
                    pytest.skip(reason)
                raise RuntimeError(reason)
            time.sleep(0.05)

    def stop(self) -> None:
        """Stop the process by its pid (idempotent)."""
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)
        self._log.close()


def start_fakellm(home: Path, rules: str) -> ServerProcess:
    """fakellm (PyPI: an OpenAI- and Anthropic-compatible server) with ``rules``."""
    config = home / "fakellm.yaml"
    config.write_text(rules)

    def command(port: int) -> list[str]:
        serve = [sys.executable, "-m", "fakellm.cli", "serve", "--host", "127.0.0.1"]
        return [*serve, "--port", str(port), "--config", str(config)]

    return ServerProcess(command, home, what="fakellm", skip=True)
