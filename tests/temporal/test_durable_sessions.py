"""Durable sessions on a real Temporal dev server: the same answers as in-process,
cancels, configuration and connection errors (DESIGN §17, docs/durable-sessions.md).

Workers run in this process (``SessionWorker``, on its own asyncio thread); clients run on
the test's backend: asyncio directly, trio through the asyncio portal.
"""

from __future__ import annotations

from typing import Any

import pytest
from _temporal_kit import demo_plan, queue, reply

from amplifier_anyio import AmplifierSession, TurnStatus
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
    task_queue = queue()
    async with (
        SessionWorker(plan, address=temporal_server, task_queue=task_queue),
        TemporalSessions(address=temporal_server, task_queue=task_queue) as sessions,
    ):
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
    task_queue = queue()
    async with (
        SessionWorker(plan, address=temporal_server, task_queue=task_queue),
        TemporalSessions(address=temporal_server, task_queue=task_queue) as sessions,
    ):
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
