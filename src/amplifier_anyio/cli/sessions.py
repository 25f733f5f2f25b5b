"""``amplifier-anyio sessions``: the persistent transcripts ``chat`` writes.

A session is a directory ``<home>/projects/<slug>/sessions/<id>/`` holding
``context-messages.jsonl`` (context-persistent's file; ``<home>`` is ``$AMPLIFIER_HOME``,
default ``~/.amplifier``; ``<slug>`` names the working directory). ``list`` shows the
sessions of the working directory (``--all``: of every directory), newest first; ``show``
prints one conversation, then the tree of its sub-agent sessions (children persisted next
to it by tool-task, each with a ``metadata.json`` naming its parent; ``docs/agents.md``);
``rm`` deletes one (asking first on a terminal; ``--yes`` does
not ask, and off a terminal is required). ``list`` shows root sessions only, one row each
with its sub-agent sessions counted (``--json`` nests them).

A session is named by its id, or by a prefix of it (4 characters at least), in any
project. A child's id begins with its parent's (``{parent}-{span}_{agent}``), so a prefix
is read against the root sessions first: a prefix that matches one root session names it,
whatever children it has; only a prefix that matches no root session (it goes past the
root's id) names a sub-agent session.

``approve ID CALL allow|deny`` decides a tool call a turn left waiting for approval
(``docs/durable.md``); ``run --resume ID`` (or ``chat --resume ID``, then ``/resume``)
continues the turn, under the plan the session ran under.

Nothing here but ``rm`` writes: ``list`` and ``show`` read the transcript as it is (a
running session's too), and ``approve`` appends to the transcript's decisions file, which
the session's writer takes in when the turn resumes. ``rm`` takes the session's writer
lock first, so it refuses a session a process has open.

Each sub-command is one function registered on `app` (``@app.command("name")``)
and resolves its ``ID`` with `find_session`.
"""

from __future__ import annotations

import json
import shutil
import sys
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

import anyio
import attrs
import typer

from ..contexts import _jsonl, _store
from ..contexts.durable import approve, pending_approvals
from ..contexts.persistent import CONTEXT_MESSAGES_FILENAME, amplifier_home, default_path
from ..errors import ContextFileError, SessionError
from ..kernel._ids import agent_of_child_id, parent_of_child_id
from ..kernel._turns import PendingApproval
from ..session._agents import read_metadata
from ._common import fail, one_line, out, say

__all__ = (
    "app",
    "SessionInfo",
    "find_session",
    "list_sessions",
    "root_sessions",
    "project_sessions_dir",
    "list_command",
    "show_command",
    "rm_command",
    "approve_command",
    "describe_message",
    "describe_pending",
    "session_tree",
)

app = typer.Typer(
    name="sessions",
    help="List, show and remove the saved chat sessions (resume one with chat --resume ID).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

_MIN_PREFIX = 4  # characters of an id that may name a session


@attrs.frozen(kw_only=True)
class SessionInfo:
    """One saved session: its id, transcript file and what the file holds."""

    session_id: str
    path: Path
    """The ``context-messages.jsonl`` file."""
    updated: datetime
    """When the transcript last changed (local time)."""
    messages: int
    title: str
    """The first user prompt, on one line."""
    parent_id: str | None = None
    """The session that spawned it (a sub-agent session); None for a root session."""
    agent: str | None = None
    """The agent a sub-agent session runs."""

    @property
    def directory(self) -> Path:
        """The session's directory (what ``rm`` deletes)."""
        return self.path.parent


def project_sessions_dir(cwd: Path | None = None) -> Path:
    """The sessions directory of a working directory (default: the current one)."""
    return default_path("x", cwd).parent.parent


def _all_sessions_dirs() -> list[Path]:
    projects = amplifier_home() / "projects"
    if not projects.is_dir():
        return []
    return sorted(path / "sessions" for path in projects.iterdir() if (path / "sessions").is_dir())


def _info(path: Path) -> SessionInfo | None:
    try:
        stat = path.stat()
        messages, _torn = _jsonl.read_messages(path)
    except (OSError, _jsonl.ContextFileError):
        return None
    title = next(
        (_text(m) for m in messages if m.get("role") == "user" and _text(m).strip()), "(empty)"
    )
    session_id = path.parent.name
    metadata = read_metadata(path) or {}
    parent = metadata.get("parent_id")
    agent = metadata.get("agent_name")
    if not isinstance(parent, str) or not parent:  # no metadata: the id's own shape
        agent = agent_of_child_id(session_id)
        parent = parent_of_child_id(session_id)
    return SessionInfo(
        session_id=session_id,
        path=path,
        updated=datetime.fromtimestamp(stat.st_mtime).astimezone(),
        messages=len(messages),
        title=one_line(title),
        parent_id=parent or None,
        agent=agent if isinstance(agent, str) else None,
    )


def list_sessions(*, every_project: bool = False) -> list[SessionInfo]:
    """The saved sessions of the working directory (or of every one), newest first."""
    directories = _all_sessions_dirs() if every_project else [project_sessions_dir()]
    found = [
        info
        for directory in directories
        if directory.is_dir()
        for child in directory.iterdir()
        if (info := _info(child / CONTEXT_MESSAGES_FILENAME)) is not None
    ]
    return sorted(found, key=lambda info: info.updated, reverse=True)


def root_sessions(sessions: list[SessionInfo]) -> list[tuple[SessionInfo, list[SessionInfo]]]:
    """Each root session of ``sessions`` with its sub-agent sessions (every level, in the
    order given), in the order given. A sub-agent session whose root is not among them (it
    was removed) counts as a root."""
    by_id = {info.session_id: info for info in sessions}

    def root_of(info: SessionInfo) -> SessionInfo:
        seen = {info.session_id}
        while info.parent_id in by_id and info.parent_id not in seen:
            info = by_id[info.parent_id]
            seen.add(info.session_id)
        return info

    below: dict[str, list[SessionInfo]] = {}
    roots: list[SessionInfo] = []
    for info in sessions:
        root = root_of(info)
        if root is info:
            roots.append(info)
        else:
            below.setdefault(root.session_id, []).append(info)
    return [(root, below.get(root.session_id, [])) for root in roots]


def find_session(name: str) -> SessionInfo:
    """The session an id (or a prefix of one) names, in any project; else one line, exit 2.

    A prefix names the root session it matches (a child's id begins with its parent's);
    only a prefix that matches no root session names a sub-agent session."""
    name = name.strip()
    if not name or "/" in name or name in (".", ".."):
        raise fail(f"not a session id: {name!r}")
    here = project_sessions_dir()
    for directory in [here, *(d for d in _all_sessions_dirs() if d != here)]:
        info = _info(directory / name / CONTEXT_MESSAGES_FILENAME)
        if info is not None:
            return info
    if len(name) >= _MIN_PREFIX:
        matches = [i for i in list_sessions(every_project=True) if i.session_id.startswith(name)]
        roots = [info for info in matches if info.parent_id is None]
        matches = roots or matches
        if len(matches) == 1:
            return matches[0]
        if matches:
            ids = ", ".join(info.session_id for info in matches[:5])
            raise fail(f"{name!r} names {len(matches)} sessions ({ids}); give more of the id")
    raise fail(f"no session {name!r} (amplifier-anyio sessions list --all shows them)")


# -- sub-commands ----------------------------------------------------------------------------


@app.command("list")
def list_command(
    every_project: Annotated[
        bool, typer.Option("--all", help="Sessions of every working directory.")
    ] = False,
    json_output: Annotated[bool, typer.Option("--json", help="One JSON object a line.")] = False,
) -> None:
    """List the saved sessions, newest first: id, last change, messages, sub-agent
    sessions, first prompt (one row per root session; sessions show ID draws its tree)."""
    sessions = root_sessions(list_sessions(every_project=every_project))
    for info, children in sessions:
        if json_output:
            record = {
                **_record(info),
                "sub_sessions": [
                    {**_record(child), "parent_id": child.parent_id, "agent": child.agent}
                    for child in children
                ],
            }
            say(json.dumps(record, ensure_ascii=False), console=out)
            continue
        when = info.updated.strftime("%Y-%m-%d %H:%M")
        title = info.title if len(info.title) <= 60 else info.title[:59] + "…"
        agents = f"  +{len(children)} sub-agent{'s' if len(children) != 1 else ''}"
        say(
            f"{info.session_id}  {when}  {info.messages:>4} msgs{agents if children else ''}"
            f"  {title}",
            console=out,
        )
    if not sessions and not json_output:
        where = "anywhere" if every_project else "for this directory (--all: every directory)"
        say(f"no saved sessions {where}")


def _record(info: SessionInfo) -> dict[str, Any]:
    return {
        "session_id": info.session_id,
        "updated": info.updated.isoformat(timespec="seconds"),
        "messages": info.messages,
        "title": info.title,
        "path": str(info.path),
    }


@app.command("show")
def show_command(
    session_id: Annotated[str, typer.Argument(metavar="ID", help="A session id (or prefix).")],
    json_output: Annotated[
        bool, typer.Option("--json", help="The messages as they are stored, one a line.")
    ] = False,
) -> None:
    """Print one session's conversation (tool calls and results shortened)."""
    info = find_session(session_id)
    messages, _torn = _jsonl.read_messages(info.path)
    if json_output:
        for message in messages:
            say(json.dumps(message, ensure_ascii=False), console=out)
        return
    say(f"session {info.session_id}: {info.messages} messages, {info.path}")
    for message in messages:
        for line in describe_message(message):
            say(line, console=out)
    waiting = _pending(info)
    if waiting:
        for line in describe_pending(waiting, info.session_id):
            say(line, console=out)
    parent = (read_metadata(info.path) or {}).get("parent_id")
    if parent:
        say(f"sub-agent session of {parent}", console=out)
    tree = session_tree(info)
    if tree:
        say("sub-agents:", console=out)
        for line in tree:
            say(line, console=out)


@app.command("approve")
def approve_command(
    session_id: Annotated[str, typer.Argument(metavar="ID", help="A session id (or prefix).")],
    call_id: Annotated[str, typer.Argument(metavar="CALL", help="The waiting call's id.")],
    decision: Annotated[str, typer.Argument(metavar="allow|deny", help="The decision.")],
) -> None:
    """Allow or deny a tool call the session's last turn left waiting for approval; the
    call runs (or is answered as denied) when the turn resumes (chat --resume ID, /resume)."""
    if decision not in ("allow", "deny"):
        raise fail(f"the decision must be allow or deny, not {decision!r}")
    info = find_session(session_id)
    try:
        waiting = anyio.run(approve, info.path, {call_id: decision})
    except (SessionError, ContextFileError) as exc:
        raise fail(str(exc)) from None
    say(f"{decision} recorded for {call_id} in session {info.session_id}")
    if waiting:
        say(f"{len(waiting)} call(s) still waiting: " + ", ".join(p.call_id for p in waiting))
    else:
        say(
            f"continue the turn with: amplifier-anyio run --resume {info.session_id} "
            f"(or chat --resume {info.session_id}, then /resume)"
        )


def session_tree(info: SessionInfo) -> list[str]:
    """The lines that draw the sub-agent sessions below ``info`` (read-only): each child
    with its agent, messages and first prompt, its own children indented below it."""
    children: dict[str, list[tuple[str, SessionInfo]]] = {}
    directory = info.directory.parent
    for child in sorted(directory.iterdir()) if directory.is_dir() else ():
        metadata = read_metadata(child / CONTEXT_MESSAGES_FILENAME)
        found = _info(child / CONTEXT_MESSAGES_FILENAME) if metadata else None
        if metadata and found is not None and isinstance(metadata.get("parent_id"), str):
            agent = str(metadata.get("agent_name") or "?")
            children.setdefault(metadata["parent_id"], []).append((agent, found))
    lines: list[str] = []
    drawn = {info.session_id}  # metadata that loops (edited by hand) is drawn once

    def draw(session_id: str, indent: str) -> None:
        below = [(a, c) for a, c in children.get(session_id, []) if c.session_id not in drawn]
        drawn.update(c.session_id for _, c in below)
        for index, (agent, child) in enumerate(below):
            last = index == len(below) - 1
            branch, more = ("└─ ", "   ") if last else ("├─ ", "│  ")
            title = child.title if len(child.title) <= 50 else child.title[:49] + "…"
            lines.append(
                f"{indent}{branch}{agent}  {child.session_id}  {child.messages} msgs  {title}"
            )
            draw(child.session_id, indent + more)

    draw(info.session_id, "  ")
    return lines


def _pending(info: SessionInfo) -> list[PendingApproval]:
    try:
        return anyio.run(pending_approvals, info.path)
    except ContextFileError:
        return []


@app.command("rm")
def rm_command(
    session_id: Annotated[str, typer.Argument(metavar="ID", help="A session id (or prefix).")],
    yes: Annotated[
        bool, typer.Option("--yes", "-y", help="Delete without asking (needed off a terminal).")
    ] = False,
) -> None:
    """Delete a saved session (its whole directory), after asking on a terminal; never
    one a process has open."""
    info = find_session(session_id)
    if not yes:
        if not sys.stdin.isatty():
            msg = f"sessions rm {info.session_id}: no terminal to ask on; add --yes to delete it"
            raise fail(msg)
        question = (
            f"delete session {info.session_id} ({info.messages} messages, "
            f"{info.updated:%Y-%m-%d %H:%M}, {info.title!r})?"
        )
        if not typer.confirm(one_line(question), default=False, err=True):
            say(f"kept session {info.session_id}")
            raise typer.Exit(1)
    try:
        held = _store.acquire_writer(info.path)  # as its writer: no session has it open
    except (SessionError, ContextFileError) as exc:
        raise fail(f"cannot remove session {info.session_id}: {exc}") from None
    try:
        shutil.rmtree(info.directory)
    except OSError as exc:
        raise fail(f"cannot remove {info.directory}: {exc.strerror or exc}") from None
    finally:
        _store.release_writer(held)
    say(f"removed session {info.session_id}")


# -- showing messages ------------------------------------------------------------------------

_SHORT = 200  # characters of a tool call or result shown


def describe_message(message: dict[str, Any]) -> list[str]:
    """The lines ``show`` (and ``chat --resume``) print for one stored message."""
    role = message.get("role", "?")
    text = _text(message).strip()
    if role == "tool":
        name = message.get("name") or message.get("tool_call_id", "")
        return [f"  <- {name}: {_short(text)}"]
    lines = [f"{role}: {text}"] if text else []
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        name = call.get("name") or function.get("name", "?")
        arguments = call.get("arguments", function.get("arguments", {}))
        shown = arguments if isinstance(arguments, str) else json.dumps(arguments)
        lines.append(f"  -> {name}({_short(shown)})")
    return lines


def describe_pending(waiting: list[PendingApproval], session_id: str) -> list[str]:
    """The lines that show the calls waiting for approval, and how to decide them."""
    lines = [f"waiting for approval ({len(waiting)}):"]
    for pending in waiting:
        shown = _short(json.dumps(pending.input, ensure_ascii=False, default=str))
        lines.append(f"  {pending.call_id}  {pending.tool} {shown}  — {_short(pending.prompt)}")
    lines.append(
        f"decide with: /approve CALL allow|deny in chat, or "
        f"amplifier-anyio sessions approve {session_id} CALL allow|deny"
    )
    return lines


def _short(text: str) -> str:
    text = one_line(text)
    return text if len(text) <= _SHORT else text[: _SHORT - 1] + "…"


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(block.get("text", ""))
            for block in content
            if isinstance(block, dict) and block.get("type") == "text"
        )
    return ""
