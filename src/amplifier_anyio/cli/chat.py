"""``amplifier-anyio chat``: a REPL — many turns on one session, saved and resumable.

The conversation is kept by context-persistent under the sessions directory (see
`sessions`), so ``chat --resume ID`` continues it, in this process or a later one.

Ctrl-C is read as a signal (``anyio.open_signal_receiver``), on asyncio and trio alike,
never as a KeyboardInterrupt in the middle of the session's code: while a turn runs, the
first Ctrl-C cancels it gracefully (the running tools finish), the second immediately,
the third leaves; at the prompt, the first Ctrl-C drops the line, the second leaves.
Ctrl-D (end of input) or ``/exit`` leaves too. Input lines are read off the event loop's
critical path: the reader waits for stdin to be readable (``anyio.wait_readable``) and
only while the prompt is shown, so a turn's approval question reads the terminal alone,
and a Ctrl-C at the prompt simply cancels the wait.
"""

from __future__ import annotations

import contextlib
import enum
import json
import os
import re
import shutil
import signal
import stat
import sys
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Annotated, Any

import anyio
import attrs
import typer
from rich.cells import cell_len

from ..contexts.persistent import default_path, lock_path_for
from ..errors import CassetteMismatchError
from ..events import (
    CONTENT_BLOCK_DELTA,
    CONTENT_BLOCK_START,
    TASK_AGENT_COMPLETED,
    TASK_AGENT_RESUMED,
    TASK_AGENT_SPAWNED,
)
from ..kernel._ids import agent_of_child_id
from ..kernel._mount_plan import MountPlan
from ..kernel._turns import PendingApproval, TurnStatus
from ..models import HookResult
from ..session._session import AmplifierSession
from ._common import (
    EventLog,
    approval_system,
    check_backend,
    cli_command,
    enter_session,
    leaf,
    one_line,
    out,
    print_events,
    run_failure,
    say,
    warn,
)
from ._plans import RESUMABLE, PlanOptions, build_plan, persistent_plan, read_prompt
from ._stored import metadata_path_for, remember_plan, stored_plan
from .run import (
    BackendOption,
    BaseUrlOption,
    EventsJsonlOption,
    EventsOption,
    MaxIterationsOption,
    ModelOption,
    PlanOption,
    ProviderOption,
    RecordOption,
    ReplayOption,
    StrictOption,
    SystemOption,
    ToolsOption,
    add_system_prompt,
)
from .sessions import SessionInfo, describe_message, describe_pending, find_session

__all__ = (
    "chat_command",
    "chat_plan",
    "transcript_markdown",
    "LineReader",
    "WordWrap",
    "terminal_width",
    "PROMPT",
)

PROMPT = "you> "
"""What the REPL shows when it waits for a line."""

_RECAP = 10  # messages of a resumed conversation shown before the first prompt

HELP = """\
/exit              leave (also Ctrl-D, or Ctrl-C twice at the prompt)
/reset             start a new session (the old one stays saved)
/save [FILE]       write the conversation to FILE (.md: Markdown; .jsonl: the stored messages)
/events on|off     print the event stream live
/session           the session's id and transcript file
/approve CALL allow|deny   decide a tool call waiting for approval ("all" for every one)
/resume            continue the last turn (after approvals, or one a crash cut short)
/help              this list
Ctrl-C during a turn: cancel it (the running tools finish); twice: stop now; thrice: leave.
Ctrl-C at the prompt: drop the line; twice in a row: leave."""


def chat_command(
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
    resume: Annotated[
        str | None,
        typer.Option("--resume", metavar="ID", help="Continue a saved session (sessions list)."),
    ] = None,
    strict: StrictOption = False,
    record: RecordOption = None,
    replay: ReplayOption = None,
) -> None:
    """Talk with the agent: one session, many turns, saved for --resume."""
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
        resumed = find_session(resume) if resume is not None else None
        if resumed is not None:  # without --plan: the plan the session ran under
            options = stored_plan(options, resumed.session_id, resumed.path)
        base = build_plan(options, streaming=True)
        system_text = read_prompt(system) if system is not None else None
        if system_text is not None:  # --system replaces a bundle's instruction
            base = attrs.evolve(base, instruction=system_text)
        resumed = find_session(resume) if resume is not None else None
        log = EventLog(events_jsonl) if events_jsonl is not None else None
        if log is not None:
            log.open()
        repl = _Repl(
            base, system=system_text, events=events, log=log, strict=strict, resumed=resumed
        )
        repl.plan_file = options.plan
        try:
            code = anyio.run(repl.main, backend=backend)
        except typer.Exit:
            raise
        except Exception as exc:  # noqa: BLE001 - any failure is one line and an exit code
            raise run_failure(exc) from None
        finally:
            if log is not None:
                log.close()
    raise typer.Exit(code)


def chat_plan(base: MountPlan, path: Path) -> MountPlan:
    """``base`` with its context kept in ``path``: context-simple becomes
    context-persistent (same settings); another context module is kept as it is (the chat
    then cannot be resumed)."""
    return persistent_plan(base, path)


class _State(enum.Enum):
    STARTING = "starting"
    IDLE = "idle"
    TURN = "turn"
    CLOSING = "closing"


_LEAVE = "leave"
_RESET = "reset"


class _Repl:
    """The chat loop; its Ctrl-C handling follows `_State`."""

    def __init__(
        self,
        base: MountPlan,
        *,
        system: str | None,
        events: bool,
        log: EventLog | None,
        strict: bool,
        resumed: SessionInfo | None,
    ) -> None:
        self.base = base
        self.system = system
        self.events = events
        self._stop_events: Callable[[], None] | None = None  # the printer, while it is on
        self.log = log
        self.strict = strict
        self.resumed = resumed
        self.reader = LineReader(sys.stdin)
        self.state = _State.STARTING
        self.session: AmplifierSession | None = None
        self.exit_code = 0
        self.presses = 0
        self.idle_presses = 0
        self.streamed = False
        self.wrap = WordWrap(None)
        """The answer being printed, broken at spaces before the terminal's edge."""
        self.drifted = False
        """A replayed turn left its cassette: nothing later can be answered; leave, exit 1."""
        self.decisions: dict[str, str] = {}
        """``/approve`` decisions not yet sent (the turn resumes once none is left)."""
        self.plan_file: Path | None = None
        """The plan file the session runs under (remembered beside its transcript)."""
        self._scope: anyio.CancelScope | None = None
        self._read_scope: anyio.CancelScope | None = None
        if base.context.module not in RESUMABLE:
            warn(f"context {base.context.module!r} is not saved by chat: no --resume for it")

    async def main(self) -> int:
        """Run the REPL; the exit code (0: /exit or Ctrl-D, 130: left with Ctrl-C)."""
        with anyio.open_signal_receiver(signal.SIGINT) as signals:
            async with anyio.create_task_group() as group:
                group.start_soon(self._watch, signals)
                try:
                    with anyio.CancelScope() as self._scope:
                        async with contextlib.AsyncExitStack() as stack:
                            cassette = self.base.cassette
                            if cassette is not None:
                                # One cassette for every session of the chat (/reset too):
                                # their calls go on in the root lane.
                                from ..runtime._cassette import open_cassette

                                await stack.enter_async_context(
                                    open_cassette(cassette.path, cassette.mode)
                                )
                            await self._sessions()
                finally:
                    group.cancel_scope.cancel("chat: leaving (the Ctrl-C watcher stops)")
        return self.exit_code

    # -- Ctrl-C ---------------------------------------------------------------------------

    async def _watch(self, signals: AsyncIterator[int]) -> None:
        async for _ in signals:
            self._interrupt()

    def _interrupt(self) -> None:
        """One Ctrl-C. ``presses`` counts them since the last line entered, ``idle_presses``
        those in a row at the prompt: the third press, or the second at the prompt, leaves."""
        self.presses += 1
        if self.state is _State.STARTING:
            self._leave()
        elif self.state is _State.IDLE:
            self.idle_presses += 1
            if self.presses >= 3 or self.idle_presses >= 2:
                self._leave()
                return
            say("\n(Ctrl-C again, Ctrl-D or /exit to leave)")
            if self._read_scope is not None:
                self._read_scope.cancel("chat: Ctrl-C at the prompt")
        elif self.state is _State.TURN and self.session is not None:
            if self.presses == 1:
                self.session.cancel()
                say("\n(cancelling: the running tools finish first; Ctrl-C again to stop now)")
            elif self.presses == 2:
                self.session.cancel(immediate=True, reason="chat: Ctrl-C twice during a turn")
                say("\n(stopping now; Ctrl-C again to leave)")
            else:
                self._leave()
        # CLOSING: the session's cleanup is bounded; a Ctrl-C then changes nothing

    def _leave(self) -> None:
        self.exit_code = 130
        say("\ninterrupted")
        if self._scope is not None:
            self._scope.cancel("chat: left with Ctrl-C")

    # -- sessions -------------------------------------------------------------------------

    async def _sessions(self) -> None:
        if self.resumed is not None:
            session_id, path, resumed = self.resumed.session_id, self.resumed.path, True
        else:
            session_id = str(uuid.uuid4())
            path, resumed = default_path(session_id), False
        while await self._one_session(session_id, path, resumed) == _RESET:
            session_id = str(uuid.uuid4())
            path, resumed = default_path(session_id), False

    async def _one_session(self, session_id: str, path: Path, resumed: bool) -> str:
        self.state = _State.STARTING
        session = AmplifierSession(
            chat_plan(self.base, path),
            session_id=session_id,
            is_resumed=resumed,
            strict=self.strict,
            approval_system=approval_system(),
        )
        if self.log is not None:
            self.log.attach(session)
        count = 0
        try:
            async with contextlib.AsyncExitStack() as stack:
                await enter_session(stack, session)
                await remember_plan(session, self.plan_file)
                self._attach(session)
                context: Any = session.coordinator.get("context")
                history = await context.get_messages()
                self._banner(session, path, history, resumed)
                pending = getattr(context, "pending_approvals", None)
                waiting = pending() if resumed and callable(pending) else []
                if waiting:
                    self._show_pending(session, waiting)
                if self.system is not None and not history:
                    await add_system_prompt(session, self.system)
                self.session = session
                try:
                    return await self._loop(session)
                finally:
                    self.state = _State.CLOSING
                    self.session = None
                    with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                        count = len(await _messages(context))
        finally:
            _goodbye(session_id, path, count)

    def _attach(self, session: AmplifierSession) -> None:
        hooks = session.coordinator.hooks
        self._stop_events = print_events(session) if self.events else None
        # Terminal writes may block (a slow terminal): off the loop, in order.
        hooks.register(
            CONTENT_BLOCK_START, self._on_block_start, name="cli-chat-stream", blocking=True
        )
        hooks.register(CONTENT_BLOCK_DELTA, self._on_delta, name="cli-chat-stream", blocking=True)
        _show_agents(session)
        session.child_setup.append(_show_agents)  # and each sub-agent's own, indented

    def _show_events(self, session: AmplifierSession, *, on: bool) -> None:
        """``/events on|off``: the printer is registered only while it is on."""
        self.events = on
        if on and self._stop_events is None:
            self._stop_events = print_events(session)
        elif not on and self._stop_events is not None:
            self._stop_events()
            self._stop_events = None

    def _banner(
        self, session: AmplifierSession, path: Path, history: list[dict[str, Any]], resumed: bool
    ) -> None:
        if resumed:
            shown = [line for m in history[-_RECAP:] for line in describe_message(m)]
            if len(history) > _RECAP:
                say(f"… {len(history) - _RECAP} earlier messages", console=out)
            for line in shown:
                say(line, console=out)
            state = f"resumed, {len(history)} messages"
        else:
            state = "new"
        say(f"chat: session {session.session_id} ({state}); /help for commands, Ctrl-D leaves")

    # -- the loop -------------------------------------------------------------------------

    async def _loop(self, session: AmplifierSession) -> str:
        while True:
            self.state = _State.IDLE
            line = await self._prompt()
            if line is None:
                say("", console=out)
                return _LEAVE
            text = line.strip()
            if not text:
                continue
            self.presses = self.idle_presses = 0
            if text.startswith("/"):
                action = await self._command(text, session)
                if action is not None:
                    return action
                continue
            await self._turn(session, text)
            if self.drifted:
                return _LEAVE

    async def _prompt(self) -> str | None:
        say(PROMPT, console=out, end="")
        try:
            with anyio.CancelScope() as self._read_scope:
                return await self.reader.readline()
        finally:
            self._read_scope = None
        return ""  # Ctrl-C at the prompt: the line is dropped

    async def _turn(
        self, session: AmplifierSession, prompt: str | None, approvals: dict[str, str] | None = None
    ) -> None:
        """One turn for ``prompt``; with None, the last turn resumed (with ``approvals``)."""
        self.streamed = False
        self.wrap = WordWrap(terminal_width())
        self.state = _State.TURN
        try:
            if prompt is None:
                result = await session.resume(approvals=approvals)
            else:
                result = await session.run(prompt)
        except Exception as exc:  # noqa: BLE001 - one line; the REPL goes on
            failure = leaf(exc)
            say(f"error: the turn failed: {type(failure).__name__}: {one_line(str(failure))}")
            return
        finally:
            self.state = _State.IDLE
        if self.streamed:
            say(self.wrap.flush(), console=out)
        elif result.text:
            say(self.wrap.feed(result.text) + self.wrap.flush(), console=out)
        if result.status is TurnStatus.CANCELLED:
            say("(turn cancelled)")
        elif result.status is TurnStatus.ERROR:
            error = result.error
            say(f"error: the turn failed: {type(error).__name__}: {one_line(str(error))}")
            if isinstance(error, CassetteMismatchError):
                self.drifted, self.exit_code = True, 1
        elif result.status is TurnStatus.AWAITING_APPROVAL:
            self._show_pending(session, list(result.pending_approvals))
        elif result.status is not TurnStatus.SUCCESS:
            say(f"(turn ended with status {result.status})")

    def _show_pending(self, session: AmplifierSession, waiting: list[PendingApproval]) -> None:
        for line in describe_pending(waiting, session.session_id):
            say(line)

    async def _approve(self, session: AmplifierSession, argument: str) -> None:
        """``/approve CALL allow|deny``: decide one waiting call (or ``all``); once none is
        left undecided, the turn resumes with the decisions."""
        call, _, decision = argument.partition(" ")
        decision = decision.strip()
        if not call or decision not in ("allow", "deny"):
            say("usage: /approve CALL allow|deny (CALL may be all)")
            return
        context: Any = session.coordinator.get("context")
        pending = getattr(context, "pending_approvals", None)
        waiting = [
            p for p in (pending() if callable(pending) else []) if p.call_id not in self.decisions
        ]
        ids = [p.call_id for p in waiting]
        if call != "all" and call not in ids:
            say(
                f"no call {call!r} is waiting for approval"
                + (f" (waiting: {', '.join(ids)})" if ids else "")
            )
            return
        for call_id in ids if call == "all" else [call]:
            self.decisions[call_id] = decision
        left = [i for i in ids if i not in self.decisions]
        if left:
            say(f"({decision} {call}; still waiting: {', '.join(left)})")
            return
        decisions, self.decisions = self.decisions, {}
        await self._turn(session, None, decisions)

    def _on_block_start(self, event: str, data: dict[str, Any]) -> HookResult:
        if data.get("block_type") == "text" and self.streamed:
            say(self.wrap.flush(), console=out)
        return HookResult()

    def _on_delta(self, event: str, data: dict[str, Any]) -> HookResult:
        if data.get("block_type") == "text" and isinstance(data.get("delta"), str):
            say(self.wrap.feed(data["delta"]), console=out, end="")
            self.streamed = True
        return HookResult()

    # -- slash commands -------------------------------------------------------------------

    async def _command(self, text: str, session: AmplifierSession) -> str | None:
        name, _, argument = text.partition(" ")
        argument = argument.strip()
        if name in ("/exit", "/quit"):
            return _LEAVE
        if name == "/reset":
            return _RESET
        if name == "/help":
            say(HELP, console=out)
        elif name == "/session":
            context: Any = session.coordinator.get("context")
            where = getattr(context, "path", None)
            say(f"session {session.session_id}" + (f": {where}" if where else ""), console=out)
        elif name == "/events":
            if argument not in ("on", "off"):
                say("usage: /events on|off")
            else:
                self._show_events(session, on=argument == "on")
                say(f"(events {argument})")
        elif name == "/save":
            await self._save(session, argument)
        elif name == "/approve":
            await self._approve(session, argument)
        elif name == "/resume":
            self.decisions = {}
            await self._turn(session, None)
        else:
            say(f"unknown command {name} (/help lists them)")
        return None

    async def _save(self, session: AmplifierSession, argument: str) -> None:
        context: Any = session.coordinator.get("context")
        messages = await _messages(context)
        path = Path(argument or f"chat-{session.session_id[:8]}.md")
        if path.suffix == ".jsonl":
            text = "".join(json.dumps(m, ensure_ascii=False) + "\n" for m in messages)
        elif path.suffix.lower() in (".md", ".markdown"):
            text = transcript_markdown(messages, session.session_id)
        else:
            text = "".join(line + "\n" for m in messages for line in describe_message(m))
        try:
            await anyio.to_thread.run_sync(_write_text, path, text)
        except OSError as exc:
            say(f"error: /save {path}: {exc.strerror or exc}")
            return
        say(f"(saved {len(messages)} messages to {path})")


def terminal_width() -> int | None:
    """The width answers are wrapped to: the terminal's (``COLUMNS`` first), or None when
    standard output is not a terminal (a pipe gets the text as it is)."""
    try:
        if not sys.stdout.isatty():
            return None
    except (AttributeError, ValueError):  # a closed or replaced stream
        return None
    return max(shutil.get_terminal_size().columns, 1)


@attrs.define(eq=False)
class WordWrap:
    """Text printed piece by piece (a streamed answer), broken at spaces before the
    terminal's edge, so no word is cut in two where the terminal would wrap it.

    A word that would cross the edge starts the next line (the spaces before it are
    dropped); a word longer than a whole line is cut at the edge; the spaces at the start
    of a line (indentation) are kept. The last word of a piece is held until a space, a
    newline or `flush` shows where it ends. Widths are terminal cells (a wide character
    counts two). With ``width`` None, text passes through unchanged.
    """

    width: int | None
    column: int = 0
    """Cells already printed on the current line."""
    gap: str = ""
    """Spaces read but not printed yet (they print with the word after them)."""
    word: str = ""
    """The word being read."""

    def feed(self, text: str) -> str:
        """What to print now for ``text``."""
        if self.width is None:
            return text
        printed: list[str] = []
        for char in text:
            if char == "\n":
                printed.append(self._place())
                printed.append("\n")
                self.column, self.gap = 0, ""
            elif char in " \t":
                printed.append(self._place())
                self.gap += " " if char == "\t" else char
            else:
                self.word += char
        return "".join(printed)

    def flush(self) -> str:
        """What is held back (the last word), for the end of an answer; the next text
        starts a new line."""
        if self.width is None:
            return ""
        placed = self._place()
        self.column, self.gap = 0, ""
        return placed

    def _place(self) -> str:
        if not self.word:
            return ""
        assert self.width is not None
        word, gap = self.word, self.gap
        self.word = self.gap = ""
        printed: list[str] = []
        if self.column and self.column + cell_len(gap) + cell_len(word) > self.width:
            printed.append("\n")
            self.column, gap = 0, ""
        text = gap + word
        while self.column + cell_len(text) > self.width:
            cut, cells = 0, self.column
            while cells + cell_len(text[cut]) <= self.width:
                cells += cell_len(text[cut])
                cut += 1
            if cut == 0 and self.column == 0:  # a character wider than the line
                cut = 1
            printed.append(text[:cut] + "\n")
            text, self.column = text[cut:], 0
        printed.append(text)
        self.column += cell_len(text)
        return "".join(printed)


def _agent_named(data: dict[str, Any]) -> str:
    """The agent of a ``task:*`` event without one: the whole name its child id ends in."""
    child_id = str(data.get("sub_session_id", "?"))
    return agent_of_child_id(child_id) or child_id


def _show_agents(session: AmplifierSession) -> None:
    """Sub-agent activity, one short line as each starts and ends, indented by depth:
    ``  ↳ researcher started`` … ``  ↳ researcher done: success, 2 calls, 1 234 tokens``."""
    indent = "  " * (session.depth + 1)
    hooks = session.coordinator.hooks

    def started(event: str, data: dict[str, Any]) -> HookResult:
        agent = data.get("agent") or _agent_named(data)
        verb = "resumed" if event == TASK_AGENT_RESUMED else "started"
        say(f"{indent}↳ {agent} {verb}")
        return HookResult()

    def completed(event: str, data: dict[str, Any]) -> HookResult:
        agent = data.get("agent") or _agent_named(data)
        if data.get("error"):
            say(f"{indent}↳ {agent} failed: {one_line(str(data['error']))}")
            return HookResult()
        usage = data.get("usage") or {}
        tokens = usage.get("total_tokens") if isinstance(usage, dict) else None
        parts = [str(data.get("status", "?"))]
        if data.get("turn_count") is not None:
            parts.append(f"{data['turn_count']} calls")
        if tokens:
            parts.append(f"{tokens:,} tokens".replace(",", " "))
        say(f"{indent}↳ {agent} done: {', '.join(parts)}")
        return HookResult()

    # terminal writes can block: off the loop, as the stream's printers
    for event in (TASK_AGENT_SPAWNED, TASK_AGENT_RESUMED):
        hooks.register(event, started, name="cli-chat-agents", blocking=True)
    hooks.register(TASK_AGENT_COMPLETED, completed, name="cli-chat-agents", blocking=True)


def transcript_markdown(messages: list[dict[str, Any]], session_id: str) -> str:
    """The conversation as Markdown (``/save FILE.md``): a heading per message naming its
    role, the text as it is, each tool call's arguments and each tool result in a fenced
    block (JSON pretty-printed)."""
    parts = [f"# Chat session {session_id}"]
    for message in messages:
        role = str(message.get("role", "?"))
        if role == "tool":
            name = message.get("name") or "tool"
            parts.append(f"## Tool result: `{name}` ({_call_id(message.get('tool_call_id'))})")
            parts.append(_fenced(_message_text(message)))
            continue
        parts.append(f"## {role.capitalize()}")
        text = _message_text(message).strip()
        if text:
            parts.append(text)
        for call in message.get("tool_calls") or ():
            function = call.get("function") or {}
            name = call.get("name") or function.get("name", "?")
            arguments = call.get("arguments", function.get("arguments", {}))
            parts.append(f"Tool call `{name}` ({_call_id(call.get('id'))}):")
            parts.append(_fenced(arguments))
    return "\n\n".join(parts) + "\n"


def _call_id(call_id: Any) -> str:
    return f"call `{call_id}`" if call_id else "call"


def _message_text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "".join(
            str(block.get("text", ""))
            for block in content
            if isinstance(block, dict) and block.get("type") == "text"
        )
    return "" if content is None else str(content)


def _fenced(value: Any) -> str:
    """``value`` in a fenced block: JSON (text that parses as JSON too) pretty-printed,
    anything else as text; the fence is longer than any run of backticks inside."""
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            value = json.loads(value)
    if isinstance(value, str):
        body, language = value, "text"
    else:
        body, language = json.dumps(value, ensure_ascii=False, indent=2, default=str), "json"
    longest = max((len(run) for run in re.findall(r"`+", body)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{language}\n{body.rstrip()}\n{fence}"


async def _messages(context: Any) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = await context.get_messages()
    return messages


def _write_text(path: Path, text: str) -> None:
    path.write_text(text, encoding="utf-8")


def _goodbye(session_id: str, path: Path, count: int) -> None:
    if count:
        say(f"saved session {session_id}: amplifier-anyio chat --resume {session_id}")
        return
    with contextlib.suppress(OSError):  # nothing was said: leave no empty session behind
        if path.exists() and path.stat().st_size == 0:
            path.unlink()
        if not path.exists():  # the files beside it (its writer has closed by now)
            for beside in (lock_path_for(path), metadata_path_for(path)):
                beside.unlink(missing_ok=True)
        path.parent.rmdir()


class LineReader:
    """Lines of a text stream's file descriptor, read without blocking the event loop.

    It waits for the descriptor to be readable (``anyio.wait_readable``: cancellable, no
    thread left blocked on a terminal), then reads what is there. What cannot be waited
    for that way — a regular file or ``/dev/null`` as stdin, a stream without a descriptor
    — is read from a worker thread. ``readline()`` returns a line without its newline, or
    None at the end of input (Ctrl-D on a terminal).
    """

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        try:
            self._fd: int | None = stream.fileno()
        except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is both
            self._fd = None
        self._pollable = self._fd is not None and not stat.S_ISREG(os.fstat(self._fd).st_mode)
        self._buffer = b""
        self._eof = False

    async def readline(self) -> str | None:
        """The next line, or None at the end of input."""
        while b"\n" not in self._buffer and not self._eof:
            chunk = await self._read()
            if chunk:
                self._buffer += chunk
            else:
                self._eof = True
        if not self._buffer:
            await anyio.lowlevel.checkpoint()
            return None
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line.decode("utf-8", "replace")

    async def _read(self) -> bytes:
        if self._fd is None:
            line = await anyio.to_thread.run_sync(self._stream.readline, abandon_on_cancel=True)
            return line.encode("utf-8") if isinstance(line, str) else bytes(line)
        if self._pollable:
            try:
                await anyio.wait_readable(self._fd)
            except OSError:  # the descriptor cannot be polled (/dev/null under epoll)
                self._pollable = False
            else:
                return os.read(self._fd, 65536)
        return await anyio.to_thread.run_sync(os.read, self._fd, 65536)
