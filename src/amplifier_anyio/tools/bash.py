"""tool-bash: run a shell command, and never leave a process of it behind.

The command runs as ``bash -c`` (``sh`` where there is no bash) in a new session, so it
and every child it forks share one process group. However the call ends — the command
exits, its ``timeout`` passes, or the call is cancelled (an immediate cancel of the turn,
the orchestrator's ``tool_timeout``, the host's cancel scope, Ctrl-C) — the whole group
gets SIGTERM, then SIGKILL after ``kill_grace`` seconds, and the call returns only once no
process of the group is alive. That cleanup runs under a shield with a bound; a bound
that expires is logged at error level. Background jobs (``cmd &``) therefore end with the
command that started them.

What cannot be contained: a child that leaves the group itself (``setsid``, ``setpgid``,
a daemon that double-forks into a new session) is out of reach of a group kill. The call
still returns: once the group is gone, the output pipes get ``drain_timeout`` seconds to
close, and a process still holding them is abandoned (``output_incomplete`` in the
result). Run untrusted commands in a container, not behind this tool alone.

Results are upstream's: ``{stdout, stderr, returncode}`` (plus ``truncated`` and the total
sizes when output was cut); a command that fails keeps all three and is an error result.
Output is capped at ``max_output_bytes`` per stream, keeping the head and the tail around
a marker. A deny-list (`amplifier_anyio.tools._bash_safety`) refuses obviously
destructive commands before they start.

A command may touch anything under its working directory, so by default each call claims
the working directory for writing (``claims: write``): within one reply, bash calls run
one after another in call order, and filesystem calls under that directory are ordered
against them (``docs/concurrency.md``). ``claims: read`` lets bash calls run in parallel
with one another (still ordered against writes); ``claims: none`` orders nothing.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
from collections.abc import Mapping
from contextlib import suppress
from fnmatch import fnmatchcase
from typing import Any, ClassVar

import anyio
import anyio.abc
import anyio.to_thread
import attrs

from ..config_schema import ConfigSchema
from ..errors import ConfigError, ValidationError
from ..interfaces import Claims
from ..models import ToolResult, structure
from ..models._validators import number
from ._bash_safety import PROFILES, check_command

__all__ = ("BashConfig", "BashTool", "DEFAULT_ENV", "group_alive", "make_tool", "mount")

logger = logging.getLogger(__name__)

DEFAULT_ENV = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "LC_*",
    "TERM",
    "TZ",
    "TMPDIR",
)
"""The environment variables a command inherits by default (globs)."""

_FALLBACK_PATH = "/usr/local/bin:/usr/bin:/bin"
_KILL_WAIT = 5.0  # seconds to wait for the group after SIGKILL
_POLL = 0.02


def _profile(_inst: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value not in PROFILES:
        msg = f"{attribute.name}: expected one of {', '.join(PROFILES)}, got {value!r}"
        raise ConfigError(msg)


# What a bash call claims of its working directory (the ``claims`` config key).
_CLAIM_MODES = ("write", "read", "none")


def _claim_mode(_inst: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value not in _CLAIM_MODES:
        msg = f"{attribute.name}: expected one of {', '.join(_CLAIM_MODES)}, got {value!r}"
        raise ConfigError(msg)


@attrs.frozen(kw_only=True)
class BashConfig:
    """tool-bash's settings (times in seconds, sizes in bytes).

    ``working_dir`` defaults to the ``session.working_dir`` capability, else the
    process's working directory; ``env`` lists the variables (globs) a command inherits;
    ``timeout`` is a command's default limit and ``max_timeout`` caps what a call may ask;
    ``claims`` is what a call claims of the working directory (``write``, ``read`` or
    ``none``; see the module docstring).
    """

    working_dir: str | None = None
    timeout: float = attrs.field(default=30.0, validator=number())
    max_timeout: float = attrs.field(default=600.0, validator=number())
    max_output_bytes: int = attrs.field(
        default=100_000, validator=number(minimum=64, exclusive=False, integer=True)
    )
    kill_grace: float = attrs.field(default=2.0, validator=number(minimum=0, exclusive=False))
    drain_timeout: float = attrs.field(default=1.0, validator=number(minimum=0, exclusive=False))
    env: tuple[str, ...] = DEFAULT_ENV
    safety_profile: str = attrs.field(default="standard", validator=_profile)
    denied_commands: tuple[str, ...] = ()
    allowed_commands: tuple[str, ...] = ()
    shell: str | None = None
    claims: str = attrs.field(default="write", validator=_claim_mode)

    @classmethod
    def from_dict(cls, config: dict[str, Any] | None) -> BashConfig:
        """Parse a plan's tool config; errors name the key."""
        config = dict(config or {})
        known = {a.name for a in attrs.fields(cls)}
        for key in sorted(set(config) - known):
            logger.warning("tool-bash: ignoring unknown config key %r", key)
            config.pop(key)
        try:
            return structure(config, cls)
        except ValidationError as exc:
            raise ConfigError("; ".join(exc.errors)) from exc


class _Capture:
    """One output stream, capped: the first half of the budget and the latest second half."""

    def __init__(self, limit: int) -> None:
        self.head = bytearray()
        self.tail = bytearray()
        self.head_limit = limit // 2
        self.tail_limit = limit - self.head_limit
        self.total = 0
        self.closed = anyio.Event()

    async def drain(self, stream: anyio.abc.ByteReceiveStream | None) -> None:
        try:
            if stream is not None:
                async for chunk in stream:
                    self.add(chunk)
        finally:
            self.closed.set()

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.head_limit - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            excess = len(self.tail) - self.tail_limit
            if excess > 0:
                del self.tail[:excess]

    @property
    def truncated(self) -> bool:
        return self.total > len(self.head) + len(self.tail)

    def text(self) -> str:
        head = self.head.decode("utf-8", "replace")
        if not self.truncated:
            return (self.head + self.tail).decode("utf-8", "replace")
        omitted = self.total - len(self.head) - len(self.tail)
        marker = f"\n\n... [{omitted} bytes of output omitted] ...\n\n"
        return head + marker + self.tail.decode("utf-8", "replace")


class BashTool:
    """``bash``: run one shell command; see the module docstring for the guarantees."""

    name = "bash"
    description = (
        "Run a shell command (bash) in the working directory and return its stdout, "
        "stderr and return code. Commands have a timeout (seconds, default 30); the "
        "command and everything it started are stopped when it ends or times out, so "
        "background jobs do not outlive it. Long output keeps its beginning and end. "
        "Destructive commands (rm -rf /, mkfs, dd to a device, …) are refused."
    )
    input_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "command": {"type": "string", "description": "The command to run."},
            "timeout": {
                "type": "number",
                "description": "Seconds before the command is stopped (default 30).",
            },
        },
        "required": ["command"],
    }

    def __init__(
        self, config: BashConfig | dict[str, Any] | None = None, *, working_dir: str
    ) -> None:
        if not isinstance(config, BashConfig):
            config = BashConfig.from_dict(config)
        self.config = config
        self.working_dir = working_dir
        self.shell = config.shell or ("/bin/bash" if os.path.exists("/bin/bash") else "/bin/sh")

    def claims(self, input: dict[str, Any]) -> Claims:
        """The working directory, for writing unless ``claims`` says otherwise."""
        mode = self.config.claims
        if mode == "write":
            return Claims(writes=(self.working_dir,))
        if mode == "read":
            return Claims(reads=(self.working_dir,))
        return Claims()

    async def execute(self, input: dict[str, Any]) -> ToolResult:
        """Check the command, run it, and answer ``{stdout, stderr, returncode}``."""
        command = input.get("command")
        if not isinstance(command, str) or not command.strip():
            return _error("command is required and must be a non-empty string")
        if input.get("run_in_background"):
            return _error("run_in_background is not supported: commands never outlive the call")
        timeout = input.get("timeout", self.config.timeout)
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
            return _error(f"timeout must be a positive number of seconds, got {timeout!r}")
        timeout = min(float(timeout), self.config.max_timeout)
        reason = check_command(
            command,
            self.config.safety_profile,
            denied=self.config.denied_commands,
            allowed=self.config.allowed_commands,
        )
        if reason is not None:
            message = (
                f"Command denied for safety: {reason}\n  Hint: tool-bash's safety_profile "
                f"({self.config.safety_profile}) refuses it."
            )
            await anyio.lowlevel.checkpoint()
            return _error(message, type="CommandDenied")
        try:
            return await self._run(command, timeout)
        except OSError as exc:  # the shell or the working directory is missing
            return _error(f"cannot start {self.shell} in {self.working_dir}: {exc.strerror}")

    async def _run(self, command: str, timeout: float) -> ToolResult:
        # Shielded: on asyncio a cancel that lands while the pipes are connected (after the
        # fork) loses the handle, and asyncio kills only the shell — its children would
        # live on. Once the handle is ours, the `finally` below stops the whole group.
        with anyio.CancelScope(shield=True):
            process = await anyio.open_process(
                [self.shell, "-c", command],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=self.working_dir,
                env=self._environment(),
                start_new_session=True,
            )
        limit = self.config.max_output_bytes
        stdout, stderr = _Capture(limit), _Capture(limit)
        stopped = False
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(stdout.drain, process.stdout)
                tg.start_soon(stderr.drain, process.stderr)
                with anyio.move_on_after(timeout) as deadline:
                    await process.wait()
                # The command is over (or out of time): stop whatever it left running.
                await self._stop(process)
                stopped = True
                with anyio.move_on_after(self.config.drain_timeout) as drain:
                    await stdout.closed.wait()
                    await stderr.closed.wait()
                tg.cancel_scope.cancel("bash: command over, its output drained or out of time")
        finally:
            if not stopped:  # cancelled or failed while the command ran
                await self._stop(process)
            with anyio.move_on_after(1.0, shield=True):
                await process.aclose()  # the pipes; the shell is already reaped
        return _result(
            process,
            (stdout, stderr),
            timeout=timeout,
            timed_out=deadline.cancelled_caught,
            incomplete=drain.cancelled_caught,
        )

    def _environment(self) -> dict[str, str]:
        patterns = self.config.env
        env = {k: v for k, v in os.environ.items() if any(fnmatchcase(k, p) for p in patterns)}
        env.setdefault("PATH", _FALLBACK_PATH)
        return env

    async def _stop(self, process: anyio.abc.Process) -> None:
        """SIGTERM the group, SIGKILL it after the grace, reap — shielded and bounded."""
        bound = self.config.kill_grace + _KILL_WAIT + 1.0
        with anyio.CancelScope(shield=True) as scope:
            scope.deadline = anyio.current_time() + bound
            await _stop_group(process, self.config.kill_grace)
        if scope.cancelled_caught:
            logger.error(
                "tool-bash: process group %d still alive %.1f s after SIGTERM/SIGKILL",
                process.pid,
                bound,
            )


def _result(
    process: anyio.abc.Process,
    captures: tuple[_Capture, _Capture],
    *,
    timeout: float,
    timed_out: bool,
    incomplete: bool,
) -> ToolResult:
    stdout, stderr = captures
    output: dict[str, Any] = {
        "stdout": stdout.text(),
        "stderr": stderr.text(),
        "returncode": process.returncode,
    }
    if stdout.truncated or stderr.truncated:
        output["truncated"] = True
        output["stdout_total_bytes"] = stdout.total
        output["stderr_total_bytes"] = stderr.total
    if incomplete:
        output["output_incomplete"] = True  # a process outside the group holds a pipe
    if timed_out:
        output["timed_out"] = True
        message = f"Command timed out after {timeout:g} seconds"
        return ToolResult(success=False, output=output, error={"message": message})
    if process.returncode != 0:
        message = f"Command exited with code {process.returncode}"
        error = {"message": message, "returncode": process.returncode}
        return ToolResult(success=False, output=output, error=error)
    return ToolResult(output=output)


def _error(message: str, **details: Any) -> ToolResult:
    return ToolResult(success=False, output=message, error={"message": message, **details})


async def _stop_group(process: anyio.abc.Process, grace: float) -> None:
    pgid = process.pid  # start_new_session: the shell leads its own group
    _signal_group(pgid, signal.SIGTERM)
    if await _wait_group(process, pgid, grace):
        return
    _signal_group(pgid, signal.SIGKILL)
    await _wait_group(process, pgid, _KILL_WAIT)


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with suppress(ProcessLookupError, PermissionError):  # the group is gone already
        os.killpg(pgid, sig)


async def _wait_group(process: anyio.abc.Process, pgid: int, seconds: float) -> bool:
    """Reap the shell and wait until no process of the group is alive (zombies aside)."""
    with anyio.move_on_after(seconds):
        await process.wait()
        while True:
            if not await anyio.to_thread.run_sync(group_alive, pgid):
                return True
            await anyio.sleep(_POLL)
    return False


def group_alive(pgid: int) -> bool:
    """Whether a live (not zombie) process is in group ``pgid``. Blocking (reads /proc)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        names = os.listdir("/proc")
    except OSError:
        return True  # no /proc: a member exists, zombie or not
    return any(_live_member(name, pgid) for name in names if name.isdigit())


def _live_member(pid: str, pgid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            fields = file.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return False
    # After the command name: state, ppid, pgrp, …
    return int(fields[2]) == pgid and fields[0] not in (b"Z", b"X")


def _working_dir(coordinator: Any, config: BashConfig) -> str:
    if config.working_dir is not None:
        return os.path.realpath(os.path.expanduser(config.working_dir))
    get = getattr(coordinator, "get_capability", None)
    offered = get("session.working_dir") if get is not None else None
    return os.path.realpath(str(offered) if offered else os.getcwd())


def make_tool(coordinator: Any, config: Mapping[str, Any] | None = None) -> BashTool:
    """A [`BashTool`][amplifier_anyio.tools.bash.BashTool] configured as ``mount`` would (for tests
    and embedding)."""
    parsed = BashConfig.from_dict(dict(config or {}))
    return BashTool(parsed, working_dir=_working_dir(coordinator, parsed))


async def mount(coordinator: Any, config: dict[str, Any] | None = None) -> None:
    """Mount the ``bash`` tool."""
    tool = make_tool(coordinator, config)
    await coordinator.mount("tools", tool, name=tool.name)


CONFIG_SCHEMA = ConfigSchema.from_attrs("tool-bash", BashConfig)
"""The keys tool-bash accepts (checked by ``validate --strict``)."""
