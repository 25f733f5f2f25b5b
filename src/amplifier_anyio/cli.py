"""The ``amplifier-anyio`` command: run a turn, validate a plan or a module, benchmark.

Exit codes: 0 ok; 1 the turn failed; 2 bad usage, a bad plan or an unknown module (one
line on stderr, no traceback); 130 interrupted.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Annotated, Any

import anyio
import typer
from rich.console import Console

from . import __version__
from .errors import AmplifierError, ConfigError, ModuleLoadError, ModuleNotFoundError
from .events import MODULE_LOAD_FAILED
from .kernel.loader import ModuleLoader
from .kernel.mount_plan import MountPlan
from .kernel.session import AmplifierSession
from .kernel.turns import TurnStatus
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


def _fail(message: str, code: int = 2) -> typer.Exit:
    err.print(f"error: {message}", markup=False, highlight=False, soft_wrap=True)
    return typer.Exit(code)


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
) -> None:
    """Run one turn and print the answer."""
    _check_backend(backend)
    mount_plan = _load_plan(plan)
    try:
        result = anyio.run(_run_turn, mount_plan, prompt, events, backend=backend)
    except KeyboardInterrupt:
        err.print("interrupted")
        raise typer.Exit(130) from None
    except (ConfigError, ModuleNotFoundError, ModuleLoadError) as exc:
        raise _fail(str(exc)) from None
    except AmplifierError as exc:
        raise _fail(str(exc), code=1) from None
    if result.status is TurnStatus.ERROR:
        raise _fail(f"the turn failed: {type(result.error).__name__}: {result.error}", code=1)
    out.print(result.text, markup=False, highlight=False, soft_wrap=True)
    if result.status is not TurnStatus.SUCCESS:
        err.print(f"(turn ended with status {result.status})")
    raise typer.Exit(0 if result.status is not TurnStatus.CANCELLED else 1)


async def _run_turn(plan: MountPlan, prompt: str, events: bool) -> Any:
    session = AmplifierSession(plan)
    session.coordinator.hooks.register(MODULE_LOAD_FAILED, _warn_load_failed, name="cli-warn")
    async with session:
        if events:
            _print_events(session)
        return await session.run(prompt)


def _warn_load_failed(event: str, data: dict[str, Any]) -> None:
    kind, module_id, error = data.get("module_type"), data.get("module_id"), data.get("error")
    err.print(
        f"warning: {kind} {module_id!r} not loaded: {error}",
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
            f"[dim]{data.get('timestamp', '')[11:23]}[/dim] [bold]{event}[/bold] {text}",
            highlight=False,
        )
        return HookResult()

    for event in ALL_EVENTS:
        session.coordinator.hooks.register(event, show, priority=1_000_000, name="cli-events")


@app.command("validate")
def _validate_command(
    path: Annotated[Path, typer.Argument(help="A plan file or a module directory.")],
) -> None:
    """Check a plan (every module id resolvable) or a module directory (importable mount)."""
    problems = anyio.run(_validate, path)
    if problems:
        for problem in problems:
            err.print(f"error: {problem}", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(2)


async def _validate(path: Path) -> list[str]:
    if await anyio.Path(path).is_dir():
        return await _validate_module_dir(path)
    try:
        plan = await anyio.to_thread.run_sync(MountPlan.from_file, path)
    except ConfigError as exc:
        return [str(exc)]
    loader = ModuleLoader()
    problems = []
    try:
        for kind, spec in plan.all_modules():
            try:
                await loader.load(spec.module, spec.config, spec.source)
            except (ModuleNotFoundError, ModuleLoadError) as exc:
                problems.append(f"{kind} {spec.module!r}: {exc}")
    finally:
        loader.cleanup()
    if not problems:
        counts = ", ".join(f"{len(getattr(plan, s))} {s}" for s in ("providers", "tools", "hooks"))
        modules = f"orchestrator {plan.orchestrator.module}, context {plan.context.module}"
        out.print(f"ok: {path}: {modules}, {counts}", markup=False, highlight=False, soft_wrap=True)
    return problems


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
    except (ModuleNotFoundError, ModuleLoadError) as exc:
        return [str(exc)]
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

    try:
        config = make_config(
            quick=quick, backends=backend, suites=suite, sizes=size, repeats=repeats
        )
        run_command(
            config, out=out, err=err, json_path=json_file, plot_path=plot, markdown=markdown
        )
    except ConfigError as exc:
        raise _fail(str(exc)) from None
    except KeyboardInterrupt:
        err.print("interrupted")
        raise typer.Exit(130) from None


def main() -> None:
    """Console-script entry point."""
    app()
