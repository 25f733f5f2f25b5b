"""kill -9 of a worker at seeded random points: the turn finishes on a second worker.

Each round runs five sessions at once on a worker process, each with its own seeded
script (three calls of random lengths: two that may run once, one idempotent); the worker
is killed at a seeded random moment, a second worker starts, and every turn finishes there.
Four rounds (two seeds on each client backend): twenty sessions, each caught by the kill
at its own point. What must hold: no call that may run once ran twice (its marks), every
call is answered exactly once in call order, a lost call is answered *interrupted*, the
idempotent call never is (it is retried), and every turn ends with the model's answer.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from _temporal_kit import FAST, marker_plan, queue, reply
from test_durable_sessions import calls_answered_in_order, content

from amplifier_anyio import TurnStatus
from amplifier_anyio.temporal import TemporalSessions

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

HERE = Path(__file__).parent
SESSIONS_PER_ROUND = 5


def script(rng: random.Random, name: str) -> list[dict[str, Any]]:
    calls = [
        (f"{name}-a", "marker", {"delay": round(rng.uniform(0, 1.5), 2)}),
        (f"{name}-b", "marker", {"delay": round(rng.uniform(0, 1.5), 2)}),
        (f"{name}-c", "again", {"delay": round(rng.uniform(0, 1.5), 2)}),
    ]
    return [reply(calls=calls), reply(f"{name} done")]


class WorkerProcess:
    def __init__(self, plan_path: Path, address: str, task_queue: str, log: Path) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), *sys.path])}
        self._log = log.open("ab")
        self.process = subprocess.Popen(
            [sys.executable, str(HERE / "_worker_process.py"), str(plan_path), address, task_queue],
            stdout=subprocess.PIPE,
            stderr=self._log,
            env=env,
        )

    async def ready(self) -> None:
        assert self.process.stdout is not None
        line = await anyio.to_thread.run_sync(self.process.stdout.readline)
        assert line.strip() == b"ready", line

    def kill(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)
        if self.process.stdout is not None:
            self.process.stdout.close()
        self._log.close()


@pytest.mark.parametrize("seed", [0, 1])
async def test_kill_9_turn_finishes_on_a_second_worker(
    temporal_server: str, tmp_path: Path, seed: int, anyio_backend: str
) -> None:
    seed = seed * 2 + (anyio_backend == "trio")  # four rounds, four seeds
    rng = random.Random(seed)
    marks = tmp_path / "marks"
    names = [f"s{seed}{i}" for i in range(SESSIONS_PER_ROUND)]
    plan = marker_plan([], marks, FAST)
    plan["providers"][0]["config"] = {"scripts": {n: script(rng, n) for n in names}}
    plan_path = tmp_path / "plan.json"
    plan_path.write_text(json.dumps(plan))
    task_queue = queue()
    first = WorkerProcess(plan_path, temporal_server, task_queue, tmp_path / "first.log")
    second: WorkerProcess | None = None
    results: dict[str, Any] = {}
    try:
        await first.ready()
        async with TemporalSessions(address=temporal_server, task_queue=task_queue) as sessions:
            opened = {n: await sessions.open(plan, session_id=f"{n}-{task_queue}") for n in names}

            async def turn(name: str) -> None:
                results[name] = await opened[name].run(name)

            with anyio.fail_after(90):
                async with anyio.create_task_group() as group:
                    for name in names:
                        group.start_soon(turn, name)
                    await anyio.sleep(rng.uniform(0.2, 2.0))
                    first.kill()
                    second = WorkerProcess(
                        plan_path, temporal_server, task_queue, tmp_path / "second.log"
                    )
                    await second.ready()
            transcripts = {n: await opened[n].messages() for n in names}
    finally:
        first.kill()
        if second is not None:
            second.kill()
    for name in names:
        result = results[name]
        assert (result.status, result.text) == (TurnStatus.SUCCESS, f"{name} done"), name
        messages = transcripts[name]
        calls_answered_in_order(messages)
        answers = {m["tool_call_id"]: content(m) for m in messages if m.get("role") == "tool"}
        assert set(answers) == {f"{name}-a", f"{name}-b", f"{name}-c"}
        for call_id, answer in answers.items():
            runs = (marks / call_id).read_text().splitlines() if (marks / call_id).exists() else []
            assert all(key == f"{name}-{task_queue}/{call_id}" for key in runs)
            if call_id.endswith("-c"):  # idempotent: retried, never answered interrupted
                assert answer == {"done": call_id}, (call_id, answer)
                assert 1 <= len(runs) <= 2
            else:
                assert len(runs) <= 1, (call_id, runs)  # never ran twice
                assert answer in ({"done": call_id}, _interrupted(call_id)), answer
                if answer == {"done": call_id}:
                    assert len(runs) == 1


def _interrupted(call_id: str) -> dict[str, Any]:
    return {"error": "Tool execution was interrupted", "interrupted": True, "tool": "marker"}
