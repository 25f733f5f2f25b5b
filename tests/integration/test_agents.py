"""Sub-agents (issue 29, DESIGN §14): tool-task runs each child as a nested scope of the
tool call that spawned it.

Children get their provider and tools through ``session.child_setup`` (a host's hook,
called with each child once it is opened). Concurrency is shown by events (each child
waits, inside its tool, for the other to be there), never by durations; a wait that
would hang if the code were wrong is bounded generously.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from _agents_kit import (
    HANG_GUARD,
    Children,
    answer,
    calls,
    child_messages,
    of,
    paired,
    parent_reply,
    plan,
    task,
    tool_results,
)
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from amplifier_anyio import (
    AmplifierSession,
    ChatRequest,
    ChatResponse,
    DelegationError,
    TurnStatus,
)
from amplifier_anyio.events import (
    EXECUTION_END,
    SESSION_FORK,
    TASK_AGENT_COMPLETED,
    TASK_AGENT_SPAWNED,
)
from amplifier_anyio.providers.scripted import ScriptedProvider
from amplifier_anyio.testing import EventRecorder

pytestmark = pytest.mark.anyio

# -- concurrency, answers -----------------------------------------------------------------


async def test_two_task_calls_run_children_concurrently_and_the_parent_answers_from_both() -> None:
    arrived = {"researcher": anyio.Event(), "writer": anyio.Event()}

    def probe(child: AmplifierSession) -> Any:
        mine = child.agent_name or ""
        other = "writer" if mine == "researcher" else "researcher"

        async def body() -> str:
            arrived[mine].set()
            with anyio.fail_after(HANG_GUARD):  # sequential children would wait here for good
                await arrived[other].wait()
            return f"{mine} saw {other}"

        return body

    children = Children(
        {
            "researcher": [calls(("probe", {})), answer("facts found")],
            "writer": [calls(("probe", {})), answer("prose written")],
        },
        probe,
    )
    parent = ScriptedProvider(parent_reply(calls(task("researcher"), task("writer"))))
    async with AmplifierSession(plan()) as session:
        session.child_setup.append(children)
        await session.coordinator.mount("providers", parent, name="scripted")
        result = await session.run("research, then write")
        context: Any = session.coordinator.get("context")
        messages = await context.get_messages()

    assert result.status is TurnStatus.SUCCESS
    by_call = {m["tool_call_id"]: json.loads(m["content"]) for m in messages if m["role"] == "tool"}
    assert by_call["c0"]["response"] == "facts found"
    assert by_call["c1"]["response"] == "prose written"
    assert "facts found" in result.text
    assert "prose written" in result.text
    for child in children.sessions:
        assert child.parent_id == session.session_id
        assert re.fullmatch(
            rf"{session.session_id}-[0-9a-f]{{16}}_{child.agent_name}", child.session_id
        )
        call = "c0" if child.agent_name == "researcher" else "c1"
        assert child.lane == f"root/{child.agent_name}@{call}"  # a lane per spawn
        assert child.depth == 1
    assert {by_call["c0"]["session_id"], by_call["c1"]["session_id"]} == {
        c.session_id for c in children.sessions
    }


async def test_the_events_fire_once_per_child_with_usage() -> None:
    recorder = EventRecorder()
    children = Children({"researcher": [answer("ok", tokens=7)]})
    parent = ScriptedProvider(parent_reply(calls(task("researcher"))))
    async with AmplifierSession(plan()) as session:
        recorder.attach(session.coordinator.hooks)
        session.child_setup.append(children)
        await session.coordinator.mount("providers", parent, name="scripted")
        result = await session.run("ask")
    (child,) = children.sessions
    (spawned,) = of(recorder, TASK_AGENT_SPAWNED)
    (completed,) = of(recorder, TASK_AGENT_COMPLETED)
    (fork,) = of(recorder, SESSION_FORK)
    assert spawned["sub_session_id"] == completed["sub_session_id"] == child.session_id
    assert spawned["tool_call_id"] == "c0"
    assert completed["success"] is True
    assert completed["status"] == "success"
    assert completed["usage"]["total_tokens"] == 7
    assert fork["child_session_id"] == child.session_id
    assert fork["lane"] == "root/researcher@c0"
    assert result.usage.total_tokens == 7  # the child's usage flows up
    assert [e["status"] for e in of(children.recorders[child.session_id], EXECUTION_END)] == [
        "completed"
    ]


async def test_an_unknown_agent_is_the_calls_error_result() -> None:
    parent = ScriptedProvider(parent_reply(calls(task("nobody"))))
    async with AmplifierSession(plan()) as session:
        await session.coordinator.mount("providers", parent, name="scripted")
        result = await session.run("ask")
    assert "Agent 'nobody' not found" in result.text


# -- cancellation ---------------------------------------------------------------------------


def blocking_children(
    entered: list[str], exited: list[str], release: anyio.Event | None
) -> Children:
    both = anyio.Event()

    def probe(child: AmplifierSession) -> Any:
        async def body() -> str:
            entered.append(child.session_id)
            if len(entered) == 2:
                both.set()
            try:
                if release is None:
                    await anyio.sleep_forever()
                await release.wait()
                return "finished"
            finally:
                exited.append(child.session_id)

        return body

    children = Children(
        {
            "researcher": [calls(("probe", {})), answer("r done")],
            "writer": [calls(("probe", {})), answer("w done")],
        },
        probe,
    )
    children.both = both  # type: ignore[attr-defined]
    return children


async def test_an_immediate_cancel_reaches_both_children_mid_tool() -> None:
    entered: list[str] = []
    exited: list[str] = []
    children = blocking_children(entered, exited, release=None)
    parent = ScriptedProvider(parent_reply(calls(task("researcher"), task("writer"))))
    async with AmplifierSession(plan()) as session:
        session.child_setup.append(children)
        await session.coordinator.mount("providers", parent, name="scripted")
        with anyio.fail_after(HANG_GUARD):
            async with anyio.create_task_group() as tg:
                outcome: list[Any] = []

                async def run() -> None:
                    outcome.append(await session.run("both"))

                tg.start_soon(run)
                await children.both.wait()  # type: ignore[attr-defined]
                assert session.cancel(immediate=True)
        messages: Any = await session.coordinator.get("context").get_messages()

    (result,) = outcome
    assert result.status is TurnStatus.CANCELLED
    assert sorted(exited) == sorted(entered)
    assert len(exited) == 2
    for child in children.sessions:
        assert child.state.value == "closed"
        child_history = await child_messages(child)
        assert paired(child_history)
        assert "Tool execution was cancelled" in child_history[-1]["content"]
        ends = of(children.recorders[child.session_id], EXECUTION_END)
        assert [e["status"] for e in ends] == ["cancelled"]  # the child's terminal events, once
    assert paired(messages)


async def test_a_graceful_cancel_lets_the_childrens_current_batches_finish() -> None:
    entered: list[str] = []
    exited: list[str] = []
    release = anyio.Event()
    children = blocking_children(entered, exited, release=release)
    parent = ScriptedProvider(parent_reply(calls(task("researcher"), task("writer"))))
    async with AmplifierSession(plan()) as session:
        session.child_setup.append(children)
        await session.coordinator.mount("providers", parent, name="scripted")
        with anyio.fail_after(HANG_GUARD):
            async with anyio.create_task_group() as tg:
                outcome: list[Any] = []

                async def run() -> None:
                    outcome.append(await session.run("both"))

                tg.start_soon(run)
                await children.both.wait()  # type: ignore[attr-defined]
                assert session.cancel(immediate=False)
                await anyio.lowlevel.checkpoint()
                release.set()

    (result,) = outcome
    assert result.status is TurnStatus.CANCELLED
    assert len(parent.requests) == 1  # the parent stopped before its next provider call
    for child in children.sessions:
        history = await child_messages(child)
        assert paired(history)
        assert history[-1]["content"] == '"finished"' or "finished" in history[-1]["content"]
        ends = of(children.recorders[child.session_id], EXECUTION_END)
        assert [e["status"] for e in ends] == ["cancelled"]


async def test_the_hosts_cancel_scope_reaches_the_children() -> None:
    entered: list[str] = []
    exited: list[str] = []
    children = blocking_children(entered, exited, release=None)
    parent = ScriptedProvider(parent_reply(calls(task("researcher"), task("writer"))))
    async with AmplifierSession(plan()) as session:
        session.child_setup.append(children)
        await session.coordinator.mount("providers", parent, name="scripted")
        with anyio.fail_after(HANG_GUARD):
            async with anyio.create_task_group() as tg:
                with anyio.CancelScope() as host:

                    async def cancel_when_both_in() -> None:
                        await children.both.wait()  # type: ignore[attr-defined]
                        host.cancel()

                    tg.start_soon(cancel_when_both_in)
                    await session.run("both")
                    pytest.fail("the host's cancel must propagate")  # pragma: no cover
    assert host.cancelled_caught
    assert len(exited) == 2
    for child in children.sessions:
        assert child.state.value == "closed"
        assert paired(await child_messages(child))


# -- depth ----------------------------------------------------------------------------------


async def test_self_delegation_stops_at_the_depth_limit_with_an_error_result() -> None:
    seen: list[tuple[int, list[str]]] = []

    def recursive(child: AmplifierSession) -> ScriptedProvider:
        def reply(request: ChatRequest) -> ChatResponse:
            results = tool_results(request)
            if not results:
                return calls(task("researcher", "dig deeper"))
            seen.append((child.depth, results))
            return answer(f"depth {child.depth}: {results[0][:80]}")

        return ScriptedProvider(reply)

    children = Children({"researcher": recursive})
    parent = ScriptedProvider(parent_reply(calls(task("researcher"))))
    async with AmplifierSession(plan()) as session:
        session.child_setup.append(children)
        await session.coordinator.mount("providers", parent, name="scripted")
        with anyio.fail_after(HANG_GUARD):
            result = await session.run("dig")
    assert result.status is TurnStatus.SUCCESS
    assert [c.depth for c in children.sessions] == [1, 2, 3]
    deepest = children.sessions[-1]
    assert deepest.lane == "root/researcher@c0/researcher@c0/researcher@c0"
    depth, results = seen[0]
    assert depth == 3
    assert "delegation depth limit reached" in results[0]


async def test_a_smaller_depth_limit_is_honoured() -> None:
    parent = ScriptedProvider(parent_reply(calls(task("researcher"))))
    async with AmplifierSession(plan(session={"max_agent_depth": 0})) as session:
        await session.coordinator.mount("providers", parent, name="scripted")
        result = await session.run("ask")
    assert "delegation depth limit reached" in result.text


# -- budget ---------------------------------------------------------------------------------


async def test_a_token_budget_across_parent_and_children_ends_the_turn_and_cancels_them() -> None:
    entered: list[str] = []
    exited: list[str] = []
    gate = anyio.Event()

    def probe(child: AmplifierSession) -> Any:
        async def body() -> str:
            entered.append(child.session_id)
            gate.set()
            try:
                await anyio.sleep_forever()
            finally:
                exited.append(child.session_id)
            return "never"  # pragma: no cover

        return body

    def spender(tokens: int) -> Any:
        def make(child: AmplifierSession) -> ScriptedProvider:
            async def reply(request: ChatRequest) -> ChatResponse:
                if child.agent_name == "writer":
                    with anyio.fail_after(HANG_GUARD):
                        await gate.wait()  # the writer spends once the researcher is in its tool
                return calls(("probe", {}), tokens=tokens)

            return ScriptedProvider(reply)

        return make

    children = Children({"researcher": spender(40), "writer": spender(40)}, probe)

    parent = ScriptedProvider(parent_reply(calls(task("researcher"), task("writer"), tokens=30)))
    budget = {"budget": {"max_tokens": 100}}
    async with AmplifierSession(plan(session=budget)) as session:
        session.child_setup.append(children)
        await session.coordinator.mount("providers", parent, name="scripted")
        with anyio.fail_after(HANG_GUARD):
            result = await session.run("spend")

    assert result.status is TurnStatus.INCOMPLETE
    assert result.finish_reason == "budget"
    assert result.usage.total_tokens == 110  # the parent's 30 and both children's 40
    assert any("max_tokens: 100 reached" in p for p in result.problems)
    assert entered
    assert sorted(exited) == sorted(entered)
    for child in children.sessions:
        assert paired(await child_messages(child))
        ends = of(children.recorders[child.session_id], EXECUTION_END)
        assert [e["status"] for e in ends] == ["cancelled"]


async def test_a_tool_call_budget_stops_a_batch_before_it_runs() -> None:
    ran: list[str] = []

    def probe(child: AmplifierSession) -> Any:
        async def body() -> str:
            ran.append(child.session_id)
            return "ran"

        return body

    children = Children(
        {"researcher": [calls(("probe", {}), ("probe", {})), answer("done")]}, probe
    )
    parent = ScriptedProvider(parent_reply(calls(task("researcher"))))
    async with AmplifierSession(plan(session={"budget": {"max_tool_calls": 2}})) as session:
        session.child_setup.append(children)
        await session.coordinator.mount("providers", parent, name="scripted")
        result = await session.run("go")
    # the parent's task call is 1; the child's batch of 2 would make 3
    assert result.status is TurnStatus.INCOMPLETE
    assert result.finish_reason == "budget"
    assert ran == []


# -- resume ---------------------------------------------------------------------------------


async def test_a_child_is_resumed_with_its_history() -> None:
    child_requests: list[ChatRequest] = []

    def researcher(child: AmplifierSession) -> ScriptedProvider:
        def reply(request: ChatRequest) -> ChatResponse:
            child_requests.append(request)
            return answer(f"answer {len(child_requests)}")

        return ScriptedProvider(reply)

    children = Children({"researcher": researcher})
    ids: list[str] = []

    def reply(request: ChatRequest) -> ChatResponse:
        results = tool_results(request)
        if results:
            ids.append(json.loads(results[0])["session_id"])
            return answer(results[0])
        if not ids:
            return calls(task("researcher", "first question"))
        return calls(("task", {"session_id": ids[0], "instruction": "second question"}), prefix="r")

    async with AmplifierSession(plan()) as session:
        session.child_setup.append(children)
        await session.coordinator.mount("providers", ScriptedProvider(reply), name="scripted")
        await session.run("one")
        second = await session.run("two")
        direct = await session.coordinator.get_capability("session.resume")(
            sub_session_id=ids[0], instruction="third question"
        )
        with pytest.raises(DelegationError):
            await session.coordinator.get_capability("session.resume")(
                sub_session_id=f"{session.session_id}-0000000000000000_researcher", instruction="x"
            )
    assert second.status is TurnStatus.SUCCESS
    assert ids[0] == ids[1] == direct["session_id"]
    texts = [
        m.content if isinstance(m.content, str) else "".join(b.text for b in m.content)  # type: ignore[union-attr]
        for m in child_requests[-1].messages
    ]
    assert texts[0] == "You research."
    assert "first question" in texts
    assert "answer 1" in texts
    assert "second question" in texts
    assert direct["output"] == "answer 3"
    assert [c.is_resumed for c in children.sessions] == [False, True, True]


async def test_persisted_children_live_next_to_the_parent_and_resume_in_a_new_session(
    tmp_path: Path,
) -> None:
    transcript = tmp_path / "sessions" / "parent-1" / "context-messages.jsonl"
    context = {"module": "context-persistent", "config": {"path": str(transcript)}}
    children = Children({"researcher": lambda child: ScriptedProvider([answer("remembered")])})
    parent = ScriptedProvider(parent_reply(calls(task("researcher", "remember 42"))))
    async with AmplifierSession(plan(context), session_id="parent-1") as session:
        session.child_setup.append(children)
        await session.coordinator.mount("providers", parent, name="scripted")
        await session.run("ask")
    (child,) = children.sessions
    child_file = tmp_path / "sessions" / child.session_id / "context-messages.jsonl"
    assert child_file.is_file()
    metadata = json.loads((child_file.parent / "metadata.json").read_text())
    assert metadata["parent_id"] == "parent-1"
    assert metadata["agent_name"] == "researcher"

    count = ScriptedProvider(lambda request: answer(str(len(request.messages))))
    later = Children({"researcher": lambda child: count})
    async with AmplifierSession(plan(context), session_id="parent-1", is_resumed=True) as again:
        again.child_setup.append(later)
        resumed = await again.coordinator.get_capability("session.resume")(
            sub_session_id=child.session_id, instruction="what was it?"
        )
    # system, user, answer, and the new question
    assert resumed["output"] == "4"
    history = [json.loads(line) for line in child_file.read_text().splitlines()]
    assert [m["role"] for m in history] == ["system", "user", "assistant", "user", "assistant"]


# -- OpenTelemetry ----------------------------------------------------------------------------


async def test_a_childs_turn_span_nests_under_the_parents_tool_span() -> None:
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    traced = plan()
    traced["hooks"] = [
        {"module": "hooks-otel", "config": {"tracer_provider": tracer_provider}}
    ]  # inherited by the children, with the same (shared) tracer provider
    children = Children({"researcher": [answer("facts")], "writer": [answer("prose")]})
    parent = ScriptedProvider(parent_reply(calls(task("researcher"), task("writer"))))
    async with AmplifierSession(traced) as session:
        session.child_setup.append(children)
        await session.coordinator.mount("providers", parent, name="scripted")
        await session.run("both")
    spans = exporter.get_finished_spans()
    tools = {s.attributes["gen_ai.tool.call.id"]: s for s in spans if s.name == "execute_tool task"}
    turns = [s for s in spans if s.name.startswith("invoke_agent")]
    by_conversation = {s.attributes["gen_ai.conversation.id"]: s for s in turns}
    root = by_conversation[session.session_id]
    assert root.parent is None
    for child in children.sessions:
        turn = by_conversation[child.session_id]
        assert turn.parent is not None
        assert turn.parent.span_id in {t.context.span_id for t in tools.values()}
        assert turn.context.trace_id == root.context.trace_id  # one trace for the tree
    assert {turns_parent.parent.span_id for turns_parent in turns if turns_parent is not root} == {
        t.context.span_id for t in tools.values()
    }  # each child under its own call's span


async def test_a_reused_call_id_never_reuses_a_child(tmp_path: Path) -> None:
    """Child ids come from the spawning call (so a cassette's replay gives the same ones),
    yet a model that reuses call ids — in a later turn, or a later process — gets a new
    child each time, never an old child's transcript."""
    transcript = tmp_path / "sessions" / "p" / "context-messages.jsonl"
    context = {"module": "context-persistent", "config": {"path": str(transcript)}}
    histories: list[int] = []

    def fresh(child: AmplifierSession) -> ScriptedProvider:
        def reply(request: ChatRequest) -> ChatResponse:
            histories.append(len(request.messages))
            return answer("ok")

        return ScriptedProvider(reply)

    children = Children({"researcher": fresh})
    for resumed in (False, True):  # a second process: the same session opened again
        parent = ScriptedProvider(parent_reply(calls(task("researcher"))))  # call id c0
        async with AmplifierSession(plan(context), session_id="p", is_resumed=resumed) as s:
            s.child_setup.append(children)
            await s.coordinator.mount("providers", parent, name="scripted")
            await s.run("one")
            await s.run("two")  # the same reply again: the same call id
    ids = [child.session_id for child in children.sessions]
    assert len(set(ids)) == 4
    assert histories == [2, 2, 2, 2]  # system + instruction: every child started fresh
