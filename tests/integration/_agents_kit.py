"""Helpers of the sub-agent tests (test_agents*.py): a plan with two agents, scripted
replies, and ``Children`` — a ``session.child_setup`` callback that mounts each child's
provider and probe tool and records its events."""

from __future__ import annotations

from typing import Any

from amplifier_anyio import (
    AmplifierSession,
    ChatRequest,
    ChatResponse,
    TextBlock,
    ToolCall,
    ToolResult,
    Usage,
)
from amplifier_anyio.providers.scripted import ScriptedProvider
from amplifier_anyio.testing import EventRecorder

HANG_GUARD = 30.0  # seconds: only a broken build waits this long


def plan(
    context: Any = "context-simple", session: dict[str, Any] | None = None, **loop: Any
) -> dict[str, Any]:
    orchestrator: Any = {"module": "loop-basic", "config": loop} if loop else "loop-basic"
    return {
        "session": {"orchestrator": orchestrator, "context": context, **(session or {})},
        "providers": [{"module": "provider-scripted", "config": {}}],
        "tools": [{"module": "tool-task"}],
        "agents": {
            "researcher": {"description": "Finds facts.", "instruction": "You research."},
            "writer": {"description": "Writes prose.", "instruction": "You write."},
        },
    }


def answer(text: str, tokens: int = 0) -> ChatResponse:
    usage = Usage(input_tokens=tokens, output_tokens=0, total_tokens=tokens) if tokens else None
    return ChatResponse(content=[TextBlock(text=text)], usage=usage)


def calls(*pairs: tuple[str, dict[str, Any]], prefix: str = "c", tokens: int = 0) -> ChatResponse:
    usage = Usage(input_tokens=tokens, output_tokens=0, total_tokens=tokens) if tokens else None
    return ChatResponse(
        content=[TextBlock(text="working")],
        tool_calls=[
            ToolCall(id=f"{prefix}{i}", name=name, arguments=args)
            for i, (name, args) in enumerate(pairs)
        ],
        usage=usage,
    )


def task(agent: str, instruction: str = "go") -> tuple[str, dict[str, Any]]:
    return ("task", {"agent": agent, "instruction": instruction})


def tool_results(request: ChatRequest) -> list[str]:
    """The contents of the tool messages at the end of a request (the last batch)."""
    found: list[str] = []
    for message in reversed(request.messages):
        if message.role != "tool":
            break
        found.insert(0, message.content if isinstance(message.content, str) else "")
    return found


class Probe:
    """A tool whose body is a coroutine function given per child."""

    def __init__(self, body: Any) -> None:
        self.name = "probe"
        self.description = "probe"
        self.input_schema: dict[str, Any] = {"type": "object", "properties": {}}
        self.body = body

    async def execute(self, input: dict[str, Any]) -> ToolResult:
        return ToolResult(output=await self.body())


class Children:
    """``child_setup``: mounts each child's provider (by agent) and probe tool; keeps the
    child sessions and an event recorder per child."""

    def __init__(self, providers: dict[str, Any], probe: Any = None) -> None:
        self.providers = providers
        self.probe = probe
        self.sessions: list[AmplifierSession] = []
        self.recorders: dict[str, EventRecorder] = {}

    async def __call__(self, child: AmplifierSession) -> None:
        self.sessions.append(child)
        script = self.providers[child.agent_name or ""]
        provider = script(child) if callable(script) and not isinstance(script, list) else script
        if isinstance(provider, list):
            provider = ScriptedProvider(provider)
        await child.coordinator.mount("providers", provider, name="scripted")
        if self.probe is not None:
            await child.coordinator.mount("tools", Probe(self.probe(child)), name="probe")
        recorder = EventRecorder()
        recorder.attach(child.coordinator.hooks)
        self.recorders[child.session_id] = recorder


def of(recorder: EventRecorder, name: str) -> list[dict[str, Any]]:
    return [data for _, data in recorder.get_events(name)]


def paired(messages: list[dict[str, Any]]) -> bool:
    """Every assistant tool call is answered by a tool message right after it, in order."""
    for index, message in enumerate(messages):
        ids = [c["id"] for c in message.get("tool_calls") or ()]
        answered = [m.get("tool_call_id") for m in messages[index + 1 : index + 1 + len(ids)]]
        if ids and answered != ids:
            return False
    return True


async def child_messages(child: AmplifierSession) -> list[dict[str, Any]]:
    context: Any = child.coordinator.get("context")
    return list(await context.get_messages())


def parent_reply(first: ChatResponse) -> Any:
    """The parent: ``first``, then an answer that joins the task results."""

    def reply(request: ChatRequest) -> ChatResponse:
        results = tool_results(request)
        if not results:
            return first
        return answer(" | ".join(results))

    return reply
