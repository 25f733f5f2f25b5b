"""hooks-logging under back-pressure: a slow disk never holds a turn beyond the bound.

trio runs on a fresh autojump MockClock (virtual time: the bound is checked exactly);
asyncio on the real clock, where the test checks order only — the whole turn ends before
the disk has written one line.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest

from amplifier_anyio import AmplifierSession
from amplifier_anyio.hooks.logging import EventLog, JsonlFileSink, LoggingConfig
from amplifier_anyio.models import ToolResult

pytestmark = pytest.mark.anyio


def text_reply(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}]}


def flood_plan() -> dict[str, Any]:
    call = {"id": "call-0", "name": "flood", "arguments": {}}
    replies = [{"content": [], "tool_calls": [call]}, text_reply("flooded")]
    return {
        "session": {"orchestrator": "loop-basic", "context": "context-simple"},
        "providers": [{"module": "provider-scripted", "config": {"responses": replies}}],
    }


class SlowSink:
    """A disk that takes ``delay`` per batch and does not write at all before ``gate``."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.gate = anyio.Event()
        self.records: list[dict[str, Any]] = []
        self.closed = False

    async def write(self, records: Sequence[dict[str, Any]]) -> None:
        await self.gate.wait()
        await anyio.sleep(self.delay)
        self.records.extend(records)

    async def aclose(self) -> None:
        await anyio.lowlevel.checkpoint()
        self.closed = True


class FloodTool:
    """Emits ``count`` events through the session's hooks, timing each emit."""

    name = "flood"
    description = "emit many events"
    input_schema: dict[str, Any] = {"type": "object", "properties": {}}  # noqa: RUF012

    def __init__(self, hooks: Any, count: int) -> None:
        self.hooks = hooks
        self.count = count
        self.longest = 0.0
        self.total = 0.0

    async def execute(self, input: dict[str, Any]) -> ToolResult:
        start = anyio.current_time()
        for i in range(self.count):
            before = anyio.current_time()
            await self.hooks.emit("artifact:write", {"index": i})
            self.longest = max(self.longest, anyio.current_time() - before)
        self.total = anyio.current_time() - start
        return ToolResult(output=f"{self.count} events")


@pytest.fixture
def anyio_backend(virtual_backend: tuple[str, dict[str, object]]) -> tuple[str, dict[str, object]]:
    return virtual_backend


async def test_ten_thousand_events_on_a_slow_disk_never_block_a_turn_beyond_the_bound(
    anyio_backend: tuple[str, dict[str, object]],
) -> None:
    virtual = anyio_backend[0] == "trio"
    bound = 0.5
    sink = SlowSink(delay=1.0 if virtual else 0.0)
    log = EventLog(LoggingConfig(buffer_size=100, max_block=bound, flush_timeout=60), sink=sink)
    plan = flood_plan()
    async with AmplifierSession(plan) as session:
        await log.attach(session.coordinator)
        flood = FloodTool(session.coordinator.hooks, 10_000)
        await session.coordinator.mount("tools", flood)
        result = await session.run("flood")
        # The whole turn ran while the disk had not written a single line.
        assert not sink.records
        assert result.status == "success"
        sink.gate.set()
        stats = log.statistics()
        assert stats.dropped > 0
    if virtual:
        # Virtual time: each emit waited at most the bound, and the flood stalled once.
        assert flood.longest <= bound
        assert flood.total <= bound
    floods = [r for r in sink.records if r["event"] == "artifact:write"]
    drop_lines = [r for r in sink.records if r["event"] == "hooks-logging:dropped"]
    dropped_floods = sum(r["data"]["events"].get("artifact:write", 0) for r in drop_lines)
    assert len(floods) + dropped_floods == 10_000
    assert sum(r["data"]["count"] for r in drop_lines) == log.statistics().dropped
    indexes = [r["data"]["index"] for r in floods]
    assert indexes == sorted(indexes)  # what was kept is in emit order
    # The session's end, emitted after the disk came back, was not lost.
    kept = [r["event"] for r in sink.records if r["event"] != "hooks-logging:dropped"]
    assert kept[-1] == "session:end"
    assert sink.closed


@pytest.mark.parametrize("real_backend", ["asyncio", "trio"])
def test_the_real_file_sink_on_a_stalled_disk_never_blocks_the_turn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, real_backend: str
) -> None:
    """The shipped JSONL writer, its disk writes stalled (each batch waits on a gate the
    test opens only after the turn): the turn still ends, what was kept reaches the file in
    order once the disk is back, and the file ends with ``session:end``. Real clock and a
    real worker thread, so checked by order, never by duration."""
    gate = threading.Event()
    original = JsonlFileSink._write_batch

    def stalled(self: JsonlFileSink, records: list[dict[str, Any]]) -> None:
        if not gate.wait(timeout=120):  # a safety limit only: the test opens the gate
            raise TimeoutError("the test never opened the gate")
        original(self, records)

    monkeypatch.setattr(JsonlFileSink, "_write_batch", stalled)
    path = tmp_path / "events.jsonl"
    config = LoggingConfig(
        session_log_template=str(path), buffer_size=50, max_block=0.05, flush_timeout=60, fsync=True
    )

    async def main() -> tuple[str, int]:
        log = EventLog(config)
        async with AmplifierSession(flood_plan()) as session:
            await log.attach(session.coordinator)
            await session.coordinator.mount("tools", FloodTool(session.coordinator.hooks, 2_000))
            result = await session.run("flood")
            on_disk = path.read_text("utf-8") if path.exists() else ""
            assert "artifact:write" not in on_disk  # the whole turn ran with the disk stalled
            gate.set()
        return str(result.status), log.statistics().dropped

    status, dropped = anyio.run(main, backend=real_backend)

    assert status == "success"
    assert dropped > 0
    records = [json.loads(line) for line in path.read_text("utf-8").splitlines()]
    floods = [r for r in records if r["event"] == "artifact:write"]
    drop_lines = [r for r in records if r["event"] == "hooks-logging:dropped"]
    assert (
        len(floods) + sum(r["data"]["events"].get("artifact:write", 0) for r in drop_lines) == 2_000
    )
    indexes = [r["data"]["index"] for r in floods]
    assert indexes == sorted(indexes)
    kept = [r["event"] for r in records if r["event"] != "hooks-logging:dropped"]
    assert kept[-1] == "session:end"
