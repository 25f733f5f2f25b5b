"""Blocking file work for context-persistent; every function here runs in a worker thread.

The file holds one JSON message per line (UTF-8, ``\\n`` terminated). Appends are one
``write`` of whole lines followed by ``fsync``, and all or nothing: a failed write (a full
disk) is cut off again. Rewrites go to a temporary file in the same directory, are
fsynced, then ``os.replace``-d over the old file, and the directory is fsynced, so a crash
leaves either the old file or the new one. An ``OSError`` that fails a read, an append or
a rewrite becomes a [`ContextFileError`][amplifier_anyio.errors.ContextFileError] naming the file,
with the ``OSError`` as its cause.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import json
import json.scanner
import os
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import ContextFileError

__all__ = (
    "ContextFileError",
    "AppendError",
    "Withdrawal",
    "encode",
    "append_line",
    "rewrite",
    "read_messages",
    "read_lines",
    "remove_stale_temp_files",
    "append_fd",
    "fsync_dir",
)


class AppendError(ContextFileError):
    """An append failed. The file is as it was before, unless `undo_to` is set.

    ``undo_to`` is the size the file had before the failed write, when cutting the torn
    bytes off failed too: the next `append_line` must get it, so that it cuts them
    off before it appends anything.
    """

    def __init__(self, path: Path, problem: str, undo_to: int | None) -> None:
        super().__init__(path, None, problem)
        self.undo_to = undo_to


def encode(message: dict[str, Any]) -> bytes:
    """One line of the file for ``message``."""
    return (json.dumps(message, ensure_ascii=False) + "\n").encode("utf-8")


class Withdrawal:
    """An append its caller may stop waiting for and take back (a bounded write that gave
    up): the writing thread and the caller decide, under a lock, which of them cuts the
    lines off again.

    The caller calls `give_up` when it stops waiting. If the lines have not landed yet,
    the thread cuts them off as soon as they have (truncates the file back and fsyncs);
    if they landed already, `give_up` answers where they start, for the caller to cut
    them off with its next append (``undo_to``).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._given_up = False
        self._landed_at: int | None = None

    def give_up(self) -> int | None:
        """Take the append back: None when nothing of it is left to the caller (the thread
        cuts it off, or it never lands), else the size to cut the file back to."""
        with self._lock:
            self._given_up = True
            return self._landed_at

    def landed(self, start: int) -> bool:
        """The thread's side, once its lines are written and fsynced from ``start`` on:
        whether the caller gave up already (the thread then cuts them off)."""
        with self._lock:
            if self._given_up:
                return True
            self._landed_at = start
            return False


def append_line(
    path: Path, data: bytes, undo_to: int | None = None, withdrawal: Withdrawal | None = None
) -> None:
    """Append ``data`` (whole lines) and fsync; create the file (and fsync its directory).

    All or nothing: when the write or the fsync fails, the file is truncated back to its
    old size and fsynced before `AppendError` is raised. If that fails too, the
    error's ``undo_to`` says where the torn bytes start; given back here as ``undo_to``,
    they are cut off first, and nothing is appended while that fails. ``data`` never
    continues a line this function did not finish: after bytes without a final newline
    (another writer's) it starts on a new line. With a `Withdrawal` that the caller gave
    up, the lines are cut off again once written (if even that fails they stay, as after
    a crash).
    """
    try:
        created = not path.exists()
        if created:
            path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    except OSError as exc:
        raise AppendError(path, f"cannot append: {_reason(exc)}", undo_to) from exc
    try:
        _append(path, fd, data, undo_to, withdrawal)
    finally:
        # after a successful fsync a failing close loses nothing; after a failure the
        # AppendError is the one to report
        with contextlib.suppress(OSError):
            os.close(fd)
    if created:
        _fsync_dir(path.parent)


def _append(
    path: Path, fd: int, data: bytes, undo_to: int | None, withdrawal: Withdrawal | None = None
) -> None:
    try:
        if undo_to is not None and os.fstat(fd).st_size > undo_to:  # never extend the file
            _truncate(fd, undo_to)
    except OSError as exc:
        problem = f"cannot append: an earlier failed write could not be undone ({_reason(exc)})"
        raise AppendError(path, problem, undo_to) from exc
    try:
        size = os.fstat(fd).st_size
        if size and not _ends_with_newline(fd, size):
            data = b"\n" + data
    except OSError as exc:
        raise AppendError(path, f"cannot append: {_reason(exc)}", None) from exc
    try:
        _write_all(fd, data)
        os.fsync(fd)
    except OSError as exc:
        problem = f"cannot append: {_reason(exc)}"
        try:
            _truncate(fd, size)
        except OSError as undo_exc:
            problem += f"; cutting off the torn write failed too ({_reason(undo_exc)})"
            raise AppendError(path, problem, size) from exc
        raise AppendError(path, problem, None) from exc
    if withdrawal is not None and withdrawal.landed(size):
        with contextlib.suppress(OSError):  # the caller is gone: nobody to report to
            _truncate(fd, size)


def append_fd(path: Path, fd: int, data: bytes) -> None:
    """`append_line` on a descriptor the caller opened (``O_APPEND``) and closes."""
    _append(path, fd, data, None)


def _ends_with_newline(fd: int, size: int) -> bool:
    os.lseek(fd, size - 1, os.SEEK_SET)  # reads only: O_APPEND writes go to the end anyway
    return os.read(fd, 1) == b"\n"


def _truncate(fd: int, size: int) -> None:
    os.ftruncate(fd, size)
    os.fsync(fd)


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc)


def rewrite(path: Path, lines: list[bytes]) -> None:
    """Atomically replace the file's content with ``lines`` (the old file stays on error)."""
    try:
        _rewrite(path, lines)
    except OSError as exc:
        raise ContextFileError(path, None, f"cannot rewrite: {_reason(exc)}") from exc


def _rewrite(path: Path, lines: list[bytes]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        try:
            _write_all(fd, b"".join(lines))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp_name, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp_name)
        raise
    _fsync_dir(path.parent)


def read_messages(path: Path) -> tuple[list[dict[str, Any]], bool]:
    """The messages of the file and whether its last line was torn (unterminated).

    An unterminated last line is a write cut short by a crash: it is dropped when it does
    not parse (and kept when it does; only its newline was lost). Any other bad line
    raises [`ContextFileError`][amplifier_anyio.errors.ContextFileError] naming the line.
    """
    messages, _, torn = read_lines(path)
    return messages, torn


def read_lines(path: Path) -> tuple[list[dict[str, Any]], list[int], bool]:
    """`read_messages`, with the length in characters of each message's line."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return [], [], False
    except OSError as exc:
        raise ContextFileError(path, None, f"cannot read: {_reason(exc)}") from exc
    complete = data.rfind(b"\n") + 1
    fast = _read_fast(data[:complete])
    if fast is None:  # a blank or bad line somewhere: line by line, to name it
        lines = data[:complete].split(b"\n")[:-1]
        messages, lengths = [], []
        for number, raw in enumerate(lines, 1):
            message = _parse(path, number, raw)
            if message is not None:
                messages.append(message)
                lengths.append(len(raw.decode("utf-8")))
    else:
        messages, lengths = fast
    tail = data[complete:]  # b"" when the file ends with a newline
    if not tail.strip():
        return messages, lengths, bool(tail)
    try:
        last = _parse(path, data.count(b"\n") + 1, tail)
    except ContextFileError:
        last = None
    if last is not None:
        messages.append(last)
        lengths.append(len(tail.decode("utf-8")))
    return messages, lengths, True


# the C scanner json.loads uses (typeshed types make_scanner's argument oddly)
_scan: Callable[[str, int], tuple[Any, int]] = json.scanner.make_scanner(
    json.JSONDecoder()  # type: ignore[arg-type]
)


def _read_fast(data: bytes) -> tuple[list[dict[str, Any]], list[int]] | None:
    """Whole lines, each exactly one JSON object with a string ``role``; None otherwise.

    One decode of the file and one C scanner call per line (``json.loads`` per line
    costs about twice as much).
    """
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    scan, messages, lengths = _scan, [], []
    position, size = 0, len(text)
    try:
        while position < size:
            value, end = scan(text, position)
            # the value must end exactly at its line's end (JSON allows newlines inside)
            if end != text.find("\n", position) or value.__class__ is not dict:
                return None
            if value.get("role").__class__ is not str:
                return None
            messages.append(value)
            lengths.append(end - position)
            position = end + 1
    except (StopIteration, ValueError):
        return None
    return messages, lengths


def _parse(path: Path, number: int, raw: bytes) -> dict[str, Any] | None:
    if not raw.strip():
        return None
    try:
        value = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ContextFileError(path, number, str(exc)) from None
    if not isinstance(value, dict) or not isinstance(value.get("role"), str):
        raise ContextFileError(path, number, "expected an object with a string 'role'")
    return value


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        if not written:  # not expected of a regular file; never loop on it
            raise OSError(errno.EIO, "write stored nothing")
        view = view[written:]


def fsync_dir(directory: Path) -> None:
    """Make a newly created or renamed entry of ``directory`` durable (where allowed)."""
    _fsync_dir(directory)


def _fsync_dir(directory: Path) -> None:
    # makes a newly created or renamed entry durable; not every platform allows it
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def remove_stale_temp_files(path: Path) -> None:
    """Delete temporary files a rewrite killed half-way left next to ``path``."""
    with contextlib.suppress(OSError):
        for leftover in path.parent.glob(f".{glob.escape(path.name)}.*.tmp"):
            with contextlib.suppress(OSError):
                leftover.unlink()
