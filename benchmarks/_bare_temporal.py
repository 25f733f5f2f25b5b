"""The floor of a durable 10-call turn: the same shape on Temporal with nothing of ours.

A workflow whose update ``run`` calls one activity (the "provider"), then ten at once (the
"tools"), then the first again, with the options our session workflow gives its activities
(start-to-close and heartbeat timeouts, one attempt, ``WAIT_CANCELLATION_COMPLETED``), in
Temporal's default sandbox; the activities return constants. What this shape costs on a
machine is what no design that follows DESIGN §17's mapping (one activity per provider call
and per tool call, workflow code in the sandbox) can go below there.

``python -m benchmarks._bare_temporal ADDRESS TASK_QUEUE`` runs its worker (prints
``ready``, runs until killed, leaves by ``os._exit``: a Temporal client can abort at
interpreter exit, temporalio's sdk-python issue 300).
"""

from __future__ import annotations

import asyncio
import os
import sys
from datetime import timedelta
from typing import Any

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.common import RetryPolicy
from temporalio.worker import Worker

CALLS = 10
WORKFLOW = "bare-turn"


@activity.defn(name="bare-ask")
async def ask(position: int) -> dict[str, Any]:
    """The provider: ten calls first, then the answer."""
    if position == 0:
        return {"calls": [f"c{i}" for i in range(CALLS)], "text": ""}
    return {"calls": [], "text": "counted"}


@activity.defn(name="bare-call")
async def call(call_id: str) -> dict[str, Any]:
    """A tool call: its result."""
    return {"tool_call_id": call_id, "content": "3"}


def _options() -> dict[str, Any]:
    return {
        "start_to_close_timeout": timedelta(seconds=120),
        "heartbeat_timeout": timedelta(seconds=2),
        "retry_policy": RetryPolicy(maximum_attempts=1),
        "cancellation_type": workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
    }


@workflow.defn(name=WORKFLOW)
class BareTurn:
    """Serves turns until closed, like the session workflow."""

    def __init__(self) -> None:
        self._closing = False

    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: self._closing)

    @workflow.update(name="run")
    async def turn(self, prompt: str) -> str:
        reply = await workflow.execute_activity("bare-ask", 0, **_options())
        await asyncio.gather(
            *(workflow.execute_activity("bare-call", c, **_options()) for c in reply["calls"])
        )
        answer = await workflow.execute_activity("bare-ask", 1, **_options())
        return str(answer["text"])

    @workflow.signal(name="close")
    def close(self) -> None:
        self._closing = True


async def serve(address: str, task_queue: str) -> None:
    client = await Client.connect(address)
    worker = Worker(
        client,
        task_queue=task_queue,
        workflows=[BareTurn],
        activities=[ask, call],
        sticky_queue_schedule_to_start_timeout=timedelta(seconds=1),
    )
    async with worker:
        print("ready", flush=True)
        await asyncio.Event().wait()


if __name__ == "__main__":
    try:
        asyncio.run(serve(sys.argv[1], sys.argv[2]))
    finally:
        sys.stdout.flush()
        os._exit(1)
