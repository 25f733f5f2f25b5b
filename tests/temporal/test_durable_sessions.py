"""Durable sessions on a real Temporal dev server: the same answers as in-process,
cancels, configuration and connection errors (DESIGN §17, docs/durable-sessions.md).

Workers run in this process (``SessionWorker``, on its own asyncio thread); clients run on
the test's backend: asyncio directly, trio through the asyncio portal.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import anyio
import pytest
from _temporal_kit import FAST, MODULES, demo_plan, marker_plan, queue, reply, served

from _servers import free_port
from amplifier_anyio import AmplifierSession, TurnStatus
from amplifier_anyio.errors import ConfigError, DurableSessionError
from amplifier_anyio.temporal import SessionWorker, TemporalSessions

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

SCRIPT = [
    reply(
        calls=[("c1", "word_count", {"text": "a b c"}), ("c2", "reverse_words", {"text": "x y"})]
    ),
    reply(calls=[("c3", "word_count", {"text": "one"})]),
    reply("three words, reversed"),
]


async def in_process(plan: dict[str, Any], prompts: list[str]) -> tuple[list[Any], list[Any]]:
    results = []
    async with AmplifierSession(plan) as session:
        for prompt in prompts:
            results.append(await session.run(prompt))  # noqa: PERF401 - one turn after another
        messages = await session.coordinator.get("context").get_messages()
    return results, messages


async def test_same_answer_and_transcript_as_in_process(temporal_server: str) -> None:
    plan = demo_plan([*SCRIPT, reply("and again")])
    expected, transcript = await in_process(plan, ["count them", "more"])
    async with served(plan, temporal_server) as sessions:
        session = await sessions.open(plan)
        first = await session.run("count them")
        second = await session.run("more")
        messages = await session.messages()
    for got, want in zip((first, second), expected, strict=True):
        assert (got.text, got.status, got.turn_count) == (want.text, want.status, want.turn_count)
        assert got.usage == want.usage
        assert got.finish_reason == want.finish_reason
    assert messages == transcript


async def test_iteration_limit_wraps_up_as_in_process(temporal_server: str) -> None:
    plan = demo_plan([*SCRIPT, reply("wrapped up")])
    plan["orchestrator"] = {"config": {"max_iterations": 1}}
    expected, transcript = await in_process(plan, ["count them"])
    async with served(plan, temporal_server) as sessions:
        session = await sessions.open(plan)
        result = await session.run("count them")
        messages = await session.messages()
    assert expected[0].status is TurnStatus.INCOMPLETE
    assert (result.text, result.status, result.turn_count) == (
        expected[0].text,
        expected[0].status,
        expected[0].turn_count,
    )
    assert messages == transcript


def calls_answered_in_order(messages: list[dict[str, Any]]) -> None:
    """Invariant 2 of §6: each assistant call answered once, right after it, in call order."""
    for index, message in enumerate(messages):
        calls = message.get("tool_calls") or []
        if message.get("role") != "assistant" or not calls:
            continue
        answers = messages[index + 1 : index + 1 + len(calls)]
        assert [a.get("role") for a in answers] == ["tool"] * len(calls)
        assert [a["tool_call_id"] for a in answers] == [c["id"] for c in calls]
    ids = [m["tool_call_id"] for m in messages if m.get("role") == "tool"]
    assert len(ids) == len(set(ids))


async def marks_of(marks: Path, *call_ids: str, within: float = 30.0) -> None:
    """Wait until each call has left its mark."""
    with anyio.fail_after(within):
        while not all((marks / c).exists() for c in call_ids):  # noqa: ASYNC110 - marks come from the worker
            await anyio.sleep(0.05)


def two_calls(slow: float) -> list[dict[str, Any]]:
    return [
        reply(calls=[("c1", "marker", {"delay": 0}), ("c2", "marker", {"delay": slow})]),
        reply("done"),
    ]


def content(message: dict[str, Any]) -> dict[str, Any]:
    decoded: dict[str, Any] = json.loads(message["content"])
    return decoded


@pytest.mark.parametrize("how", ["graceful", "immediate", "scope"])
async def test_cancel_answers_every_call_and_ends_cancelled_once(
    temporal_server: str, tmp_path: Path, how: str
) -> None:
    marks = tmp_path / "marks"
    plan = marker_plan(two_calls(slow=1.0 if how == "graceful" else 60.0), marks, FAST)
    async with served(plan, temporal_server) as sessions:
        session = await sessions.open(plan)
        outcome: list[Any] = []
        async with anyio.create_task_group() as group:
            scope = anyio.CancelScope()

            async def turn() -> None:
                with scope:
                    outcome.append(await session.run("go"))

            group.start_soon(turn)
            await marks_of(marks, "c1", "c2")
            if how == "scope":
                scope.cancel()  # the host's own cancel: run() cancels the turn there
            else:
                await session.cancel(immediate=how == "immediate")
        result = outcome[0] if outcome else await session.last_result()
        messages = await session.messages()
    assert result is not None
    assert result.status is TurnStatus.CANCELLED
    assert result.turn_count == 1  # no provider call after the cancel
    calls_answered_in_order(messages)
    tools = [m for m in messages if m.get("role") == "tool"]
    assert content(tools[0]) == {"done": "c1"}  # finished before the cancel: kept
    if how == "graceful":
        assert content(tools[1]) == {"done": "c2"}  # the running batch finishes
    else:
        assert content(tools[1])["cancelled"] is True
    assert [m["role"] for m in messages].count("assistant") == 1
    assert (marks / "c2").read_text().count("\n") == 1  # ran once


async def test_a_deadline_around_run_is_caught_by_its_own_scope(
    temporal_server: str, tmp_path: Path
) -> None:
    """``move_on_after`` around ``run()`` ends the turn and is caught where it was set: the
    caller goes on. (Before, on asyncio the cancel came back out of ``run()`` as a bare
    ``CancelledError`` that anyio's scope did not recognise as its own, so it cancelled the
    caller too.)"""
    marks = tmp_path / "marks"
    plan = marker_plan([reply(calls=[("s1", "marker", {"delay": 60})])], marks, FAST)
    async with served(plan, temporal_server) as sessions:
        session = await sessions.open(plan)
        with anyio.move_on_after(30) as outer:  # a hang detector, not the deadline tested
            with anyio.move_on_after(0.5) as cut:
                await session.run("go")
            went_on = True
        result = await session.last_result()
    assert cut.cancelled_caught
    assert not outer.cancel_called
    assert went_on
    assert result is not None
    assert result.status is TurnStatus.CANCELLED


def queued_turns() -> list[dict[str, Any]]:
    """A first turn whose one call takes 2 s, then the answers of two more turns."""
    return [
        reply(calls=[("s1", "marker", {"delay": 2})]),
        reply("first done"),
        reply("second done"),
    ]


async def test_two_callers_at_once_run_one_turn_after_the_other(
    temporal_server: str, tmp_path: Path
) -> None:
    marks = tmp_path / "marks"
    plan = marker_plan(queued_turns(), marks, FAST)
    results: dict[str, Any] = {}
    async with served(plan, temporal_server) as sessions:
        session = await sessions.open(plan)
        other = await sessions.attach(session.id)  # a second caller, as another process has

        async def turn(caller: Any, prompt: str) -> None:
            results[prompt] = await caller.run(prompt)

        async with anyio.create_task_group() as group:
            group.start_soon(turn, session, "one")
            await marks_of(marks, "s1")  # the first turn runs
            group.start_soon(turn, other, "two")
        messages = await session.messages()
    assert (results["one"].status, results["one"].text) == (TurnStatus.SUCCESS, "first done")
    assert (results["two"].status, results["two"].text) == (TurnStatus.SUCCESS, "second done")
    users = [m["content"] for m in messages if m["role"] == "user"]
    assert users == ["one", "two"]
    calls_answered_in_order(messages)


async def test_a_callers_cancel_never_cancels_another_callers_turn(
    temporal_server: str, tmp_path: Path
) -> None:
    """A caller whose turn waits behind another's gives up (a deadline around its
    ``run()``): its turn never runs, and the running turn, someone else's, goes on. (Before,
    its cancel cancelled the running turn, and its own turn ran after it.)"""
    marks = tmp_path / "marks"
    plan = marker_plan(queued_turns(), marks, FAST)
    results: dict[str, Any] = {}
    async with served(plan, temporal_server) as sessions:
        session = await sessions.open(plan)
        other = await sessions.attach(session.id)

        async def first() -> None:
            results["one"] = await session.run("one")

        async with anyio.create_task_group() as group:
            group.start_soon(first)
            await marks_of(marks, "s1")
            with anyio.move_on_after(0.5) as cut:
                await other.run("two")  # queued behind "one"
        assert cut.cancelled_caught
        after = await session.run("three")  # the session goes on; "two" never ran
        messages = await session.messages()
    assert (results["one"].status, results["one"].text) == (TurnStatus.SUCCESS, "first done")
    assert (marks / "s1").read_text().count("\n") == 1
    assert (after.status, after.text) == (TurnStatus.SUCCESS, "second done")
    assert [m["content"] for m in messages if m["role"] == "user"] == ["one", "three"]
    calls_answered_in_order(messages)


async def test_unreachable_server_is_a_clear_error_within_a_bound() -> None:
    address = f"127.0.0.1:{free_port()}"
    with anyio.fail_after(20):
        with pytest.raises(DurableSessionError, match="cannot reach the Temporal server") as info:
            async with TemporalSessions(address=address, connect_timeout=3):
                pass
    assert address in str(info.value)
    assert "\n" not in str(info.value)


async def test_a_worker_cancelled_while_it_connects_stops_at_once() -> None:
    """A cancel that lands while the worker still connects (its loop has not made its
    stop event yet) ends ``async with SessionWorker`` promptly, and a second worker of the
    same plan starts and stops cleanly after it."""
    plan = demo_plan([reply("x")])
    with socket.create_server(("127.0.0.1", 0)) as silent:  # accepts, never answers
        address = f"127.0.0.1:{silent.getsockname()[1]}"
        with anyio.fail_after(10):  # a hang detector: the connect alone may take 30 s
            with anyio.move_on_after(0.5) as cut:
                async with SessionWorker(plan, address=address, connect_timeout=30):
                    pytest.fail("a silent server: the worker cannot be ready")
        assert cut.cancelled_caught
        with anyio.fail_after(20), pytest.raises(DurableSessionError, match="cannot reach"):
            async with SessionWorker(plan, address=address, connect_timeout=1):
                pass


async def test_bad_durable_value_names_the_key(tmp_path: Path) -> None:
    plan = demo_plan([reply("x")], {"tools": {"maximum_attempts": 0}})
    with pytest.raises(ConfigError, match=r"^session\.durable\.tools\.maximum_attempts: ") as info:
        SessionWorker(plan)
    assert "\n" not in str(info.value)


async def test_continue_as_new_keeps_the_messages(temporal_server: str) -> None:
    plan = demo_plan([reply("one"), reply("two"), reply("three")])
    plan["session"]["durable"] = {"continue_as_new_after_turns": 1}
    async with served(plan, temporal_server) as sessions:
        session = await sessions.open(plan)
        texts = [(await session.run(p)).text for p in ("a", "b", "c")]
        messages = await session.messages()
    assert texts == ["one", "two", "three"]
    assert [m["role"] for m in messages] == ["user", "assistant"] * 3


async def test_a_looping_model_ends_no_progress_as_in_process(
    temporal_server: str, tmp_path: Path
) -> None:
    """The same failing call over and over: reminded at 3 (the reminder reaches the next
    request), stopped at 6, ``incomplete`` / ``no_progress``, on both drivers alike."""
    loop = [reply(calls=[(f"c{i}", "nope", {"x": 1})]) for i in range(10)]
    sent = {"in-process": tmp_path / "in.jsonl", "durable": tmp_path / "durable.jsonl"}

    def plan(record: Path) -> dict[str, Any]:
        found = demo_plan([])
        found["providers"] = [
            {
                "module": "provider-positional",
                "source": str(MODULES),
                "config": {"replies": [*loop, reply("never")], "record": str(record)},
            }
        ]
        return found

    expected, transcript = await in_process(plan(sent["in-process"]), ["go"])
    durable_plan = plan(sent["durable"])
    async with served(durable_plan, temporal_server) as sessions:
        session = await sessions.open(durable_plan)
        result = await session.run("go")
        messages = await session.messages()
    want = expected[0]
    assert (want.status, want.finish_reason, want.turn_count) == (
        TurnStatus.INCOMPLETE,
        "no_progress",
        6,
    )
    assert (result.status, result.finish_reason, result.turn_count, result.text) == (
        want.status,
        want.finish_reason,
        want.turn_count,
        want.text,
    )
    assert result.problems == want.problems
    assert messages == transcript
    requests = [sent[k].read_text().splitlines() for k in ("in-process", "durable")]
    assert requests[0] == requests[1]
    assert "has failed 3 times in a row" in json.loads(requests[1][3])


async def test_session_events_fire_once_and_injections_reach_the_next_call(
    temporal_server: str, tmp_path: Path
) -> None:
    """The workflow's session-level events fire once per turn, also when a second worker
    replays the first turn's history; ``prompt:submit`` and ``tool:post`` injections reach
    the next provider call; ``tool:pre``'s ``index`` is the call's index in its reply."""
    events = ["execution:start", "prompt:submit", "tool:pre", "prompt:complete", "execution:end"]
    replies = [*SCRIPT[:1], reply("counted"), reply("again")]

    def plan(tag: str) -> dict[str, Any]:
        found = demo_plan([])
        found["providers"] = [
            {
                "module": "provider-positional",
                "source": str(MODULES),
                "config": {"replies": replies, "record": str(tmp_path / f"{tag}.sent")},
            }
        ]
        inject = {"prompt:submit": "note: submitted", "tool:post": "note: posted"}
        config = {"path": str(tmp_path / f"{tag}.events"), "events": events, "inject": inject}
        config["events"] = [*events, "tool:post"]
        found["hooks"] = [{"module": "hooks-record", "source": str(MODULES), "config": config}]
        return found

    expected, transcript = await in_process(plan("in"), ["count them", "more"])
    durable_plan = plan("durable")
    task_queue = queue()
    async with TemporalSessions(address=temporal_server, task_queue=task_queue) as sessions:
        async with SessionWorker(durable_plan, address=temporal_server, task_queue=task_queue):
            session = await sessions.open(durable_plan)
            first = await session.run("count them")
        # a second worker: it replays the first turn's history before the second turn
        async with SessionWorker(durable_plan, address=temporal_server, task_queue=task_queue):
            second = await session.run("more")
            messages = await session.messages()
    assert [(r.text, r.status) for r in (first, second)] == [(r.text, r.status) for r in expected]
    assert messages == transcript

    def records(tag: str) -> list[dict[str, Any]]:
        lines = (tmp_path / f"{tag}.events").read_text().splitlines()
        return [json.loads(line) for line in lines]

    def key(record: dict[str, Any]) -> str:
        return json.dumps(record, sort_keys=True)

    want, got = records("in"), records("durable")
    assert sorted(map(key, got)) == sorted(map(key, want))  # nothing twice, nothing missing
    assert [r["event"] for r in got].count("execution:start") == 2
    assert {r["index"] for r in got if r["event"] == "tool:pre"} == {0, 1}
    sent = [(tmp_path / f"{t}.sent").read_text().splitlines() for t in ("in", "durable")]
    assert sent[0] == sent[1]
    assert [json.loads(line) for line in sent[1]][:2] == ["note: submitted", "note: posted"]
