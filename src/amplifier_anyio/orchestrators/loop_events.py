"""loop-events: loop-basic's turn with a scheduler stage before every tool call.

A short policy over the shared turn engine (`amplifier_anyio.runtime._turn`). Before a
call's ``tool:pre``, the orchestrator emits ``tool:selecting`` and collects the answer of
**every** scheduler (the handlers of that event) with
[`emit_and_collect`][amplifier_anyio.HookRegistry.emit_and_collect], each under its own
``scheduler_timeout``; a scheduler that raises, hangs or answers garbage is logged and
ignored. The answers are reduced by `reduce_answers`:

* any ``deny`` vetoes the call: its result is ``Error: <reason>``;
* otherwise the ``modify`` with the highest ``HookResult.priority`` wins (ties: the
  earliest-registered scheduler); its ``data`` names ``{"tool", "arguments"}`` (either may
  be left out: the model's choice stands for it). A tool that is not mounted, or
  arguments that are not an object, give the call an error result instead;
* otherwise the model's choice stands.

Then ``tool:selected {tool, source, original_tool, tool_call_id}`` and the shared batch's
per-call path (``tool:pre``, the tool, ``tool:post`` / ``tool:error``). Calls run one
after another by default (``parallel_tools: false``); with ``parallel_tools: true`` the
scheduler stage runs for every call first, in call order, then the chosen calls run as one
parallel batch. Either way the stage runs inside the batch, after the assistant message is
stored: a cancel during it leaves no call unanswered (the unfinished ones get the
cancelled result). Nobody listening costs nothing: no payload is built for an event
without handlers.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, ClassVar

import attrs

from ..config_schema import ConfigSchema
from ..events import TOOL_SELECTED, TOOL_SELECTING
from ..kernel._coordinator import ModuleCoordinator
from ..kernel._hooks import HookAnswer, utc_timestamp
from ..models import ChatResponse, ToolCall
from ..models._validators import number
from ..runtime._requests import assistant_message
from ..runtime._tool_batch import ToolBatch, _decode_arguments
from .loop_basic import LoopBasicConfig, LoopBasicOrchestrator

if TYPE_CHECKING:
    from ..runtime._turn import Turn

__all__ = (
    "LoopEventsConfig",
    "LoopEventsOrchestrator",
    "SchedulingBatch",
    "reduce_answers",
    "DENIED_BY_SCHEDULER",
    "mount",
)

logger = logging.getLogger(__name__)

DENIED_BY_SCHEDULER = "Tool execution denied by scheduler"
"""The reason of a veto that gives none (upstream's text)."""


@attrs.frozen(kw_only=True)
class LoopEventsConfig(LoopBasicConfig):
    """loop-events' settings: loop-basic's, with calls one after another by default, and
    ``scheduler_timeout``, the seconds each scheduler may take per call."""

    parallel_tools: bool = False
    scheduler_timeout: float = attrs.field(default=1.0, validator=number())

    module_id: ClassVar[str] = "loop-events"


def reduce_answers(answers: Iterable[HookAnswer]) -> HookAnswer | None:
    """The answer that decides a call: the first ``deny``; else the ``modify`` with the
    highest priority (ties: the earliest registered); else None (the model's choice).

    Other actions count as continue. A ``modify`` whose data is not a dict naming
    ``tool`` or ``arguments`` is garbage: logged and ignored.
    """
    best: HookAnswer | None = None
    for answer in answers:
        result = answer.result
        if result.action == "deny":
            return answer
        if result.action != "modify":
            continue
        data = result.data
        if not isinstance(data, dict) or not ("tool" in data or "arguments" in data):
            logger.warning(
                "scheduler %s answered modify without 'tool' or 'arguments'; ignored",
                answer.handler,
            )
            continue
        if best is None or (result.priority, -answer.registered) > (
            best.result.priority,
            -best.registered,
        ):
            best = answer
    return best


@attrs.define(eq=False)
class SchedulingBatch(ToolBatch):
    """A tool batch whose calls pass the scheduler stage before their ``tool:pre``."""

    scheduler_timeout: float = 1.0
    _chosen: dict[int, ToolCall | None] = attrs.field(init=False, factory=dict)
    """Per call once its stage ran: the call to run, or None (answered already)."""

    async def _run_parallel(self) -> None:
        # Every call's stage first, one after another, so schedulers see a fixed order.
        for index, call in enumerate(self.calls):
            await self._choose(index, call)
        await super()._run_parallel()

    async def _execute(self, index: int, call: ToolCall) -> None:
        chosen = self._chosen[index] if index in self._chosen else await self._choose(index, call)
        if chosen is not None:
            await super()._execute(index, chosen)

    async def _choose(self, index: int, call: ToolCall) -> ToolCall | None:
        try:
            chosen = await self._select(index, call)
        except Exception as exc:  # noqa: BLE001 - one call's failure is that call's result
            logger.warning("scheduler stage of %s (%s) failed: %r", call.id, call.name, exc)
            await self._error(index, call, type(exc).__name__, str(exc) or repr(exc))
            chosen = None
        self._chosen[index] = chosen
        return chosen

    def selecting_payload(self, index: int, call: ToolCall) -> dict[str, Any]:
        """The ``tool:selecting`` data (built only when a scheduler listens).

        ``emit_and_collect`` stamps nothing, so the payload carries its own ``timestamp``
        and the turn's ``trace_id``."""
        payload = {
            "tool_name": call.name,
            "tool_input": _decode_arguments(call.arguments)[0],
            "available_tools": list(self.tools),
            "tool_call_id": call.id,
            "index": index,
            "parallel_group_id": self.parallel_group_id,
        }
        if self._trace_id is not None:
            payload["trace_id"] = self._trace_id
        payload["timestamp"] = utc_timestamp()
        return payload

    async def _select(self, index: int, call: ToolCall) -> ToolCall | None:
        """The scheduler stage of one call: the call to run, or None when it is answered."""
        chosen, source = call, "llm"
        if self.hooks.has_handlers(TOOL_SELECTING):
            answers = await self.hooks.emit_and_collect(
                TOOL_SELECTING,
                self.selecting_payload(index, call),
                self.scheduler_timeout,
                answers=True,
            )
            decisive = reduce_answers(answers)
            if decisive is not None and decisive.result.action == "deny":
                self._slots[index] = f"Error: {decisive.result.reason or DENIED_BY_SCHEDULER}"
                return None
            if decisive is not None:
                rewritten = self._rewrite(call, decisive)
                if isinstance(rewritten, str):
                    await self._error(index, call, "SchedulerError", rewritten)
                    return None
                chosen, source = rewritten, "scheduler"
        if self.hooks.has_handlers(TOOL_SELECTED):
            changed = chosen.name != call.name
            await self.hooks.emit(
                TOOL_SELECTED,
                {
                    "tool": chosen.name,
                    "source": source,
                    "original_tool": call.name if changed else None,
                    "tool_call_id": call.id,
                },
            )
        return chosen

    def _rewrite(self, call: ToolCall, answer: HookAnswer) -> ToolCall | str:
        """The call a winning modify names, or the problem with it."""
        data = answer.result.data
        assert isinstance(data, dict)  # reduce_answers keeps no other
        tool = data.get("tool", call.name)
        arguments = data.get("arguments", call.arguments)
        if not isinstance(tool, str) or tool not in self.tools:
            return f"scheduler {answer.handler} chose tool {tool!r}, which is not mounted"
        if not isinstance(arguments, dict):
            kind = type(arguments).__name__
            return f"scheduler {answer.handler} gave arguments of type {kind}, not an object"
        return attrs.evolve(call, name=tool, arguments=arguments)


class LoopEventsOrchestrator(LoopBasicOrchestrator):
    """loop-basic with the scheduler stage (same engine, events and invariants)."""

    name = "loop-events"

    def __init__(self, config: LoopEventsConfig | dict[str, Any] | None = None) -> None:
        if not isinstance(config, LoopEventsConfig):
            config = LoopEventsConfig.from_dict(config)
        super().__init__(config)
        self.scheduler_timeout = config.scheduler_timeout
        self.tool_runner = self.run_tools

    async def run_tools(self, turn: Turn, response: ChatResponse, calls: list[ToolCall]) -> None:
        """The engine's tool policy: one `SchedulingBatch` per response."""
        batch = turn.new_batch(calls, SchedulingBatch, scheduler_timeout=self.scheduler_timeout)
        await turn.run_tool_batch(batch, assistant_message(response, calls))


async def mount(coordinator: ModuleCoordinator, config: dict[str, Any] | None = None) -> None:
    """Mount loop-events as the session's orchestrator."""
    await coordinator.mount("orchestrator", LoopEventsOrchestrator(config))


CONFIG_SCHEMA = ConfigSchema.from_attrs("loop-events", LoopEventsConfig)
"""The keys loop-events accepts (checked by ``validate --strict``)."""
