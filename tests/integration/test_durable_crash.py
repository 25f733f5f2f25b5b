"""Durable runs under SIGKILL: a side effect never happens twice, every call is answered once.

Each lane owns a transcript, a side-effect file and a fork server
(``_durable_crash_writer.py``). Again and again it forks a writer — which opens the session
on the transcript, resumes the turn the last crash left, and runs turns whose three tool
calls each append a line to the side-effect file — kills it with SIGKILL at a random
point, and reloads the transcript here: every call has exactly one result right after its
assistant message; no call's side effect happened twice; a call whose result is the tool's
own ("ok <id>", kept by the journal if the batch's messages were lost) happened exactly
once. The idempotent tool may run again after a crash, but dedupes by its idempotency
key, which must therefore be the same on every run of a call. At the end a writer resumes
without being killed: every turn of the transcript then ends with an answer.
"""

from __future__ import annotations

import collections
import contextlib
import os
import random
import signal
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from amplifier_anyio.contexts import PersistentContextManager
from amplifier_anyio.contexts._messages import calls, result_ids

sys.path.insert(0, str(Path(__file__).parent))

from _fork_lane import Lane

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.slow,  # a crash loop: hundreds of forked writers killed
    pytest.mark.skipif(not hasattr(os, "fork"), reason="the writers are forked"),
]

HELPER = Path(__file__).with_name("_durable_crash_writer.py")

LANES = 2
KILLS_PER_LANE = 55  # x 2 lanes x 2 backends = 220 kills per test run


def check(messages: list[dict[str, Any]], side_effects: Path) -> int:
    """Assert the invariants of the module docstring; return how many calls finished."""
    runs: collections.Counter[str] = collections.Counter()
    keys: collections.Counter[str] = collections.Counter()
    if side_effects.exists():
        for line in side_effects.read_text("utf-8").splitlines():
            if line.startswith("key "):
                keys[line.split()[1]] += 1
            else:
                runs[line] += 1
    assert all(count == 1 for count in runs.values()), f"a side effect ran twice: {runs}"
    assert all(count == 1 for count in keys.values()), f"an idempotent call ran twice: {keys}"
    seen: set[str] = set()
    finished = 0
    for index, message in enumerate(messages):
        ids = [call_id for call_id, _ in calls(message)]
        if not ids:
            continue
        assert not seen.intersection(ids), "a call made twice"
        seen.update(ids)
        following = messages[index + 1 : index + 1 + len(ids)]
        assert [result_ids(m) for m in following] == [[i] for i in ids], "a call not answered once"
        for call_id, result in zip(ids, following, strict=True):
            content = result["content"]
            if content.startswith(f"ok {call_id} "):  # the idempotent tool: ok <id> <key>
                assert keys[content.split()[2]] == 1, f"{call_id} finished but did not happen"
                finished += 1
            elif content == f"ok {call_id}":
                assert runs[call_id] == 1, f"{call_id} finished but did not happen"
                finished += 1
            else:  # interrupted (or held for a resume): it ran at most once
                assert "interrupted" in content, content
    answered = {i for m in messages for i in result_ids(m)}
    assert set(runs) <= answered, "a side effect of a call the transcript does not have"
    return finished


def check_complete(messages: list[dict[str, Any]]) -> int:
    """Every turn ends with an answer; returns the number of turns."""
    turns = 0
    answered = True
    for message in messages:
        if message["role"] == "user":
            assert answered, "a turn was left without its answer"
            turns += 1
            answered = False
        elif message["role"] == "assistant" and not message.get("tool_calls"):
            answered = True
    assert answered, "the last turn was left without its answer"
    return turns


async def reload(transcript: Path) -> list[dict[str, Any]]:
    manager = PersistentContextManager(transcript)
    await manager.load()
    return await manager.get_messages()


async def run_lane(directory: Path, seed: int) -> tuple[list[int], int]:
    rng = random.Random(seed)
    transcript = directory / "context-messages.jsonl"
    side_effects = directory / "side-effects.txt"
    progress = []
    pid: int | None = None
    command = [sys.executable, str(HELPER), str(transcript), str(side_effects)]
    backends = ["asyncio", "trio"]
    async with await anyio.open_process(command, stderr=None) as process:
        lane = Lane(process)
        try:
            for kill in range(KILLS_PER_LANE):
                await lane.send(f"spawn {backends[kill % 2]}")
                pid = int((await lane.take("forked ")).split()[1])
                if rng.random() < 0.15:  # maybe while it loads, repairs or resumes
                    await anyio.sleep(rng.uniform(0, 0.02))
                else:
                    await lane.take(f"ready {pid}")
                    await anyio.sleep(rng.uniform(0, 0.1))
                os.kill(pid, signal.SIGKILL)
                await lane.send(f"reap {pid}")
                await lane.take(f"reaped {pid}")
                pid = None
                progress.append(check(await reload(transcript), side_effects))
            await lane.send(f"finish {backends[seed % 2]}")
            pid = int((await lane.take("forked ")).split()[1])
            status = (await lane.take(f"finished {pid}")).split()[2]
            assert status == "success"
            await lane.send(f"reap {pid}")
            await lane.take(f"reaped {pid}")
            pid = None
        finally:
            if pid is not None:  # never leave a writer running when the test fails
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
    messages = await reload(transcript)
    check(messages, side_effects)
    return progress, check_complete(messages)


@pytest.mark.timeout(90)
async def test_killed_turns_never_repeat_a_side_effect_and_resume_to_the_end(
    tmp_path: Path, anyio_backend: tuple[str, dict[str, Any]]
) -> None:
    results: dict[int, tuple[list[int], int]] = {}

    async def lane(number: int) -> None:
        directory = tmp_path / f"lane{number}"
        directory.mkdir()
        results[number] = await run_lane(directory, seed=number)

    with anyio.fail_after(80):
        async with anyio.create_task_group() as tg:
            for number in range(LANES):
                tg.start_soon(lane, number)
    for progress, turns in results.values():
        assert len(progress) == KILLS_PER_LANE
        assert progress[-1] > 40, "the writers hardly finished a call: the test proves little"
        assert turns > 20
