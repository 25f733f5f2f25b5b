"""Path confinement for the filesystem tools: check after resolving, enforce at open time.

A path a model gives goes through two gates:

1. `Area.resolve` — the text is refused outright when it holds a NUL byte, a
   control character or a character that only looks like ``/`` or ``.``; otherwise it is
   ``~``-expanded, made absolute against the working directory and resolved
   (`os.path.realpath`: every symlink and ``..`` followed). The result must be an
   allowed root or lie under one.
2. `Area.walk` — the resolved path is then opened *from the root's directory
   descriptor*, one component at a time, each with ``O_NOFOLLOW`` (and ``O_DIRECTORY``
   for the directories on the way). The resolved path holds no symlink, so a symlink met
   on that walk was swapped in after the check; the walk refuses it instead of following
   it. Nothing is ever opened by its full path, so there is no window between check and
   use.

Every function here blocks; callers run them in a worker thread.
"""

from __future__ import annotations

import errno
import os
import stat
import unicodedata
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Literal

__all__ = ("Area", "PathRefused", "DIR_FLAGS", "check_text", "swapped_message")

Kind = Literal["read", "write"]

_PATH_MAX = 4096
_NAME_MAX = 255
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | _CLOEXEC
"""How every directory on a walk is opened: never through a symlink."""

# Characters that render like a path separator or a dot but are not one. A path holding
# one is refused: it is either a mistake or an attempt to make a reviewer misread it.
_LOOK_ALIKES = frozenset(
    "\u2215\u2044\u29f8\u2571\u29f5\u2216\u29f9\uff0f\uff3c\u2024\u2025\u2026"
    "\uff0e\ufe52\u3002\u1427\u00b7\u02d9\u0701\u0702\ua60e\u2e31\u2e33"
)


class PathRefused(Exception):  # noqa: N818 - it is a refusal, not an error of ours
    """A path the filesystem tools will not touch; the message names the path."""


def check_text(path: str, what: str = "path") -> None:
    """Refuse a path text with a NUL byte, a control character or a look-alike."""
    if "\x00" in path:
        msg = f"Invalid {what} {path!r}: it contains a NUL byte"
        raise PathRefused(msg)
    for char in path:
        if unicodedata.category(char) == "Cc":
            msg = f"Invalid {what} {path!r}: it contains the control character {char!r}"
            raise PathRefused(msg)
        if char == "\\":
            msg = f"Invalid {what} {path!r}: it contains a backslash (a Windows separator)"
            raise PathRefused(msg)
        if char in _LOOK_ALIKES or _normalises_to_separator(char):
            name = unicodedata.name(char, "unnamed")
            msg = (
                f"Invalid {what} {path!r}: it contains U+{ord(char):04X} ({name}), "
                "which looks like a path separator or a dot"
            )
            raise PathRefused(msg)


def _normalises_to_separator(char: str) -> bool:
    if char.isascii():
        return False
    folded = unicodedata.normalize("NFKC", char)
    return any(c in "/.\\" for c in folded)


class Area:
    """The directories one kind of access (read or write) may reach."""

    def __init__(self, roots: Sequence[str], kind: Kind, working_dir: str) -> None:
        self.kind = kind
        self.working_dir = working_dir
        resolved = (os.path.realpath(_absolute(root, working_dir)) for root in roots)
        self.roots = tuple(dict.fromkeys(resolved))

    def resolve(self, path: str) -> tuple[str, str]:
        """``(resolved path, its root)``; `PathRefused` when it is outside every root."""
        if not isinstance(path, str) or not path:
            msg = "file_path must be a non-empty string"
            raise PathRefused(msg)
        check_text(path)
        absolute = _absolute(path, self.working_dir)
        try:
            real = os.path.realpath(absolute, strict=True)
        except (FileNotFoundError, NotADirectoryError):
            real = os.path.realpath(absolute)
        except OSError as exc:
            raise PathRefused(_os_message(path, exc)) from exc
        _check_length(path, real)
        root = self.root_of(real)
        if root is not None:
            return real, root
        shown = path if real == path else f"{path} (resolves to {real})"
        msg = f"Access denied: {shown} is not within allowed {self.kind} paths"
        raise PathRefused(msg)

    def root_of(self, real: str) -> str | None:
        """The allowed root a resolved path lies in, or None."""
        for root in self.roots:
            if real == root or real.startswith(root.rstrip(os.sep) + os.sep):
                return root
        return None

    @contextmanager
    def walk(self, path: str, real: str, root: str, *, create: bool = False) -> Iterator[Walked]:
        """Open the directories from ``root`` down to ``real``'s parent without following
        a symlink; yields the parent's descriptor and the last name (None for the root).

        ``create`` makes missing directories on the way (``mkdir -p``).
        """
        parts = [] if real == root else os.path.relpath(real, root).split(os.sep)
        fd = _open_dir(path, root, None, root)
        try:
            for part in parts[:-1]:
                try:
                    child = _open_dir(path, part, fd, root)
                except FileNotFoundError:
                    if not create:
                        raise
                    with suppress(FileExistsError):
                        os.mkdir(part, 0o777, dir_fd=fd)
                    child = _open_dir(path, part, fd, root)
                os.close(fd)
                fd = child
            yield Walked(fd, parts[-1] if parts else None)
        finally:
            os.close(fd)

    def open_entry(self, path: str, walked: Walked, flags: int) -> int:
        """Open the walk's last entry (or the root itself) with ``O_NOFOLLOW``."""
        flags |= os.O_NOFOLLOW | _CLOEXEC
        if walked.name is None:
            return os.open(".", flags, dir_fd=walked.dir_fd)
        try:
            return os.open(walked.name, flags, dir_fd=walked.dir_fd)
        except OSError as exc:
            if _is_symlink(walked.name, walked.dir_fd):
                raise PathRefused(swapped_message(path, walked.name)) from exc
            raise


class Walked:
    """The directory descriptor a walk ended in and the name to open in it."""

    __slots__ = ("dir_fd", "name")

    def __init__(self, dir_fd: int, name: str | None) -> None:
        self.dir_fd = dir_fd
        self.name = name


def _check_length(path: str, real: str) -> None:
    """Refuse what the OS could not name in one string (the walk itself has no limit)."""
    encoded = os.fsencode(real)
    too_long = len(encoded) >= _PATH_MAX or any(len(p) > _NAME_MAX for p in encoded.split(b"/"))
    if too_long:
        msg = f"Invalid path {path!r}: file name too long"
        raise PathRefused(msg)


def _absolute(path: str, working_dir: str) -> str:
    # No normpath: "link/.." must go where the OS goes (realpath follows the link first).
    return os.path.join(working_dir, os.path.expanduser(path))


def _open_dir(path: str, name: str, dir_fd: int | None, root: str) -> int:
    try:
        return os.open(name, DIR_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR) and _is_symlink(name, dir_fd):
            raise PathRefused(swapped_message(path, name)) from exc
        raise


def _is_symlink(name: str, dir_fd: int | None) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def swapped_message(path: str, name: str) -> str:
    """The refusal for a symlink met where the checked path had none."""
    return (
        f"Access denied: {path}: {name!r} became a symbolic link after the path was "
        "checked (or is part of a symlink loop); it is not followed"
    )


def _os_message(path: str, exc: OSError) -> str:
    if exc.errno == errno.ELOOP:
        return f"Access denied: {path} is a symbolic link loop"
    if exc.errno == errno.ENAMETOOLONG:
        return f"Invalid path {path!r}: file name too long"
    return f"Cannot resolve {path}: {exc.strerror or exc}"
