"""tool-task: delegate a job to a sub-agent of the plan (DESIGN §14, ``docs/agents.md``).

Input ``{agent, instruction}`` starts a child session of that agent; ``{session_id,
instruction}`` continues one (the id a previous call returned). The result is
``{response, session_id}`` (plus ``status`` when the child's turn did not succeed). A
call a cancel cuts short is answered "cancelled" with the child's ``session_id`` too
(``ToolCallContext.note_resume``), so the model can resume the child. The tool's
description lists the plan's agents, so the model knows whom it may ask.

The child runs inside this tool call's task, under the calling turn: parallel task calls
run their children concurrently; any cancel of the parent reaches them at once; a child
cannot outlast the parent's deadline or spend past its budget. Delegating deeper than
``session.max_agent_depth`` — an agent that delegates to itself, say — is this call's
error result, never a hang.

``inherit_context`` (``none``, the default; ``recent``; ``all``) gives the child the
parent's conversation so far as plain user / assistant text: ``recent`` the last
``inherit_context_turns`` (default 5) user turns. Config (upstream's keys):
``exclude_tools`` / ``inherit_tools`` and ``exclude_hooks`` / ``inherit_hooks`` filter
what the children inherit (the agent's own entries always stay).

Events on the parent's hooks: ``task:agent_spawned`` ``{agent, sub_session_id,
parent_session_id, tool_call_id}`` (``task:agent_resumed`` ``{session_id, ...}`` when
continuing), then exactly one ``task:agent_completed`` ``{agent, sub_session_id,
parent_session_id, success, status, turn_count, usage, cost_usd, error}`` however the
child ended.
The session needs ``session.spawn`` / ``session.resume`` — an opened session whose plan has
agents registers them.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from typing import Any

import anyio
import attrs

from ..config_schema import ConfigSchema, Setting
from ..errors import ConfigError
from ..events import TASK_AGENT_COMPLETED, TASK_AGENT_RESUMED, TASK_AGENT_SPAWNED
from ..kernel._ids import agent_of_child_id
from ..kernel._tracing import current_tool_call
from ..models import ToolResult
from ..runtime._progress import NO_PROGRESS_FINISH_REASON

__all__ = (
    "TaskTool",
    "TaskRequest",
    "mount",
    "CONFIG_SCHEMA",
    "recent_turns",
    "parse_request",
    "task_answer",
    "answer_succeeded",
)

logger = logging.getLogger(__name__)

_INHERIT = ("none", "recent", "all")
_EVENT_TIMEOUT = 5.0  # seconds the shielded task:agent_completed of a cancelled call may take
_OK = ("success", "incomplete")
_POLICIES = ("exclude_tools", "inherit_tools", "exclude_hooks", "inherit_hooks")

_DESCRIPTION = """Delegate a task to a specialised agent, which works on it on its own and \
answers once with its result.

Give `agent` (one of the agents below) and a complete `instruction`: the agent knows \
nothing of this conversation unless `inherit_context` is "recent" or "all". Several task \
calls in one reply run their agents in parallel. To follow up with the same agent, pass \
the `session_id` its answer gave, with a new `instruction`.

Available agents:
"""


def recent_turns(messages: list[dict[str, Any]], turns: int) -> list[dict[str, Any]]:
    """The messages of the last ``turns`` user turns (a turn starts at a user message)."""
    if turns <= 0:
        return []
    starts = [i for i, message in enumerate(messages) if message.get("role") == "user"]
    if len(starts) <= turns:
        return list(messages)
    return list(messages[starts[-turns] :])


@attrs.frozen
class TaskRequest:
    """A ``task`` call's input, checked: start ``agent``, or resume ``session_id``."""

    agent: str
    instruction: str
    session_id: str
    inherit: str = "none"
    turns: int = 5


def parse_request(input: Mapping[str, Any], agents: Mapping[str, Any]) -> TaskRequest | ToolResult:
    """A ``task`` call's input checked against the plan's ``agents``: the request, or the
    call's error result (the durable driver checks its calls with the same words)."""
    agent = str(input.get("agent") or "").strip()
    instruction = str(input.get("instruction") or "").strip()
    session_id = str(input.get("session_id") or "").strip()
    if not instruction:
        return _failure("instruction: required, and not empty")
    if session_id:
        return TaskRequest(agent=agent, instruction=instruction, session_id=session_id)
    if not agent:
        return _failure("agent: required to start a sub-agent (or session_id to resume one)")
    if agent not in agents:
        known = ", ".join(sorted(agents)) or "none"
        return _failure(f"Agent '{agent}' not found (agents: {known})")
    inherit = input.get("inherit_context") or "none"
    if inherit not in _INHERIT:
        return _failure(f"inherit_context: expected one of {', '.join(_INHERIT)}")
    turns = input.get("inherit_context_turns", 5)
    if isinstance(turns, bool) or not isinstance(turns, int) or turns < 0:
        return _failure("inherit_context_turns: expected an integer >= 0")
    return TaskRequest(
        agent=agent, instruction=instruction, session_id="", inherit=str(inherit), turns=turns
    )


def task_answer(answer: Mapping[str, Any], child_id: str) -> ToolResult:
    """The ``task`` call's result for a child's answer (``{output, session_id, status,
    finish_reason}``, as ``session.spawn`` returns it): ``{response, session_id}`` (and
    ``status`` when the child's turn did not succeed), a failure when it did not end
    ``success`` or ``incomplete``, or stopped for making no progress."""
    status = str(answer.get("status", "success"))
    output: dict[str, Any] = {
        "response": answer.get("output", ""),
        "session_id": answer.get("session_id", child_id),
    }
    if status != "success":
        output["status"] = status
    if answer_succeeded(answer):
        return ToolResult(output=output)
    stuck = answer.get("finish_reason") == NO_PROGRESS_FINISH_REASON
    why = f"{status} ({NO_PROGRESS_FINISH_REASON})" if stuck else status
    return ToolResult(
        success=False,
        output=output,
        error={"message": f"the agent's turn ended {why}", "type": "DelegationError"},
    )


def answer_succeeded(answer: Mapping[str, Any]) -> bool:
    """Whether a child's answer is a success for its ``task`` call: its turn ended
    ``success`` or ``incomplete``, and not for making no progress (a child stopped for
    repeating a failing call failed its task: its parent's no-progress watch then sees a
    delegation that keeps failing the same way)."""
    status = str(answer.get("status", "success"))
    return status in _OK and answer.get("finish_reason") != NO_PROGRESS_FINISH_REASON


class TaskTool:
    """The ``task`` tool: spawn or resume a sub-agent session and return its answer."""

    name = "task"

    def __init__(self, coordinator: Any, config: Mapping[str, Any] | None = None) -> None:
        self.coordinator = coordinator
        config = dict(config or {})
        self.tool_inheritance = _policy(config, "tools")
        self.hook_inheritance = _policy(config, "hooks")

    @property
    def description(self) -> str:
        """What the tool does and which agents there are (read when a request is built)."""
        agents = self._agents()
        if not agents:
            return "Delegate a task to a sub-agent. No agents are configured: do not call it."
        listed = "\n".join(
            f"- {name}: {agent.get('description') or 'No description'}"
            for name, agent in sorted(agents.items())
        )
        return _DESCRIPTION + listed

    @property
    def input_schema(self) -> dict[str, Any]:
        """``agent``, ``instruction``, ``session_id``, ``inherit_context``(_turns)."""
        agent: dict[str, Any] = {
            "type": "string",
            "description": "The agent to start (see the list in the description).",
        }
        if self._agents():
            agent["enum"] = sorted(self._agents())
        return {
            "type": "object",
            "properties": {
                "agent": agent,
                "instruction": {"type": "string", "description": "The task, complete."},
                "session_id": {
                    "type": "string",
                    "description": "Continue this agent session (from an earlier answer).",
                },
                "inherit_context": {
                    "type": "string",
                    "enum": list(_INHERIT),
                    "description": "Pass this conversation on: none (default), recent, all.",
                },
                "inherit_context_turns": {
                    "type": "integer",
                    "description": "User turns passed with inherit_context=recent (default 5).",
                },
            },
            "required": ["instruction"],
        }

    def _agents(self) -> dict[str, Any]:
        agents = self.coordinator.config.get("agents")
        return dict(agents) if isinstance(agents, Mapping) else {}

    async def execute(self, input: dict[str, Any]) -> ToolResult:
        """Spawn (``agent``) or resume (``session_id``) a child and wait for its answer."""
        request = parse_request(input, self._agents())
        if isinstance(request, ToolResult):
            await anyio.lowlevel.checkpoint()
            return request
        if request.session_id:
            return await self._delegate(None, request.instruction, request.session_id, {})
        messages = await self._parent_messages(request.inherit, request.turns)
        extra = {"parent_messages": messages}
        return await self._delegate(request.agent, request.instruction, None, extra)

    async def _new_id(self, agent: str) -> str:
        """The new child's id: the session's (``session.new_child_id``: the same ids on a
        cassette's replay), else upstream's random ``{parent}-{span}_{agent}``."""
        make = self.coordinator.get_capability("session.new_child_id")
        if make is not None:
            child_id: str = await make(agent_name=agent)
            return child_id
        await anyio.lowlevel.checkpoint()
        return f"{self.coordinator.session_id}-{uuid.uuid4().hex[:16]}_{agent}"

    async def _parent_messages(self, inherit: str, turns: int) -> list[dict[str, Any]] | None:
        if inherit == "none":
            await anyio.lowlevel.checkpoint()
            return None
        context = self.coordinator.get("context")
        messages: list[dict[str, Any]] = list(await context.get_messages()) if context else []
        return messages if inherit == "all" else recent_turns(messages, turns)

    async def _delegate(
        self, agent: str | None, instruction: str, resume_id: str | None, extra: dict[str, Any]
    ) -> ToolResult:
        coordinator = self.coordinator
        parent_id = coordinator.session_id
        capability = "session.resume" if resume_id else "session.spawn"
        run = coordinator.get_capability(capability)
        if run is None:
            await anyio.lowlevel.checkpoint()
            return _failure(f"{capability} is not available: the plan has no agents")
        child_id = resume_id or await self._new_id(str(agent))
        call = current_tool_call()
        started: dict[str, Any] = {
            "agent": agent or _agent_in(child_id),
            "sub_session_id": child_id,
            "parent_session_id": parent_id,
            "tool_call_id": call.tool_call_id if call is not None else None,
        }
        hooks = coordinator.hooks
        ended: dict[str, Any] = {**started, "success": False, "status": "cancelled"}
        try:
            # inside the try: a cancel while an observer handles the start still closes
            # the pair with task:agent_completed
            if resume_id:
                await hooks.emit(TASK_AGENT_RESUMED, {**started, "session_id": child_id})
            else:
                await hooks.emit(TASK_AGENT_SPAWNED, started)
            if call is not None:
                # a cut answer names the child too, so that the model can resume it
                await call.note_resume(session_id=child_id)
            answer = await self._run(
                run, instruction, agent=agent, resume_id=resume_id, child_id=child_id, extra=extra
            )
        except Exception as exc:  # noqa: BLE001 - a failed delegation is this call's error
            message = f"Delegation failed: {exc}"
            ended.update(status="error", error=message)
            await hooks.emit(TASK_AGENT_COMPLETED, ended)
            return _failure(message)
        except BaseException:
            # cancelled (or stopping): the pair of events still closes, bounded, with what
            # the child spent and how many calls it made before the cut
            ended.update(_spent(coordinator, child_id))
            with anyio.CancelScope(shield=True), anyio.move_on_after(_EVENT_TIMEOUT):
                await hooks.emit(TASK_AGENT_COMPLETED, ended)
            raise
        await hooks.emit(TASK_AGENT_COMPLETED, _completed(ended, answer))
        return task_answer(answer, child_id)

    async def _run(
        self,
        run: Any,
        instruction: str,
        *,
        agent: str | None,
        resume_id: str | None,
        child_id: str,
        extra: dict[str, Any],
    ) -> dict[str, Any]:
        """The child's answer: ``session.resume`` for ``resume_id``, else ``session.spawn``."""
        if resume_id:
            resumed: dict[str, Any] = await run(sub_session_id=resume_id, instruction=instruction)
            return resumed
        spawned: dict[str, Any] = await run(
            agent_name=agent,
            instruction=instruction,
            parent_session=self.coordinator.session,
            agent_configs=self._agents(),
            sub_session_id=child_id,
            tool_inheritance=self.tool_inheritance,
            hook_inheritance=self.hook_inheritance,
            **extra,
        )
        return spawned


def _completed(ended: dict[str, Any], answer: Mapping[str, Any]) -> dict[str, Any]:
    """``task:agent_completed`` for a child that answered: its outcome and what it spent."""
    return {
        **ended,
        "success": answer_succeeded(answer),
        "status": str(answer.get("status", "success")),
        "turn_count": answer.get("turn_count"),
        "usage": answer.get("usage"),
        "cost_usd": answer.get("cost_usd"),
        "finish_reason": answer.get("finish_reason"),
    }


def _spent(coordinator: Any, child_id: str) -> dict[str, Any]:
    """``turn_count``, ``usage`` and ``cost_usd`` of a child a cancel cut short, from its
    session's ``session.child_answer`` ({} when it never ran or the session has none)."""
    answer_of = coordinator.get_capability("session.child_answer")
    answer = answer_of(child_id) if answer_of is not None else None
    if not answer:
        return {}
    return {key: answer.get(key) for key in ("turn_count", "usage", "cost_usd")}


def _agent_in(child_id: str) -> str | None:
    return agent_of_child_id(child_id)


def _failure(message: str) -> ToolResult:
    return ToolResult(success=False, error={"message": message, "type": "DelegationError"})


def _policy(config: Mapping[str, Any], section: str) -> dict[str, list[str]]:
    exclude, inherit = config.get(f"exclude_{section}"), config.get(f"inherit_{section}")
    if exclude is not None and inherit is not None:
        msg = f"tool-task: exclude_{section} and inherit_{section} exclude each other"
        raise ConfigError(msg)
    for key, value in ((f"exclude_{section}", exclude), (f"inherit_{section}", inherit)):
        if value is not None and (
            not isinstance(value, list) or not all(isinstance(v, str) for v in value)
        ):
            raise ConfigError(f"tool-task.{key}: expected a list of module ids, got {value!r}")
    if exclude:
        return {f"exclude_{section}": list(exclude)}
    if inherit is not None:
        return {f"inherit_{section}": list(inherit)}
    return {}


async def mount(coordinator: Any, config: dict[str, Any] | None = None) -> None:
    """Mount the ``task`` tool and declare its events (``observability.events``)."""
    tool = TaskTool(coordinator, config)
    declared = list(coordinator.get_capability("observability.events") or ())
    for event in (TASK_AGENT_SPAWNED, TASK_AGENT_RESUMED, TASK_AGENT_COMPLETED):
        if event not in declared:
            declared.append(event)
    coordinator.register_capability("observability.events", declared)
    await coordinator.mount("tools", tool, name=tool.name)


CONFIG_SCHEMA = ConfigSchema(
    "tool-task",
    {
        **{key: Setting((list,), "module ids children inherit or not") for key in _POLICIES},
        "max_recursion_depth": Setting(
            (int,), "upstream's key; the depth limit is session.max_agent_depth"
        ),
    },
)
"""The keys tool-task accepts (upstream's)."""
