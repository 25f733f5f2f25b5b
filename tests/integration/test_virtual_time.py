"""A turn is deterministic under virtual time (DESIGN §3), with plain hooks on every event.

trio runs on a fresh ``MockClock(autojump_threshold=0)``: the clock jumps to the next
deadline whenever every task waits, so a thread hop (a plain hook sent to a worker thread,
as before) lets a ``turn_timeout`` expire at once. asyncio runs on the real clock. Every
orchestrator is covered, with its own offline plan.
"""

from __future__ import annotations

import copy
import logging
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest
import yaml
from trio.testing import MockClock

from amplifier_anyio import AmplifierSession, HookResult
from amplifier_anyio.errors import ConfigError
from amplifier_anyio.events import ALL_EVENTS, HOOK_SLOW, TOOL_POST, TOOL_PRE
from amplifier_anyio.kernel import HookRegistry

pytestmark = pytest.mark.anyio

DOCS = Path(__file__).resolve().parents[2] / "docs"
TOOL_DELAY = 0.05


@pytest.fixture(params=[pytest.param("asyncio", id="asyncio"), pytest.param("trio", id="trio")])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, object]]:
    """asyncio on the real clock; trio on a fresh autojump MockClock."""
    if request.param == "asyncio":
        return ("asyncio", {})
    return ("trio", {"clock": MockClock(autojump_threshold=0)})


def virtual(backend: tuple[str, dict[str, object]]) -> bool:
    return backend[0] == "trio"


def plan_for(orchestrator: str) -> dict[str, Any]:
    if orchestrator == "loop-lifecycle":
        plan: dict[str, Any] = yaml.safe_load((DOCS / "lifecycle-demo.yaml").read_text())
        plan["orchestrator"]["config"]["turn_timeout"] = 10
        plan["tools"] = [{"module": "tool-demo", "config": {"delay": TOOL_DELAY}}]
        return plan
    return {
        "session": {
            "orchestrator": {"module": orchestrator, "config": {"turn_timeout": 10}},
            "context": "context-simple",
        },
        "providers": [{"module": "provider-scripted", "config": {"demo": True}}],
        "tools": [{"module": "tool-demo", "config": {"delay": TOOL_DELAY}}],
    }


ORCHESTRATORS = ["loop-basic", "loop-streaming", "loop-events", "loop-lifecycle"]
WAVES = {"loop-basic": 1, "loop-streaming": 1, "loop-events": 2, "loop-lifecycle": 2}
"""How many rounds of tool sleeps each plan's turn takes (loop-events runs its demo's two
calls one after the other, loop-lifecycle runs two waves)."""


async def recorded_turn(orchestrator: str) -> tuple[str, float, list[tuple[Any, ...]]]:
    """One turn with a plain (synchronous) recorder on every canonical event."""
    seen: list[tuple[Any, ...]] = []
    ids: dict[str, int] = {}  # a call id by first appearance (loop-lifecycle's are random)

    def record(event: str, data: dict[str, Any]) -> None:
        call_id = data.get("tool_call_id")
        ordinal = None if call_id is None else ids.setdefault(call_id, len(ids))
        seen.append((event, ordinal, data.get("tool_name")))

    async with AmplifierSession(copy.deepcopy(plan_for(orchestrator))) as session:
        for event in ALL_EVENTS:
            session.coordinator.hooks.register(event, record, name="recorder")
        started = anyio.current_time()
        result = await session.run("count my words")
        elapsed = anyio.current_time() - started
    return result.status, elapsed, seen


@pytest.mark.parametrize("orchestrator", ORCHESTRATORS)
async def test_plain_recorders_on_every_event_leave_the_turn_on_time(
    orchestrator: str, anyio_backend: tuple[str, dict[str, object]]
) -> None:
    status, elapsed, seen = await recorded_turn(orchestrator)
    assert status == "success"
    assert any(event == TOOL_PRE for event, *_ in seen)
    if virtual(anyio_backend):
        # The virtual time is the tools' own sleeps, nothing else (before: 10.0, cancelled).
        assert elapsed == pytest.approx(WAVES[orchestrator] * TOOL_DELAY)


@pytest.mark.parametrize("orchestrator", ORCHESTRATORS)
async def test_the_same_inputs_give_the_same_events(
    orchestrator: str, anyio_backend: tuple[str, dict[str, object]]
) -> None:
    # trio shuffles the tasks it runs together; the events of a batch must not follow it.
    runs = [(await recorded_turn(orchestrator))[2] for _ in range(6)]
    assert all(run == runs[0] for run in runs[1:])
    pre = [call_id for event, call_id, _ in runs[0] if event == TOOL_PRE]
    post = [call_id for event, call_id, _ in runs[0] if event == TOOL_POST]
    assert sorted(pre) == sorted(post)


async def test_a_plain_handler_may_set_a_loop_event() -> None:
    hooks = HookRegistry()
    fired = anyio.Event()
    hooks.register("tool:post", lambda event, data: fired.set())
    woke: list[str] = []

    async def waiter() -> None:
        await fired.wait()
        woke.append("woke")

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(waiter)
            await anyio.lowlevel.checkpoint()
            await hooks.emit("tool:post", {})
    assert woke == ["woke"]


async def test_a_slow_plain_handler_is_reported_once_by_name(
    caplog: pytest.LogCaptureFixture,
) -> None:
    hooks = HookRegistry()
    hooks.slow_handler = 0.005
    reports: list[dict[str, Any]] = []

    async def on_slow(event: str, data: dict[str, Any]) -> None:
        reports.append(data)

    def sluggish(event: str, data: dict[str, Any]) -> None:
        threading.Event().wait(0.02)  # holds the loop: what the report is for

    hooks.register(HOOK_SLOW, on_slow)
    hooks.register("tool:post", sluggish, name="sluggish")
    with caplog.at_level(logging.WARNING, logger="amplifier_anyio.kernel._hooks"):
        for _ in range(3):
            await hooks.emit("tool:post", {})
    assert len(reports) == 1
    assert reports[0]["handler"] == "sluggish"
    assert reports[0]["event"] == "tool:post"
    assert reports[0]["seconds"] >= 0.02
    warnings = [r for r in caplog.records if "sluggish" in r.getMessage()]
    assert len(warnings) == 1


async def test_a_blocking_gate_past_its_timeout_denies(
    anyio_backend: tuple[str, dict[str, object]],
) -> None:
    hooks = HookRegistry()
    release = threading.Event()

    def stuck(event: str, data: dict[str, Any]) -> None:
        release.wait(30)

    hooks.register(TOOL_PRE, stuck, name="stuck-gate", blocking=True, timeout=0.05)
    try:
        with anyio.fail_after(10):
            result = await hooks.emit(TOOL_PRE, {"tool_name": "x"})
    finally:
        release.set()
    assert result.action == "deny"
    assert "stuck-gate" in (result.reason or "")
    assert "0.05" in (result.reason or "")


async def test_an_async_handler_past_its_timeout_denies_a_gate_and_is_skipped_elsewhere() -> None:
    hooks = HookRegistry()

    async def slow(event: str, data: dict[str, Any]) -> HookResult:
        await anyio.sleep(5)
        return HookResult(action="modify", data={**data, "late": True})

    hooks.register(TOOL_PRE, slow, name="slow-gate", timeout=0.01)
    hooks.register(TOOL_POST, slow, name="slow-observer", timeout=0.01)
    denied = await hooks.emit(TOOL_PRE, {})
    observed = await hooks.emit(TOOL_POST, {"a": 1})
    assert denied.action == "deny"
    assert "slow-gate" in (denied.reason or "")
    assert observed.action == "continue"
    assert observed.data is not None
    assert "late" not in observed.data


class _Hostile(dict[str, Any]):
    """An answer whose every lookup raises (a dict subclass, as a careless hook returns)."""

    def __getitem__(self, key: str) -> Any:
        raise KeyError(key)

    def __getattr__(self, name: str) -> Any:
        raise KeyError(name)

    def keys(self) -> Any:
        raise KeyError("keys")


@pytest.mark.parametrize("event", ["prompt:complete", TOOL_POST])
async def test_a_hook_whose_answer_cannot_be_read_does_not_break_the_turn(event: str) -> None:
    async with AmplifierSession(copy.deepcopy(plan_for("loop-basic"))) as session:
        session.coordinator.hooks.register(event, lambda e, d: _Hostile(action="modify"))
        ends: list[str] = []
        session.coordinator.hooks.register("execution:end", lambda e, d: ends.append(e))
        result = await session.run("count my words")
        messages = await session.coordinator.get("context").get_messages()
    assert result.status == "success"
    assert ends == ["execution:end"]
    tool_results = [m for m in messages if m.get("role") == "tool"]
    assert tool_results
    assert all("error" not in str(m.get("content")).lower() for m in tool_results)


async def test_a_gate_hook_whose_answer_cannot_be_read_denies_naming_it() -> None:
    hooks = HookRegistry()
    hooks.register(TOOL_PRE, lambda e, d: _Hostile(action="allow"), name="hostile")
    result = await hooks.emit(TOOL_PRE, {})
    assert result.action == "deny"
    assert "hostile" in (result.reason or "")


async def test_registration_options_are_checked() -> None:
    hooks = HookRegistry()
    with pytest.raises(ConfigError, match="timeout"):
        hooks.register("e", lambda e, d: None, timeout=1)  # a plain handler: not interruptible
    with pytest.raises(ConfigError, match="timeout"):
        hooks.register("e", lambda e, d: None, blocking=True, timeout=float("nan"))
    with pytest.raises(ConfigError, match="slow_handler"):
        hooks.slow_handler = -1
    with pytest.warns(DeprecationWarning, match="inline"):
        hooks.register("e", lambda e, d: None, inline=True)
    await anyio.lowlevel.checkpoint()


# -- a write given up on never holds the process ----------------------------------------------

APP = Path(__file__).with_name("_stuck_write_app.py")


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_program_that_gave_up_a_stuck_write_exits(backend: str, tmp_path: Path) -> None:
    """Before: on asyncio the fsync's worker thread was no daemon, so the program never
    exited; a thread finishing after its loop stopped blocked for ever signalling it."""
    # The timeout is a hang detector: the program itself takes a few seconds.
    done = subprocess.run(
        [sys.executable, str(APP), backend, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["error"]
    assert "gave up after 0.3 s" in done.stderr


@pytest.mark.parametrize("limit", [1, 2])
async def test_a_call_the_scheduler_answers_does_not_hold_the_calls_after_it(limit: int) -> None:
    """loop-events answers a call in its scheduler stage, before its tool:pre: with a
    seat limit, the next calls must still emit theirs (this hung before the fix)."""
    plan = plan_for("loop-events")
    config = plan["session"]["orchestrator"]["config"]
    config["parallel_tools"] = True  # loop-events runs calls one by one unless told
    config["max_parallel_tools"] = limit
    calls = [
        {"id": f"c{n}", "name": "word_count", "arguments": {"text": "a b c"}} for n in range(3)
    ]
    plan["providers"] = [
        {
            "module": "provider-scripted",
            "config": {
                "responses": [
                    {"content": [{"type": "text", "text": "counting"}], "tool_calls": calls},
                    {"content": [{"type": "text", "text": "done"}]},
                ]
            },
        }
    ]
    seen: list[str] = []

    async def deny_first(event: str, data: dict[str, Any]) -> HookResult | None:
        if data["index"] == 0:
            return HookResult(action="deny", reason="not this one")
        return None

    async with AmplifierSession(plan) as session:
        session.coordinator.hooks.register("tool:selecting", deny_first, name="scheduler")
        session.coordinator.hooks.register(TOOL_PRE, lambda e, d: seen.append(d["tool_name"]))
        with anyio.fail_after(30):  # a hang detector
            result = await session.run("count my words")
    assert result.status == "success"
    assert seen == ["word_count", "word_count"]  # the calls after the denied one ran
