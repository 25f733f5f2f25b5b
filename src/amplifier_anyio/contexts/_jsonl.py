"""Blocking file work for context-persistent; every function here runs in a worker thread.

The file holds one JSON message per line (UTF-8, ``\\n`` terminated). Appends are one
``write`` of a whole line followed by ``fsync``; rewrites go to a temporary file in the
same directory, are fsynced, then ``os.replace``-d over the old file, and the directory is
fsynced, so a crash leaves either the old file or the new one.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from ..errors import ContextFileError

__all__ = (
    "ContextFileError",
    "encode",
    "append_line",
    "rewrite",
    "read_messages",
    "remove_stale_temp_files",
)


def encode(message: dict[str, Any]) -> bytes:
    """One line of the file for ``message``."""
    return (json.dumps(message, ensure_ascii=False) + "\n").encode("utf-8")


def append_line(path: Path, line: bytes) -> None:
    """Append ``line`` and fsync; create the file (and fsync its directory) if needed."""
    created = not path.exists()
    if created:
        path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        _write_all(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)
    if created:
        _fsync_dir(path.parent)


def rewrite(path: Path, lines: list[bytes]) -> None:
    """Atomically replace the file's content with ``lines``."""
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
    raises :class:`ContextFileError` naming the line.
    """
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return [], False
    lines = data.split(b"\n")
    tail = lines.pop()  # b"" when the file ends with a newline
    messages = [
        message
        for number, raw in enumerate(lines, 1)
        if (message := _parse(path, number, raw)) is not None
    ]
    if not tail.strip():
        return messages, bool(tail)
    try:
        last = _parse(path, len(lines) + 1, tail)
    except ContextFileError:
        last = None
    if last is not None:
        messages.append(last)
    return messages, True


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
        view = view[written:]


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
