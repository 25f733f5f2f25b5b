"""hooks-approval: rules that allow, deny or ask before a tool runs; the systems that ask.

The hook answers ``tool:pre``. A call is matched against the rules, deny rules first:

- a ``deny`` rule matching → ``deny`` (the model gets ``Denied by hook: <reason>``);
- else an ``allow`` rule matching → ``continue`` (the call runs, nobody is asked);
- else, when the tool is one of ``tools`` (default: every tool) → ``ask_user``, with the
  configured ``timeout`` and ``default`` (``deny`` unless configured otherwise);
- else ``continue``.

``default`` is ``allow``, ``deny`` or ``defer``: what applies when the question gets no
answer in time. ``defer`` holds the call for an approval that outlives the turn (the turn
ends ``awaiting_approval``; ``docs/durable.md``). When the session has no approval system
— the CLI without a terminal — ``non_interactive`` applies instead: ``defer`` or
``deny`` (by default ``defer`` when ``default`` is ``defer``, else ``deny``: nobody is
there to allow anything).

A rule is a glob on the tool name (``"read_file"``, ``"mcp__*"``) or ``"<tool glob>:<argument
glob>"`` (``"bash:git status*"``, ``"write_file:/tmp/*"``), or a mapping ``{tool: ...,
argument: ...}``. The argument is the call's first string among ``argument_keys``
(``command``, ``cmd``, ``file_path``, ``path``, ``url`` by default); a rule with an argument
pattern does not match a call without one.

The session's approval system answers ``ask_user`` (``ModuleCoordinator.process_hook_result``):
[`ConsoleApprovalSystem`][amplifier_anyio.hooks.approval.ConsoleApprovalSystem] (the CLI's when
stdin is a terminal: allow once / allow always / deny, with the timeout and the default of the
request) or [`CallbackApprovalSystem`][amplifier_anyio.hooks.approval.CallbackApprovalSystem] (an
embedding application's function). Both remember an "allow always" for the tool it was given for,
for as long as the system object lives.

Fail closed everywhere: a session without an approval system, a timeout whose default is
deny, an answer that is not an allow, an approval system that raises — all deny (the
coordinator's rule); and this hook itself, if it fails on a call (a malformed input), denies
the call rather than letting the registry skip it.
"""

from __future__ import annotations

import fnmatch
import inspect
import logging
import os
import sys
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Literal, TextIO

import anyio
import attrs

from ..config_schema import ConfigSchema
from ..errors import ApprovalTimeoutError, ConfigError, ValidationError
from ..events import TOOL_PRE
from ..kernel._coordinator import ModuleCoordinator
from ..kernel._offload import run_blocking
from ..models import HookResult, structure
from ..models._validators import number, one_of

__all__ = (
    "ApprovalConfig",
    "ApprovalRule",
    "ApprovalHook",
    "ConsoleApprovalSystem",
    "CallbackApprovalSystem",
    "ApprovalRequest",
    "approval_prompt",
    "ALLOW_ONCE",
    "ALLOW_ALWAYS",
    "DENY",
    "DEFER",
    "OPTIONS",
    "mount",
    "CONFIG_SCHEMA",
)

logger = logging.getLogger(__name__)

ALLOW_ONCE = "Allow once"
ALLOW_ALWAYS = "Allow always"
DENY = "Deny"
DEFER = "Defer"
OPTIONS = (ALLOW_ONCE, ALLOW_ALWAYS, DENY, DEFER)
"""The options the hook offers, in the order the console numbers them (``Defer`` holds the
call for a decision from outside the turn)."""

Default = Literal["allow", "deny", "defer"]

_PROMPT_HEAD = "Allow the tool "  # the first line names the tool: what "allow always" covers


def _rule(value: Any) -> ApprovalRule:
    if isinstance(value, ApprovalRule):
        return value
    if isinstance(value, str):
        tool, _, pattern = value.partition(":")
        return ApprovalRule(tool=tool, argument=pattern or None)
    if isinstance(value, Mapping):
        extra = set(value) - {"tool", "argument"}
        if extra or not isinstance(value.get("tool", "*"), str):
            msg = f"expected 'tool' and optionally 'argument', got {dict(value)!r}"
            raise ValueError(msg)
        argument = value.get("argument")
        if argument is not None and not isinstance(argument, str):
            msg = f"'argument' must be a glob string, got {argument!r}"
            raise ValueError(msg)
        return ApprovalRule(tool=value.get("tool", "*"), argument=argument)
    msg = f"expected 'tool' or 'tool:argument' or a mapping, got {value!r}"
    raise ValueError(msg)


@attrs.frozen
class ApprovalRule:
    """A glob on the tool name and, optionally, on the call's command / path argument."""

    tool: str = "*"
    argument: str | None = None

    def matches(self, tool_name: str, argument: str | None) -> bool:
        """Whether a call of ``tool_name`` with ``argument`` falls under the rule."""
        if not fnmatch.fnmatchcase(tool_name, self.tool):
            return False
        if self.argument is None:
            return True
        return argument is not None and fnmatch.fnmatchcase(argument, self.argument)

    def __str__(self) -> str:
        return self.tool if self.argument is None else f"{self.tool}:{self.argument}"


def _rules(values: Iterable[Any]) -> tuple[ApprovalRule, ...]:
    return tuple(_rule(v) for v in values)


def _names(values: Iterable[str]) -> tuple[str, ...]:
    return tuple(values)


@attrs.frozen(kw_only=True)
class ApprovalConfig:
    """hooks-approval's settings: rules, which tools ask, and the request's terms."""

    allow: tuple[ApprovalRule, ...] = attrs.field(default=(), converter=_rules)
    deny: tuple[ApprovalRule, ...] = attrs.field(default=(), converter=_rules)
    tools: tuple[str, ...] = attrs.field(default=("*",), converter=_names)
    """Globs of the tools that need approval when no rule decides (default: all)."""
    argument_keys: tuple[str, ...] = attrs.field(
        default=("command", "cmd", "file_path", "path", "url"), converter=_names
    )
    timeout: float = attrs.field(default=300.0, validator=number())
    """Seconds the approval system may take; then ``default`` applies."""
    default: Default = attrs.field(default="deny", validator=one_of(("allow", "deny", "defer")))
    """What applies when the question gets no answer in time (``defer``: the call is held
    for a decision from outside the turn)."""
    non_interactive: Literal["defer", "deny"] | None = attrs.field(
        default=None, validator=attrs.validators.optional(one_of(("defer", "deny")))
    )
    """What applies when the session has no approval system (no terminal); None:
    ``defer`` when ``default`` is ``defer``, else ``deny``."""
    priority: int = -50
    """Runs before most hooks: a denied call is not logged as running."""

    @classmethod
    def from_dict(cls, config: Mapping[str, Any] | None) -> ApprovalConfig:
        """Parse a plan's hooks-approval config; errors name the key."""
        config = dict(config or {})
        known = {a.name for a in attrs.fields(cls)}
        for key in sorted(set(config) - known):
            msg = f"{key}: unknown hooks-approval key (known: {', '.join(sorted(known))})"
            raise ConfigError(msg)
        rules: dict[str, tuple[ApprovalRule, ...]] = {}
        for key in ("allow", "deny"):
            given = config.pop(key, None)
            if given is None:
                continue
            if not isinstance(given, list):
                msg = f"{key}: expected a list of rules, got {given!r}"
                raise ConfigError(msg)
            try:
                rules[key] = _rules(given)
            except ValueError as exc:
                msg = f"{key}[{_bad_index(given)}]: {exc}"
                raise ConfigError(msg) from None
        try:
            parsed = structure(config, cls)
        except ValidationError as exc:
            raise ConfigError("; ".join(exc.errors)) from exc
        except ValueError as exc:
            raise ConfigError(str(exc)) from exc
        return attrs.evolve(parsed, allow=rules.get("allow", ()), deny=rules.get("deny", ()))


def _bad_index(rules: list[Any]) -> int:
    for index, rule in enumerate(rules):
        try:
            _rule(rule)
        except ValueError:
            return index
    return 0


class ApprovalHook:
    """The ``tool:pre`` handler: deny rules, allow rules, then ask (or continue).

    ``coordinator``: the session's, to know whether anyone can be asked (without one,
    someone is assumed to be).
    """

    def __init__(
        self, config: ApprovalConfig | None = None, coordinator: ModuleCoordinator | None = None
    ) -> None:
        self.config = config or ApprovalConfig()
        self._coordinator = coordinator

    def request_default(self) -> Default:
        """The request's default: ``default``, or ``non_interactive`` with nobody to ask."""
        if self._coordinator is None or self._coordinator.approval_system is not None:
            return self.config.default
        if self.config.non_interactive is not None:
            return self.config.non_interactive
        return "defer" if self.config.default == "defer" else "deny"

    async def __call__(self, event: str, data: dict[str, Any]) -> HookResult:
        """Decide one call; any failure here denies it (fail closed)."""
        await anyio.lowlevel.checkpoint()
        try:
            return self.decide(data)
        except Exception as exc:
            logger.exception("hooks-approval failed on %s; the call is denied", event)
            return HookResult(action="deny", reason=f"approval check failed: {exc}")

    def decide(self, data: Mapping[str, Any]) -> HookResult:
        """The answer for one ``tool:pre`` payload."""
        tool_name = data.get("tool_name")
        if not isinstance(tool_name, str):
            return HookResult(action="deny", reason="a tool call without a tool name")
        tool_input = data.get("tool_input")
        if tool_input is not None and not isinstance(tool_input, Mapping):
            return HookResult(action="deny", reason=f"{tool_name}: input is not a mapping")
        argument = self._argument(tool_input or {})
        for rule in self.config.deny:
            if rule.matches(tool_name, argument):
                return HookResult(action="deny", reason=f"{tool_name}: denied by rule {rule}")
        for rule in self.config.allow:
            if rule.matches(tool_name, argument):
                return HookResult()
        if not any(fnmatch.fnmatchcase(tool_name, p) for p in self.config.tools):
            return HookResult()
        return HookResult(
            action="ask_user",
            approval_prompt=approval_prompt(tool_name, argument),
            approval_options=list(OPTIONS),
            approval_timeout=self.config.timeout,
            approval_default=self.request_default(),
        )

    def _argument(self, tool_input: Mapping[str, Any]) -> str | None:
        for key in self.config.argument_keys:
            value = tool_input.get(key)
            if isinstance(value, str):
                return value
        return None


def approval_prompt(tool_name: str, argument: str | None) -> str:
    """The question asked for a call: its first line names the tool (what "allow always"
    then covers), the second the argument."""
    head = f"{_PROMPT_HEAD}{tool_name!r}?"
    return head if argument is None else f"{head}\n  {argument}"


# -- approval systems -----------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class ApprovalRequest:
    """What a callback approval system is asked."""

    prompt: str
    options: tuple[str, ...]
    timeout: float
    default: Default


class _Remembering:
    """Remembers "allow always" by the prompt's first line (the tool it names)."""

    def __init__(self) -> None:
        self.always: set[str] = set()

    def _remembered(self, prompt: str) -> bool:
        return _scope(prompt) in self.always

    def _remember(self, prompt: str, answer: str) -> str:
        if answer.strip().lower() == ALLOW_ALWAYS.lower():
            self.always.add(_scope(prompt))
        return answer


def _scope(prompt: str) -> str:
    return prompt.split("\n", 1)[0]


class ConsoleApprovalSystem(_Remembering):
    """Asks on a terminal: numbered options, an answer line, the request's timeout.

    ``1`` / ``y`` allows once, ``2`` / ``a`` allows always, ``3`` / ``n`` denies, ``4`` /
    ``d`` / ``defer`` defers (the call waits for a decision from outside the turn, e.g.
    ``amplifier-anyio sessions approve``); the option's text works too. Anything else, or
    end of input, denies. No answer within the timeout raises
    [`ApprovalTimeoutError`][amplifier_anyio.errors.ApprovalTimeoutError] (the request's
    default then applies). The answer is read from the file descriptor when it is readable
    (so a timeout leaves no thread blocked on the terminal; Unix); the prompt is written
    from a worker thread.
    """

    def __init__(self, stdin: TextIO | None = None, stdout: TextIO | None = None) -> None:
        super().__init__()
        self._stdin = stdin
        self._stdout = stdout

    async def request_approval(
        self,
        prompt: str,
        options: list[str],
        timeout: float,
        default: Default,
    ) -> str:
        """Show ``prompt`` and ``options``; the chosen option, or raise on timeout."""
        if self._remembered(prompt):
            await anyio.lowlevel.checkpoint()
            return ALLOW_ALWAYS
        options = list(options) or list(OPTIONS)
        question = _question(prompt, options, timeout, default)
        await anyio.to_thread.run_sync(self._write, question)
        try:
            with anyio.move_on_after(timeout):
                line = await self._read_line()
                return self._remember(prompt, _choice(line, options))
        except anyio.get_cancelled_exc_class():
            # The caller's own bound (the same timeout) or a cancelled turn: say so.
            with anyio.move_on_after(1.0, shield=True):
                await anyio.to_thread.run_sync(self._write, "\n(no answer)\n")
            raise
        await anyio.to_thread.run_sync(self._write, f"\n(no answer in {timeout:g}s: {default})\n")
        msg = f"no answer within {timeout:g}s"
        raise ApprovalTimeoutError(msg)

    async def _read_line(self) -> str:
        """One line: from a file descriptor, waiting for it to be readable (cancellable,
        no thread left behind); else (a stream without one) from a worker thread."""
        stdin = self._stdin or sys.stdin
        try:
            fd = stdin.fileno()
        except (AttributeError, OSError, ValueError):
            return await anyio.to_thread.run_sync(stdin.readline, abandon_on_cancel=True)
        data = b""
        while not data.endswith(b"\n"):
            await anyio.wait_readable(fd)
            chunk = os.read(fd, 1024)
            if not chunk:  # end of input
                break
            data += chunk
        return data.decode("utf-8", "replace")

    def _write(self, text: str) -> None:
        stdout = self._stdout or sys.stderr
        stdout.write(text)
        stdout.flush()


def _question(prompt: str, options: list[str], timeout: float, default: str) -> str:
    numbered = "  ".join(f"[{i}] {option}" for i, option in enumerate(options, 1))
    return f"\n{prompt}\n{numbered}\n(default {default} in {timeout:g}s) > "


_SHORTCUTS = {"y": ALLOW_ONCE, "yes": ALLOW_ONCE, "a": ALLOW_ALWAYS, "n": DENY, "no": DENY}
_SHORTCUTS.update(d=DEFER, later=DEFER)


def _choice(line: str, options: list[str]) -> str:
    """The option an answer line picks; anything unclear is a deny."""
    answer = line.strip().lower()
    if answer.isdigit() and 1 <= int(answer) <= len(options):
        return options[int(answer) - 1]
    for option in options:
        if answer == option.lower():
            return option
    picked = _SHORTCUTS.get(answer)
    if picked is not None and picked in options:
        return picked
    return DENY


Callback = Callable[[ApprovalRequest], "Awaitable[str | bool] | str | bool"]


class CallbackApprovalSystem(_Remembering):
    """Asks an embedding application's function: ``callback(ApprovalRequest)``.

    The callback (sync or async; a sync one runs in a worker thread, so it cannot freeze
    the loop) returns an option (``"Allow once"``, ``"Allow always"``, ``"Deny"``, or any
    of the request's options; ``"defer"`` holds the call for an approval that outlives the
    turn, see ``docs/durable.md``) or a bool (True: allow once). Whatever it raises reaches
    the coordinator, which denies; a callback slower than the request's timeout is given
    up on (its thread is abandoned) and the request's default applies.
    """

    def __init__(self, callback: Callback) -> None:
        super().__init__()
        self._callback = callback

    async def request_approval(
        self,
        prompt: str,
        options: list[str],
        timeout: float,
        default: Default,
    ) -> str:
        """Ask the callback; its answer as an option string."""
        await anyio.lowlevel.checkpoint()
        if self._remembered(prompt):
            return ALLOW_ALWAYS
        request = ApprovalRequest(
            prompt=prompt, options=tuple(options), timeout=timeout, default=default
        )
        if _is_coroutine_function(self._callback):
            answer = await self._callback(request)  # type: ignore[misc]
        else:
            # A plain function may block (a dialog, a network call): it runs in a worker
            # thread, so the coordinator's timeout bounds the wait and the loop never freezes.
            answer = await run_blocking(self._callback, request)
            if inspect.isawaitable(answer):
                answer = await answer
        if answer is True:
            return ALLOW_ONCE
        if isinstance(answer, str):
            return self._remember(prompt, answer)
        return DENY  # False, None, anything else: fail closed


def _is_coroutine_function(fn: Any) -> bool:
    call = getattr(type(fn), "__call__", None)  # noqa: B004 - the class's, not a callable check
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(call)


# -- the module -----------------------------------------------------------------------------


async def mount(coordinator: ModuleCoordinator, config: dict[str, Any] | None = None) -> Any:
    """Mount hooks-approval on ``tool:pre``; returns its unregister function."""
    await anyio.lowlevel.checkpoint()
    hook = ApprovalHook(ApprovalConfig.from_dict(config), coordinator)
    if coordinator.approval_system is None and hook.request_default() == "deny":
        logger.warning(
            "hooks-approval: the session has no approval system; calls that need approval "
            "are denied"
        )
    return coordinator.hooks.register(
        TOOL_PRE, hook, priority=hook.config.priority, name="hooks-approval"
    )


CONFIG_SCHEMA = ConfigSchema.from_attrs("hooks-approval", ApprovalConfig)
"""The keys hooks-approval accepts."""
