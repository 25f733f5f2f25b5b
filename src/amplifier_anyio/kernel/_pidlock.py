"""A lock file that names its holder: one holder per file, across processes.

The session store's writer lock and the cassette's recorder lock are the same thing: an
exclusive, non-blocking ``flock`` on ``<file>.lock`` with the holder's pid written in it,
so that the error a second holder gets can say who has it. Their callers say what a held
lock or an unreadable one means (a `SessionError`, a `CassetteError`); this says how.
"""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX (Windows)
    fcntl = None  # type: ignore[assignment]

__all__ = ("HAS_LOCKS", "LockFileError", "held_by", "holder_of", "take")

HAS_LOCKS: bool = fcntl is not None
"""Whether this system has ``fcntl`` file locks (every POSIX one)."""


class LockFileError(OSError):
    """The lock file could not be opened (``step`` "open") or locked ("lock")."""

    def __init__(self, step: str, cause: OSError) -> None:
        super().__init__(cause.errno, cause.strerror or str(cause))
        self.step = step


def take(lock: Path) -> int | str:
    """Take ``lock`` (created with its folder if missing) without waiting.

    Returns the descriptor that holds it, the caller's pid written in it; or, when another
    process holds it, that holder (``"pid 123"``, see `holder_of`). Raises `LockFileError`.
    A holder may remove the file as it lets go: a lock taken on a file so removed is let go
    and taken again on the new one, so two holders never both hold it.
    """
    assert fcntl is not None, "check HAS_LOCKS first"
    for _ in range(100):
        try:
            lock.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise LockFileError("open", exc) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = holder_of(fd)
            os.close(fd)
            return holder
        except OSError as exc:
            os.close(fd)
            raise LockFileError("lock", exc) from exc
        if _names(fd, lock):
            with contextlib.suppress(OSError):  # the lock is held all the same, unnamed
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            return fd
        os.close(fd)  # its holder removed it as it let go: take the new one
    cause = OSError(errno.EAGAIN, "it keeps being replaced")
    raise LockFileError("lock", cause)  # pragma: no cover


def held_by(lock: Path) -> str | None:
    """Who holds ``lock`` now (see `holder_of`), or None: no lock file, or nobody holds it."""
    assert fcntl is not None, "check HAS_LOCKS first"
    try:
        fd = os.open(lock, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return holder_of(fd)
    except OSError:
        return None  # a lock we cannot test is not known to be held
    finally:
        os.close(fd)
    return None


def _names(fd: int, lock: Path) -> bool:
    """Whether ``lock`` still names the file ``fd`` holds."""
    try:
        held, named = os.fstat(fd), os.stat(lock)
    except OSError:
        return False
    return (held.st_dev, held.st_ino) == (named.st_dev, named.st_ino)


def holder_of(fd: int) -> str:
    """Who holds the lock file open as ``fd``, as its pid line says: ``"pid 123"``."""
    try:
        text = os.pread(fd, 64, 0).decode("ascii", "replace").strip()
    except OSError:
        text = ""
    if not text.isdigit():
        return "pid unknown"
    mine = " — this process" if int(text) == os.getpid() else ""
    return f"pid {text}{mine}"
