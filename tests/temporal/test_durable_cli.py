"""``amplifier-anyio temporal worker`` and ``run --plan`` on a durable plan, as processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from _temporal_kit import demo_plan, queue, reply

from _servers import free_port

pytestmark = pytest.mark.slow

CLI = [sys.executable, "-c", "from amplifier_anyio.cli import main; main()"]
SRC = Path(__file__).parents[2] / "src"


def test_worker_command_and_run_on_a_durable_plan(temporal_server: str, tmp_path: Path) -> None:
    durable = {"address": temporal_server, "task_queue": queue()}
    script = [reply(calls=[("c1", "word_count", {"text": "a b c"})]), reply("three words")]
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump(demo_plan(script, durable)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), *sys.path])}
    worker = subprocess.Popen(
        [*CLI, "temporal", "worker", "--plan", str(plan)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
        text=True,
    )
    try:
        assert worker.stdout is not None
        line = worker.stdout.readline()
        assert "worker ready" in line, line
        done = subprocess.run(
            [*CLI, "run", "--plan", str(plan), "count the words"],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
            check=False,
        )
        assert (done.returncode, done.stdout.strip()) == (0, "three words"), done.stderr
    finally:
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait(timeout=10)
        if worker.stdout is not None:
            worker.stdout.close()


def test_run_on_a_durable_plan_without_a_server_is_one_line(tmp_path: Path) -> None:
    durable = {"address": f"127.0.0.1:{free_port()}", "task_queue": "q"}
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump(demo_plan([reply("x")], durable)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), *sys.path])}
    done = subprocess.run(
        [*CLI, "run", "--plan", str(plan), "hello"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0
    assert "cannot reach the Temporal server" in done.stderr
