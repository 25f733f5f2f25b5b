"""No-progress detection (runtime/_progress): a model that repeats the same failing tool
call is reminded at N same failures in a row and stopped at 2N, ``incomplete`` with
``finish_reason="no_progress"``, in every orchestrator, at the top and inside a child."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _agents_kit import Children, answer, plan
from hypothesis import given
from hypothesis import strategies as st

from amplifier_anyio import AmplifierSession, ChatRequest, ChatResponse, ToolCall, TurnStatus
from amplifier_anyio.errors import ConfigError
from amplifier_anyio.providers.scripted import ScriptedProvider
from amplifier_anyio.runtime import (
    NO_PROGRESS_FINISH_REASON,
    ProgressVerdict,
    ProgressWatch,
    no_progress_repeats,
)

# -- the watch: pure, deterministic ----------------------------------------------------------


def test_remind_at_n_and_stop_at_2n() -> None:
    watch = ProgressWatch(3)
    verdicts = [watch.observe("read_file", {"path": "x"}, "Error: not found") for _ in range(6)]

    assert verdicts == [ProgressVerdict.NONE] * 2 + [ProgressVerdict.REMIND] + [
        ProgressVerdict.NONE
    ] * 2 + [ProgressVerdict.STOP]
    assert "read_file" in watch.problem()
    assert "not found" in watch.problem()


def test_arguments_compare_as_canonical_json_and_ids_are_left_out() -> None:
    watch = ProgressWatch(2)
    watch.observe("t", {"a": 1, "b": 2}, "failed in 0f1e2d3c4b5a6978-aaaa_x")

    assert watch.observe("t", {"b": 2, "a": 1}, "failed in 99887766aabbccdd-bbbb_x") is (
        ProgressVerdict.REMIND
    )


def test_a_success_or_another_call_starts_the_count_again() -> None:
    watch = ProgressWatch(2)
    watch.observe("t", {}, "boom")
    watch.observe("t", {}, None)
    assert watch.observe("t", {}, "boom") is ProgressVerdict.NONE
    watch.observe("u", {}, "boom")
    assert watch.observe("t", {}, "boom") is ProgressVerdict.NONE
    assert watch.observe("t", {"a": 1}, "boom") is ProgressVerdict.NONE
    assert watch.count == 1


@given(
    st.integers(1, 4),
    st.lists(st.tuples(st.sampled_from("ab"), st.sampled_from([None, "e1", "e2"])), max_size=40),
)
def test_stop_only_after_2n_same_failures_in_a_row(repeats: int, feed: list[Any]) -> None:
    watch = ProgressWatch(repeats)
    run = 0
    last: Any = None
    for name, error in feed:
        run = run + 1 if error is not None and (name, error) == last else int(error is not None)
        last = (name, error)
        verdict = watch.observe(name, {}, error)
        assert (verdict is ProgressVerdict.STOP) == (run >= 2 * repeats)
        assert (verdict is ProgressVerdict.REMIND) == (run == repeats)


@pytest.mark.parametrize(
    ("value", "repeats"),
    [(None, 3), (True, 3), ("on", 3), (False, None), ("off", None), ({"repeats": 5}, 5), ({}, 3)],
)
def test_config_values(value: Any, repeats: int | None) -> None:
    assert no_progress_repeats(value, "loop-basic.no_progress") == repeats


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"repeats": 0}, "loop-basic.no_progress.repeats: expected an integer >= 1, got 0"),
        ({"repeat": 3}, "loop-basic.no_progress: unknown key 'repeat'"),
        ("sometimes", "loop-basic.no_progress: expected off or a table"),
    ],
)
def test_bad_config_is_a_config_error_naming_the_key(value: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace("[", r"\[")):
        no_progress_repeats(value, "loop-basic.no_progress")


# -- sessions --------------------------------------------------------------------------------

pytestmark = pytest.mark.anyio

ORCHESTRATORS = ["loop-basic", "loop-streaming", "loop-events"]


def looping(request: ChatRequest) -> ChatResponse:
    """A model that asks for the same missing file for ever."""
    n = len(request.messages)
    call = ToolCall(id=f"r{n}", name="read_file", arguments={"file_path": "missing.txt"})
    return ChatResponse(tool_calls=[call])


def fs_plan(tmp_path: Path, orchestrator: str, **config: Any) -> dict[str, Any]:
    return {
        "session": {
            "orchestrator": {"module": orchestrator, "config": config},
            "context": "context-simple",
        },
        "providers": [{"module": "provider-scripted", "config": {}}],
        "tools": [{"module": "tool-filesystem", "config": {"working_dir": str(tmp_path)}}],
    }


@pytest.mark.parametrize("orchestrator", ORCHESTRATORS)
async def test_a_model_repeating_a_failing_call_is_reminded_then_stopped(
    tmp_path: Path, orchestrator: str
) -> None:
    provider = ScriptedProvider(looping)
    async with AmplifierSession(fs_plan(tmp_path, orchestrator)) as session:
        await session.coordinator.mount("providers", provider, name="scripted")
        result = await session.run("read it")

    assert result.status is TurnStatus.INCOMPLETE
    assert result.finish_reason == NO_PROGRESS_FINISH_REASON
    assert len(provider.requests) == 6  # 2N with the default N = 3
    assert result.turn_count == 6
    [problem] = [p for p in result.problems if p.startswith("no_progress:")]
    assert "read_file was called 6 times in a row" in problem
    texts = [str(m.content) for r in provider.requests for m in r.messages]
    reminded = [i for i, r in enumerate(provider.requests) if "has failed 3 times" in str(r)]
    assert reminded == [3]  # the request after the third failure, once
    assert any("has failed 3 times" in t for t in texts)


@pytest.mark.parametrize("orchestrator", ORCHESTRATORS)
async def test_repeats_is_configurable_and_off_leaves_max_iterations(
    tmp_path: Path, orchestrator: str
) -> None:
    provider = ScriptedProvider(looping)
    async with AmplifierSession(
        fs_plan(tmp_path, orchestrator, no_progress={"repeats": 2})
    ) as session:
        await session.coordinator.mount("providers", provider, name="scripted")
        result = await session.run("read it")
    assert result.finish_reason == NO_PROGRESS_FINISH_REASON
    assert len(provider.requests) == 4

    provider = ScriptedProvider(looping)
    async with AmplifierSession(
        fs_plan(tmp_path, orchestrator, no_progress=False, max_iterations=9)
    ) as session:
        await session.coordinator.mount("providers", provider, name="scripted")
        result = await session.run("read it")
    assert result.status is TurnStatus.INCOMPLETE
    assert result.finish_reason != NO_PROGRESS_FINISH_REASON
    assert len(provider.requests) == 10  # 9 iterations and the wrap-up call


@pytest.mark.parametrize("orchestrator", [*ORCHESTRATORS, "loop-lifecycle"])
async def test_a_bad_no_progress_value_is_a_config_error_naming_the_key(
    tmp_path: Path, orchestrator: str
) -> None:
    with pytest.raises(ConfigError, match=r"no_progress\.repeats: expected an integer >= 1"):
        async with AmplifierSession(fs_plan(tmp_path, orchestrator, no_progress={"repeats": -1})):
            pass


async def test_a_looping_child_is_stopped_and_a_parent_that_keeps_delegating_too() -> None:
    """Bounded at every level: each child costs at most 2N calls; the parent, whose task
    call keeps failing the same way, at most 2N calls too."""

    def child_loop(request: ChatRequest) -> ChatResponse:
        call = ToolCall(id=f"p{len(request.messages)}", name="probe", arguments={})
        return ChatResponse(tool_calls=[call])

    async def failing() -> str:
        raise RuntimeError("the probe is broken")

    providers: list[ScriptedProvider] = []

    def child_provider(child: AmplifierSession) -> ScriptedProvider:
        providers.append(ScriptedProvider(child_loop))
        return providers[-1]

    children = Children({"researcher": child_provider}, probe=lambda child: failing)

    def parent_loop(request: ChatRequest) -> ChatResponse:
        arguments = {"agent": "researcher", "instruction": "find it"}
        call = ToolCall(id=f"t{len(request.messages)}", name="task", arguments=arguments)
        return ChatResponse(tool_calls=[call])

    parent = ScriptedProvider(parent_loop)
    async with AmplifierSession(plan()) as session:
        session.child_setup.append(children)
        await session.coordinator.mount("providers", parent, name="scripted")
        result = await session.run("research")

    assert result.status is TurnStatus.INCOMPLETE
    assert result.finish_reason == NO_PROGRESS_FINISH_REASON
    assert len(parent.requests) == 6
    assert len(providers) == 6
    assert [len(p.requests) for p in providers] == [6] * 6
    assert "task was called 6 times in a row" in result.problems[-1]
    assert answer  # the kit's helpers stay imported for the other tests of this file
