"""``amplifier-anyio run``: one turn, its answer on stdout (or the TurnResult as JSON)."""

from __future__ import annotations

import contextlib
import json
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated, Any, NoReturn

import anyio
import attrs
import typer

from ..kernel._mount_plan import MountPlan
from ..kernel._turns import TurnResult, TurnStatus
from ..session._session import AmplifierSession
from ._common import (
    EventLog,
    approval_system,
    check_backend,
    cli_command,
    enter_session,
    fail,
    out,
    print_events,
    run_failure,
    say,
    turn_json,
)
from ._plans import PlanOptions, agent_plan, build_plan, persistent_plan, read_prompt
from ._stored import remember_plan, stored_plan

__all__ = ("run_command", "add_system_prompt")

PlanOption = Annotated[
    Path | None,
    typer.Option(
        "--plan",
        help="A mount plan (.yaml/.yml/.toml) or an upstream bundle or profile (.md, a "
        "bundle directory); default: the offline demo.",
    ),
]
BackendOption = Annotated[str, typer.Option("--backend", help="asyncio or trio.")]
ProviderOption = Annotated[
    str | None,
    typer.Option(
        "--provider",
        help="openai, anthropic or scripted (the offline demo, default); builds the plan "
        "(keys from OPENAI_API_KEY / ANTHROPIC_API_KEY). A --plan file wins.",
    ),
]
ModelOption = Annotated[str | None, typer.Option("--model", help="The model to ask.")]
BaseUrlOption = Annotated[
    str | None,
    typer.Option("--base-url", help="Where the API lives (an OpenAI-compatible local server)."),
]
SystemOption = Annotated[
    str | None,
    typer.Option("--system", help="A system prompt (@file reads it from a file)."),
]
MaxIterationsOption = Annotated[
    str | None,
    typer.Option("--max-iterations", metavar="N", help="Provider calls per turn, at most."),
]
ToolsOption = Annotated[
    str | None,
    typer.Option(
        "--tools",
        help="filesystem,bash: the real tools, confined to the working directory, "
        "asking on the terminal before a command runs or a file changes.",
    ),
]
EventsOption = Annotated[bool, typer.Option("--events", help="Print the event stream live.")]
EventsJsonlOption = Annotated[
    Path | None,
    typer.Option("--events-jsonl", help="Write every event, untruncated, as JSON lines to FILE."),
]
RecordOption = Annotated[
    Path | None,
    typer.Option(
        "--record",
        metavar="FILE",
        help="Record every provider call to FILE (JSON lines) for --replay.",
    ),
]
ReplayOption = Annotated[
    Path | None,
    typer.Option(
        "--replay",
        metavar="FILE",
        help="Answer every provider call from FILE (made by --record); no request is sent.",
    ),
]
AgentOption = Annotated[
    str | None,
    typer.Option(
        "--agent",
        metavar="NAME",
        help="Run the plan's agent NAME (its agents: section) as the session itself.",
    ),
]
StrictOption = Annotated[
    bool, typer.Option("--strict", help="Refuse config keys a module does not declare.")
]
PromptArgument = Annotated[
    str | None,
    typer.Argument(
        help="What to ask the agent; - reads stdin, @FILE a file. With --resume and no "
        "prompt: continue the session's last turn (after approvals, or a crash)."
    ),
]
ResumeOption = Annotated[
    str | None,
    typer.Option(
        "--resume",
        metavar="ID",
        help="Run in a saved session (sessions list), under the plan it ran under "
        "unless --plan says otherwise.",
    ),
]


def run_command(
    prompt: PromptArgument = None,
    *,
    plan: PlanOption = None,
    backend: BackendOption = "asyncio",
    provider: ProviderOption = None,
    model: ModelOption = None,
    base_url: BaseUrlOption = None,
    system: SystemOption = None,
    max_iterations: MaxIterationsOption = None,
    tools: ToolsOption = None,
    events: EventsOption = False,
    events_jsonl: EventsJsonlOption = None,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print the TurnResult as one JSON object on stdout.")
    ] = False,
    strict: StrictOption = False,
    record: RecordOption = None,
    replay: ReplayOption = None,
    resume: ResumeOption = None,
    agent: AgentOption = None,
) -> None:
    """Run one turn and print the answer."""
    check_backend(backend)
    options = PlanOptions(
        plan=plan,
        provider=provider,
        model=model,
        base_url=base_url,
        max_iterations=max_iterations,
        tools=tools,
        record=record,
        replay=replay,
        strict=strict,
    )
    with cli_command():
        options, resumed = _resumed(options, prompt, resume)
        mount_plan = build_plan(options)
        if resumed is not None:
            mount_plan = persistent_plan(mount_plan, resumed.path)
        text = read_prompt(prompt) if prompt is not None else None
        mount_plan, system_text = _with_instruction(mount_plan, system, agent)
        if mount_plan.durable is not None and text is not None and resumed is None:
            from .temporal import run_durable  # the turn runs on a Temporal worker

            try:
                result, session_id = run_durable(mount_plan, text, backend)
            except Exception as exc:  # noqa: BLE001 - any failure is one line and an exit code
                raise run_failure(exc) from None
            _print_outcome(result, session_id, json_output=json_output)
        log = EventLog(events_jsonl) if events_jsonl is not None else None
        turn = _Turn(mount_plan, text, system=system_text, events=events, log=log, strict=strict)
        turn.plan_file = options.plan
        turn.session_id = resumed.session_id if resumed is not None else None
        try:
            result, session_id = _run(turn, backend)
        finally:
            if log is not None:
                log.close()
    _print_outcome(result, session_id, json_output=json_output)


def _resumed(
    options: PlanOptions, prompt: str | None, resume: str | None
) -> tuple[PlanOptions, Any]:
    """``--resume ID``: the saved session, and its plan unless ``--plan`` says otherwise;
    without it a prompt is required."""
    if resume is not None:  # without --plan: the plan the session ran under
        from .sessions import find_session  # only for --resume

        resumed = find_session(resume)
        return stored_plan(options, resumed.session_id, resumed.path), resumed
    if prompt is None:
        raise fail(
            "missing argument 'PROMPT' — try 'amplifier-anyio run --help' "
            "(or run --resume ID to continue a saved session)"
        )
    return options, None


def _with_instruction(
    mount_plan: MountPlan, system: str | None, agent: str | None
) -> tuple[MountPlan, str | None]:
    """The plan as ``--agent`` and ``--system`` make it, and the system prompt to add."""
    system_text = read_prompt(system) if system is not None else None
    if agent is not None:
        mount_plan, instruction = agent_plan(mount_plan, agent)
        system_text = system_text if system_text is not None else instruction
    if system_text is not None:  # --system replaces a bundle's instruction
        mount_plan = attrs.evolve(mount_plan, instruction=system_text)
    return mount_plan, system_text


def _print_outcome(result: TurnResult, session_id: str, *, json_output: bool) -> NoReturn:
    """The answer (or ``--json``'s object) on stdout, then the exit code for its status."""
    if json_output:
        say(json.dumps(turn_json(result, session_id), ensure_ascii=False), console=out)
    if result.status is TurnStatus.ERROR:
        raise fail(f"the turn failed: {type(result.error).__name__}: {result.error}", code=1)
    if not json_output:
        say(result.text, console=out)
    if result.status is TurnStatus.AWAITING_APPROVAL:
        from .sessions import describe_pending  # only for a turn left waiting

        for line in describe_pending(list(result.pending_approvals), session_id):
            say(line)
        raise typer.Exit(3)
    if result.status is not TurnStatus.SUCCESS:
        say(f"(turn ended with status {result.status})")
    raise typer.Exit(0 if result.status is not TurnStatus.CANCELLED else 1)


class _Turn:
    def __init__(
        self,
        plan: MountPlan,
        prompt: str | None,
        *,
        system: str | None,
        events: bool,
        log: EventLog | None,
        strict: bool,
    ) -> None:
        self.plan = plan
        self.prompt = prompt
        self.system = system
        self.events = events
        self.log = log
        self.strict = strict
        self.plan_file: Path | None = None
        """The plan file (remembered beside a persistent transcript)."""
        self.session_id: str | None = None
        """A saved session to run in (``--resume``); None: a new one."""

    async def __call__(self) -> tuple[TurnResult, str]:
        """The turn, with Ctrl-C read as a signal that cancels it through a cancel scope.

        asyncio's own Ctrl-C handler cancels the main task natively, and a native cancel
        goes through shields: landing inside asyncio's subprocess start (which tool-bash
        shields for this reason) it waited forever for pipes that never connect. A cancel
        scope respects the shields, on asyncio and trio alike.
        """
        outcome: tuple[TurnResult, str] | None = None
        try:
            with anyio.open_signal_receiver(signal.SIGINT) as signals:
                async with anyio.create_task_group() as group:
                    with anyio.CancelScope() as scope:
                        group.start_soon(_cancel_on_signal, signals, scope)
                        try:
                            outcome = await self._turn()
                        finally:
                            group.cancel_scope.cancel("run: turn over (the Ctrl-C watcher stops)")
        except BaseExceptionGroup as wrapped:
            if len(wrapped.exceptions) != 1:
                raise
            # the turn's own exception (a typer.Exit, a failed start), as it was raised
            raise wrapped.exceptions[0] from None
        if scope.cancel_called or outcome is None:
            raise KeyboardInterrupt  # cli_command: "interrupted", exit 130
        return outcome

    async def _turn(self) -> tuple[TurnResult, str]:
        session = AmplifierSession(
            self.plan,
            session_id=self.session_id,
            is_resumed=self.session_id is not None,
            strict=self.strict,
            approval_system=approval_system(),
        )
        if self.log is not None:
            self.log.open()
            self.log.attach(session)
        async with contextlib.AsyncExitStack() as stack:
            await enter_session(stack, session)
            await remember_plan(session, self.plan_file)
            if self.events:
                print_events(session)
            if self.system is not None:
                await add_system_prompt(session, self.system)
            if self.prompt is None:  # --resume without a prompt: the last turn goes on
                return await session.resume(), session.session_id
            return await session.run(self.prompt), session.session_id


async def _cancel_on_signal(signals: AsyncIterator[int], scope: anyio.CancelScope) -> None:
    async for _ in signals:
        scope.cancel("run: Ctrl-C")


def _run(turn: _Turn, backend: str) -> tuple[TurnResult, str]:
    try:
        return anyio.run(turn, backend=backend)
    except typer.Exit:
        raise
    except Exception as exc:  # noqa: BLE001 - any failure is one line and an exit code
        raise run_failure(exc) from None


async def add_system_prompt(session: AmplifierSession, text: str) -> bool:
    """Put ``text`` first in the session's context as a system message, unless the history
    already has one (a resumed conversation keeps its own). Returns whether it was added."""
    context: Any = session.coordinator.get("context")
    messages = await context.get_messages()
    if any(message.get("role") == "system" for message in messages):
        return False
    if messages:
        await context.set_messages([{"role": "system", "content": text}, *messages])
    else:
        await context.add_message({"role": "system", "content": text})
    return True
