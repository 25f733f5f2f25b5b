"""hooks-logging under back-pressure: a slow disk never holds a turn beyond the bound.

trio runs on a fresh autojump MockClock (virtual time: the bound is checked exactly);
asyncio on the real clock, where the test checks order only — the whole turn ends before
the disk has written one line.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import anyio
import pytest

from amplifier_anyio import AmplifierSession
from amplifier_anyio.hooks.logging import EventLog, LoggingConfig
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
