"""What the commands share: the consoles, one-line errors, Ctrl-C, the session's start.

Every failure a command reports is one line on stderr (``error: …``) and an exit code;
nothing here prints a traceback.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import json
import logging
import math
import sys
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import anyio
import attrs
import typer
from rich.console import Console
from rich.markup import escape

from ..errors import ConfigError, ModuleLoadError, ModuleNotFoundError, describe
from ..events import ALL_EVENTS, MODULE_LOAD_FAILED, PROVIDER_RETRY
from ..kernel._mount_plan import MountPlan
from ..kernel._turns import TurnResult
from ..models import HookResult, unstructure
from ..session._bundles import plan_of, resolve_plan_file
from ..session._session import AmplifierSession

out = Console()
err = Console(stderr=True)

BACKENDS = ("asyncio", "trio")

_MAX_MESSAGE = 500  # characters of one error line


def say(text: str, *, console: Console = err, end: str = "\n") -> None:
    """Print ``text`` as it is (no markup, no highlighting, no wrapping of our own)."""
    console.print(text, markup=False, highlight=False, soft_wrap=True, end=end)


def fail(message: str, code: int = 2) -> typer.Exit:
    """Print ``error: message`` on one line; return the Exit to raise."""
    say(f"error: {one_line(message)}")
    return typer.Exit(code)


def warn(message: str) -> None:
    """Print ``warning: message`` on one line."""
    say(f"warning: {one_line(message)}")


def one_line(text: str) -> str:
    """``text`` with its whitespace collapsed, cut at 500 characters."""
    text = " ".join(text.split())
    return text if len(text) <= _MAX_MESSAGE else text[: _MAX_MESSAGE - 1] + "…"


def leaf(exc: BaseException) -> BaseException:
    """The one exception inside nested single-member groups (a task group's wrapping)."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def cause(exc: BaseException) -> str:
    """``Type: message`` of an exception (our own errors: the message), on one line."""
    return one_line(describe(exc))


def interrupted(exc: BaseException) -> bool:
    """Ctrl-C: a KeyboardInterrupt, or a group holding one (trio raises it through nurseries)."""
    if isinstance(exc, BaseExceptionGroup):
        return exc.subgroup(KeyboardInterrupt) is not None
    return isinstance(exc, KeyboardInterrupt)


@contextlib.contextmanager
def cli_command() -> Iterator[None]:
    """Around a command: Ctrl-C is one line and exit 130; library log records are one line."""
    handler = _LogLine()
    package_logger = logging.getLogger("amplifier_anyio")
    package_logger.addHandler(handler)
    try:
        yield
    except BaseException as exc:
        if not interrupted(exc):
            raise
        say("interrupted")
        raise typer.Exit(130) from None
    finally:
        package_logger.removeHandler(handler)


class _LogLine(logging.Handler):
    """The library's warnings and errors as one line each on stderr, never a traceback."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)

    def emit(self, record: logging.LogRecord) -> None:
        if _reported_as_event(record):
            return
        try:
            message = record.getMessage()
            if record.exc_info is not None and record.exc_info[1] is not None:
                message = f"{message} ({cause(record.exc_info[1])})"
        except Exception:  # noqa: BLE001 - logging's own policy for a record that cannot format
            self.handleError(record)
            return
        say(f"{record.levelname.lower()}: {one_line(message)}")


def _reported_as_event(record: logging.LogRecord) -> bool:
    # The session logs an optional module that failed to load and emits
    # module:load_failed, which the CLI prints (warn_load_failed): print it once.
    return record.name == "amplifier_anyio.session._session" and "not loaded" in str(record.msg)


def check_backend(backend: str) -> None:
    """``--backend``: asyncio, or trio when it is installed."""
    if backend not in BACKENDS:
        raise fail(f"--backend: must be one of {', '.join(BACKENDS)}, not {backend!r}")
    if backend == "trio" and importlib.util.find_spec("trio") is None:
        raise fail("--backend trio: trio is not installed (pip install 'amplifier-anyio[trio]')")


def load_plan_file(plan: Path, *, strict: bool = False) -> MountPlan:
    """A plan file (an upstream bundle or profile resolved, its warnings printed), or one
    line and exit 2."""
    try:
        resolved = anyio.run(functools.partial(resolve_plan_file, plan, strict=strict))
        for warning in resolved.warnings:
            warn(warning)
        return plan_of(resolved)
    except ConfigError as exc:
        raise fail(str(exc)) from None


# -- the session's start and the failures of a run -----------------------------------------


class StartupError(Exception):
    """The session could not start; the message is the CLI's line for it."""


async def enter_session(stack: contextlib.AsyncExitStack, session: AmplifierSession) -> None:
    """Enter ``session`` on ``stack``; a module that fails to load or mount is a StartupError."""
    # terminal writes can block (a slow ssh session, a full pipe): in a thread, off the loop
    hooks = session.coordinator.hooks
    hooks.register(MODULE_LOAD_FAILED, warn_load_failed, name="cli-warn", blocking=True)
    hooks.register(PROVIDER_RETRY, say_retry, name="cli-retry", blocking=True)
    try:
        # Entered with ``async with``: the session then owns the task group that
        # module services (hooks-logging's writer, …) run in.
        await stack.enter_async_context(session)
    except Exception as exc:
        # Whatever a module raises while the session loads and mounts it (the session
        # has cleaned up already): one line naming the module, exit 2.
        raise StartupError(_startup_problem(exc)) from exc


def _startup_problem(exc: Exception) -> str:
    if isinstance(leaf(exc), ModuleLoadError | ModuleNotFoundError | ConfigError):
        return cause(exc)  # the message names the plan entry (and the module, the key)
    return f"the session could not start: {cause(exc)}"


def run_failure(exc: BaseException) -> typer.Exit:
    """The line and exit code for an exception out of ``anyio.run`` of a command."""
    found = leaf(exc)
    if isinstance(found, StartupError):
        return fail(str(found))
    if isinstance(found, ConfigError | ModuleNotFoundError | ModuleLoadError):
        return fail(cause(found))
    # Not a result but an exception out of the turn: still one line, exit 1.
    return fail(f"the turn failed: {type(found).__name__}: {found}", code=1)


def approval_system() -> Any:
    """Ask on the terminal when there is one; otherwise none, so approvals fail closed."""
    if not sys.stdin.isatty():
        return None
    from ..hooks.approval import ConsoleApprovalSystem

    return ConsoleApprovalSystem()


def warn_load_failed(event: str, data: dict[str, Any]) -> None:
    """The warning line of an optional module that did not load."""
    if not data.get("optional"):
        return  # a required module's failure ends the start: the error line says it
    kind, module_id, error = data.get("module_type"), data.get("module_id"), data.get("error")
    say(f"warning: {kind} {module_id!r} not loaded: {one_line(str(error))}")


def say_retry(event: str, data: dict[str, Any]) -> None:
    """A provider's retry, as it happens: ``openai: retrying 1/3 in 1.0 s (why)``, so a
    server that does not answer is not minutes of silence before the error line."""
    error = data.get("error") or {}
    why = error.get("msg") or error.get("type") or "the attempt failed"
    say(
        f"{data.get('provider')}: retrying {data.get('attempt')}/{data.get('max_retries')} "
        f"in {float(data.get('delay') or 0):.1f} s ({one_line(str(why))})"
    )


# -- events ----------------------------------------------------------------------------------

_EVENT_IDS = ("session_id", "parent_id", "timestamp", "trace_id")


def print_events(session: AmplifierSession) -> Callable[[], None]:
    """Print every event, one short line each on stderr; returns what stops it.

    Registered only while wanted: a listener on every event costs each emit a thread hop
    and turns on the ordering of a batch's tool events (docs/hooks.md)."""

    def show(event: str, data: dict[str, Any]) -> HookResult:
        fields = {k: v for k, v in data.items() if k not in _EVENT_IDS}
        text = json.dumps(fields, default=str)
        if len(text) > 160:
            text = text[:157] + "..."
        # soft_wrap: one line per event whatever the width (a log file is grepped by line)
        err.print(
            f"[dim]{data.get('timestamp', '')[11:23]}[/dim] [bold]{event}[/bold] {escape(text)}",
            highlight=False,
            soft_wrap=True,
        )
        return HookResult()

    # A terminal write may block (a slow terminal, a full pipe): off the loop, in order.
    register = session.coordinator.hooks.register
    stops = [
        register(event, show, priority=1_000_000, name="cli-events", blocking=True)
        for event in ALL_EVENTS
    ]

    def stop() -> None:
        for unregister in stops:
            unregister()

    return stop


class EventLog:
    """``--events-jsonl FILE``: every event as one JSON line, untruncated, with its ids.

    A line is ``{"event", "timestamp", "session_id", "parent_id", "trace_id", "data"}``;
    the file is written from a worker thread and flushed after each line, so ``tail -f``
    follows a turn as it runs.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file: Any = None

    def open(self) -> None:
        """Create the file (and its folder) now, or one line and exit 2."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = self.path.open("w", encoding="utf-8")
        except OSError as exc:
            raise fail(f"--events-jsonl {self.path}: {exc.strerror or exc}") from None

    def close(self) -> None:
        """Close the file (idempotent)."""
        if self._file is not None:
            self._file.close()
            self._file = None

    def attach(self, session: AmplifierSession) -> None:
        """Record every event of ``session``, after every other hook has seen it."""
        for event in ALL_EVENTS:
            session.coordinator.hooks.register(
                event, self._record, priority=1_000_001, name="cli-events-jsonl"
            )

    async def _record(self, event: str, data: dict[str, Any]) -> HookResult:
        record: dict[str, Any] = {"event": event}
        record.update((key, data.get(key)) for key in _EVENT_IDS)
        record["data"] = {k: v for k, v in data.items() if k not in _EVENT_IDS}
        line = json.dumps(record, ensure_ascii=False, default=_jsonable) + "\n"
        if self._file is not None:
            await anyio.to_thread.run_sync(self._write, line)
        return HookResult()

    def _write(self, line: str) -> None:
        if self._file is not None:
            self._file.write(line)
            self._file.flush()


def _jsonable(value: Any) -> Any:
    if isinstance(value, BaseException):
        return f"{type(value).__name__}: {value}"
    try:
        plain = unstructure(value)
    except Exception:  # noqa: BLE001 - anything the converter does not know is shown as text
        return str(value)
    return str(plain) if plain is value else plain


def turn_json(result: TurnResult, session_id: str) -> dict[str, Any]:
    """``--json``: a TurnResult as a JSON-ready dict, with the session's id.

    Every value is plain JSON: dollars (``usage.cost_usd``, a `Decimal`) are their exact
    text, a pending call's input is made plain the same way (`json_ready`).
    """
    error = result.error
    return {
        "session_id": session_id,
        "status": str(result.status),
        "text": result.text,
        "turn_count": result.turn_count,
        "usage": json_ready(attrs.asdict(result.usage)),
        "finish_reason": result.finish_reason,
        "trace_id": result.trace_id,
        "error": None
        if error is None
        else {"type": type(error).__name__, "message": one_line(str(error))},
        "problems": [str(p) for p in result.problems],
        "pending_approvals": [json_ready(attrs.asdict(p)) for p in result.pending_approvals],
    }


def json_ready(value: Any) -> Any:
    """``value`` as what `json.dumps` takes: a `Decimal` as its exact text, an attrs value
    as its fields, tuples and sets as lists, bytes as text, mapping keys as text, and any
    other object as its ``str()``."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, dict):
        return {str(k): json_ready(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_ready(v) for v in value]
    if isinstance(value, set | frozenset):
        return sorted((json_ready(v) for v in value), key=repr)
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", "replace")
    if attrs.has(type(value)):
        return json_ready(unstructure(value))
    return str(value)
