"""Executors (DESIGN §11): where a tool call runs, chosen by the plan.

The cluster tests (the full tier: they need the dask extra) run against a real
``LocalCluster(processes=False)`` started once for the module (worker threads in this
process, the scheduler on its own loop thread); the tools
are ``tool-compute``'s, rebuilt on the workers from their plan entry. Real clock only:
threads, processes and the cluster's sockets do not follow a virtual clock.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from amplifier_anyio import AmplifierSession, ConfigError
from amplifier_anyio.events import TOOL_POST
from amplifier_anyio.executors.dask import DaskExecutor, DaskExecutorConfig
from amplifier_anyio.kernel import MountPlan
from amplifier_anyio.runtime import CANCELLED_MESSAGE, ProcessExecutor, ThreadExecutor
from amplifier_anyio.session import validate_plan
from tiers import needs, optional

pytestmark = pytest.mark.anyio

distributed = optional("distributed")


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    """One in-process cluster for the module: 2 workers of 8 threads (room for the calls
    a cancel abandons on the workers, so that they never delay a later test's calls)."""
    with distributed.LocalCluster(
        n_workers=2, processes=False, threads_per_worker=8, dashboard_address="127.0.0.1:0"
    ) as local:
        yield local


def dask_executor(cluster: Any) -> dict[str, Any]:
    return {"module": "executor-dask", "config": {"address": cluster.scheduler_address}}


def call(call_id: str, name: str = "probe", **arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "name": name, "arguments": arguments}


def plan(
    calls: list[dict[str, Any]],
    executor: Any = None,
    *,
    tool_timeout: float | None = None,
    tool_entry: dict[str, Any] | None = None,
) -> dict[str, Any]:
    session: dict[str, Any] = {"orchestrator": "loop-basic", "context": "context-simple"}
    if executor is not None:
        session["executor"] = executor
    replies = [{"content": [], "tool_calls": calls}, {"content": [{"type": "text", "text": "ok"}]}]
    return {
        "session": session,
        "orchestrator": {"config": {"tool_timeout": tool_timeout}},
        "providers": [{"module": "provider-scripted", "config": {"responses": replies}}],
        "tools": [tool_entry or {"module": "tool-compute"}],
    }


async def run_plan(the_plan: dict[str, Any]) -> tuple[Any, list[dict[str, Any]]]:
    async with AmplifierSession(the_plan) as session:
        result = await session.run("go")
        messages = await session.coordinator.get("context").get_messages()
    return result, messages


def tool_contents(messages: list[dict[str, Any]]) -> dict[str, str]:
    return {m["tool_call_id"]: m["content"] for m in messages if m["role"] == "tool"}


def twenty_calls() -> list[dict[str, Any]]:
    calls = [call(f"c{i}", sleep=(i % 5) * 0.01, value=i) for i in range(17)]
    calls.append(call("h", "hash_work", rounds=2000))
    calls.append(call("boom", fail="boom"))
    calls.append(call("bad", "hash_work", rounds=-1))
    return calls


def without_pids(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages with the probe's process id taken out (it says where a call ran)."""
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


@needs("distributed")
async def test_twenty_parallel_calls_on_the_cluster_give_the_local_context(cluster: Any) -> None:
    calls = twenty_calls()
    local, local_messages = await run_plan(plan(calls))
    remote, remote_messages = await run_plan(plan(calls, dask_executor(cluster)))
    assert local.status == remote.status == "success"
    assert remote_messages == local_messages  # workers are threads here: same pid
    contents = tool_contents(remote_messages)
    assert contents["boom"] == "Error: boom"  # raised on the worker: that call's error
    assert contents["bad"].startswith("Error: ")
    assert json.loads(contents["c3"])["value"] == 3


@pytest.mark.parametrize("executor", ["thread", "process"])
async def test_thread_and_process_executors_give_the_local_context(executor: str) -> None:
    calls = twenty_calls()
    _, local_messages = await run_plan(plan(calls))
    result, messages = await run_plan(plan(calls, executor))
    assert result.status == "success"
    assert without_pids(messages) == without_pids(local_messages)


async def test_the_process_executor_runs_calls_in_other_processes() -> None:
    result, messages = await run_plan(plan([call("a"), call("b")], "process"))
    assert result.status == "success"
    pids = {json.loads(c)["pid"] for c in tool_contents(messages).values()}
    assert os.getpid() not in pids


@needs("distributed")
async def test_an_immediate_cancel_keeps_finished_results_and_leaves_nothing_on_the_cluster(
    cluster: Any,
) -> None:
    fast = [call(f"fast{i}", value=i) for i in range(6)]
    slow = [call(f"slow{i}", sleep=1.0, value=i) for i in range(6)]
    the_plan = plan(fast + slow, dask_executor(cluster))
    async with AmplifierSession(the_plan) as session:
        done: list[str] = []

        async def count(_event: str, data: dict[str, Any]) -> None:
            done.append(data["tool_call_id"])
            if len(done) == len(fast):
                session.cancel(immediate=True)

        session.coordinator.hooks.register(TOOL_POST, count)
        result = await session.run("go")
        messages = await session.coordinator.get("context").get_messages()
        executor = next(iter(session.coordinator.tool_executors.values()))
        assert isinstance(executor, DaskExecutor)
        assert executor.pending == {}
        client = executor.client
        turn = result.trace_id

        def keys_of_the_turn() -> list[str]:
            return [k for k in client.run_on_scheduler(_task_keys) if turn in k]

        with anyio.fail_after(20):  # generous: the scheduler forgets released keys soon
            while await anyio.to_thread.run_sync(keys_of_the_turn):  # noqa: ASYNC110 - a poll
                await anyio.sleep(0.05)
    assert result.status == "cancelled"
    contents = tool_contents(messages)
    assert sorted(contents) == sorted(c["id"] for c in fast + slow)  # every call answered
    for c in fast:
        assert json.loads(contents[c["id"]])["value"] == c["arguments"]["value"]
    for c in slow:
        assert json.loads(contents[c["id"]])["error"] == CANCELLED_MESSAGE


def _task_keys(dask_scheduler: Any) -> list[str]:
    return [str(key) for key in dask_scheduler.tasks]


@needs("distributed")
async def test_a_per_tool_timeout_answers_the_slow_call_on_the_cluster(cluster: Any) -> None:
    calls = [call("quick", value=1), call("stuck", sleep=4)]
    result, messages = await run_plan(plan(calls, dask_executor(cluster), tool_timeout=2.0))
    assert result.status == "success"
    contents = tool_contents(messages)
    assert json.loads(contents["quick"])["value"] == 1
    assert contents["stuck"] == "Error: timed out after 2.0 s"


async def test_a_tool_entry_can_keep_its_tool_local() -> None:
    entry = {"module": "tool-compute", "executor": "local"}
    async with AmplifierSession(plan([call("a")], "thread", tool_entry=entry)) as session:
        assert session.coordinator.tool_executors == {}
    entry = {"module": "tool-compute", "executor": {"module": "thread"}}
    async with AmplifierSession(plan([call("a")], tool_entry=entry)) as session:
        chosen = session.coordinator.tool_executors
        assert set(chosen) == {"probe", "hash_work"}
        assert all(isinstance(e, ThreadExecutor) for e in chosen.values())
    async with AmplifierSession(plan([call("a")], "process")) as session:
        chosen = session.coordinator.tool_executors
        assert all(isinstance(e, ProcessExecutor) for e in chosen.values())


@pytest.mark.parametrize(
    ("executor", "message"),
    [
        ({"module": "thread", "config": {"max_workers": 0}}, "session.executor.config.max_workers"),
        ({"module": "process", "config": {"workers": 2}}, "session.executor.config.workers"),
        ({"module": "local", "config": {"x": 1}}, "session.executor.config.x"),
        ({"module": "executor-dask", "config": {}}, "executor-dask.address"),
        (
            {"module": "executor-dask", "config": {"local": {"n_workers": -1}}},
            "executor-dask.local.n_workers",
        ),
        (
            {"module": "executor-dask", "config": {"address": "tcp://x:1", "cancel_timeout": 0}},
            "executor-dask.cancel_timeout",
        ),
        ({"module": "tool-compute"}, "session.executor.module"),
    ],
)
async def test_a_bad_executor_config_is_one_line_naming_the_key(
    executor: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        async with AmplifierSession(plan([call("a")], executor)):
            pass
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("entry", "field"),
    [
        ({"session": {"executor": 3}}, "session.executor"),
        ({"session": {"executor": {"config": {}}}}, "session.executor.module"),
        ({"tools": [{"module": "tool-compute", "executor": []}]}, "tools[0].executor"),
    ],
)
def test_a_bad_executor_entry_in_a_plan_names_the_field(entry: dict[str, Any], field: str) -> None:
    data: dict[str, Any] = {"session": {"orchestrator": "loop-basic", "context": "context-simple"}}
    data["session"].update(entry.get("session", {}))
    if "tools" in entry:
        data["tools"] = entry["tools"]
    with pytest.raises(ConfigError, match=field.replace("[", r"\[").replace("]", r"\]")):
        MountPlan.from_dict(data)


def test_executor_entries_round_trip_through_to_dict() -> None:
    data = {
        "session": {
            "orchestrator": "loop-basic",
            "context": "context-simple",
            "executor": {"module": "process", "config": {"max_workers": 2}},
        },
        "tools": [{"module": "tool-compute", "executor": {"module": "local"}}],
    }
    parsed = MountPlan.from_dict(data)
    assert parsed.executor is not None
    assert parsed.executor.config == {"max_workers": 2}
    assert MountPlan.from_dict(parsed.to_dict()) == parsed
    assert "executor" not in parsed.session_settings


def test_dask_config_needs_exactly_one_place() -> None:
    with pytest.raises(ConfigError, match="either address"):
        DaskExecutorConfig.from_config({"address": "tcp://x:1", "local": {}})
    config = DaskExecutorConfig.from_config({"local": {"n_workers": 3, "processes": False}})
    assert (config.n_workers, config.processes, config.address) == (3, False, None)


@needs("distributed")
async def test_validate_reports_a_bad_executor_config() -> None:
    good = plan([call("a")], {"module": "executor-dask", "config": {"local": {"n_workers": 1}}})
    assert (await validate_plan(good)).errors == ()
    bad = plan([call("a")], {"module": "thread", "config": {"max_workers": "many"}})
    bad["tools"][0]["executor"] = {"module": "executor-dask", "config": {"address": 7}}
    errors = (await validate_plan(bad)).errors
    assert any("session.executor.config.max_workers" in e for e in errors), errors
    assert any("executor-dask.address" in e for e in errors), errors


@needs("distributed")
async def test_a_local_cluster_of_its_own_lives_as_long_as_the_session() -> None:
    executor = {
        "module": "executor-dask",
        "config": {"local": {"n_workers": 1, "processes": False}},
    }
    async with AmplifierSession(plan([call("a", value=1), call("b", value=2)], executor)) as s:
        result = await s.run("go")
        messages = await s.coordinator.get("context").get_messages()
        (dask,) = set(s.coordinator.tool_executors.values())
        assert dask.cluster is not None
    assert result.status == "success"
    assert [json.loads(c)["value"] for c in tool_contents(messages).values()] == [1, 2]
    assert dask.cluster is None  # closed by the session's cleanup
    assert dask.client is None
