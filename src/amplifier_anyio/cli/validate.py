"""``amplifier-anyio validate``: check a plan or a module directory without running it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import anyio
import typer

from ..kernel._loader import ModuleLoader
from ..session._validation import validate_plan
from ._common import cause, cli_command, one_line, out, say

__all__ = ("validate_command",)


def validate_command(
    path: Annotated[Path, typer.Argument(help="A plan file or a module directory.")],
    strict: Annotated[
        bool,
        typer.Option(
            "--strict",
            help="Unknown config keys and bundle references that cannot be resolved are "
            "errors, not warnings.",
        ),
    ] = False,
    resolved: Annotated[
        bool,
        typer.Option(
            "--resolved", help="Print the plan as it will run: includes and profiles merged."
        ),
    ] = False,
) -> None:
    """Check a plan, an upstream bundle or profile (includes, parent profile and agent
    files resolved; modules found, config against their schemas, mounted offline) or a
    module directory (importable mount). Every problem is printed; exit 2 on any error."""
    with cli_command():
        problems = anyio.run(_validate, path, strict, resolved)
    if problems:
        for problem in problems:
            say(f"error: {one_line(problem)}")
        raise typer.Exit(2)


async def _validate(path: Path, strict: bool, show_plan: bool) -> list[str]:
    if await anyio.Path(path).is_dir() and not await _is_bundle_dir(path):
        return await _validate_module_dir(path)
    report = await validate_plan(path, strict=strict)
    for warning in report.warnings:
        say(f"warning: {one_line(warning)}")
    if report.ok and report.plan is not None:
        plan = report.plan
        counts = ", ".join(f"{len(plan.get(s, ()))} {s}" for s in ("providers", "tools", "hooks"))
        session = plan["session"]
        modules = (
            f"orchestrator {session['orchestrator']['module']}, "
            f"context {session['context']['module']}"
        )
        say(f"ok: {path}: {modules}, {counts}", console=out)
        for line in report.resolved:  # what an upstream bundle's references resolved to
            say(f"  resolved: {line}", console=out)
        for line in report.modules:  # what will be mounted, and from where
            say(f"  {line}", console=out)
        if show_plan:
            say(_as_yaml(plan), console=out, end="")
    return list(report.errors)


async def _is_bundle_dir(path: Path) -> bool:
    names = ("bundle.md", "bundle.yaml", "bundle.yml")
    return any([await anyio.Path(path, name).is_file() for name in names])


def _as_yaml(plan: dict[str, Any]) -> str:
    """The plan as YAML, a text of several lines (the instruction) as a ``|`` block."""
    import yaml  # only for --resolved

    class Dumper(yaml.SafeDumper):
        pass

    def text(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
        style = "|" if "\n" in value else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    Dumper.add_representer(str, text)
    return str(yaml.dump(plan, Dumper=Dumper, sort_keys=False, allow_unicode=True, width=100))


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
