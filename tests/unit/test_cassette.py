"""Cassettes (DESIGN §16): a session's provider calls recorded by lane, replayed without
the provider, drift named by its JSON path — on asyncio and trio, with real files."""

from __future__ import annotations

import json
import random
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from amplifier_anyio import AmplifierSession, CassetteMismatchError, MountPlan, TurnStatus
from amplifier_anyio.errors import ConfigError, RateLimitError
from amplifier_anyio.events import CONTENT_BLOCK_DELTA, PROVIDER_ERROR
from amplifier_anyio.models import (
    ChatRequest,
    ChatResponse,
    Message,
    TextBlock,
    ToolCall,
    ToolCallBlock,
    ToolResult,
    unstructure,
)
from amplifier_anyio.providers.scripted import ScriptedProvider
from amplifier_anyio.testing import (
    EventRecorder,
    MockTool,
    child_lane,
    first_difference,
    install_cassette,
    lane_of,
    normalise_request,
    open_cassette,
)
from amplifier_anyio.testing.pytest_plugin import cassette_path

pytestmark = pytest.mark.anyio

BASE = {"session": {"orchestrator": "loop-basic", "context": "context-simple"}}


def calls(*names: str, prefix: str = "call") -> ChatResponse:
    """A response asking for one call per name (ids ``call_0``, ``call_1``, …)."""
    tool_calls = [
        ToolCall(id=f"{prefix}_{i}", name=name, arguments={"n": i}) for i, name in enumerate(names)
    ]
    return ChatResponse(
        content=[ToolCallBlock(id=c.id, name=c.name, input=c.arguments) for c in tool_calls],
        tool_calls=tool_calls,
        finish_reason="tool_calls",
    )


def answer(text: str) -> ChatResponse:
    return ChatResponse(content=[TextBlock(text=text)], finish_reason="stop")


class Unreachable:
    """A provider that must never be asked: replay makes no provider request."""

    name = "scripted"
    priority = None

    def __init__(self) -> None:
        self.asked = 0

    def get_info(self) -> Any:
        return ScriptedProvider([]).get_info()

    async def list_models(self) -> list[Any]:
        return []

    async def complete(self, request: ChatRequest, **kwargs: Any) -> ChatResponse:
        self.asked += 1
        raise AssertionError("the provider was asked during a replay")

    def parse_tool_calls(self, response: ChatResponse) -> list[ToolCall]:
        return list(response.tool_calls or [])


class Streaming(ScriptedProvider):
    """A scripted provider that streams: each text word is one delta."""

    @asynccontextmanager
    async def stream(
        self, request: ChatRequest, **kwargs: Any
    ) -> AsyncIterator[AsyncIterator[dict[str, Any]]]:
        response = await self.complete(request, **kwargs)

        async def events() -> AsyncIterator[dict[str, Any]]:
            for index, block in enumerate(response.content):
                yield {"type": "content_block:start", "index": index, "block_type": block.type}
                if isinstance(block, TextBlock):
                    for word in block.text.split(" "):
                        await anyio.lowlevel.checkpoint()
                        yield {
                            "type": "content_block:delta",
                            "index": index,
                            "block_type": "text",
                            "delta": word + " ",
                        }
                yield {"type": "content_block:end", "index": index, "block": block}
            yield {"type": "response", "response": response}

        yield events()


@asynccontextmanager
async def session_with(
    cassette: dict[str, Any] | None,
    provider: Any,
    tools: tuple[Any, ...] = (),
    orchestrator: str = "loop-basic",
) -> AsyncIterator[tuple[AmplifierSession, EventRecorder]]:
    """A session whose provider and tools the test mounts, behind ``cassette``."""
    plan = {"session": {"orchestrator": orchestrator, "context": "context-simple"}}
    async with AmplifierSession(plan) as session:
        recorder = EventRecorder()
        recorder.attach(session.coordinator.hooks)
        await session.coordinator.mount("providers", provider, name=provider.name)
        for tool in tools:
            await session.coordinator.mount("tools", tool, name=tool.name)
        if cassette is not None:
            await install_cassette(session.coordinator, cassette)
        yield session, recorder


async def transcript(session: AmplifierSession) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = await session.coordinator.get("context").get_messages()
    return messages


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


# -- the plan -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cassette", "message"),
    [
        ({"mode": "record"}, "session.cassette.path: required"),
        ({"path": ""}, "session.cassette.path: required"),
        ({"path": 3}, "session.cassette.path: expected a file path, got int"),
        (
            {"path": "x.jsonl", "mode": "rewind"},
            "session.cassette.mode: expected one of record, replay, auto, new_episodes, "
            "got 'rewind'",
        ),
        ({"path": "x.jsonl", "tools": "yes"}, "session.cassette.tools: expected true or false"),
        ({"path": "x.jsonl", "speed": 2}, "session.cassette.speed: unknown key"),
        (["x.jsonl"], "session.cassette: expected a {path, mode, tools} table, got a list"),
    ],
)
def test_a_bad_cassette_entry_is_a_config_error_naming_the_key(cassette: Any, message: str) -> None:
    plan = {"session": {**BASE["session"], "cassette": cassette}}
    with pytest.raises(ConfigError) as caught:
        MountPlan.from_dict(plan)
    assert str(caught.value).startswith(message)


def test_a_cassette_entry_parses_and_round_trips() -> None:
    plan = MountPlan.from_dict({"session": {**BASE["session"], "cassette": "run.jsonl"}})
    assert plan.cassette is not None
    assert (plan.cassette.path, plan.cassette.mode, plan.cassette.tools) == (
        "run.jsonl",
        "auto",
        False,
    )
    again = MountPlan.from_dict(plan.to_dict())
    assert again.cassette == plan.cassette


async def test_replaying_a_file_that_does_not_exist_fails_the_start(tmp_path: Path) -> None:
    plan = {
        "session": {
            **BASE["session"],
            "cassette": {"path": str(tmp_path / "no.jsonl"), "mode": "replay"},
        },
        "providers": [{"module": "provider-scripted", "config": {"responses": []}}],
    }
    with pytest.raises(
        ConfigError, match=r"session\.cassette\.path: .*no\.jsonl: no such cassette"
    ):
        async with AmplifierSession(plan):
            pass


# -- record, then replay --------------------------------------------------------------------


async def test_a_recorded_tool_turn_replays_identically_without_the_provider(
    tmp_path: Path,
) -> None:
    path = tmp_path / "turn.jsonl"
    script = [calls("clock", "echo"), answer("It is noon, and you said hi.")]
    clock, echo = MockTool("clock", "noon"), MockTool("echo", "hi")
    async with session_with(
        {"path": str(path), "mode": "record"}, ScriptedProvider(script), (clock, echo)
    ) as (session, _):
        recorded = await session.run("What time is it?")
        recorded_messages = await transcript(session)

    provider = Unreachable()
    clock2, echo2 = MockTool("clock", "noon"), MockTool("echo", "hi")
    async with session_with({"path": str(path), "mode": "replay"}, provider, (clock2, echo2)) as (
        session,
        _,
    ):
        replayed = await session.run("What time is it?")
        replayed_messages = await transcript(session)

    assert recorded.status is TurnStatus.SUCCESS, recorded.error
    assert (replayed.status, replayed.text) == (recorded.status, recorded.text)
    assert replayed_messages == recorded_messages
    assert provider.asked == 0
    assert (clock2.call_count, echo2.call_count) == (1, 1)  # tools: false runs the tools
    entries = lines(path)
    assert entries[0] == {"cassette": "amplifier-anyio-cassette", "version": 1}
    assert [(e["lane"], e["ordinal"], e["kind"]) for e in entries[1:]] == [
        ("root", 0, "complete"),
        ("root", 1, "complete"),
    ]
    assert entries[2]["request"]["messages"][0] == {"role": "user", "content": "What time is it?"}
    assert entries[2]["response"]["content"] == [
        {"type": "text", "text": "It is noon, and you said hi."}
    ]


async def test_a_plan_cassette_in_auto_mode_records_then_replays(tmp_path: Path) -> None:
    path = tmp_path / "auto.jsonl"
    plan = {
        "session": {**BASE["session"], "cassette": {"path": str(path)}},
        "providers": [{"module": "provider-scripted", "config": {"demo": True}}],
        "tools": [{"module": "tool-demo"}],
    }
    results = []
    for _ in range(2):
        async with AmplifierSession(plan) as session:
            result = await session.run("count these words")
            stats = session.coordinator.get_capability("cassette").statistics()
            results.append((result.text, await transcript(session), stats.mode, stats.replayed))
    (text1, messages1, mode1, replayed1), (text2, messages2, mode2, replayed2) = results
    assert (mode1, replayed1, mode2, replayed2) == ("record", 0, "replay", 2)
    assert (text2, messages2) == (text1, messages1)


async def test_replay_through_an_http_provider_sends_no_request(tmp_path: Path) -> None:
    """Recorded under the mount name ``openai``; replayed with provider-openai pointed at
    a closed port (and no retries): any request would fail the turn."""
    path = tmp_path / "http.jsonl"
    script = {"name": "openai", "responses": [unstructure(answer("Recorded."))]}
    record = {
        "session": {**BASE["session"], "cassette": {"path": str(path), "mode": "record"}},
        "providers": [{"module": "provider-scripted", "config": script}],
    }
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed once the block ends: nothing listens there
    replay = {
        "session": {**BASE["session"], "cassette": {"path": str(path), "mode": "replay"}},
        "providers": [
            {
                "module": "provider-openai",
                "config": {
                    "api_key": "sk-never-used",
                    "base_url": f"http://127.0.0.1:{port}/v1",
                    "max_retries": 0,
                    "timeout": 5,
                },
            }
        ],
    }
    async with AmplifierSession(record) as session:
        first = await session.run("Hello")
    async with AmplifierSession(replay) as session:
        second = await session.run("Hello")
    assert first.status is TurnStatus.SUCCESS, first.error
    assert (second.status, second.text) == (TurnStatus.SUCCESS, "Recorded."), second.error


async def test_twenty_parallel_calls_with_random_delays_replay_with_other_delays(
    tmp_path: Path,
) -> None:
    path = tmp_path / "fanout.jsonl"
    names = [f"t{i}" for i in range(20)]
    rng = random.Random(20)

    def script() -> ScriptedProvider:
        return ScriptedProvider([calls(*names), answer("all twenty done")])

    def tools() -> tuple[MockTool, ...]:
        return tuple(MockTool(n, f"out-{n}", delay=rng.uniform(0, 0.02)) for n in names)

    async with session_with({"path": str(path), "mode": "record"}, script(), tools()) as (s, _):
        recorded = await s.run("fan out")
        recorded_messages = await transcript(s)
    async with session_with({"path": str(path), "mode": "replay"}, Unreachable(), tools()) as (
        s,
        _,
    ):
        replayed = await s.run("fan out")
        replayed_messages = await transcript(s)

    assert recorded.status is replayed.status is TurnStatus.SUCCESS
    assert replayed_messages == recorded_messages
    results = [m for m in replayed_messages if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in results] == [f"call_{i}" for i in range(20)]


async def test_tools_true_replays_tool_results_without_running_the_tools(
    tmp_path: Path,
) -> None:
    path = tmp_path / "tools.jsonl"

    class Failing(MockTool):
        async def execute(self, input: dict[str, Any]) -> ToolResult:
            self.calls.append(input)
            raise ValueError("the disk is full")

    spec = {"path": str(path), "mode": "record", "tools": True}
    script = ScriptedProvider([calls("a", "b", "a"), answer("done")])
    real = (MockTool("a", {"k": [1, 2]}), Failing("b"))
    async with session_with(spec, script, real) as (session, _):
        await session.run("go")
        recorded_messages = await transcript(session)

    spare = (MockTool("a", "NOT RECORDED"), MockTool("b", "NOT RECORDED"))
    async with session_with({**spec, "mode": "replay"}, Unreachable(), spare) as (session, _):
        result = await session.run("go")
        replayed_messages = await transcript(session)

    assert result.status is TurnStatus.SUCCESS, result.error
    assert [tool.call_count for tool in spare] == [0, 0]
    assert replayed_messages == recorded_messages
    contents = [m["content"] for m in replayed_messages if m["role"] == "tool"]
    assert contents[0] == '{"k": [1, 2]}'
    assert contents[1] == "Error: the disk is full"
    tool_lines = [e for e in lines(path)[1:] if e["kind"] == "tool"]
    assert sorted(
        (e["call"], e["occurrence"], e["tool"], e["tool_call_id"]) for e in tool_lines
    ) == [
        ("1:0", 0, "a", "call_0"),
        ("1:1", 0, "b", "call_1"),
        ("1:2", 0, "a", "call_2"),
    ]


def planner(request: ChatRequest) -> ChatResponse:
    """A model for every orchestrator: plans for loop-lifecycle, calls two tools once, then
    answers from the results."""
    last = str(unstructure(request.messages[-1].content))
    if "lifecycle-plan" in last:
        steps = [{"id": f"s{i}", "tool": "echo", "input": {"n": i}} for i in (1, 2)]
        return answer(json.dumps(steps))
    if any(m.role == "tool" for m in request.messages) or not request.tools:
        results = [str(m.content) for m in request.messages if m.role == "tool"]
        return answer("results: " + ", ".join(results))
    return calls("echo", "echo")


@pytest.mark.parametrize("tools", [False, True], ids=["tools-false", "tools-true"])
@pytest.mark.parametrize(
    "orchestrator", ["loop-basic", "loop-streaming", "loop-events", "loop-lifecycle"]
)
async def test_every_orchestrator_replays_its_recorded_turn(
    tmp_path: Path, orchestrator: str, tools: bool
) -> None:
    path = tmp_path / "turn.jsonl"
    runs = []
    for mode, provider in (("record", Streaming(planner)), ("replay", Silent([]))):
        echo = MockTool("echo", "pong", delay=random.uniform(0, 0.01))
        spec = {"path": str(path), "mode": mode, "tools": tools}
        async with session_with(spec, provider, (echo,), orchestrator) as (session, recorder):
            result = await session.run("ping twice")
            names = [
                n for n in recorder.names() if n.startswith(("tool:", "provider:", "content_"))
            ]
            runs.append((result.status, result.text, await transcript(session), sorted(names)))
        if mode == "replay":
            assert echo.call_count == (0 if tools else 2)
    assert runs[0][0] is TurnStatus.SUCCESS
    assert runs[0][1] == "results: pong, pong"
    if orchestrator == "loop-lifecycle":
        # its own per-turn call ids differ from run to run: compare the rest
        for run in runs:
            for message in run[2]:
                message.pop("tool_call_id", None)
                for call in message.get("tool_calls") or ():
                    call.pop("id")
    assert runs[1] == runs[0]


class Silent(Streaming):
    """A streaming provider that must never be asked: replay makes no provider request."""

    async def complete(self, request: ChatRequest, **kwargs: Any) -> ChatResponse:
        raise AssertionError("the provider was asked during a replay")


async def test_a_streamed_turn_replays_the_same_deltas(tmp_path: Path) -> None:
    path = tmp_path / "stream.jsonl"
    script = [calls("echo"), answer("the echo said hello back")]
    runs = []
    for mode, provider in (("record", Streaming(script)), ("replay", Silent([]))):
        spec = {"path": str(path), "mode": mode}
        echo = MockTool("echo", "hello")
        async with session_with(spec, provider, (echo,), "loop-streaming") as (session, recorder):
            result = await session.run("say it")
            deltas = [d["delta"] for _, d in recorder.get_events(CONTENT_BLOCK_DELTA)]
            runs.append((result.status, result.text, deltas, await transcript(session)))

    assert runs[0] == runs[1]
    assert runs[0][0] is TurnStatus.SUCCESS
    assert runs[0][2] == ["the ", "echo ", "said ", "hello ", "back "]
    assert [e["kind"] for e in lines(path)[1:]] == ["stream", "stream"]


async def test_a_stream_cancelled_mid_way_replays_to_the_same_cancel(tmp_path: Path) -> None:
    """Recorded as cancelled after its second delta; the replay gives the same deltas and
    then waits, as the stream did, for the same cancel."""
    path = tmp_path / "cancelled.jsonl"
    runs = []
    for mode, provider in (
        ("record", Streaming([answer("one two three four")])),
        ("replay", Silent([])),
    ):
        async with session_with(
            {"path": str(path), "mode": mode}, provider, (), "loop-streaming"
        ) as (
            session,
            recorder,
        ):

            async def cancel_on_second(event: str, data: dict[str, Any]) -> None:
                await anyio.lowlevel.checkpoint()
                if len(recorder.get_events(CONTENT_BLOCK_DELTA)) == 2:
                    session.cancel(immediate=True)

            session.coordinator.hooks.register(
                CONTENT_BLOCK_DELTA, cancel_on_second, priority=2_000_000
            )
            result = await session.run("count")
            deltas = [d["delta"] for _, d in recorder.get_events(CONTENT_BLOCK_DELTA)]
            runs.append((result.status, deltas, await transcript(session)))
    assert runs[0] == runs[1]
    assert runs[0][:2] == (TurnStatus.CANCELLED, ["one ", "two "])
    entry = lines(path)[1]
    assert entry["cancelled"] is True
    assert [e["type"] for e in entry["events"]] == [
        "content_block:start",
        "content_block:delta",
        "content_block:delta",
    ]


# -- drift ----------------------------------------------------------------------------------


async def test_drift_ends_the_turn_with_an_error_naming_the_json_path(tmp_path: Path) -> None:
    path = tmp_path / "drift.jsonl"
    script = ScriptedProvider([answer("first"), answer("second")])
    async with session_with({"path": str(path), "mode": "record"}, script) as (session, _):
        await session.run("one")
        await session.run("two")

    async with session_with({"path": str(path), "mode": "replay"}, Unreachable()) as (
        session,
        recorder,
    ):
        same = await session.run("one")
        drifted = await session.run("TWO")
        after = await session.run("two")

    assert same.status is TurnStatus.SUCCESS
    assert drifted.status is TurnStatus.ERROR
    error = drifted.error
    assert isinstance(error, CassetteMismatchError)
    assert (error.lane, error.ordinal, error.path) == ("root", 1, "messages[2].content")
    assert (error.recorded, error.actual) == ("two", "TWO")
    assert str(error) == (
        "lane 'root', call 1: the request differs from the recording at messages[2].content "
        '(recorded "two", got "TWO")'
    )
    errors = [d["error"]["type"] for _, d in recorder.get_events(PROVIDER_ERROR)]
    assert errors == ["CassetteMismatchError", "CassetteMismatchError"]
    # After a mismatch the run is no longer the recorded one: every later call fails too.
    assert after.status is TurnStatus.ERROR
    assert isinstance(after.error, CassetteMismatchError)
    assert after.error.path == "messages[2].content"


async def test_a_call_past_the_end_of_a_lane_is_a_mismatch(tmp_path: Path) -> None:
    path = tmp_path / "short.jsonl"
    async with session_with(
        {"path": str(path), "mode": "record"}, ScriptedProvider([answer("a")])
    ) as (s, _):
        await s.run("one")
    async with session_with({"path": str(path), "mode": "replay"}, Unreachable()) as (s, _):
        first = await s.run("one")
        second = await s.run("two")
    assert first.status is TurnStatus.SUCCESS
    assert second.status is TurnStatus.ERROR
    assert isinstance(second.error, CassetteMismatchError)
    assert (second.error.lane, second.error.ordinal, second.error.path) == ("root", 1, None)
    assert str(second.error) == (
        "lane 'root', call 1: no recorded call (the recording has 1 in this lane)"
    )


async def test_a_recorded_provider_error_is_raised_again_on_replay(tmp_path: Path) -> None:
    path = tmp_path / "error.jsonl"
    failure = RateLimitError("slow down", status_code=429, retryable=True, retry_after=7.0)
    outcomes = []
    for mode, provider in (("record", ScriptedProvider([failure])), ("replay", Unreachable())):
        async with session_with({"path": str(path), "mode": mode}, provider) as (session, _):
            result = await session.run("hi")
        error = result.error
        assert isinstance(error, RateLimitError)
        outcomes.append((result.status, str(error), error.status_code, error.retry_after))
    assert outcomes[0] == outcomes[1] == (TurnStatus.ERROR, "slow down", 429, 7.0)


async def test_new_episodes_replays_what_is_recorded_and_records_the_rest(tmp_path: Path) -> None:
    path = tmp_path / "episodes.jsonl"
    async with session_with(
        {"path": str(path), "mode": "record"}, ScriptedProvider([answer("a")])
    ) as (s, _):
        await s.run("one")
    provider = ScriptedProvider([answer("b")])
    async with session_with({"path": str(path), "mode": "new_episodes"}, provider) as (s, _):
        first, second = await s.run("one"), await s.run("two")
    assert (first.text, second.text) == ("a", "b")
    assert len(provider.requests) == 1  # only the call past the end
    assert [e.get("ordinal") for e in lines(path)[1:]] == [0, 1]


# -- lanes ----------------------------------------------------------------------------------


async def test_sessions_in_their_own_lanes_share_one_cassette_and_replay_per_lane(
    tmp_path: Path,
) -> None:
    """A parent's lane and a child's, two turns each, run at once on one file: recorded
    in one interleaving, replayed in another; each lane gets its own calls back."""
    path = tmp_path / "lanes.jsonl"
    child = child_lane("root", "researcher")

    async def both(mode: str, order: list[str]) -> dict[str, Any]:
        found: dict[str, Any] = {}
        steps = [anyio.Event() for _ in range(len(order) + 1)]
        steps[0].set()

        async def run(lane: str) -> None:
            if mode == "record":
                provider: Any = ScriptedProvider([answer(f"{lane} {n}") for n in (1, 2)])
            else:
                provider = Unreachable()
            session = AmplifierSession(BASE)
            session.lane = lane  # what a sub-agent's creator does before the child opens
            async with session:
                await session.coordinator.mount("providers", provider, name="scripted")
                await install_cassette(session.coordinator, {"path": str(path), "mode": mode})
                texts = []
                for step, who in enumerate(order):
                    if who != lane:
                        continue
                    await steps[step].wait()
                    result = await session.run(f"turn {len(texts) + 1} of {lane}")
                    texts.append((result.status, result.text))
                    steps[step + 1].set()
                found[lane] = (texts, await transcript(session))

        async with open_cassette(path, mode), anyio.create_task_group() as group:
            group.start_soon(run, "root")
            group.start_soon(run, child)
        return found

    recorded = await both("record", [child, "root", child, "root"])
    replayed = await both("replay", ["root", "root", child, child])
    assert replayed == recorded
    assert [text for _, text in recorded[child][0]] == [f"{child} 1", f"{child} 2"]
    assert [(e["lane"], e["ordinal"]) for e in lines(path)[1:]] == [
        (child, 0),
        ("root", 0),
        (child, 1),
        ("root", 1),
    ]


def test_lanes_are_named_by_the_session_and_by_the_agent_path() -> None:
    session = AmplifierSession(BASE)
    assert lane_of(session.coordinator) == "root"
    session.lane = child_lane("root", "researcher")
    assert lane_of(session.coordinator) == "root/researcher"
    assert child_lane("root/researcher", "critic", "call_7") == "root/researcher/critic@call_7"
    assert lane_of(object()) == "root"


# -- normalising and comparing --------------------------------------------------------------


def test_a_request_is_normalised_without_random_ids_and_times() -> None:
    request = ChatRequest(
        messages=[Message(role="user", content="run 123e4567-e89b-12d3-a456-426614174000 now")],
        metadata={"trace_id": "abc", "timestamp": "2026-01-01T00:00:00Z", "kept": 1},
    )
    normalised = normalise_request(request)
    assert normalised == {
        "messages": [{"role": "user", "content": "run <uuid> now"}],
        "metadata": {"kept": 1},
    }


def test_tool_call_ids_are_numbered_by_first_appearance() -> None:
    request = {
        "messages": [
            {"role": "assistant", "content": "", "tool_calls": [{"id": "lc-9f-s1", "name": "p"}]},
            {"role": "tool", "tool_call_id": "lc-9f-s1", "content": "x"},
            {
                "role": "assistant",
                "content": [{"type": "tool_call", "id": "zz", "name": "p", "input": {}}],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_call_id": "zz", "output": 1}],
            },
        ]
    }
    messages = normalise_request(request)["messages"]
    assert messages[0]["tool_calls"][0]["id"] == "call-0"
    assert messages[1]["tool_call_id"] == "call-0"
    assert messages[2]["content"][0]["id"] == "call-1"
    assert messages[3]["content"][0]["tool_call_id"] == "call-1"


def test_first_difference_names_the_first_differing_path() -> None:
    old = {"messages": [{"role": "user", "content": "a"}, {"role": "tool", "content": "x"}]}
    assert first_difference(old, old) is None
    new = {"messages": [{"role": "user", "content": "a"}, {"role": "tool", "content": "y"}]}
    assert first_difference(old, new) == "messages[1].content"
    assert first_difference(old, {"messages": old["messages"][:1]}) == "messages[1]"
    assert first_difference({"a": 1}, {"a": True}) == "a"
    assert first_difference({"a": 1}, {"a": 1, "b": 2}) == "b"
    assert first_difference(1, 2) == "<root>"


def test_the_fixture_names_a_file_per_test_from_its_node_id() -> None:
    root = Path("/project")
    assert cassette_path(
        root, "tests/cassettes", "tests/unit/test_x.py::TestC::test_y[asyncio-a/b c]"
    ) == Path("/project/tests/cassettes/unit/test_x/TestC.test_y[asyncio-a_b_c].jsonl")
    assert cassette_path(root, "cassettes", "test_top.py::test_z") == Path(
        "/project/cassettes/test_top/test_z.jsonl"
    )
