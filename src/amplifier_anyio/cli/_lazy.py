"""Commands imported when they are invoked, and parameters parsed without pydantic.

Two costs of start-up live here (``docs/benchmarks.md``, "Start-up"):

- Declaring a command with Typer needs its function, hence its module and everything that
  module imports (the kernel, the chat loop, the benchmark, the MCP SDK's glue). A
  `lazy_group` holds each command as a `LazyCommand` (a name and where it
  lives) and builds its click command the first time it is asked for, exactly as
  ``app.command(name)(function)`` / ``app.add_typer(sub_app, name=name)`` would have: the
  same Typer functions build it from the same registration. ``--help`` asks for every
  command (it prints their help) and so imports them all; ``amplifier-anyio run`` imports
  only ``run``.
- Typer 0.29 coerces every parameter value through a pydantic ``TypeAdapter``, built when
  the command line is parsed: importing pydantic and building the adapters costs more
  than the rest of a demo turn. `plain_params` gives the parameters whose value is
  already what they want — a ``str`` for a ``str``, a path string for a ``Path`` — a
  coercion that returns the string, or hands it to Typer's own path checks as a ``Path``;
  any other value or type (numbers, lists, choices, files, parsers, a Typer without this
  machinery) keeps Typer's coercion, with its messages.

And how the command line reads: a flag is shown without a value placeholder (``--json``,
not ``--json <bool>``), an argument as ``PROMPT`` (``[PROMPT]`` when optional) on the usage
line, and every usage error — an unknown option or command, a missing argument, a bad
value — is the project's one line, ``error: …`` on stderr and exit 2, not Typer's box.
"""

from __future__ import annotations

import contextlib
import difflib
import importlib
from collections.abc import Callable, Iterable, Iterator, MutableMapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import attrs
import typer
import typer.main
from typer.core import TyperArgument, TyperGroup, TyperOption

try:  # Typer 0.29 carries its own click
    from typer._click.exceptions import ClickException, NoArgsIsHelpError, NoSuchOption
except ImportError:  # pragma: no cover - a Typer on the click package
    from click.exceptions import (  # type: ignore[assignment]
        ClickException,
        NoArgsIsHelpError,
        NoSuchOption,
    )

__all__ = ("LazyCommand", "lazy_group", "plain_params", "one_line_usage_errors")


@attrs.frozen
class LazyCommand:
    """A command of the CLI: its ``name``, the ``module`` of this package that defines it
    and the ``attribute`` there (a command function, or a Typer app when ``group``)."""

    name: str
    module: str
    attribute: str
    group: bool = False

    def build(self, *, rich_markup_mode: Any, suggest_commands: bool) -> Any:
        """Import the module and build the click command as Typer's registration would."""
        target = getattr(importlib.import_module(f"{__package__}.{self.module}"), self.attribute)
        holder = typer.Typer(rich_markup_mode=rich_markup_mode, suggest_commands=suggest_commands)
        if self.group:
            holder.add_typer(target, name=self.name)
            command: Any = typer.main.get_group_from_info(
                holder.registered_groups[0],
                pretty_exceptions_short=holder.pretty_exceptions_short,
                rich_markup_mode=rich_markup_mode,
                suggest_commands=suggest_commands,
            )
        else:
            holder.command(self.name)(target)
            command = typer.main.get_command_from_info(
                holder.registered_commands[0],
                pretty_exceptions_short=holder.pretty_exceptions_short,
                rich_markup_mode=rich_markup_mode,
            )
        plain_params(command)
        return command


class _Commands(MutableMapping[str, Any]):
    """A group's commands by name: the declared ones are listed at once, built on access."""

    def __init__(self, built: dict[str, Any], declared: Sequence[LazyCommand], build: Any):
        self._declared = {spec.name: spec for spec in declared if spec.name not in built}
        self._built = built
        self._build: Callable[[LazyCommand], Any] = build

    def __getitem__(self, name: str) -> Any:
        if name not in self._built:
            spec = self._declared[name]  # KeyError: no such command
            self._built[name] = self._build(spec)
        return self._built[name]

    def __setitem__(self, name: str, command: Any) -> None:
        self._declared.pop(name, None)
        self._built[name] = command

    def __delitem__(self, name: str) -> None:
        found = name in self._built or name in self._declared
        self._built.pop(name, None)
        self._declared.pop(name, None)
        if not found:
            raise KeyError(name)

    def __iter__(self) -> Iterator[str]:
        yield from self._declared
        yield from (name for name in self._built if name not in self._declared)

    def __len__(self) -> int:
        return len(self._declared.keys() | self._built.keys())

    def __contains__(self, name: object) -> bool:
        return name in self._declared or name in self._built


def lazy_group(commands: Sequence[LazyCommand]) -> type[TyperGroup]:
    """A ``TyperGroup`` class (``typer.Typer(cls=...)``) whose ``commands`` are built
    from ``commands`` when first looked up, and listed in their order."""

    commands_by_name = {spec.name for spec in commands}

    class LazyGroup(TyperGroup):
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            plain_params(self)
            self.commands = _Commands(dict(self.commands), commands, self._build_command)

        def _build_command(self, spec: LazyCommand) -> Any:
            return spec.build(
                rich_markup_mode=self.rich_markup_mode, suggest_commands=self.suggest_commands
            )

        def list_commands(self, ctx: Any) -> list[str]:
            return list(self.commands)

        def get_command(self, ctx: Any, cmd_name: str) -> Any:
            command = super().get_command(ctx, cmd_name)
            if command is not None and cmd_name in commands_by_name:
                # its --help option is made per context: give it the plain coercion too
                settings = command.context_settings or {}
                own = command.context_class(command, info_name=cmd_name, parent=ctx, **settings)
                plain_help(command, own)
            return command

        def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
            plain_help(self, ctx)
            return super().parse_args(ctx, args)

        # A usage error is raised while the command line is parsed (here, or in a
        # sub-command's context made by invoke) or by a command itself (invoke).
        def make_context(self, *args: Any, **kwargs: Any) -> Any:
            with one_line_usage_errors():
                return super().make_context(*args, **kwargs)

        def invoke(self, ctx: Any) -> Any:
            with one_line_usage_errors():
                return super().invoke(ctx)

    return LazyGroup


@contextlib.contextmanager
def one_line_usage_errors() -> Iterator[None]:
    """A click usage error (or any ClickException) inside: ``error: …`` on one line of
    stderr naming where ``--help`` is, then exit with its code (2 for bad usage)."""
    try:
        yield
    except NoArgsIsHelpError:
        raise  # no arguments at all: the help, as Typer shows it
    except ClickException as exc:
        if isinstance(exc, NoSuchOption) and exc.possibilities:
            exc.possibilities = _close(exc.option_name, exc.possibilities)
        message = " ".join(exc.format_message().split()).rstrip(".")
        if message[:2].istitle():  # "Missing argument", not "ID ..."
            message = message[0].lower() + message[1:]
        ctx = getattr(exc, "ctx", None)
        if ctx is not None:
            message += f" — try '{ctx.command_path} --help'"
        typer.echo(f"error: {message}", err=True)
        raise typer.Exit(exc.exit_code) from None


def _close(name: str, options: Iterable[str]) -> list[str]:
    """The options close enough to ``name`` to suggest (their names without dashes at
    least 70 % alike: ``--strcit`` → ``--strict``, but ``--frobnicate`` → none)."""
    bare = name.lstrip("-")
    return [o for o in options if difflib.SequenceMatcher(None, bare, o.lstrip("-")).ratio() >= 0.7]


# -- parameters without pydantic -------------------------------------------------------------
try:  # Typer's runtime coercion (0.2x with pydantic); without it there is nothing to avoid
    from typer._coercion import RuntimeParam, build_runtime_param
    from typer._param_types import coerce_cli_path, lenient_issubclass
    from typer.core import _TyperParameter
except ImportError:  # pragma: no cover - another Typer
    _PLAIN = False
else:
    _PLAIN = True

    @dataclass(frozen=True)
    class _PlainParam(RuntimeParam):
        """A ``bool`` or a ``str`` as it is; a non-empty string for a ``Path`` as a ``Path`` through
        Typer's own path checks; anything else through Typer's pydantic coercion."""

        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            if self.annotation is bool and isinstance(value, bool):
                return value
            if isinstance(value, str):
                if self.annotation is str:
                    return value
                if value:
                    path_type: Any = self.parameter_info.path_type or self.annotation
                    return coerce_cli_path(
                        path_type(value),
                        self.parameter_info,
                        path_type=path_type,
                        param=param,
                        ctx=ctx,
                    )
            typer_own = build_runtime_param(param.type_descriptor)
            return typer_own._coerce_value(value, param=param, ctx=ctx)


def plain_help(command: Any, ctx: Any) -> None:
    """Give ``command``'s ``--help`` option in ``ctx`` the plain coercion (a flag)."""
    option = command.get_help_option(ctx)
    if option is not None:
        _make_plain(option)
        _plain_display(option)


def _plain(param: Any) -> bool:
    descriptor = param.type_descriptor
    info = descriptor.parameter_info
    if info.parser is not None or descriptor.file_annotation is not None or descriptor.is_choice:
        return False
    annotation = descriptor.annotation
    if annotation is str or annotation is bool:
        return True
    path_type = info.path_type or annotation
    return (
        isinstance(path_type, type)
        and lenient_issubclass(path_type, Path)
        and descriptor.is_path
        and not descriptor.is_list
    )


def plain_params(command: Any) -> None:
    """Give ``command``'s plain ``str`` / ``Path`` parameters (and those of an already
    built group's sub-commands) a coercion without pydantic (see the module's docstring)."""
    for param in command.params:
        _plain_display(param)
    # its --help too (made once per command, on first use: made here with the default names)
    plain_help(command, command.context_class(command, info_name=command.name))
    if not _PLAIN:  # pragma: no cover - another Typer
        return
    for param in command.params:
        _make_plain(param)
    commands = getattr(command, "commands", None)
    if isinstance(commands, dict):
        for sub in commands.values():
            plain_params(sub)


def _plain_display(param: Any) -> None:
    """A flag without a value placeholder; an argument as ``NAME`` / ``[NAME]`` on the
    usage line (Typer 0.29 shows ``<bool>`` and ``{name}``)."""
    if isinstance(param, TyperOption):
        if param.is_flag and param.metavar is None:
            param.metavar = ""  # shown as the option's type: nothing
    elif isinstance(param, TyperArgument):
        if param.metavar is None and param.name:
            param.metavar = param.name.upper()
        if hasattr(param, "_usage_display_name"):
            param._usage_display_name = lambda: _usage_name(param)  # type: ignore[method-assign]


def _usage_name(param: Any) -> str:
    name = str(param.metavar)
    name = name if param.required else f"[{name}]"
    return name + ("..." if param.nargs != 1 else "")


def _make_plain(param: Any) -> None:
    if not _PLAIN:  # pragma: no cover - another Typer
        return
    if isinstance(param, _TyperParameter) and param._runtime_param is None and _plain(param):
        descriptor = param.type_descriptor
        param._runtime_param = _PlainParam(
            parameter_info=descriptor.parameter_info, annotation=descriptor.annotation
        )
