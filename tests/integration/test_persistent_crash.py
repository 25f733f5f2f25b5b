"""Crash safety of context-persistent: writers SIGKILLed at random points, then reloaded.

Each lane owns one file and a fork server (``_crash_writer.py``). Again and again it
forks a writer, kills it with SIGKILL after a random delay (sometimes before the writer
finished loading, so kills also land inside a load's repair rewrite), waits until it is
gone, and reloads the file here, on this test's backend: the reload must succeed, hold
only whole messages, in order, and leave no tool call without a result. The next writer
resumes the same file, so every kill also exercises a resume after a crash.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import random
import signal
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from amplifier_anyio.contexts import PersistentContextManager
from amplifier_anyio.contexts.persistent import lock_path_for

sys.path.insert(0, str(Path(__file__).parent))

from _fork_lane import Lane

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.slow,  # a crash loop: hundreds of forked writers killed
    pytest.mark.skipif(not hasattr(os, "fork"), reason="the writers are forked"),
]

HELPER = Path(__file__).with_name("_crash_writer.py")
_spec = importlib.util.spec_from_file_location("_crash_writer", HELPER)
assert _spec is not None
assert _spec.loader is not None
writer = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(writer)

LANES = 2
KILLS_PER_LANE = 14  # x 2 lanes x 2 backends = 56 kills per test run


def check(messages: list[dict[str, Any]]) -> int:
    """Assert the reloaded history is whole, ordered and closed; return the last seq."""
    last_seq = -1
    for index, message in enumerate(messages):
        metadata = message.get("metadata") or {}
        if metadata.get("interrupted"):
            assert message["role"] == "tool"
            continue
        seq = metadata["seq"]
        assert seq > last_seq, "messages out of order or repeated"
        assert message["content"] == writer.content_for(seq), "a partial message was loaded"
        last_seq = seq
        if message.get("tool_calls"):
            ids = [call["id"] for call in message["tool_calls"]]
            assert ids == writer.call_ids_for(seq)
            following = messages[index + 1 : index + 1 + len(ids)]
            assert [m.get("tool_call_id") for m in following] == ids, "orphaned tool call"
    return last_seq


async def run_lane(directory: Path, seed: int, backends: list[str]) -> list[int]:
    rng = random.Random(seed)
    path = directory / "context-messages.jsonl"
    lock = lock_path_for(path)
    progress = []
    pid: int | None = None
    async with await anyio.open_process(
        [sys.executable, str(HELPER), str(path)], stderr=None
    ) as process:
        lane = Lane(process)
        try:
            for kill in range(KILLS_PER_LANE):
                await lane.send(f"spawn {backends[kill % len(backends)]}")
                pid = int((await lane.take("forked ")).split()[1])
                if rng.random() < 0.2:
                    # kill early, maybe while the writer is still loading or repairing
                    await anyio.sleep(rng.uniform(0, 0.01))
                else:
                    await lane.take(f"ready {pid}")
                    await anyio.sleep(rng.uniform(0, 0.08))
                os.kill(pid, signal.SIGKILL)
                await lane.send(f"reap {pid}")
                await lane.take(f"reaped {pid}")
                pid = None
                async with PersistentContextManager(path) as manager:  # repairs, as a writer
                    progress.append(check(await manager.get_messages()))
                names = {name for name in await _names(directory) if name != lock.name}
                assert sorted(names) in ([], [path.name])  # no temp file left
        finally:
            if pid is not None:  # never leave a writer running when the test fails
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
    return progress


async def _names(directory: Path) -> list[str]:
    return [entry.name async for entry in anyio.Path(directory).iterdir()]


@pytest.mark.timeout(60)
async def test_killed_writers_never_leave_a_file_that_reloads_badly(
    tmp_path: Path, anyio_backend: tuple[str, dict[str, Any]]
) -> None:
    results: dict[int, list[int]] = {}

    async def lane(number: int) -> None:
        directory = tmp_path / f"lane{number}"
        directory.mkdir()
        results[number] = await run_lane(directory, seed=number, backends=["asyncio", "trio"])

    with anyio.fail_after(50):
        async with anyio.create_task_group() as tg:
            for number in range(LANES):
                tg.start_soon(lane, number)
    for progress in results.values():
        assert len(progress) == KILLS_PER_LANE
        assert progress[-1] > 20, "the writers hardly wrote anything: the test proves little"
