"""executor-dask with a LocalCluster of its own, in worker *processes*: the session starts
the cluster as a module service, the workers import ``tool-compute`` and rebuild its tools
from the plan entry, and the session's cleanup closes the cluster.

Real clock, real processes: one turn per backend (a cluster start takes seconds).
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from amplifier_anyio import AmplifierSession
from amplifier_anyio.executors.dask import DaskExecutor
from amplifier_anyio.kernel import ServiceState
from tiers import needs

pytestmark = [pytest.mark.anyio, *needs("distributed")]


def plan(calls: list[dict[str, Any]], executor: dict[str, Any] | None) -> dict[str, Any]:
    session: dict[str, Any] = {"orchestrator": "loop-basic", "context": "context-simple"}
    if executor is not None:
        session["executor"] = executor
    replies = [{"content": [], "tool_calls": calls}, {"content": [{"type": "text", "text": "ok"}]}]
    return {
        "session": session,
        "providers": [{"module": "provider-scripted", "config": {"responses": replies}}],
        "tools": [{"module": "tool-compute"}],
    }


def calls() -> list[dict[str, Any]]:
    found = [
        {"id": f"c{i}", "name": "probe", "arguments": {"sleep": 0.01 * (i % 3), "value": i}}
        for i in range(17)
    ]
    found.append({"id": "h1", "name": "hash_work", "arguments": {"rounds": 20_000}})
    found.append({"id": "h2", "name": "hash_work", "arguments": {"rounds": 20_000}})
    found.append({"id": "boom", "name": "probe", "arguments": {"fail": "boom"}})
    return found


async def turn(executor: dict[str, Any] | None) -> tuple[Any, list[dict[str, Any]], Any]:
    async with AmplifierSession(plan(calls(), executor)) as session:
        result = await session.run("go")
        messages = await session.coordinator.get("context").get_messages()
        executors = list(session.coordinator.tool_executors.values())
    services = session.coordinator.statistics().services  # after the session's cleanup
    return result, messages, (executors, services)


def pids_out(messages: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], set[int]]:
    cleaned, pids = [], set()
    for message in messages:
        content = message.get("content")
        if message["role"] == "tool" and isinstance(content, str) and '"pid"' in content:
            data = json.loads(content)
            pids.add(data.pop("pid"))
            cleaned.append({**message, "content": json.dumps(data)})
        else:
            cleaned.append(message)
    return cleaned, pids


async def test_a_turn_on_worker_processes_gives_the_local_context() -> None:
    local, local_messages, _ = await turn(None)
    executor = {"module": "executor-dask", "config": {"local": {"n_workers": 2, "processes": True}}}
    remote, remote_messages, (executors, services) = await turn(executor)
    assert local.status == remote.status == "success"
    expected, _ = pids_out(local_messages)
    got, pids = pids_out(remote_messages)
    assert got == expected
    assert os.getpid() not in pids  # the probes ran in the cluster's worker processes
    tool_messages = {
        m["tool_call_id"]: m["content"] for m in remote_messages if m["role"] == "tool"
    }
    assert tool_messages["boom"] == "Error: boom"
    assert all(isinstance(e, DaskExecutor) for e in executors)
    # The session's cleanup stopped the executor's service and closed its cluster.
    assert [s.state for s in services if s.name == "executor:executor-dask"] == [
        ServiceState.STOPPED
    ]
    assert executors[0].cluster is None
    assert executors[0].client is None
