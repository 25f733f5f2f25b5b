"""tool-bash's deny-list: refuse the obviously destructive commands before they run.

A command is split into simple commands (at ``;``, ``&&``, ``||``, ``|``, ``&``, newlines,
``(``/``)``, ``$(…)`` and backticks) and each is read with shell quoting rules, so a rule
looks at the command word and its arguments — ``echo "rm -rf /"`` is an echo, not an rm.

Each simple command is then peeled like the shell and the wrappers would run it: leading
``!``, ``{`` and ``if``/``while``/``do``… keywords, variable assignments (``FOO=1``) and
redirections go, and a wrapper (``sudo``, ``doas``, ``env``, ``nice``, ``nohup``,
``timeout``, ``xargs``, ``time``, ``command``, ``builtin``, ``exec``, ``stdbuf``,
``setsid``, ``ionice``) goes with its own options and their values (``nice -n 5``, ``env -u
HOME``, ``timeout -s KILL 5``, ``xargs -n 1``, ``stdbuf -oL``; ``env -S 'cmd args'`` is
read as the command it spells). Every layer — the wrapper and what it runs — is checked
against every rule and every ``denied_commands`` pattern, so ``nice -n 5 sudo …`` is a
sudo and ``FOO=1 probe`` matches ``probe*``. ``bash -c '…'`` / ``eval …`` / ``trap '…'
EXIT`` are checked recursively; a shell's options are read as the shell reads them
(``bash -lc``, ``sh -ec``, ``bash -xc``, ``sh -e -c``, ``bash -o pipefail -c``, ``bash -c
-- '…'``). The keywords ``coproc`` (``coproc NAME { …; }`` too) and ``function f { …; }``
are peeled like ``{``, so a function body or a coprocess is checked as it would run.

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

import attrs

__all__ = ("PROFILES", "check_command")

PROFILES = ("strict", "standard", "permissive", "unrestricted")
"""Safety profiles, strictest first."""

_SEPARATORS = frozenset(";&|()")


@attrs.frozen
class _Options:
    """How a wrapper reads its own options before the command it runs."""

    short: str = ""
    """Short options that take a value (``-n 5`` or ``-n5``)."""
    long: frozenset[str] = frozenset()
    """Long options that take a value (``--signal KILL`` or ``--signal=KILL``)."""
    positionals: int = 0
    """Operands before the command (``timeout``'s duration)."""
    inspects: str = ""
    """Short options with which it only reports on the command (``command -v``)."""


_WRAPPERS: dict[str, _Options] = {
    "sudo": _Options(
        "CDghprtTUu",
        frozenset(
            {
                *("--close-from", "--chdir", "--group", "--host", "--prompt", "--role"),
                *("--type", "--command-timeout", "--other-user", "--user", "--chroot"),
            }
        ),
    ),
    "doas": _Options("Cu"),
    "env": _Options("CPSu", frozenset({"--chdir", "--split-string", "--unset"})),
    "nice": _Options("n", frozenset({"--adjustment"})),
    "nohup": _Options(),
    "timeout": _Options("ks", frozenset({"--kill-after", "--signal"}), positionals=1),
    "xargs": _Options(
        "adEILnPs",
        frozenset(
            {
                *("--arg-file", "--delimiter", "--max-args", "--max-procs", "--max-chars"),
                "--process-slot-var",
            }
        ),
    ),
    "time": _Options("fo", frozenset({"--format", "--output"})),
    "command": _Options(inspects="vV"),
    "builtin": _Options(),
    "exec": _Options("a"),
    "stdbuf": _Options("eio", frozenset({"--error", "--input", "--output"})),
    "setsid": _Options(),
    "ionice": _Options("cnpP", frozenset({"--class", "--classdata", "--pid", "--pgid"})),
}
_KEYWORDS = frozenset({"!", "{", "}", "if", "then", "else", "elif", "fi", "do", "done"})
_KEYWORDS |= {"while", "until", "coproc"}
_NAMING_KEYWORDS = frozenset({"function", "coproc"})  # may be followed by a name, then `{`
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=.*", re.DOTALL)
_REDIRECT = re.compile(r"[<>&]*[<>][<>&|]*")
_SHELLS = frozenset({"sh", "bash", "zsh", "dash", "ksh", "rbash", "mksh", "ash"})
_SHELL_LONG_VALUES = frozenset({"--rcfile", "--init-file"})
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
        layers = _layers(simple)
        for pattern in denied:
            if _denied(pattern, text, simple, layers):
                return f"matches denied_commands pattern {pattern!r}"
        # the simple command as written too: a leading redirection is a rule's business
        for words in [simple, *layers] if layers[:1] != [simple] else layers:
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


def _denied(pattern: str, text: str, simple: list[str], layers: list[list[str]]) -> bool:
    """Whether a ``denied_commands`` glob matches the command, a simple command of it, or
    any layer of one (its first word also as a bare name: ``/usr/bin/probe`` is ``probe``)."""
    if fnmatchcase(text, pattern) or fnmatchcase(" ".join(simple), pattern):
        return True
    for words in layers:
        if fnmatchcase(" ".join(words), pattern):
            return True
        if fnmatchcase(" ".join([_name(words[0]), *words[1:]]), pattern):
            return True
    return False


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


def _layers(words: list[str]) -> list[list[str]]:
    """What runs, layer by layer: the command as written (keywords, assignments and
    leading redirections peeled off), then what each wrapper in it runs."""
    layers: list[list[str]] = []
    while True:
        words = _peel(words)
        if not words:
            return layers
        layers.append(words)
        options = _WRAPPERS.get(_name(words[0]))
        if options is None:
            return layers
        words = _wrapped(words, options)


def _peel(words: list[str]) -> list[str]:
    """Drop leading keywords, assignments and redirections (with their targets)."""
    index = 0
    while index < len(words):
        word = words[index]
        if word in _NAMING_KEYWORDS and index + 2 < len(words) and words[index + 2] == "{":
            index += 3  # `function f {` / `coproc NAME {`: the body follows
        elif word == "function":
            index += 2  # `function f` (its `()` is a separator): no command here
        elif word in _KEYWORDS or _ASSIGNMENT.fullmatch(word):
            index += 1
        elif _REDIRECT.fullmatch(word):
            index += 2  # the operator and its target
        elif word.isdigit() and index + 1 < len(words) and _REDIRECT.fullmatch(words[index + 1]):
            index += 1  # a descriptor number before its operator
        else:
            break
    return words[index:]


def _wrapped(words: list[str], options: _Options) -> list[str]:
    """The command a wrapper runs: what follows its options, their values and operands
    (``env -S``'s value is split into words, as env does)."""
    index, prefix = 1, []
    while index < len(words):
        word = words[index]
        if word == "--":
            index += 1
            break
        if not word.startswith("-") or word == "-":
            break
        index += 1
        if word.startswith("--"):
            name, equals, value = word.partition("=")
            if name in options.long and not equals:
                value, index = (words[index] if index < len(words) else ""), index + 1
            if name == "--split-string":
                prefix = _split(value)
            continue
        for position, letter in enumerate(word[1:], 1):
            if letter in options.inspects:
                return []  # it only reports on the command (command -v): nothing runs
            if letter in options.short:
                value = word[position + 1 :]
                if not value:
                    value, index = (words[index] if index < len(words) else ""), index + 1
                if letter == "S" and _name(words[0]) == "env":
                    prefix = _split(value)
                break
    index += options.positionals
    return [*prefix, *words[index:]]


def _split(value: str) -> list[str]:
    try:
        return shlex.split(value)
    except ValueError:
        return value.split()


def _name(word: str) -> str:
    return os.path.basename(word)


def _nested(words: list[str]) -> str | None:
    name = _name(words[0])
    if name in _SHELLS:
        return _shell_command(words)
    if name == "eval" and len(words) > 1:
        return " ".join(words[1:])
    if name == "trap" and len(words) > 2 and not words[1].startswith("-"):
        return words[1]  # the action it runs on a signal or at exit
    return None


def _shell_command(words: list[str]) -> str | None:
    """The command string a shell is given with ``-c``, read as the shell reads its own
    options: combined flags (``-lc``, ``-ec``, ``-xc``, ``+e -c``), options with a value
    (``-o pipefail``, ``-O extglob``, ``--rcfile f``) and ``--`` before the string."""
    index, command = 1, False
    while index < len(words):
        word = words[index]
        if word in ("--", "-"):
            index += 1
            break
        if word in _SHELL_LONG_VALUES:
            index += 2
            continue
        if word.startswith("--"):
            index += 1
            continue
        if len(word) < 2 or word[0] not in "-+":
            break
        if word[0] == "-" and "c" in word[1:]:
            command = True
        index += 2 if word[-1] in "oO" else 1  # -o / +o / -O take the next word
    if command and index < len(words):
        return words[index]
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
