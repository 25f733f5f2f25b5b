"""Commands imported when they are invoked, and usage errors on one line.

Declaring a command with Typer needs its function, hence its module and everything that
module imports (the kernel, the chat loop, the benchmark, the MCP SDK's glue). `lazy_group`
is Click's documented lazy-loading pattern on Typer's public API: a ``TyperGroup`` subclass
(``typer.Typer(cls=...)``) whose ``list_commands`` names every declared `LazyCommand` and
whose ``get_command`` imports a command's module the first time it is asked for and builds
its click command with ``typer.main.get_command``, from a registration on a Typer app of
its own, as ``app.command(name)`` / ``app.add_typer(sub_app, name=name)`` would have.
``--help`` asks for every command (it prints their help) and so imports them all;
``amplifier-anyio run`` imports only ``run``. Nothing here imports Typer's or Click's
private modules, so a new Typer is taken as it comes.

And how the command line reads: a flag is shown without a value placeholder (``--json``,
not ``--json <bool>``), an argument as ``PROMPT`` (``[PROMPT]`` when optional) on the usage
line — through Click's public ``metavar`` and ``get_usage_pieces`` — and every usage error
— an unknown option or command, a missing argument, a bad value — is the project's one
line, ``error: …`` on stderr and exit 2, not Typer's box.
"""

from __future__ import annotations

import contextlib
import difflib
import importlib
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import attrs
import typer
import typer.main
from typer.core import TyperArgument, TyperGroup, TyperOption

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
        """Import the module and build the click command (``typer.main.get_command``)."""
        target = getattr(importlib.import_module(f"{__package__}.{self.module}"), self.attribute)
        holder = typer.Typer(
            rich_markup_mode=rich_markup_mode,
            suggest_commands=suggest_commands,
            add_completion=False,
        )
        if self.group:  # a group of one: Typer keeps it a group (sub-command and all)
            holder.add_typer(target, name=self.name)
            command: Any = typer.main.get_command(holder).commands[self.name]  # type: ignore[attr-defined]
        else:  # the only command of an app: Typer gives it back as is
            holder.command(self.name)(target)
            command = typer.main.get_command(holder)
        plain_params(command)
        return command


def lazy_group(commands: Sequence[LazyCommand]) -> type[TyperGroup]:
    """A ``TyperGroup`` class (``typer.Typer(cls=...)``) that lists ``commands`` in their
    order and builds each from its `LazyCommand` when it is first looked up."""

    declared = {spec.name: spec for spec in commands}

    class LazyGroup(TyperGroup):
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            plain_params(self)
            self.built: dict[str, Any] = {}

        def list_commands(self, ctx: Any) -> list[str]:
            own = [name for name in super().list_commands(ctx) if name not in declared]
            return [*declared, *own]

        def get_command(self, ctx: Any, cmd_name: str) -> Any:
            spec = declared.get(cmd_name)
            if spec is None:
                return super().get_command(ctx, cmd_name)
            if cmd_name not in self.built:
                self.built[cmd_name] = spec.build(
                    rich_markup_mode=self.rich_markup_mode, suggest_commands=self.suggest_commands
                )
            command = self.built[cmd_name]
            # its --help option is made per context: show it as a flag there too
            settings = command.context_settings or {}
            own = command.context_class(command, info_name=cmd_name, parent=ctx, **settings)
            plain_help(command, own)
            return command

        def resolve_command(self, ctx: Any, args: list[str]) -> Any:
            try:
                return super().resolve_command(ctx, args)
            except typer.TyperException as exc:  # no such command: suggest a declared one too
                clicks: Any = exc
                if self.suggest_commands and args and "Did you mean" not in clicks.message:
                    matches = difflib.get_close_matches(args[0], self.list_commands(ctx))
                    if matches:
                        names = ", ".join(repr(name) for name in matches)
                        clicks.message = f"{clicks.message.rstrip('.')}. Did you mean {names}?"
                raise

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


def _no_args_is_help(exc: BaseException) -> bool:
    """Click's ``NoArgsIsHelpError``: a group called without arguments shows its help."""
    return any(kind.__name__ == "NoArgsIsHelpError" for kind in type(exc).__mro__)


@contextlib.contextmanager
def one_line_usage_errors() -> Iterator[None]:
    """A click usage error (or any ClickException: Typer's public ``TyperException``)
    inside: ``error: …`` on one line of stderr naming where ``--help`` is, then exit with
    its code (2 for bad usage)."""
    try:
        yield
    except typer.TyperException as exc:
        if _no_args_is_help(exc):
            raise  # no arguments at all: the help, as Typer shows it
        clicks: Any = exc
        possibilities = getattr(clicks, "possibilities", None)  # click's NoSuchOption
        if possibilities and isinstance(getattr(clicks, "option_name", None), str):
            clicks.possibilities = _close(clicks.option_name, possibilities)
        message = " ".join(clicks.format_message().split()).rstrip(".")
        if message[:2].istitle():  # "Missing argument", not "ID ..."
            message = message[0].lower() + message[1:]
        ctx = getattr(exc, "ctx", None)
        if ctx is not None:
            message += f" — try '{ctx.command_path} --help'"
        typer.echo(f"error: {message}", err=True)
        raise typer.Exit(clicks.exit_code) from None


def _close(name: str, options: Iterable[str]) -> list[str]:
    """The options close enough to ``name`` to suggest (their names without dashes at
    least 70 % alike: ``--strcit`` → ``--strict``, but ``--frobnicate`` → none)."""
    bare = name.lstrip("-")
    return [o for o in options if difflib.SequenceMatcher(None, bare, o.lstrip("-")).ratio() >= 0.7]


def plain_help(command: Any, ctx: Any) -> None:
    """Show ``command``'s ``--help`` option in ``ctx`` as a flag (no value placeholder)."""
    option = command.get_help_option(ctx)
    if option is not None:
        _plain_display(option)


def plain_params(command: Any) -> None:
    """Show ``command``'s flags and arguments plainly (and those of an already built
    group's sub-commands; see the module's docstring)."""
    for param in command.params:
        _plain_display(param)
    # its --help too (made once per command, on first use: made here with the default names)
    plain_help(command, command.context_class(command, info_name=command.name))
    commands = getattr(command, "commands", None)
    if isinstance(commands, dict):
        for sub in commands.values():
            plain_params(sub)


def _plain_display(param: Any) -> None:
    """A flag without a value placeholder; an argument as ``NAME`` / ``[NAME]`` on the
    usage line (Typer shows ``<bool>`` and ``{name}``)."""
    if isinstance(param, TyperOption):
        if param.is_flag and param.metavar is None:
            param.metavar = ""  # shown as the option's type: nothing
    elif isinstance(param, TyperArgument):
        if param.metavar is None and param.name:
            param.metavar = param.name.upper()
        param.get_usage_pieces = lambda ctx: [_usage_name(param)]  # type: ignore[method-assign]


def _usage_name(param: Any) -> str:
    name = str(param.metavar)
    name = name if param.required else f"[{name}]"
    return name + ("..." if param.nargs != 1 else "")
