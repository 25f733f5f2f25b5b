"""Plans and helpers shared by the durable-session tests."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

MODULES = Path(__file__).parent / "modules"


def queue() -> str:
    """A task queue of one test's own."""
    return f"q-{uuid.uuid4().hex[:12]}"


def reply(text: str = "", calls: list[tuple[str, str, dict[str, Any]]] = ()) -> dict[str, Any]:
    """A ChatResponse dict: text, or tool calls (id, name, arguments)."""
    content = [{"type": "text", "text": text}] if text else []
    tool_calls = [{"id": i, "name": n, "arguments": a} for i, n, a in calls]
    found: dict[str, Any] = {"content": content, "finish_reason": "tool_calls" if calls else "stop"}
    if tool_calls:
        found["tool_calls"] = tool_calls
    found["usage"] = {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15}
    return found


def demo_plan(
    replies: list[dict[str, Any]], durable: dict[str, Any] | None = None
) -> dict[str, Any]:
    """provider-scripted and tool-demo (no delay) under loop-basic."""
    plan: dict[str, Any] = {
        "session": {"orchestrator": "loop-basic", "context": "context-simple"},
        "providers": [{"module": "provider-scripted", "config": {"responses": replies}}],
        "tools": [{"module": "tool-demo", "config": {"delay": 0}}],
    }
    if durable is not None:
        plan["session"]["durable"] = durable
    return plan


def marker_plan(
    replies: list[dict[str, Any]], marks: Path, durable: dict[str, Any] | None = None
) -> dict[str, Any]:
    """provider-positional, tool-marker (``marker``), its idempotent twin (``again``) and
    its twin that asks for an approval (``guarded``)."""
    plan: dict[str, Any] = {
        "session": {"orchestrator": "loop-basic", "context": "context-simple"},
        "providers": [
            {
                "module": "provider-positional",
                "source": str(MODULES),
                "config": {"replies": replies},
            }
        ],
        "tools": [
            {"module": "tool-marker", "source": str(MODULES), "config": {"dir": str(marks)}},
            {
                "module": "tool-marker",
                "source": str(MODULES),
                "config": {"dir": str(marks), "idempotent": True, "name": "again"},
            },
            {
                "module": "tool-marker",
                "source": str(MODULES),
                "config": {"dir": str(marks), "guarded": True, "name": "guarded"},
            },
        ],
    }
    if durable is not None:
        plan["session"]["durable"] = durable
    return plan


FAST = {
    "provider": {"heartbeat_timeout": 2, "start_to_close_timeout": 60},
    "tools": {"heartbeat_timeout": 2, "start_to_close_timeout": 60},
    "sticky_timeout": 1,
}
"""Durable settings that notice a dead worker within seconds."""


def agent_plan(
    scripts: dict[str, list[dict[str, Any]]],
    marks: Path,
    durable: dict[str, Any] | None = None,
    *,
    events: Path | None = None,
    budget: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """`marker_plan` with tool-task and one agent, ``helper``; the positional provider
    answers by ``scripts`` (a child's script is the one of its instruction). ``events``
    records the task events and each session's ``execution:start`` / ``execution:end``
    there (a child inherits the hook, so it records its own)."""
    plan = marker_plan([], marks, durable)
    plan["providers"][0]["config"] = {"scripts": scripts}
    plan["tools"].append({"module": "tool-task"})
    plan["agents"] = {"helper": {"description": "Helps.", "instruction": "You help."}}
    if budget is not None:
        plan["session"]["budget"] = budget
    if events is not None:
        recorded = [
            "task:agent_spawned",
            "task:agent_completed",
            "execution:start",
            "execution:end",
        ]
        config = {"path": str(events), "events": recorded}
        plan["hooks"] = [{"module": "hooks-record", "source": str(MODULES), "config": config}]
    return plan


@contextlib.asynccontextmanager
async def served(plan: dict[str, Any], address: str) -> AsyncIterator[Any]:
    """A worker of ``plan`` on a task queue of its own, and a client of that queue."""
    from amplifier_anyio.temporal import SessionWorker, TemporalSessions  # noqa: PLC0415

    task_queue = queue()
    async with (
        SessionWorker(plan, address=address, task_queue=task_queue),
        TemporalSessions(address=address, task_queue=task_queue) as sessions,
    ):
        yield sessions
