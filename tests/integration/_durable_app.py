"""A small durable application for the durable-run tests, usable in any process.

The model is a pure function of the conversation (so a resumed process gets the same
answers): on a user message it asks for three tool calls, ``append`` twice and
``append_once`` (idempotent) once — or, when the prompt starts with ``approve``, ``append``,
``guarded`` (which defers until approved) and ``append``; on tool results it answers with
their contents. The tools append one line per side effect to a file, so a test can count
how often each call really ran.

Run as ``python _durable_app.py TRANSCRIPT SIDE_EFFECTS allow|deny`` it opens the
transcript in a fresh process, resumes with that decision for every pending call, and
prints the TurnResult and the conversation as JSON.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

from amplifier_anyio import AmplifierSession, ApprovalDeferred, TurnResult
from amplifier_anyio.kernel import current_tool_call
from amplifier_anyio.models import ChatRequest, ChatResponse, TextBlock, ToolCall
from amplifier_anyio.providers.scripted import ScriptedProvider


def brain(request: ChatRequest) -> ChatResponse:
    """Three calls on a user message, an answer on tool results."""
    messages = request.messages
    last = messages[-1]
    turn = sum(1 for m in messages if m.role == "user")
    if last.role == "user":
        prompt = last.content if isinstance(last.content, str) else ""
        names = ["append", "guarded", "append"] if prompt.startswith("approve") else None
        names = names or ["append", "append", "append_once"]
        calls = [
            ToolCall(id=f"c{turn}-{j}", name=name, arguments={"tag": f"{turn}-{j}"})
            for j, name in enumerate(names)
        ]
        return ChatResponse(content=[TextBlock(text=f"working on {turn}")], tool_calls=calls)
    results = []
    for message in reversed(messages):
        if message.role != "tool":
            break
        results.append(str(message.content))
    return ChatResponse(content=[TextBlock(text="answer: " + " | ".join(reversed(results)))])


class AppendTool:
    """Appends the call id to the side-effect file: one line per real run."""

    description = "append a line"

    def __init__(self, name: str, path: Path) -> None:
        self.name = name
        self.path = path
        self.input_schema = {"type": "object", "properties": {"tag": {"type": "string"}}}

    async def execute(self, input: dict[str, Any]) -> str:
        call = current_tool_call()
        assert call is not None
        await anyio.to_thread.run_sync(_append_line, self.path, f"{call.tool_call_id}\n")
        return f"ok {call.tool_call_id}"


class AppendOnceTool(AppendTool):
    """An idempotent tool: it appends its idempotency key unless the file has it already."""

    idempotent = True

    async def execute(self, input: dict[str, Any]) -> str:
        call = current_tool_call()
        assert call is not None
        assert call.idempotency_key is not None, "a journaling context gives every call a key"
        line = f"key {call.idempotency_key} {call.tool_call_id}\n"
        await anyio.to_thread.run_sync(_append_unless_present, self.path, line)
        return f"ok {call.tool_call_id} {call.idempotency_key}"


class GuardedTool(AppendTool):
    """Defers its own approval until the call is approved, then appends."""

    async def execute(self, input: dict[str, Any]) -> str:
        call = current_tool_call()
        assert call is not None
        if not call.approved:
            raise ApprovalDeferred(f"Let {call.tool_call_id} append {input.get('tag')}?")
        return await super().execute(input)


def _append_line(path: Path, line: str) -> None:
    with path.open("a", encoding="utf-8") as handle:
        handle.write(line)


def _append_unless_present(path: Path, line: str) -> None:
    key = line.split()[1]
    if path.exists() and any(
        entry.split()[:2] == ["key", key] for entry in path.read_text("utf-8").splitlines()
    ):
        return
    _append_line(path, line)


def plan(transcript: Path) -> dict[str, Any]:
    """loop-basic over context-persistent at ``transcript``; providers and tools come
    from :func:`open_session`."""
    return {
        "session": {
            "orchestrator": "loop-basic",
            "context": {"module": "context-persistent", "config": {"path": str(transcript)}},
        },
    }


async def open_session(
    transcript: Path,
    side_effects: Path,
    *,
    hooks: list[dict[str, Any]] | None = None,
    context: str = "context-persistent",
    orchestrator: str = "loop-basic",
    **kwargs: Any,
) -> tuple[AmplifierSession, ScriptedProvider]:
    """An initialised session with the app's model and tools mounted (``async with`` it)."""
    mount_plan = plan(transcript)
    if hooks:
        mount_plan["hooks"] = hooks
    if context != "context-persistent":
        mount_plan["session"]["context"] = context
    mount_plan["session"]["orchestrator"] = orchestrator
    session = AmplifierSession(mount_plan, **kwargs)
    provider = ScriptedProvider(brain)
    await session.initialize()
    await session.coordinator.mount("providers", provider, name="scripted")
    for tool in (
        AppendTool("append", side_effects),
        AppendOnceTool("append_once", side_effects),
        GuardedTool("guarded", side_effects),
    ):
        await session.coordinator.mount("tools", tool, name=tool.name)
    return session, provider


def describe(result: TurnResult, messages: list[dict[str, Any]]) -> dict[str, Any]:
    """What a test compares between processes."""
    return {
        "status": str(result.status),
        "text": result.text,
        "pending": [p.call_id for p in result.pending_approvals],
        "messages": [
            {k: m.get(k) for k in ("role", "content", "tool_call_id") if k in m} for m in messages
        ],
    }


async def _resume_in_fresh_process(transcript: str, side_effects: str, decision: str) -> None:
    session, _ = await open_session(Path(transcript), Path(side_effects))
    async with session:
        context = session.coordinator.get("context")
        pending = context.pending_approvals()
        result = await session.resume(approvals={p.call_id: decision for p in pending})
        messages = await context.get_messages()
    os.write(sys.stdout.fileno(), json.dumps(describe(result, messages)).encode() + b"\n")


if __name__ == "__main__":
    anyio.run(
        _resume_in_fresh_process, *sys.argv[1:4], backend=os.environ.get("BACKEND", "asyncio")
    )
