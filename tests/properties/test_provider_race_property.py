"""Hedged requests against two real servers on 127.0.0.1 with random latencies and failures.

Each example starts two Chat Completions servers (``tests/_loopback.py``), draws for each
how long it waits before answering, whether it answers, fails (500, 429), or cuts its
stream after the first token, and runs one turn with ``fallback`` and ``hedge_after``.
Whatever the draw, on asyncio and trio:

- the turn succeeds iff one server answers, and then exactly one assistant message — the
  answer of one server — is in the context; otherwise there is none;
- every request a server did not finish was closed by the client (the loser's
  connection), and no task of the turn is left once the session is closed;
- usage is counted once per request whose answer arrived: server A's answer counts 1
  input token, B's 10, so the sum says which were counted — never one twice, always the
  winner's, and only requests the server finished.
"""

from __future__ import annotations

import asyncio
from typing import Any

import anyio
import pytest
import sniffio
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from _loopback import Reply, Request, open_loopback, sse_event
from amplifier_anyio import AmplifierSession, TurnStatus
from amplifier_anyio.events import PROVIDER_HEDGE_SETTLED
from amplifier_anyio.providers.openai import OpenAIChatProvider
from amplifier_anyio.testing import EventRecorder
from tiers import examples

pytestmark = pytest.mark.anyio

TOKENS = {"a": 1, "b": 10}
OUTCOMES = ("ok", "500", "429", "cut")


def completion(name: str) -> dict[str, Any]:
    usage = {
        "prompt_tokens": TOKENS[name],
        "completion_tokens": 1,
        "total_tokens": TOKENS[name] + 1,
    }
    message = {"role": "assistant", "content": f"answer from {name}"}
    return {
        "id": f"c-{name}",
        "model": "m",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": usage,
    }


def chunks(name: str) -> list[bytes]:
    def chunk(delta: dict[str, Any] | None, **extra: Any) -> bytes:
        choices = (
            []
            if delta is None
            else [{"index": 0, "delta": delta, "finish_reason": extra.pop("finish", None)}]
        )
        return sse_event({"id": f"c-{name}", "model": "m", "choices": choices, **extra})

    usage = {
        "prompt_tokens": TOKENS[name],
        "completion_tokens": 1,
        "total_tokens": TOKENS[name] + 1,
    }
    return [
        chunk({"role": "assistant", "content": "answer "}),
        chunk({"content": f"from {name}"}),
        chunk({}, finish="stop"),
        chunk(None, usage=usage),
        sse_event("[DONE]"),
    ]


def reply(name: str, outcome: str, delay: float, gap: float, stream: bool) -> Reply:
    if outcome in ("500", "429"):
        body = {"error": {"message": f"{name} says {outcome}", "type": "server_error"}}
        return Reply(status=int(outcome), json=body, delay=delay)
    if not stream:  # a cut answer: the connection closes with nothing sent
        return Reply(json=completion(name), delay=delay, drop=outcome == "cut")
    events = chunks(name)
    if outcome == "cut":
        events = events[:2]  # the first token, then the connection goes
    return Reply(events=events, delay=delay, gap=gap, cut=outcome == "cut")


def task_count() -> int:
    """Tasks alive in this event loop (asyncio) or under the root task (trio)."""
    if sniffio.current_async_library() == "trio":

        def count(task: Any) -> int:
            children = (child for nursery in task.child_nurseries for child in nursery.child_tasks)
            return 1 + sum(count(child) for child in children)

        return count(trio.lowlevel.current_root_task())
    return len(asyncio.all_tasks())


scenario = st.fixed_dictionaries(
    {
        "a": st.sampled_from(OUTCOMES),
        "b": st.sampled_from(OUTCOMES),
        "delay_a": st.floats(0, 0.15),
        "delay_b": st.floats(0, 0.15),
        "gap": st.floats(0, 0.03),
        "hedge_after": st.floats(0.005, 0.1),
        "stream": st.booleans(),
    }
)


@settings(max_examples=examples(25), deadline=None)
@given(draw=scenario)
async def test_hedged_requests_end_with_one_answer_and_nothing_left(draw: dict[str, Any]) -> None:
    stream = draw["stream"]

    def handler_for(name: str) -> Any:
        async def handler(request: Request) -> Reply:
            return reply(name, draw[name], draw[f"delay_{name}"], draw["gap"], stream)

        return handler

    before = task_count()
    async with (
        open_loopback(handler_for("a")) as server_a,
        open_loopback(handler_for("b")) as server_b,
    ):
        plan = {
            "session": {
                "orchestrator": "loop-streaming" if stream else "loop-basic",
                "context": "context-simple",
                "providers_policy": {"fallback": ["b"], "hedge_after": draw["hedge_after"]},
            }
        }
        async with AmplifierSession(plan) as session:
            coordinator = session.coordinator
            recorder = EventRecorder()
            recorder.attach(coordinator.hooks)
            for priority, (name, server) in enumerate((("a", server_a), ("b", server_b))):
                config = {
                    "name": name,
                    "base_url": f"{server.url}/v1",
                    "api_key": "sk-loopback",
                    "model": "m",
                    "max_retries": 0,
                    "priority": priority,
                    "timeout": 20,
                }
                provider = OpenAIChatProvider(config, hooks=coordinator.hooks)
                await coordinator.mount("providers", provider, name=name)
                coordinator.register_cleanup(provider.http.aclose)
            result = await session.run("race")
            messages = await coordinator.get("context").get_messages()
        answers = [m for m in messages if m["role"] == "assistant"]
        requests = {"a": server_a.requests, "b": server_b.requests}
        # a request cancelled by a winner is made again if the winner's stream breaks
        assert all(len(r) <= 2 for r in requests.values())
        if "ok" in (draw["a"], draw["b"]):
            assert result.status is TurnStatus.SUCCESS, result.error
            (answer,) = answers
            text = answer["content"][0]["text"]
            assert text in ("answer from a", "answer from b")
            winner = text.rsplit(" ", 1)[1]
            assert draw[winner] == "ok"
            # usage: the winner's once, a loser's at most once and only if its server finished
            counted = {n for n in TOKENS if result.usage.input_tokens // TOKENS[n] % 10 == 1}
            assert result.usage.input_tokens == sum(TOKENS[n] for n in counted)
            assert winner in counted
            for name in counted - {winner}:
                assert requests[name]
                assert requests[name][0].answered
            settled = [data for _, data in recorder.get_events(PROVIDER_HEDGE_SETTLED)]
            if settled:
                assert sorted(settled[0]["counted"]) == sorted(counted)
        else:
            assert result.status is TurnStatus.ERROR
            assert answers == []
        # a request the server did not finish was closed by the client (a cancelled loser)
        with anyio.fail_after(5):
            for name, made in requests.items():
                for request in made:
                    if not request.answered and draw[name] != "cut":
                        await request.disconnected.wait()
            await server_a.wait_idle()
            await server_b.wait_idle()
    assert task_count() == before
