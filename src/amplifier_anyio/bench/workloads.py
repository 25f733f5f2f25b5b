"""The work the benchmarks time: a full-loop fan-out turn and the floors it is held to.

Everything a timed run needs (the provider's script, the tool calls, the tools, the hook
handlers) is built by a ``prepare`` step outside the timed region; the timed region is one
``await`` of the returned coroutine function.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import anyio.lowlevel
import attrs

from ..events import TOOL_POST, TOOL_PRE
from ..kernel._coordinator import ModuleCoordinator
from ..kernel._hooks import HookRegistry
from ..kernel._turns import TurnStatus
from ..models import ChatResponse, HookResult, TextBlock, ToolCall, ToolResult
from ..orchestrators.loop_basic import LoopBasicOrchestrator
from ..providers.scripted import ScriptedProvider
from ..runtime import assistant_message
from ..runtime._tool_batch import ToolBatch

__all__ = (
    "Job",
    "LeanContext",
    "SleepTool",
    "noop_handler",
    "plain_noop_handler",
    "sleep_into",
    "taskgroup_floor",
    "FanoutTurn",
    "prepare_batch",
    "prepare_floor",
    "tool_calls",
    "register_noop_hooks",
)

Job = Callable[[], Awaitable[Any]]
"""One timed unit of work: awaited once between two clock reads."""

_CONTINUE = HookResult()
_OK = ToolResult(success=True, output="ok")


async def noop_handler(event: str, data: dict[str, Any]) -> HookResult:
    """A hook handler that does nothing and lets the call continue."""
    return _CONTINUE


def plain_noop_handler(event: str, data: dict[str, Any]) -> HookResult:
    """The same as a plain function: the registry calls it inline, on the loop."""
    return _CONTINUE


async def sleep_into(results: list[Any], index: int, delay: float) -> None:
    """The floor's unit of work: sleep ``delay`` (a checkpoint at 0), fill one slot."""
    await anyio.sleep(delay)
    results[index] = index


async def taskgroup_floor(n: int, delay: float) -> list[Any]:
    """The floor: a bare task group running ``n`` sleeps into a pre-sized list."""
    results: list[Any] = [None] * n
    async with anyio.create_task_group() as tg:
        for index in range(n):
            tg.start_soon(sleep_into, results, index, delay)
    return results


class SleepTool:
    """The benchmark's tool: sleeps ``delay`` seconds (a checkpoint at 0), answers ``ok``."""

    name = "sleep"
    description = "Sleep for the benchmark's delay."
    input_schema: dict[str, Any] = {"type": "object", "properties": {}}  # noqa: RUF012

    def __init__(self, delay: float) -> None:
        self.delay = delay

    async def execute(self, input: dict[str, Any]) -> ToolResult:
        """Sleep, then succeed."""
        await anyio.sleep(self.delay)
        return _OK


class LeanContext:
    """An in-memory context manager that stores messages as given, no copies, no compaction.

    It keeps the context's cost out of the runtime's numbers; each call still checkpoints,
    as every context manager's async methods do.
    """

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []

    async def add_message(self, message: dict[str, Any]) -> None:
        """Append ``message``."""
        await anyio.lowlevel.checkpoint()
        self.messages.append(message)

    async def add_messages(self, messages: list[dict[str, Any]]) -> None:
        """Append ``messages`` with one checkpoint, as the built-in contexts' batch write
        does (a tool batch writes its results with it; one checkpoint per result would
        time the context's scheduling, not the runtime)."""
        await anyio.lowlevel.checkpoint()
        self.messages.extend(messages)

    async def get_messages(self) -> list[dict[str, Any]]:
        """The history (a new list)."""
        await anyio.lowlevel.checkpoint()
        return list(self.messages)

    async def get_messages_for_request(
        self, token_budget: int | None = None, provider: Any | None = None
    ) -> list[dict[str, Any]]:
        """The whole history."""
        return await self.get_messages()

    async def set_messages(self, messages: list[dict[str, Any]]) -> None:
        """Replace the history."""
        await anyio.lowlevel.checkpoint()
        self.messages = list(messages)

    async def clear(self) -> None:
        """Forget the history."""
        await anyio.lowlevel.checkpoint()
        self.messages = []


def tool_calls(n: int) -> list[ToolCall]:
    """``n`` calls of the sleep tool, with distinct ids."""
    return [ToolCall(id=f"call_{index}", name=SleepTool.name) for index in range(n)]


def register_noop_hooks(hooks: HookRegistry, count: int) -> None:
    """``count`` no-op handlers on ``tool:pre`` and ``count`` on ``tool:post``."""
    for index in range(count):
        hooks.register(TOOL_PRE, noop_handler, name=f"bench-pre-{index}")
        hooks.register(TOOL_POST, noop_handler, name=f"bench-post-{index}")


@attrs.define(eq=False)
class FanoutTurn:
    """One loop-basic turn: a reply asking for ``n`` parallel calls, then a final answer.

    Driven through
    [`LoopBasicOrchestrator.run_turn`][amplifier_anyio.orchestrators.LoopBasicOrchestrator.run_turn]
    with a real [`ModuleCoordinator`][amplifier_anyio.ModuleCoordinator] (its hook registry,
    cancellation token and hook-result processing) and a `LeanContext`. `prepare` builds a fresh
    coordinator, context and provider; `check` proves the turn did all the work.
    """

    n: int
    delay: float
    hooks: int = 0
    _first: ChatResponse = attrs.field(init=False)
    _final: ChatResponse = attrs.field(init=False)
    _tools: dict[str, Any] = attrs.field(init=False)
    _last: tuple[LeanContext, Any] | None = attrs.field(init=False, default=None)

    def __attrs_post_init__(self) -> None:
        self._first = ChatResponse(tool_calls=tool_calls(self.n), finish_reason="tool_calls")
        self._final = ChatResponse(content=[TextBlock(text="done")], finish_reason="stop")
        self._tools = {SleepTool.name: SleepTool(self.delay)}

    def prepare(self) -> Job:
        """A fresh turn, ready to be awaited."""
        coordinator = ModuleCoordinator()
        register_noop_hooks(coordinator.hooks, self.hooks)
        context = LeanContext()
        provider = ScriptedProvider([self._first, self._final])
        orchestrator = LoopBasicOrchestrator()

        async def turn() -> Any:
            result = await orchestrator.run_turn(
                "fan out",
                context,
                {provider.name: provider},
                self._tools,
                coordinator.hooks,
                coordinator=coordinator,
            )
            self._last = (context, result)
            return result

        return turn

    def check(self) -> None:
        """Raise unless the last turn succeeded with one tool message per call."""
        if self._last is None:
            raise RuntimeError("the fan-out turn has not run")
        context, result = self._last
        tool_messages = sum(1 for m in context.messages if m.get("role") == "tool")
        if result.status is not TurnStatus.SUCCESS or tool_messages != self.n:
            msg = f"fan-out turn ended {result.status} with {tool_messages}/{self.n} results"
            raise RuntimeError(msg)
        self._last = None


def prepare_batch(n: int) -> Job:
    """One [`ToolBatch`][amplifier_anyio.runtime.ToolBatch] of ``n`` calls of a zero-delay tool, no
    hooks, no coordinator."""
    calls = tool_calls(n)
    tools = {SleepTool.name: SleepTool(0.0)}
    message = assistant_message(ChatResponse(tool_calls=calls), calls)
    batch = ToolBatch(calls=calls, tools=tools, hooks=HookRegistry())

    async def run() -> None:
        await batch.run(LeanContext(), message)

    return run


def prepare_floor(n: int, delay: float) -> Job:
    """The task-group floor as a timed job."""

    async def run() -> None:
        await taskgroup_floor(n, delay)

    return run
