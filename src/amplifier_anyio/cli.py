"""The ``amplifier-anyio`` command: run a turn, validate a plan or a module, benchmark.

Exit codes: 0 ok; 1 the turn failed; 2 bad usage, a bad plan, or a session that could not
start (one line on stderr, no traceback); 130 interrupted (Ctrl-C, on either backend).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import anyio
import typer
from rich.console import Console
from rich.markup import escape

from . import __version__
from .errors import ConfigError, ModuleLoadError, ModuleNotFoundError, describe
from .events import MODULE_LOAD_FAILED
from .kernel._loader import ModuleLoader
from .kernel._mount_plan import MountPlan
from .kernel._session import AmplifierSession
from .kernel._turns import TurnStatus
from .kernel._validation import validate_plan
from .models import HookResult

__all__ = ("DEFAULT_PLAN", "app", "main")

DEFAULT_PLAN: dict[str, Any] = {
    "session": {"orchestrator": "loop-basic", "context": "context-simple"},
    "orchestrator": {"config": {"max_iterations": 8}},
    "providers": [{"module": "provider-scripted", "config": {"demo": True}}],
    "tools": [{"module": "tool-demo"}],
}
"""The embedded offline plan: a scripted model that calls two demo tools in parallel."""

app = typer.Typer(
    name="amplifier-anyio",
    help="An Amplifier-style agent runtime on AnyIO: runs on asyncio and trio.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
out = Console()
err = Console(stderr=True)

_BACKENDS = ("asyncio", "trio")


def _version(value: bool) -> None:
    if value:
        out.print(f"amplifier-anyio {__version__}")
        raise typer.Exit


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Show the version."),
    ] = False,
) -> None:
    """Run agent turns offline or against real providers, validate plans, benchmark."""


_MAX_MESSAGE = 500  # characters of one error line


def _fail(message: str, code: int = 2) -> typer.Exit:
    err.print(f"error: {_one_line(message)}", markup=False, highlight=False, soft_wrap=True)
    return typer.Exit(code)


def _one_line(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _MAX_MESSAGE else text[: _MAX_MESSAGE - 1] + "…"


def _leaf(exc: BaseException) -> BaseException:
    """The one exception inside nested single-member groups (a task group's wrapping)."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def _cause(exc: BaseException) -> str:
    """``Type: message`` of an exception (our own errors: the message), on one line."""
    return _one_line(describe(exc))


def _interrupted(exc: BaseException) -> bool:
    """Ctrl-C: a KeyboardInterrupt, or a group holding one (trio raises it through nurseries)."""
    if isinstance(exc, BaseExceptionGroup):
        return exc.subgroup(KeyboardInterrupt) is not None
    return isinstance(exc, KeyboardInterrupt)


@contextlib.contextmanager
def _cli_command() -> Iterator[None]:
    """Around a command: Ctrl-C is one line and exit 130; library log records are one line."""
    handler = _LogLine()
    package_logger = logging.getLogger("amplifier_anyio")
    package_logger.addHandler(handler)
    try:
        yield
    except BaseException as exc:
        if not _interrupted(exc):
            raise
        err.print("interrupted", markup=False, highlight=False)
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
                message = f"{message} ({_cause(record.exc_info[1])})"
        except Exception:  # noqa: BLE001 - logging's own policy for a record that cannot format
            self.handleError(record)
            return
        line = f"{record.levelname.lower()}: {_one_line(message)}"
        err.print(line, markup=False, highlight=False, soft_wrap=True)


def _reported_as_event(record: logging.LogRecord) -> bool:
    # The session logs an optional module that failed to load and emits
    # module:load_failed, which the CLI prints (_warn_load_failed): print it once.
    return record.name == "amplifier_anyio.kernel._session" and "not loaded" in str(record.msg)


def _check_backend(backend: str) -> None:
    if backend not in _BACKENDS:
        raise _fail(f"--backend: must be one of {', '.join(_BACKENDS)}, not {backend!r}")
    if backend == "trio" and importlib.util.find_spec("trio") is None:
        raise _fail("--backend trio: trio is not installed (pip install 'amplifier-anyio[trio]')")


def _load_plan(plan: Path | None) -> MountPlan:
    try:
        return MountPlan.from_dict(DEFAULT_PLAN) if plan is None else MountPlan.from_file(plan)
    except ConfigError as exc:
        raise _fail(str(exc)) from None


@app.command("run")
def _run_command(
    prompt: Annotated[str, typer.Argument(help="What to ask the agent.")],
    plan: Annotated[
        Path | None,
        typer.Option("--plan", help="A mount plan (.yaml/.yml/.toml); default: the offline demo."),
    ] = None,
    backend: Annotated[str, typer.Option("--backend", help="asyncio or trio.")] = "asyncio",
    events: Annotated[bool, typer.Option("--events", help="Print the event stream live.")] = False,
    strict: Annotated[
        bool, typer.Option("--strict", help="Refuse config keys a module does not declare.")
    ] = False,
) -> None:
    """Run one turn and print the answer."""
    _check_backend(backend)
    with _cli_command():
        mount_plan = _load_plan(plan)
        result = _run(mount_plan, prompt, events, backend, strict)
    if result.status is TurnStatus.ERROR:
        raise _fail(f"the turn failed: {type(result.error).__name__}: {result.error}", code=1)
    out.print(result.text, markup=False, highlight=False, soft_wrap=True)
    if result.status is not TurnStatus.SUCCESS:
        err.print(f"(turn ended with status {result.status})")
    raise typer.Exit(0 if result.status is not TurnStatus.CANCELLED else 1)


def _run(plan: MountPlan, prompt: str, events: bool, backend: str, strict: bool) -> Any:
    try:
        return anyio.run(_run_turn, plan, prompt, events, strict, backend=backend)
    except Exception as exc:  # noqa: BLE001 - any failure is one line and an exit code
        leaf = _leaf(exc)
        if isinstance(leaf, _StartupError):
            raise _fail(str(leaf)) from None
        if isinstance(leaf, ConfigError | ModuleNotFoundError | ModuleLoadError):
            raise _fail(_cause(leaf)) from None
        # Not a result but an exception out of the turn: still one line, exit 1.
        raise _fail(f"the turn failed: {type(leaf).__name__}: {leaf}", code=1) from None


class _StartupError(Exception):
    """The session could not start; the message is the CLI's line for it."""


async def _run_turn(plan: MountPlan, prompt: str, events: bool, strict: bool) -> Any:
    session = AmplifierSession(plan, strict=strict, approval_system=_approval_system())
    session.coordinator.hooks.register(MODULE_LOAD_FAILED, _warn_load_failed, name="cli-warn")
    async with contextlib.AsyncExitStack() as stack:
        try:
            # Entered with ``async with``: the session then owns the task group that
            # module services (hooks-logging's writer, …) run in.
            await stack.enter_async_context(session)
        except Exception as exc:
            # Whatever a module raises while the session loads and mounts it (the session
            # has cleaned up already): one line naming the module, exit 2.
            raise _StartupError(_startup_problem(exc)) from exc
        if events:
            _print_events(session)
        return await session.run(prompt)


def _approval_system() -> Any:
    """Ask on the terminal when there is one; otherwise none, so approvals fail closed."""
    if not sys.stdin.isatty():
        return None
    from .hooks.approval import ConsoleApprovalSystem

    return ConsoleApprovalSystem()


def _startup_problem(exc: Exception) -> str:
    cause = _cause(exc)
    if isinstance(_leaf(exc), ModuleLoadError | ModuleNotFoundError | ConfigError):
        return cause  # the message names the plan entry (and the module, the key)
    return f"the session could not start: {cause}"


def _warn_load_failed(event: str, data: dict[str, Any]) -> None:
    if not data.get("optional"):
        return  # a required module's failure ends the start: the error line says it
    kind, module_id, error = data.get("module_type"), data.get("module_id"), data.get("error")
    err.print(
        f"warning: {kind} {module_id!r} not loaded: {_one_line(str(error))}",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )


def _print_events(session: AmplifierSession) -> None:
    from .events import ALL_EVENTS

    skipped = {"session_id", "parent_id", "timestamp", "trace_id"}

    def show(event: str, data: dict[str, Any]) -> HookResult:
        fields = {k: v for k, v in data.items() if k not in skipped}
        text = json.dumps(fields, default=str)
        if len(text) > 160:
            text = text[:157] + "..."
        err.print(
            f"[dim]{data.get('timestamp', '')[11:23]}[/dim] [bold]{event}[/bold] {escape(text)}",
            highlight=False,
        )
        return HookResult()

    for event in ALL_EVENTS:
        session.coordinator.hooks.register(event, show, priority=1_000_000, name="cli-events")


@app.command("validate")
def _validate_command(
    path: Annotated[Path, typer.Argument(help="A plan file or a module directory.")],
    strict: Annotated[
        bool, typer.Option("--strict", help="Unknown config keys are errors, not warnings.")
    ] = False,
) -> None:
    """Check a plan (modules found, config against their schemas, mounted offline) or a
    module directory (importable mount). Every problem is printed; exit 2 on any error."""
    with _cli_command():
        problems = anyio.run(_validate, path, strict)
    if problems:
        for problem in problems:
            err.print(f"error: {_one_line(problem)}", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(2)


async def _validate(path: Path, strict: bool) -> list[str]:
    if await anyio.Path(path).is_dir():
        return await _validate_module_dir(path)
    report = await validate_plan(path, strict=strict)
    for warning in report.warnings:
        err.print(f"warning: {_one_line(warning)}", markup=False, highlight=False, soft_wrap=True)
    if report.ok:
        plan = await anyio.to_thread.run_sync(MountPlan.from_file, path)
        counts = ", ".join(f"{len(getattr(plan, s))} {s}" for s in ("providers", "tools", "hooks"))
        modules = f"orchestrator {plan.orchestrator.module}, context {plan.context.module}"
        out.print(f"ok: {path}: {modules}, {counts}", markup=False, highlight=False, soft_wrap=True)
        for line in report.modules:  # what will be mounted, and from where
            out.print(f"  {line}", markup=False, highlight=False, soft_wrap=True)
    return list(report.errors)


async def _validate_module_dir(path: Path) -> list[str]:
    names = [p.name async for p in anyio.Path(path).glob("amplifier_module_*")]
    if not names and await anyio.Path(path, "__init__.py").is_file():
        names = [path.name]
    if len(names) != 1:
        return [f"{path}: expected one package amplifier_module_<id>, found {len(names)}"]
    module_id = names[0].removeprefix("amplifier_module_").replace("_", "-")
    loader = ModuleLoader()
    try:
        await loader.load(module_id, source_hint=str(path))
    except Exception as exc:  # noqa: BLE001 - reported as the one problem
        return [_cause(exc)]
    finally:
        loader.cleanup()
    out.print(
        f"ok: {path}: module {module_id!r} has a mount() function",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
    return []


@app.command("bench")
def _bench_command(
    *,
    quick: Annotated[
        bool, typer.Option("--quick", help="The CI run: N up to 1 000, 3 repeats, < 1 min.")
    ] = False,
    json_file: Annotated[
        Path | None, typer.Option("--json", help="Write every case with its floors to FILE.")
    ] = None,
    plot: Annotated[
        Path | None, typer.Option("--plot", help="Plot overhead per call vs N (matplotlib).")
    ] = None,
    backend: Annotated[
        list[str] | None,
        typer.Option("--backend", help="asyncio, asyncio+uvloop or trio (repeatable)."),
    ] = None,
    suite: Annotated[
        list[str] | None,
        typer.Option("--suite", help="fanout, emit, batch or compaction (repeatable)."),
    ] = None,
    size: Annotated[
        list[int] | None, typer.Option("--size", min=1, help="Tool calls per turn (repeatable).")
    ] = None,
    repeats: Annotated[int | None, typer.Option("--repeats", min=1, help="Runs per case.")] = None,
    markdown: Annotated[bool, typer.Option("--markdown", help="Print Markdown tables.")] = False,
) -> None:
    """Benchmark parallel tool fan-out against a bare task group, hook emit and compaction."""
    from .bench import make_config, run_command

    with _cli_command():
        try:
            config = make_config(
                quick=quick, backends=backend, suites=suite, sizes=size, repeats=repeats
            )
            run_command(
                config, out=out, err=err, json_path=json_file, plot_path=plot, markdown=markdown
            )
        except ConfigError as exc:
            raise _fail(str(exc)) from None


def main() -> None:
    """Console-script entry point."""
    app()
