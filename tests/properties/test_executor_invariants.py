"""The five invariants (DESIGN §6) with the tool calls on the ``thread`` and ``process``
executors (DESIGN §11): a sibling of ``test_loop_invariants.py``, smaller, since a call
here crosses into a worker thread or process.

Each example draws a script (1..2 tool rounds of 1..8 calls to ``tool-compute``: a probe
that answers after a drawn delay, one that raises on the worker, a ``hash_work`` with bad
input — an error result), a cancel kind (none, immediate, graceful, the host's own scope,
``turn_timeout``) and an instant, and runs the turn through ``AmplifierSession`` with the
drawn executor. The same script then runs twice uncancelled under two delay assignments.
All three runs share one event loop (so one pool of worker processes), on asyncio and on
trio, on the real clock: threads and processes do not follow a virtual clock, so no check
depends on a duration. Checked on every run:

1. one ``orchestrator:complete`` and one ``execution:end``, nothing after them;
2. every tool call is answered once, right after its assistant message, in call order;
3. each answer is the call's real result or the cancelled result; a call whose
   ``tool:post`` was emitted keeps its real result; without a cancel, all are real;
4. when ``run()`` is over, no worker thread or process still runs a call of the turn (the
   executor's limiter has no token borrowed) and the turn's token tracks no running tool;
5. the two uncancelled runs leave the same context.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import attrs
import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from amplifier_anyio import AmplifierSession
from amplifier_anyio.events import (
    CANCEL_REQUESTED,
    EXECUTION_END,
    ORCHESTRATOR_COMPLETE,
    SESSION_END,
    TOOL_POST,
)
from amplifier_anyio.runtime import CANCELLED_MESSAGE
from amplifier_anyio.testing import EventRecorder
from tiers import examples

UNIT = 0.002
"""Seconds per drawn delay unit (real clock)."""

MODES = ("ok", "ok", "ok", "raise", "error")
CANCELS = ("none", "immediate", "graceful", "host_scope", "turn_timeout")
EXAMPLES = {"thread": examples(5), "process": examples(2)}
"""Per backend and cancel kind; process start-up is slow, so fewer."""


@attrs.frozen
class Call:
    id: str
    mode: str
    delay: int
    other_delay: int

    def tool_call(self, delay: int) -> dict[str, Any]:
        if self.mode == "error":
            return {"id": self.id, "name": "hash_work", "arguments": {"rounds": -1}}
        arguments: dict[str, Any] = {"sleep": delay * UNIT, "value": self.id}
        if self.mode == "raise":
            arguments["fail"] = f"boom {self.id}"
        return {"id": self.id, "name": "probe", "arguments": arguments}

    def expected(self) -> str:
        if self.mode == "error":
            return "Error: 'rounds' must be an integer >= 0"
        if self.mode == "raise":
            return f"Error: boom {self.id}"
        return json.dumps({"value": self.id})


@attrs.frozen
class Scenario:
    executor: str
    rounds: tuple[tuple[Call, ...], ...]
    cancel: str
    cancel_at: int  # units after run() starts

    @property
    def calls(self) -> dict[str, Call]:
        return {c.id: c for batch in self.rounds for c in batch}


@st.composite
def scenarios(draw: st.DrawFn, executor: str, cancel: str) -> Scenario:
    n_rounds = draw(st.integers(1, 2))
    rounds = []
    for r in range(n_rounds):
        size = draw(st.integers(1, 8))
        rounds.append(
            tuple(
                Call(
                    id=f"call_{r}_{i}",
                    mode=draw(st.sampled_from(MODES)),
                    delay=draw(st.integers(0, 20)),
                    other_delay=draw(st.integers(0, 20)),
                )
                for i in range(size)
            )
        )
    return Scenario(
        executor=executor,
        rounds=tuple(rounds),
        cancel=cancel,
        cancel_at=draw(st.integers(0, 60)),
    )


def plan(scenario: Scenario, cancel: str, delays: dict[str, int]) -> dict[str, Any]:
    replies: list[dict[str, Any]] = [
        {"content": [], "tool_calls": [c.tool_call(delays[c.id]) for c in batch]}
        for batch in scenario.rounds
    ]
    replies.append({"content": [{"type": "text", "text": "done"}]})
    config: dict[str, Any] = {}
    if cancel == "turn_timeout":
        config["turn_timeout"] = max(scenario.cancel_at, 1) * UNIT
    return {
        "session": {
            "orchestrator": "loop-basic",
            "context": "context-simple",
            "executor": scenario.executor,
        },
        "orchestrator": {"config": config},
        "providers": [{"module": "provider-scripted", "config": {"responses": replies}}],
        "tools": [{"module": "tool-compute"}],
    }


@attrs.define
class Run:
    events: list[str]
    posted: set[str]
    messages: list[dict[str, Any]]
    status: str | None  # None: the host's cancellation propagated
    running_tools: set[str]
    borrowed: int


def limiter(executor: str) -> anyio.CapacityLimiter:
    if executor == "process":
        return anyio.to_process.current_default_process_limiter()
    return anyio.to_thread.current_default_thread_limiter()


async def run_once(scenario: Scenario, cancel: str, delays: dict[str, int]) -> Run:
    recorder = EventRecorder()
    status: str | None = None
    async with AmplifierSession(plan(scenario, cancel, delays)) as session:
        recorder.attach(session.coordinator.hooks)
        async with anyio.create_task_group() as tg:
            with anyio.CancelScope() as host:

                async def fire() -> None:
                    await anyio.sleep(scenario.cancel_at * UNIT)
                    if cancel == "immediate":
                        session.cancel(immediate=True)
                    elif cancel == "graceful":
                        session.cancel()
                    elif cancel == "host_scope":
                        host.cancel()

                if cancel in ("immediate", "graceful", "host_scope"):
                    tg.start_soon(fire)
                result = await session.run("go")
                status = str(result.status)
            tg.cancel_scope.cancel()
        borrowed = limiter(scenario.executor).borrowed_tokens
        running = set(session.coordinator.cancellation.running_tools)
        messages = await session.coordinator.get("context").get_messages()
    posted = {data["tool_call_id"] for _, data in recorder.get_events(TOOL_POST)}
    return Run(recorder.names(), posted, messages, status, running, borrowed)


def without_pids(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    cleaned = []
    for message in messages:
        content = message.get("content")
        if message["role"] == "tool" and isinstance(content, str) and '"pid"' in content:
            data = json.loads(content)
            data.pop("pid")
            cleaned.append({**message, "content": json.dumps(data)})
        else:
            cleaned.append(message)
    return cleaned


def without_delays(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    cleaned = []
    for message in without_pids(messages):
        calls = message.get("tool_calls")
        if calls:
            calls = [
                {**c, "arguments": {k: v for k, v in c["arguments"].items() if k != "sleep"}}
                for c in calls
            ]
            message = {**message, "tool_calls": calls}  # noqa: PLW2901 - a cleaned copy
        cleaned.append(message)
    return cleaned


def check(scenario: Scenario, run: Run, cancelled: bool) -> None:
    # 1. one orchestrator:complete and one execution:end, nothing after them.
    assert run.events.count(ORCHESTRATOR_COMPLETE) == 1, run.events
    assert run.events.count(EXECUTION_END) == 1, run.events
    after = run.events[run.events.index(EXECUTION_END) + 1 :]
    # A cancel() that came as the turn closed is recorded after it (not part of the turn).
    assert set(after) <= {SESSION_END, CANCEL_REQUESTED}, after
    # 2. every call answered once, right after its assistant message, in order.
    messages = without_pids(run.messages)
    for i, message in enumerate(messages):
        calls = message.get("tool_calls") or []
        if message["role"] != "assistant" or not calls:
            continue
        answers = messages[i + 1 : i + 1 + len(calls)]
        assert [a.get("tool_call_id") for a in answers] == [c["id"] for c in calls], answers
        assert all(a["role"] == "tool" for a in answers)
        # 3. the real result, or the cancelled one; a posted call keeps its real result.
        for answer in answers:
            call = scenario.calls[answer["tool_call_id"]]
            if answer["content"] == call.expected():
                continue
            assert cancelled, (answer, call)
            assert call.id not in run.posted, (answer, call)
            assert json.loads(answer["content"])["error"] == CANCELLED_MESSAGE, answer
    answered = [m["tool_call_id"] for m in messages if m["role"] == "tool"]
    assert len(answered) == len(set(answered))
    # 4. nothing of the turn still runs in a worker.
    assert run.borrowed == 0, run.borrowed
    assert run.running_tools == set(), run.running_tools


async def check_scenario(scenario: Scenario) -> None:
    delays = {c.id: c.delay for c in scenario.calls.values()}
    other = {c.id: c.other_delay for c in scenario.calls.values()}
    first = await run_once(scenario, "none", delays)
    check(scenario, first, cancelled=False)
    assert first.status == "success"
    if scenario.cancel != "none":
        run = await run_once(scenario, scenario.cancel, delays)
        check(scenario, run, cancelled=True)
    second = await run_once(scenario, "none", other)
    check(scenario, second, cancelled=False)
    # 5. the context does not depend on tool timing (the drawn delays aside: the probe
    # reads its delay from its arguments, so they differ between the two runs).
    assert without_delays(first.messages) == without_delays(second.messages)


PHASES = [Phase.explicit, Phase.reuse, Phase.generate]  # real time: report, never shrink


def run_example(executor: str, cancel: str, backend: str, data: st.DataObject) -> None:
    scenario = data.draw(scenarios(executor, cancel), label="scenario")
    anyio.run(check_scenario, scenario, backend=backend)


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@pytest.mark.parametrize("cancel", CANCELS)
@settings(max_examples=EXAMPLES["thread"], deadline=None, phases=PHASES)
@given(data=st.data())
def test_five_invariants_on_the_thread_executor(
    cancel: str, backend: str, data: st.DataObject
) -> None:
    run_example("thread", cancel, backend, data)


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@pytest.mark.parametrize("cancel", CANCELS)
@settings(max_examples=EXAMPLES["process"], deadline=None, phases=PHASES)
@given(data=st.data())
def test_five_invariants_on_the_process_executor(
    cancel: str, backend: str, data: st.DataObject
) -> None:
    run_example("process", cancel, backend, data)
