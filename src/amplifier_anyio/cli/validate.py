"""``amplifier-anyio validate``: check a plan or a module directory without running it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import anyio
import typer

from ..kernel._loader import ModuleLoader
from ..kernel._mount_plan import MountPlan
from ..kernel._validation import validate_plan
from ._common import cause, cli_command, one_line, out, say

__all__ = ("validate_command",)


def validate_command(
    path: Annotated[Path, typer.Argument(help="A plan file or a module directory.")],
    strict: Annotated[
        bool, typer.Option("--strict", help="Unknown config keys are errors, not warnings.")
    ] = False,
) -> None:
    """Check a plan (modules found, config against their schemas, mounted offline) or a
    module directory (importable mount). Every problem is printed; exit 2 on any error."""
    with cli_command():
        problems = anyio.run(_validate, path, strict)
    if problems:
        for problem in problems:
            say(f"error: {one_line(problem)}")
        raise typer.Exit(2)


async def _validate(path: Path, strict: bool) -> list[str]:
    if await anyio.Path(path).is_dir():
        return await _validate_module_dir(path)
    report = await validate_plan(path, strict=strict)
    for warning in report.warnings:
        say(f"warning: {one_line(warning)}")
    if report.ok:
        plan = await anyio.to_thread.run_sync(MountPlan.from_file, path)
        counts = ", ".join(f"{len(getattr(plan, s))} {s}" for s in ("providers", "tools", "hooks"))
        modules = f"orchestrator {plan.orchestrator.module}, context {plan.context.module}"
        say(f"ok: {path}: {modules}, {counts}", console=out)
        for line in report.modules:  # what will be mounted, and from where
            say(f"  {line}", console=out)
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
        return [cause(exc)]
    finally:
        loader.cleanup()
    say(f"ok: {path}: module {module_id!r} has a mount() function", console=out)
    return []
