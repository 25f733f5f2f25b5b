"""The test kit is deterministic by construction (DESIGN §16), on asyncio and trio: a fault
plan's record is in plan order, every spawn has its own cassette lane, one recorder per
cassette file, a cassette is validated whole when it is opened."""

from __future__ import annotations

import functools
import json
import os
import sys
from pathlib import Path
from typing import Any, ClassVar

import anyio
import anyio.lowlevel
import pytest

from amplifier_anyio import AmplifierSession
from amplifier_anyio.errors import CassetteError
from amplifier_anyio.models import ChatResponse, TextBlock, ToolCall, ToolResult
from amplifier_anyio.providers.scripted import ScriptedProvider
from amplifier_anyio.testing import install_cassette, lock_path_for, open_cassette
from amplifier_anyio.testing.faults import FaultPlan

pytestmark = pytest.mark.anyio

DEMO_PLAN: dict[str, Any] = {
    "session": {"orchestrator": "loop-basic", "context": "context-simple"},
    "providers": [{"module": "provider-scripted", "config": {"demo": True}}],
    "tools": [{"module": "tool-demo", "config": {"delay": 0}}],
}


# -- fault plans: the record of what struck is in plan order ---------------------------------


async def docs_run(plan: FaultPlan) -> tuple[str, list[str], list[dict[str, Any]]]:
    """docs/testing.md's fault plan example, one run."""
    async with AmplifierSession(DEMO_PLAN) as session:
        faults = plan.apply(session.coordinator)
        result = await session.run("Count my words, please")
        messages = await session.coordinator.get("context").get_messages()
    return str(result.status), faults.injected, messages


async def test_the_docs_fault_plan_example_gives_the_same_run_every_time() -> None:
    """30 runs of the example's plans (5 per seed): one record per seed, whatever order
    trio's scheduler starts the tool calls of a batch in."""
    for seed in range(6):
        plan = FaultPlan(seed=seed, provider_rate=0.3, tool_rate=0.5, tool_kinds=("fail",))
        first = await docs_run(plan)
        for _ in range(4):
            assert await docs_run(plan) == first, seed


class Echo:
    """A tool that answers with its input's ``n``."""

    name = "echo"
    description = "Echo n."
    input_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"n": {"type": "integer"}},
    }

    async def execute(self, input: dict[str, Any]) -> ToolResult:
        await anyio.lowlevel.checkpoint()
        return ToolResult(output=str(input.get("n")))


def batch_reply(request: Any) -> ChatResponse:
    if any(getattr(m, "role", None) == "tool" for m in request.messages):
        return ChatResponse(content=[TextBlock(text="done")])
    calls = [ToolCall(id=f"c{n}", name="echo", arguments={"n": n}) for n in range(5)]
    return ChatResponse(content=[], tool_calls=calls)


async def test_a_batch_of_failed_tool_calls_is_recorded_by_index() -> None:
    plan = FaultPlan(seed=7, provider_rate=0.0, tool_rate=1.0, tool_kinds=("fail",), cancel_rate=0)
    expected = [f"tool call {n} after provider call 0 (echo): fail" for n in range(5)]
    for _ in range(10):
        async with AmplifierSession(
            {"session": {"orchestrator": "loop-basic", "context": "context-simple"}}
        ) as session:
            await session.coordinator.mount("providers", ScriptedProvider(batch_reply), name="s")
            await session.coordinator.mount("tools", Echo(), name="echo")
            run = plan.apply(session.coordinator)
            result = await session.run("echo five")
        assert str(result.status) == "success"
        assert run.injected == expected


# -- one recorder per cassette file ---------------------------------------------------------


def demo_plan(path: Path, mode: str) -> dict[str, Any]:
    return {
        **DEMO_PLAN,
        "session": {**DEMO_PLAN["session"], "cassette": {"path": str(path), "mode": mode}},
    }


async def test_a_second_recorder_in_one_loop_is_refused_naming_the_first(tmp_path: Path) -> None:
    tape = tmp_path / "tape.jsonl"
    async with AmplifierSession(demo_plan(tape, "record")) as first:
        with pytest.raises(CassetteError) as caught:
            async with AmplifierSession(demo_plan(tape, "record")):
                pass
        assert f"lane 'root' is already being recorded by session {first.session_id!r}" in str(
            caught.value
        )
        assert f"pid {os.getpid()}" in str(caught.value)
        result = await first.run("Count my words, please")
    assert str(result.status) == "success"
    async with AmplifierSession(demo_plan(tape, "replay")) as again:  # the first one's calls
        replayed = await again.run("Count my words, please")
    assert replayed.text == result.text


HOLDER = """
import sys, anyio
from amplifier_anyio.testing import open_cassette

async def main():
    async with open_cassette(sys.argv[1], "record") as cassette:
        print("ready", flush=True)
        await anyio.to_thread.run_sync(sys.stdin.readline)

anyio.run(main)
"""


async def test_a_recorder_in_another_process_is_named_and_its_file_kept(tmp_path: Path) -> None:
    tape = tmp_path / "tape.jsonl"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    async with await anyio.open_process(
        [sys.executable, "-c", HOLDER, str(tape)], env=env
    ) as process:
        assert process.stdout is not None
        assert process.stdin is not None
        with anyio.fail_after(30):
            ready = b""
            async for chunk in process.stdout:
                ready += chunk
                if b"ready" in ready:
                    break
        held = tape.read_bytes()
        try:
            with pytest.raises(
                CassetteError, match=rf"another recorder holds it \(pid {process.pid}\)"
            ):
                async with open_cassette(tape, "record"):
                    pass
            with pytest.raises(CassetteError, match=rf"pid {process.pid}"):
                async with AmplifierSession(demo_plan(tape, "auto")):
                    pass
            assert tape.read_bytes() == held  # not truncated by the refused recorder
        finally:
            await process.stdin.send(b"done\n")
            with anyio.fail_after(30):
                await process.wait()
    assert process.returncode == 0
    assert not lock_path_for(tape).exists()  # the holder removed its lock as it let go
    async with open_cassette(tape, "record"):  # free again
        assert lock_path_for(tape).exists()


# -- a cassette is validated whole when it is opened -----------------------------------------


def damaged(lines: list[str], how: str) -> tuple[list[str], int, str]:
    """``lines`` of a recorded demo run (header, call 0, call 1) damaged ``how``; the
    line named, and what the error says."""
    call_1 = json.loads(lines[2])
    if how == "empty":
        return [], 0, "the file is empty"
    if how == "corrupt":
        return [lines[0], lines[1], lines[2][:40]], 3, "not a JSON line"
    if how == "bad response":
        call_1["response"]["content"] = [{"type": "nope"}]
        return [lines[0], lines[1], json.dumps(call_1)], 3, "unknown block type 'nope'"
    if how == "duplicate":
        return [lines[0], lines[1], lines[1], lines[2]], 3, "lane 'root', call 0 is recorded twice"
    if how == "gap":
        return [lines[0], lines[2]], 2, "lane 'root', call 1 is recorded but call 0 is not"
    assert how == "no header"
    return [lines[1], lines[2]], 1, "not a version 1 amplifier-anyio cassette"


class Counted:
    """A word_count tool that counts its calls: a replay that starts must not run it."""

    name = "word_count"
    description = "Count words."
    input_schema: ClassVar[dict[str, Any]] = {"type": "object"}

    def __init__(self) -> None:
        self.calls = 0

    async def execute(self, input: dict[str, Any]) -> ToolResult:
        self.calls += 1
        await anyio.lowlevel.checkpoint()
        return ToolResult(output="4")


@pytest.mark.parametrize(
    "how", ["empty", "corrupt", "bad response", "duplicate", "gap", "no header"]
)
async def test_a_damaged_cassette_fails_the_start_naming_the_line(tmp_path: Path, how: str) -> None:
    tape = tmp_path / "tape.jsonl"
    async with AmplifierSession(demo_plan(tape, "record")) as session:
        await session.run("Count my words, please")
    lines, number, problem = damaged(tape.read_text().splitlines(), how)
    tape.write_text("".join(f"{line}\n" for line in lines))
    tool = Counted()

    async def replay(mode: str) -> None:
        async with AmplifierSession(demo_plan(tape, mode)) as session:
            await session.coordinator.mount("tools", tool, name="word_count")
            await session.run("Count my words, please")

    for mode in ("replay", "auto"):
        with pytest.raises(CassetteError) as caught:
            await replay(mode)
        error = caught.value
        assert problem in str(error)
        assert error.path == str(tape)
        where = f"{tape}:{number}:" if number else f"{tape}:"
        assert where in str(error)
        assert error.line == (number or None)
    assert tool.calls == 0  # never half-replayed


# -- a lane per spawn -------------------------------------------------------------------------


def agents_plan(tape: Path, mode: str) -> dict[str, Any]:
    """A parent with the agent ``w``, whose own scripted model answers once."""
    reply = {"content": [{"type": "text", "text": "ok"}]}
    child_script = [reply] if mode == "record" else []
    return {
        "session": {
            "orchestrator": "loop-basic",
            "context": "context-simple",
            "cassette": {"path": str(tape), "mode": mode},
        },
        "agents": {
            "w": {
                "description": "Works.",
                "providers": [
                    {"module": "provider-scripted", "config": {"responses": child_script}}
                ],
            }
        },
    }


class Ask:
    """A tool of the application's own that spawns the agent ``w`` (not tool-task)."""

    name = "ask"
    description = "Ask w."
    input_schema: ClassVar[dict[str, Any]] = {"type": "object"}

    def __init__(self, session: AmplifierSession) -> None:
        self.session = session

    async def execute(self, input: dict[str, Any]) -> ToolResult:
        spawn = self.session.coordinator.get_capability("session.spawn")
        answer = await spawn(agent_name="w", instruction=str(input["who"]))
        return ToolResult(output=f"{input['who']}: {answer['output']}")


def two_asks(request: Any) -> ChatResponse:
    if any(getattr(m, "role", None) == "tool" for m in request.messages):
        return ChatResponse(content=[TextBlock(text="both")])
    calls = [ToolCall(id=f"c{n}", name="ask", arguments={"who": w}) for n, w in enumerate("LR")]
    return ChatResponse(content=[], tool_calls=calls)


async def ask_twice(tape: Path, mode: str) -> Any:
    async with AmplifierSession(agents_plan(tape, mode)) as session:
        provider: Any = ScriptedProvider(two_asks if mode == "record" else [])
        await session.coordinator.mount("providers", provider, name="scripted")
        await install_cassette(session.coordinator, {"path": str(tape), "mode": mode})
        await session.coordinator.mount("tools", Ask(session), name="ask")
        return await session.run("ask both")


async def test_two_concurrent_spawns_of_one_agent_get_their_own_lanes_and_replay(
    tmp_path: Path,
) -> None:
    tape = tmp_path / "tape.jsonl"
    recorded = await ask_twice(tape, "record")
    assert str(recorded.status) == "success", recorded.error
    entries = [json.loads(line) for line in tape.read_text().splitlines()[1:]]
    assert sorted({entry["lane"] for entry in entries}) == ["root", "root/w@c0", "root/w@c1"]
    for _ in range(6):  # whichever child the scheduler starts first
        replayed = await ask_twice(tape, "replay")
        assert str(replayed.status) == "success", replayed.error
        assert replayed.text == recorded.text


async def test_spawns_outside_a_tool_call_are_numbered_in_spawn_order(tmp_path: Path) -> None:
    tape = tmp_path / "tape.jsonl"
    forks: list[str] = []

    async def forked(event: str, data: dict[str, Any]) -> None:
        forks.append(data["lane"])

    async with AmplifierSession(agents_plan(tape, "record")) as session:
        session.coordinator.hooks.register("session:fork", forked)
        spawn = session.coordinator.get_capability("session.spawn")
        await spawn(agent_name="w", instruction="first")
        async with anyio.create_task_group() as group:  # at once: each its own lane
            for who in "LR":
                group.start_soon(functools.partial(spawn, agent_name="w", instruction=who))
    assert forks[0] == "root/w#1"
    assert sorted(forks[1:]) == ["root/w#2", "root/w#3"]
