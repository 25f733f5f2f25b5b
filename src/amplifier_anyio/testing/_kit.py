"""Real, small stand-ins for the parts of a session a module under test talks to."""

from __future__ import annotations

import copy
import types
from collections.abc import Iterable
from typing import Any, Literal

import anyio

from ..events import ALL_EVENTS
from ..kernel._coordinator import ModuleCoordinator
from ..kernel._hooks import HookRegistry
from ..models import HookResult, ToolResult

__all__ = (
    "MockCoordinator",
    "MockTool",
    "MockContextManager",
    "EventRecorder",
    "ScriptedOrchestrator",
    "ScriptedApprovalSystem",
    "RecordingDisplaySystem",
)


class ScriptedApprovalSystem:
    """Answers approval requests from a list, then with ``default_answer``; records prompts."""

    def __init__(self, answers: Iterable[str] = (), default_answer: str = "Allow") -> None:
        self.answers = list(answers)
        self.default_answer = default_answer
        self.requests: list[dict[str, Any]] = []

    async def request_approval(
        self,
        prompt: str,
        options: list[str],
        timeout: float,
        default: Literal["allow", "deny", "defer"],
    ) -> str:
        """Record the request and give the next scripted answer."""
        await anyio.lowlevel.checkpoint()
        self.requests.append(
            {"prompt": prompt, "options": options, "timeout": timeout, "default": default}
        )
        return self.answers.pop(0) if self.answers else self.default_answer


class RecordingDisplaySystem:
    """Collects ``show_message`` calls as ``(message, level, source)`` tuples."""

    def __init__(self) -> None:
        self.messages: list[tuple[str, str, str]] = []

    def show_message(
        self, message: str, level: Literal["info", "warning", "error"], source: str = "hook"
    ) -> None:
        """Record one message."""
        self.messages.append((message, level, source))


class MockCoordinator(ModuleCoordinator):
    """A real [`ModuleCoordinator`][amplifier_anyio.ModuleCoordinator] with a fake session; records
    mounts and unmounts.

    ``hooks`` is a real HookRegistry. The default display system records messages; there is
    no approval system unless one is given, so ``ask_user`` fails closed as in production.
    """

    def __init__(
        self,
        config: dict[str, Any] | None = None,
        *,
        session_id: str = "test-session",
        parent_id: str | None = None,
        approval_system: Any = None,
        display_system: Any = None,
    ) -> None:
        session = types.SimpleNamespace(
            session_id=session_id,
            parent_id=parent_id,
            config=config
            if config is not None
            else {"session": {"orchestrator": "test-orchestrator", "context": "test-context"}},
        )
        super().__init__(
            session,
            approval_system=approval_system,
            display_system=display_system or RecordingDisplaySystem(),
        )
        self.hooks.set_default_fields(session_id=session_id, parent_id=parent_id)
        self.mount_history: list[dict[str, Any]] = []
        self.unmount_history: list[dict[str, Any]] = []

    async def mount(self, mount_point: str, module: Any, name: str | None = None) -> None:
        """Mount as the real coordinator does, and record it."""
        await super().mount(mount_point, module, name)
        self.mount_history.append({"mount_point": mount_point, "module": module, "name": name})

    async def unmount(self, mount_point: str, name: str | None = None) -> None:
        """Unmount as the real coordinator does, and record it."""
        await super().unmount(mount_point, name)
        self.unmount_history.append({"mount_point": mount_point, "name": name})


class MockTool:
    """A tool that returns ``output`` (or fails with ``error``) after ``delay`` seconds.

    ``calls`` records every input it was executed with.
    """

    def __init__(
        self,
        name: str = "mock_tool",
        output: Any = "Success",
        *,
        delay: float = 0.0,
        error: str | None = None,
        description: str | None = None,
        input_schema: dict[str, Any] | None = None,
    ) -> None:
        self.name = name
        self.output = output
        self.delay = delay
        self.error = error
        self.description = description or f"Mock tool: {name}"
        self.input_schema = input_schema or {"type": "object", "properties": {}}
        self.calls: list[dict[str, Any]] = []

    @property
    def call_count(self) -> int:
        """How many times the tool was executed."""
        return len(self.calls)

    async def execute(self, input: dict[str, Any]) -> ToolResult:
        """Record the call, sleep ``delay``, return the configured result."""
        self.calls.append(input)
        await anyio.sleep(self.delay)
        if self.error is not None:
            return ToolResult(success=False, error={"message": self.error})
        return ToolResult(success=True, output=self.output)


class MockContextManager:
    """An in-memory context manager with no compaction; ``messages`` is the history."""

    def __init__(self, messages: list[dict[str, Any]] | None = None) -> None:
        self.messages: list[dict[str, Any]] = list(messages or [])

    async def add_message(self, message: dict[str, Any]) -> None:
        """Append a copy of ``message``."""
        await anyio.lowlevel.checkpoint()
        self.messages.append(copy.deepcopy(message))

    async def add_messages(self, messages: list[dict[str, Any]]) -> None:
        """Append copies of several messages."""
        await anyio.lowlevel.checkpoint()
        self.messages.extend(copy.deepcopy(messages))

    async def get_messages(self) -> list[dict[str, Any]]:
        """A copy of the history."""
        await anyio.lowlevel.checkpoint()
        return copy.deepcopy(self.messages)

    async def get_messages_for_request(
        self, token_budget: int | None = None, provider: Any | None = None
    ) -> list[dict[str, Any]]:
        """The whole history (no compaction)."""
        return await self.get_messages()

    async def set_messages(self, messages: list[dict[str, Any]]) -> None:
        """Replace the history."""
        await anyio.lowlevel.checkpoint()
        self.messages = copy.deepcopy(messages)

    async def clear(self) -> None:
        """Empty the history."""
        await anyio.lowlevel.checkpoint()
        self.messages.clear()


class EventRecorder:
    """Records events as ``(event, data)`` pairs; attach it to a registry or call it directly."""

    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    async def emit(self, event: str, data: dict[str, Any]) -> HookResult:
        """Record one event (usable as a hook handler or in place of a registry)."""
        self.events.append((event, dict(data)))
        return HookResult()

    record = emit

    async def __call__(self, event: str, data: dict[str, Any]) -> HookResult:
        """Record one event when registered as a handler."""
        return await self.emit(event, data)

    def attach(
        self, hooks: HookRegistry, events: Iterable[str] = ALL_EVENTS, priority: int = 1_000_000
    ) -> None:
        """Register on ``hooks`` for ``events``, late (high priority), to see final data."""
        for event in events:
            hooks.register(event, self, priority=priority, name="event-recorder")

    def get_events(self, event_type: str | None = None) -> list[tuple[str, dict[str, Any]]]:
        """Every recorded event, or only those named ``event_type``."""
        return [e for e in self.events if event_type is None or e[0] == event_type]

    def names(self) -> list[str]:
        """The recorded event names, in order."""
        return [name for name, _ in self.events]

    def clear(self) -> None:
        """Forget what was recorded."""
        self.events.clear()


class ScriptedOrchestrator:
    """Answers each turn with the next scripted response, then ``"DONE"``.

    It adds the user and assistant messages to the context and emits ``execution:start``
    and ``execution:end``; unlike upstream's it accepts ``**kwargs`` (the coordinator).
    """

    def __init__(self, responses: Iterable[str]) -> None:
        self.responses = list(responses)
        self.calls: list[str] = []

    async def execute(
        self,
        prompt: str,
        context: Any,
        providers: dict[str, Any],
        tools: dict[str, Any],
        hooks: Any,
        **kwargs: Any,
    ) -> str:
        """Record the prompt and return the next response."""
        self.calls.append(prompt)
        response = self.responses.pop(0) if self.responses else "DONE"
        await hooks.emit("execution:start", {"prompt": prompt})
        await context.add_message({"role": "user", "content": prompt})
        await context.add_message({"role": "assistant", "content": response})
        await hooks.emit("execution:end", {"response": response, "status": "completed"})
        return response
