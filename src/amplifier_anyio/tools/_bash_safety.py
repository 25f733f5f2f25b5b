"""tool-bash's deny-list: refuse the obviously destructive commands before they run.

A command is split into simple commands (at ``;``, ``&&``, ``||``, ``|``, ``&``, newlines,
``$(…)`` and backticks) and each is read with shell quoting rules, so a rule looks at the
command word and its arguments — ``echo "rm -rf /"`` is an echo, not an rm. Leading
variable assignments and wrappers (``sudo``, ``env``, ``nohup``, ``time``, …) are looked
through, and ``bash -c '…'`` / ``eval …`` are checked recursively.

This is a seatbelt against accidents, not a sandbox: a determined command can always be
spelt so no pattern sees it (``$(printf 'r%s' m) -rf /``). Approval (hooks-approval) and
the operating system's own permissions are the real gates.
"""

from __future__ import annotations

import itertools
import os
import re
import shlex
from collections.abc import Callable, Iterable, Sequence
from fnmatch import fnmatchcase

__all__ = ("PROFILES", "check_command")

PROFILES = ("strict", "standard", "permissive", "unrestricted")
"""Safety profiles, strictest first."""

_SEPARATORS = frozenset(";&|()")
_WRAPPERS = frozenset(
    {"sudo", "doas", "env", "nice", "nohup", "time", "command", "builtin", "exec", "xargs"}
)
_SHELLS = frozenset({"sh", "bash", "zsh", "dash", "ksh"})
_SYSTEM_DIRS = frozenset(
    {
        *("/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/opt"),
        *("/proc", "/root", "/sbin", "/srv", "/sys", "/usr", "/var"),
    }
)
_HOME = frozenset({"", "~", "$HOME", "${HOME}"})
_HARMLESS_DEVICES = ("/dev/null", "/dev/zero", "/dev/stdout", "/dev/stderr", "/dev/tty", "/dev/fd/")
_FORK_BOMB = (
    re.compile(r":\s*\(\s*\)\s*\{[^}]*:\s*\|\s*:"),
    re.compile(r"\b(\w+)\s*\(\s*\)\s*\{[^}]*\b\1\s*\|\s*\1\b"),
)
_PIPE_TO_SHELL = re.compile(r"\b(curl|wget)\b[^|;&]*\|\s*(sudo\s+)?(ba|z|da|k)?sh\b")

Rule = Callable[[str, list[str]], str | None]


def check_command(
    command: str,
    profile: str = "standard",
    *,
    denied: Sequence[str] = (),
    allowed: Sequence[str] = (),
) -> str | None:
    """Why ``command`` is refused under ``profile``, or None when it may run.

    ``allowed`` globs matching the whole command let it through (not under ``strict``);
    ``denied`` globs refuse a command when one matches the whole command or any of its
    simple commands.
    """
    if profile == "unrestricted":
        return None
    text = command.strip()
    if profile != "strict" and any(fnmatchcase(text, pattern) for pattern in allowed):
        return None
    return _check(text, profile, denied, depth=0)


def _check(text: str, profile: str, denied: Sequence[str], depth: int) -> str | None:
    if any(pattern.search(text) for pattern in _FORK_BOMB):
        return "fork bomb"
    if profile == "strict" and _PIPE_TO_SHELL.search(text):
        return "piping a download into a shell"
    for simple in _simple_commands(text):
        joined = " ".join(simple)
        for pattern in denied:
            if fnmatchcase(text, pattern) or fnmatchcase(joined, pattern):
                return f"matches denied_commands pattern {pattern!r}"
        words = _unwrap(simple, profile)
        if not words:
            continue
        for rule in _RULES[profile]:
            reason = rule(_name(words[0]), words)
            if reason is not None:
                return reason
        inner = _nested(words)
        if inner is not None and depth < 5:
            reason = _check(inner, profile, denied, depth + 1)
            if reason is not None:
                return reason
    return None


def _simple_commands(text: str) -> list[list[str]]:
    spaced = text.replace("\n", " ; ").replace("`", " ; ").replace("$(", " ; ( ")
    lexer = shlex.shlex(spaced, posix=True, punctuation_chars=";&|()<>")
    lexer.whitespace_split = True
    try:
        tokens = list(lexer)
    except ValueError:  # unbalanced quotes: read it word by word instead
        tokens = spaced.split()
    commands: list[list[str]] = []
    current: list[str] = []
    for token in tokens:
        if token and set(token) <= _SEPARATORS:
            if current:
                commands.append(current)
            current = []
        else:
            current.append(token)
    if current:
        commands.append(current)
    return commands


def _unwrap(words: list[str], profile: str) -> list[str]:
    """Drop leading assignments and wrappers (``sudo`` is kept where it is refused)."""
    privileged = profile in ("strict", "standard")
    while words:
        first = words[0]
        if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", first):
            words = words[1:]
        elif _name(first) in _WRAPPERS and not (privileged and _name(first) in ("sudo", "doas")):
            words = words[1:]
            while words and words[0].startswith("-"):  # the wrapper's own options
                words = words[1:]
        else:
            break
    return words


def _name(word: str) -> str:
    return os.path.basename(word)


def _nested(words: list[str]) -> str | None:
    name = _name(words[0])
    if name in _SHELLS and "-c" in words[1:-1]:
        return words[words.index("-c") + 1]
    if name == "eval" and len(words) > 1:
        return " ".join(words[1:])
    return None


def _flags(words: Iterable[str]) -> str:
    return "".join(w[1:] for w in words if w.startswith("-") and not w.startswith("--"))


def _dangerous_target(word: str) -> bool:
    base = re.sub(r"(/+\*?|/\.)+$", "", word)
    return base in _HOME or base in _SYSTEM_DIRS


def _rm_root(name: str, words: list[str]) -> str | None:
    if name != "rm":
        return None
    if "--no-preserve-root" in words:
        return "rm --no-preserve-root"
    recursive = "r" in _flags(words).lower() or "--recursive" in words
    targets = [w for w in words[1:] if not w.startswith("-")]
    if recursive and any(_dangerous_target(t) for t in targets):
        return "recursive rm of the root, the home or a system directory"
    return None


def _mkfs(name: str, _words: list[str]) -> str | None:
    if name.startswith("mkfs") or name in ("mke2fs", "mkswap", "wipefs"):
        return f"{name} formats a file system"
    return None


def _dd_device(name: str, words: list[str]) -> str | None:
    if name != "dd":
        return None
    for word in words[1:]:
        if word.startswith("of=/dev/") and not word[3:].startswith(_HARMLESS_DEVICES):
            return f"dd writing to a device ({word})"
    return None


def _redirect_device(_name: str, words: list[str]) -> str | None:
    for arrow, target in itertools.pairwise(words):
        is_arrow = arrow and set(arrow) <= set("<>&") and ">" in arrow
        if is_arrow and target.startswith("/dev/") and not target.startswith(_HARMLESS_DEVICES):
            return f"output redirected to a device ({target})"
    return None


def _privilege(name: str, _words: list[str]) -> str | None:
    if name in ("sudo", "su", "doas", "pkexec"):
        return f"{name} (privilege escalation)"
    return None


def _recursive_perms(name: str, words: list[str]) -> str | None:
    if name not in ("chmod", "chown", "chgrp"):
        return None
    recursive = "R" in _flags(words) or "--recursive" in words
    targets = [w for w in words[2:] if not w.startswith("-")]
    if recursive and any(_dangerous_target(t) for t in targets):
        return f"recursive {name} of the root, the home or a system directory"
    return None


def _power(name: str, words: list[str]) -> str | None:
    if name in ("shutdown", "reboot", "halt", "poweroff"):
        return f"{name} stops the machine"
    if name in ("init", "telinit") and words[1:2] in (["0"], ["6"]):
        return f"{name} {words[1]} stops the machine"
    return None


def _kill_all(name: str, words: list[str]) -> str | None:
    if name in ("kill", "pkill", "killall") and ("-1" in words[1:] or name == "killall"):
        return f"{name} of every process"
    return None


def _chmod_777(name: str, words: list[str]) -> str | None:
    if name == "chmod" and any(w in ("777", "a+rwx", "0777") for w in words[1:]):
        return "chmod 777"
    return None


_PERMISSIVE: tuple[Rule, ...] = (_rm_root, _mkfs, _dd_device, _redirect_device)
_STANDARD: tuple[Rule, ...] = (*_PERMISSIVE, _privilege, _recursive_perms, _power)
_RULES: dict[str, tuple[Rule, ...]] = {
    "permissive": _PERMISSIVE,
    "standard": _STANDARD,
    "strict": (*_STANDARD, _kill_all, _chmod_777),
}
