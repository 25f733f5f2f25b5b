"""The activities of a durable session: one provider call, one tool call.

Both run on the worker's mounted session (its providers, tools, hooks and coordinator,
mounted once per process) through the in-process engine's own code: a provider call is
[`Turn.call_provider`][amplifier_anyio.runtime.Turn.call_provider] (the ``provider:*`` and
``llm:*`` events, usage, cost), a tool call is a one-call
[`ToolBatch`][amplifier_anyio.runtime.ToolBatch] (``tool:pre``, the tool, ``tool:post``,
errors and timeouts as results). So the messages are those the in-process turn writes.
A ``task`` call (a sub-agent, run by the workflow as a child workflow) is the same batch
split in two: its gate (``tool:pre`` and the approval, before any child runs) and its
answer (``tool:post`` of what the child answered).

Each heartbeats while it runs, so a dead worker is noticed within the heartbeat timeout
and a cancel reaches the call. A tool call's idempotency key is ``{session id}/{call id}``
(``current_tool_call().idempotency_key``): the same in every attempt.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

import anyio
import attrs
from temporalio import activity

from ..errors import ArgumentsChangedError
from ..events import PROMPT_SUBMIT
from ..kernel._handle import TurnHandle
from ..kernel._mount_plan import MountPlan
from ..kernel._tracing import ToolCallContext, trace_scope
from ..kernel._turns import call_digest
from ..models import ToolCall, ToolResult, structure, unstructure
from ..runtime._requests import assistant_message, select_provider, tool_calls_of
from ..runtime._tool_batch import ToolBatch, _content_of
from ..runtime._turn import Turn
from ..session._agents import SessionLimits, _sanitized, agent_instruction, agents_of
from ..tools.task import TaskTool, parse_request, recent_turns
from ._plans import child_plan, settings_of
from ._spans import activity_span

__all__ = ("SessionActivities", "Mounted")

T = TypeVar("T")


@attrs.define(eq=False)
class Mounted:
    """One plan's mounted session in a worker, and the engine's settings for it."""

    coordinator: Any
    turn_config: Any
    batch_config: Any
    orchestrator: str = "loop-basic"
    plan: MountPlan | None = None


class _Scratch:
    """The context of one activity: the messages it was given, what it adds, and the
    journal protocol (so a tool sees its idempotency key, a deferred call is held, and an
    allowed call runs only with the arguments the decision was made on)."""

    def __init__(
        self,
        messages: list[dict[str, Any]],
        key: str | None = None,
        *,
        decided: str | None = None,
    ) -> None:
        self.messages = messages
        self.key = key
        self.decided = decided
        """The digest an ``allow`` was bound to (``call_digest``), or None."""
        self.deferred: dict[str, Any] | None = None

    async def add_message(self, message: dict[str, Any]) -> None:
        self.messages.append(message)

    async def add_messages(self, messages: list[dict[str, Any]]) -> None:
        self.messages.extend(messages)

    async def get_messages(self) -> list[dict[str, Any]]:
        return list(self.messages)

    async def get_messages_for_request(self, **_: Any) -> list[dict[str, Any]]:
        return list(self.messages)

    async def journal_started(
        self, call_id: str, tool: str, arguments: Any, *, idempotent: bool = False
    ) -> str:
        await anyio.lowlevel.checkpoint()
        if self.decided is not None and self.decided != call_digest(tool, arguments):
            msg = (
                f"the arguments of {tool} call {call_id} changed after it was approved; "
                "it was not run"
            )
            raise ArgumentsChangedError(msg)
        return self.key or call_id

    async def journal_deferred(self, call_id: str, tool: str, tool_input: Any, prompt: str) -> None:
        await anyio.lowlevel.checkpoint()
        self.deferred = {
            "call_id": call_id,
            "tool": tool,
            "input": tool_input,
            "prompt": prompt,
            "digest": call_digest(tool, tool_input),
        }

    async def journal_finished(self, call_id: str, content: str, *, success: bool = True) -> None:
        await anyio.lowlevel.checkpoint()


class _OneCall(ToolBatch):
    """A one-call batch that speaks of its call by the call's index in its reply (the
    ``index`` of ``tool:pre`` / ``tool:post`` / ``tool:error`` and of
    ``current_tool_call()``), not by its index in this batch of one."""

    reply_index: int = 0

    def _payload(self, index: int, call: ToolCall, tool_input: Any) -> dict[str, Any]:
        payload = super()._payload(index, call, tool_input)
        payload["index"] = self.reply_index
        return payload

    def _call_context(self, index: int, call: ToolCall, key: str | None) -> ToolCallContext:
        return attrs.evolve(super()._call_context(index, call, key), index=self.reply_index)


class _Gate:
    """The ``task`` tool of a delegated call's first activity: it runs no child; it keeps
    the input the call reached it with, past ``tool:pre`` (a rewrite applied) and the
    approval (an allowed call's digest checked)."""

    description = "A delegated call's gate."
    input_schema: dict[str, Any] = {"type": "object"}  # noqa: RUF012 - read only

    def __init__(self, name: str) -> None:
        self.name = name
        self.passed = False
        self.input: Any = None

    async def execute(self, input: Any) -> ToolResult:
        await anyio.lowlevel.checkpoint()
        self.passed, self.input = True, input
        return ToolResult(success=True, output="")


class _Gating(_OneCall):
    """A ``task`` call up to its tool, a ``_Gate``: its ``tool:pre``, its approval (held,
    denied, or allowed only with the decided digest), as any call goes. A call that passes
    emits no ``tool:post`` here: that comes with its answer (`_Answering`); one that does
    not pass is answered as the batch answers it (an error result still gets its
    ``tool:post``, as in-process)."""

    gate: _Gate | None = None

    async def _post(
        self, index: int, call: ToolCall, tool_input: Any, result: ToolResult
    ) -> str | None:
        if self.gate is not None and self.gate.passed:
            return None  # the call goes on to its child: its tool:post is its answer's
        return await super()._post(index, call, tool_input, result)


class _Answering(_OneCall):
    """A delegated call's last activity: what its child workflow answered, through
    ``tool:post`` (with ``gated``, the input its gate let through) and the batch's
    serialisation. Its ``tool:pre`` fired once, in the gate: it does not fire again."""

    answer: ToolResult | None = None
    gated: Any = None

    async def _run_all(self) -> None:
        call, answer = self.calls[0], self.answer
        assert answer is not None
        try:
            self._slots[0] = _content_of(answer)
            self.succeeded[0] = answer.success
            replaced = await self._post(0, call, self.gated, answer)
            if replaced is not None:
                self._slots[0] = replaced
        except Exception as exc:  # noqa: BLE001 - as the batch: the call's error result
            await self._error(0, call, type(exc).__name__, str(exc) or repr(exc))


class SessionActivities:
    """The activity functions of a worker, over its mounted plans (by plan key)."""

    def __init__(
        self,
        mounted: Mapping[str, Mounted],
        *,
        heartbeat_every: float = 1.0,
        tracer_provider: Any = None,
    ) -> None:
        self.mounted = mounted
        self.heartbeat_every = heartbeat_every
        self.tracer_provider = tracer_provider
        """The OpenTelemetry tracer provider of the activities' spans (None: global)."""

    def _span(
        self, request: Mapping[str, Any], **attributes: Any
    ) -> contextlib.ExitStack[bool | None]:
        """The activity's span in its turn's trace (`_spans`)."""
        info = activity.info()
        call = request.get("call") or {}
        name = info.activity_type
        if call.get("name"):
            name = f"{name} {call['name']}"
        found = {
            "session_id": request.get("session_id"),
            "trace_id": request.get("trace_id"),
            "tool_call_id": call.get("id"),
            "tool_name": call.get("name"),
            "activity": info.activity_type,
            "activity_id": info.activity_id,
            "attempt": info.attempt,
            "workflow_id": info.workflow_id,
            **attributes,
        }
        stack = contextlib.ExitStack()
        trace_id = request.get("trace_id")
        if trace_id:  # the activity's events carry the turn's trace id, as in-process
            stack.enter_context(trace_scope(str(trace_id)))
        root = request.get("trace_root")
        stack.enter_context(activity_span(name, trace_id, found, self.tracer_provider, root))
        return stack

    def _plan(self, key: str) -> Mounted:
        found = self.mounted.get(key)
        if found is None and len(self.mounted) == 1:
            found = next(iter(self.mounted.values()))
        if found is None:
            msg = f"this worker has no plan {key!r} (it has: {', '.join(self.mounted)})"
            raise LookupError(msg)
        return found

    @activity.defn(name="amplifier-provider-call")
    async def provider_call(self, request: dict[str, Any]) -> dict[str, Any]:
        """One provider call on the session's messages; the reply as plain data."""
        with self._span(request, iteration=request.get("iteration")):
            return await self._beating(lambda: self._provider_call(request))

    async def _provider_call(self, request: dict[str, Any]) -> dict[str, Any]:
        mounted = self._plan(request["plan"])
        coordinator = mounted.coordinator
        providers = coordinator.get("providers") or {}
        tools = coordinator.get("tools") or {}
        turn = Turn(
            prompt="",
            context=_Scratch(list(request["messages"])),  # type: ignore[arg-type]
            providers=providers,
            tools=tools,
            hooks=coordinator.hooks,
            coordinator=coordinator,
            handle=TurnHandle(hooks=coordinator.hooks),
            config=mounted.turn_config,
            batch=mounted.batch_config,
            orchestrator=mounted.orchestrator,
            trace_id=request["trace_id"],
        )
        turn.iterations = int(request["iteration"])
        turn.injections = list(request.get("injections") or [])  # ephemeral: this request only
        turn.provider_name, provider = select_provider(
            providers, mounted.turn_config.default_provider
        )
        if request.get("submit") is not None:  # the turn's first call: prompt:submit first
            submitted = await turn.hook(PROMPT_SUBMIT, {"prompt": request["submit"]})
            if submitted.action == "deny":
                turn.deny(submitted)
                return {"denied": turn.text, "submit_denied": True, "finish_reason": None}
            turn.queue_ephemeral(submitted)
        response = await turn.call_provider(
            provider, with_tools=bool(request["with_tools"]), reminder=bool(request["reminder"])
        )
        if response is None:  # a hook denied the call
            return {"denied": turn.text, "finish_reason": None, "usage": None, "calls": []}
        calls = tool_calls_of(provider, response) if request["with_tools"] else []
        return {
            "assistant": assistant_message(response, calls),
            "calls": [
                {
                    **unstructure(call),
                    "idempotent": getattr(tools.get(call.name), "idempotent", False) is True,
                    "delegate": isinstance(tools.get(call.name), TaskTool),
                }
                for call in calls
            ],
            "text": response.text,
            "has_content": bool(response.content),
            "finish_reason": response.finish_reason,
            # priced as the in-process turn counts it (the plan's ``pricing``)
            "usage": unstructure(turn.usage) if response.usage is not None else None,
            "denied": None,
        }

    @activity.defn(name="amplifier-tool-call")
    async def tool_call(self, request: dict[str, Any]) -> dict[str, Any]:
        """One tool call (``tool:pre``, the tool, ``tool:post``): its ``role: tool`` message,
        and ``held`` (the call, its prompt and digest) when its approval was deferred.

        ``decision`` (``{"decision": "allow" | "deny", "digest": ...}``) runs a held call
        again: allowed, it runs only if its own arguments still have the decided digest
        (else it is denied with the reason, not run); denied, it is answered without
        running. ``answer`` (a ``ToolResult``'s data) answers a delegated call with what
        its child answered: only ``tool:post`` fires, with ``input``, the input its gate
        (``task_start``) let through."""
        with self._span(request):
            return await self._beating(lambda: self._tool_call(request))

    async def _tool_call(self, request: dict[str, Any]) -> dict[str, Any]:
        mounted = self._plan(request["plan"])
        call = _call_of(request)
        if request.get("answer") is None:
            batch, scratch = _batch_of(_OneCall, mounted, request, call)
            return await _ran(batch, scratch, call)
        answering = _batch_of(_Answering, mounted, request, call)
        answering[0].answer = structure(request["answer"], ToolResult)
        answering[0].gated = request.get("input")
        return await _ran(*answering, call)

    @activity.defn(name="amplifier-task-start")
    async def task_start(self, request: dict[str, Any]) -> dict[str, Any]:
        """Gate a ``task`` call and say what to run for it.

        The call goes through ``tool:pre`` and its approval first, as any call does (and
        ``decision`` as in ``tool_call``): ``{"held": ...}`` when its approval was
        deferred, ``{"message": ...}`` (its final ``role: tool`` message, as
        ``tool_call`` gives it) when it is answered here (denied by a hook or by the user,
        its arguments changed after the approval, its input not an object). Otherwise,
        for the input the gate let through (``input``, a rewrite applied):
        ``{"answer": result}`` (its input is wrong: the call's error result, no child),
        ``{"resume": session_id}``, ``{"failed": message, "agent": name}`` (a delegation
        the spawner refuses: deeper than ``session.max_agent_depth``), or ``{"child":
        ...}``: the new child's ``agent``, ``settings`` (its plan's, one level deeper) and
        first ``messages`` (the agent's instruction, and the parent's conversation it
        inherits); with the gate's ``injections`` and ``after`` (its hooks'
        injections)."""
        with self._span(request):
            return await self._beating(lambda: self._task_start(request))

    async def _task_start(self, request: dict[str, Any]) -> dict[str, Any]:
        mounted = self._plan(request["plan"])
        assert mounted.plan is not None
        call = _call_of(request)
        gate = _Gate(call.name)
        batch, scratch = _batch_of(_Gating, mounted, request, call, {call.name: gate})
        batch.gate = gate
        gated = await _ran(batch, scratch, call)
        if not gate.passed:
            held = gated.pop("held", None)
            return {"held": held} if held is not None else {"message": gated}
        found = _delegation(mounted.plan, request, gate.input)
        found.update(input=gate.input, injections=gated["injections"], after=gated["after"])
        return found

    async def _beating(self, work: Callable[[], Awaitable[T]]) -> T:
        """Run ``work`` while heartbeating every ``heartbeat_every`` seconds; Temporal's
        cancel of the activity (delivered with a heartbeat's answer) cancels it."""
        found: list[T] = []
        async with anyio.create_task_group() as group:

            async def beat() -> None:
                # the first beat after one interval: a call shorter than that costs no
                # heartbeat request (its completion says it is alive)
                while True:
                    await anyio.sleep(self.heartbeat_every)
                    activity.heartbeat()

            group.start_soon(beat)
            found.append(await work())
            group.cancel_scope.cancel("activity work done: heartbeats stop")
        return found[0]


B = TypeVar("B", bound=_OneCall)


def _call_of(request: Mapping[str, Any]) -> ToolCall:
    item = request["call"]
    return ToolCall(id=str(item["id"]), name=str(item["name"]), arguments=item["arguments"])


def _batch_of(
    kind: type[B],
    mounted: Mounted,
    request: Mapping[str, Any],
    call: ToolCall,
    tools: Mapping[str, Any] | None = None,
) -> tuple[B, _Scratch]:
    """A one-call batch of ``kind`` for ``call`` on the mounted session (``tools``: in
    place of its tools), with the request's ``decision``, and its scratch context."""
    coordinator = mounted.coordinator
    decision = request.get("decision") or {}
    allowed = decision.get("decision") == "allow"
    denied = {}
    if decision.get("decision") == "deny":
        denied[call.id] = str(decision.get("prompt", ""))
    batch = kind(
        calls=[call],
        tools=(coordinator.get("tools") or {}) if tools is None else tools,
        hooks=coordinator.hooks,
        coordinator=coordinator,
        handle=TurnHandle(hooks=coordinator.hooks),
        config=mounted.batch_config,
        parallel_group_id=str(request["group"]),
        approved=frozenset({call.id}) if allowed else frozenset(),
        denied=denied,
    )
    batch.reply_index = int(request["index"])
    decided = str(decision["digest"]) if allowed else None
    return batch, _Scratch([], key=str(request["key"]), decided=decided)


async def _ran(batch: _OneCall, scratch: _Scratch, call: ToolCall) -> dict[str, Any]:
    """Run ``batch``: its call's ``role: tool`` message, ``held`` (when it was held),
    ``success``, the hooks' ``injections`` (ephemeral, for the next request) and
    ``after`` (the persistent ones, after the batch's results)."""
    placeholder = {"role": "assistant", "content": [], "tool_calls": [unstructure(call)]}
    await batch.run(scratch, placeholder)  # type: ignore[arg-type]
    result: dict[str, Any] = dict(scratch.messages[1])
    if batch.held and scratch.deferred is not None:
        result["held"] = scratch.deferred
    result["success"] = batch.succeeded[0]
    result["injections"] = list(batch.pending_injections)
    result["after"] = scratch.messages[2:]
    return result


def _delegation(plan: MountPlan, request: Mapping[str, Any], tool_input: Any) -> dict[str, Any]:
    """What a gated ``task`` call with ``tool_input`` runs (see ``task_start``)."""
    agents = agents_of(plan.raw)
    checked = parse_request(tool_input or {}, agents)
    if isinstance(checked, ToolResult):
        return {"answer": unstructure(checked)}
    if checked.session_id:
        return {"resume": checked.session_id, "instruction": checked.instruction}
    depth = int(request["depth"]) + 1
    limit = SessionLimits.from_settings(plan.session_settings).max_agent_depth
    if depth > limit:
        message = (
            f"agent {checked.agent!r}: delegation depth limit reached "
            f"(session.max_agent_depth = {limit}; this would be depth {depth})"
        )
        return {"failed": message, "agent": checked.agent}
    agent = agents[checked.agent]
    settings = settings_of(child_plan(plan, checked.agent))
    settings["depth"] = depth
    messages: list[dict[str, Any]] = []
    system = agent_instruction(agent)
    if system is not None:
        messages.append({"role": "system", "content": system})
    if checked.inherit != "none":
        parent = list(request.get("messages") or [])
        inherited = parent if checked.inherit == "all" else recent_turns(parent, checked.turns)
        messages.extend(_sanitized(inherited))
    return {
        "child": {
            "agent": checked.agent,
            "settings": settings,
            "messages": messages,
            "instruction": checked.instruction,
        }
    }
