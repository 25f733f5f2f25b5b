"""The session store's files beside a transcript; every function here runs in a worker thread.

Every file is named from the transcript's whole file name (``run.jsonl`` → ``run.jsonl.lock``),
so ``run.jsonl`` and ``run.txt`` are two sessions. Sessions stored before that used the
stem (``run.lock``, ``run.journal.jsonl``, ``run.decisions.jsonl``): `migrate` takes their
journal and decisions over when they are unambiguous (see `legacy_owner`).

- ``<name>.lock``: the one-writer lock (DESIGN §15). A writing context holds an exclusive
  ``flock`` on it for as long as it is open and writes its pid into it, so a second writer
  (another process, or another context object of this process: ``flock`` locks belong to
  an open file, not to a process) is refused with `SessionError` naming the
  holder. The operating system drops the lock when its holder dies, whatever way (a
  SIGKILL too); the file itself stays (removing it would race with the next writer).
- ``<name>.decisions.jsonl``: approvals decided from outside a running session (``sessions
  approve``). Deciders only ever append one whole write of whole lines, fsynced, holding an
  exclusive ``flock`` on the file; the writer reads it under the same lock, records what it
  takes in its journal, and empties the file only when nothing was appended meanwhile.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..errors import SessionError
from ..kernel import _pidlock
from . import _journal, _jsonl

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX (Windows)
    fcntl = None  # type: ignore[assignment]

__all__ = (
    "lock_path_for",
    "decisions_path_for",
    "journal_path_for",
    "legacy_owner",
    "migrate",
    "acquire_writer",
    "release_writer",
    "append_decisions",
    "read_decisions",
    "drop_decisions",
)


_SUFFIXES = (".lock", ".journal.jsonl", ".decisions.jsonl")


def lock_path_for(path: Path) -> Path:
    """The writer lock beside a messages file: ``<name>.lock``."""
    return path.with_name(f"{path.name}.lock")


def journal_path_for(path: Path) -> Path:
    """The tool-call journal beside a messages file: ``<name>.journal.jsonl``."""
    return path.with_name(f"{path.name}.journal.jsonl")


def decisions_path_for(path: Path) -> Path:
    """The outside decisions beside a messages file: ``<name>.decisions.jsonl``."""
    return path.with_name(f"{path.name}.decisions.jsonl")


def _legacy(path: Path, suffix: str) -> Path:
    return path.with_name(f"{path.stem}{suffix}")


def legacy_owner(path: Path) -> bool:
    """Whether the stem-named files of an earlier version (``<stem>.journal.jsonl``, …)
    can only be ``path``'s: no other file in the directory could be a transcript with the
    same stem (``run.jsonl`` beside ``run.txt`` is ambiguous, and then neither takes them).
    """
    if path.stem == path.name:  # no suffix: the old names were the new ones
        return False
    try:
        siblings = [p.name for p in path.parent.glob(f"{_glob_escape(path.stem)}.*")]
    except OSError:
        return False
    for name in siblings:
        if name == path.name or name.startswith(f"{path.name}."):
            continue  # the transcript itself, or a file named from it
        rest = name[len(path.stem) :]
        if rest in _SUFFIXES or rest == ".meta.json" or rest.endswith(".tmp"):
            continue  # a stem-named store file, metadata or a temp file
        if any(name.endswith(suffix) for suffix in _SUFFIXES):
            continue  # a file named from another transcript of a longer name
        return False  # another transcript with this stem
    return True


def _glob_escape(text: str) -> str:
    return "".join(f"[{c}]" if c in "*?[" else c for c in text)


def migrate(path: Path) -> list[Path]:
    """Rename the stem-named journal and decisions file of an earlier version to the
    names taken from ``path``'s whole name, when they are ``path``'s alone
    (`legacy_owner`) and no file has the new name yet; run by the writer, holding the
    lock. Returns the files renamed. Raises `SessionError` when such a file exists but
    another transcript could own it: loading on without it would close the calls it holds
    for good."""
    moved: list[Path] = []
    owner: bool | None = None
    for new in (journal_path_for(path), decisions_path_for(path)):
        old = _legacy(path, new.name[len(path.name) :])
        if not old.exists() or new.exists():
            continue
        if owner is None:
            owner = legacy_owner(path)
        if not owner:
            raise SessionError(
                f"{old} was written by an earlier version for one of the transcripts named "
                f"{path.stem}.* beside it, and which one cannot be told: rename it to "
                f"<transcript file name>{new.name[len(path.name) :]} for the transcript it "
                "belongs to (a call it holds would otherwise be lost)"
            )
        try:
            os.replace(old, new)
        except OSError as exc:
            raise _jsonl.ContextFileError(old, None, f"cannot rename: {_reason(exc)}") from exc
        moved.append(new)
    return moved


def readable(path: Path, store_file: Path) -> Path:
    """``store_file`` (a journal or decisions file named from ``path``), or, when it does
    not exist, the earlier version's stem-named one if that is ``path``'s alone: what a
    reader that must not rename anything reads."""
    if store_file.exists():
        return store_file
    old = _legacy(path, store_file.name[len(path.name) :])
    if old.exists() and legacy_owner(path):
        return old
    return store_file


def _no_fcntl(what: str) -> SessionError:
    return SessionError(
        f"{what}: this operating system has no fcntl file locks, which context-persistent "
        "needs to keep one writer per session file (open it with read_only=True to read it)"
    )


def acquire_writer(transcript: Path) -> int:
    """Take the writer lock of ``transcript``; the descriptor that holds it.

    Raises `SessionError` naming the holder's pid when another writer has it.
    """
    if not _pidlock.HAS_LOCKS:  # pragma: no cover - not POSIX
        raise _no_fcntl(str(transcript))
    lock = lock_path_for(transcript)
    try:
        held = _pidlock.take(lock)
    except _pidlock.LockFileError as exc:
        raise _jsonl.ContextFileError(lock, None, f"cannot {exc.step}: {exc.strerror}") from exc
    if isinstance(held, str):
        raise SessionError(
            f"{transcript} is open for writing by another context ({held}); one writer "
            "per session file — close that one first, or open this one with read_only=True"
        )
    return held


def release_writer(fd: int) -> None:
    """Let the writer lock go (closing its descriptor drops the ``flock``)."""
    with contextlib.suppress(OSError):
        os.close(fd)


@contextlib.contextmanager
def _locked(path: Path, flags: int) -> Iterator[int]:
    """``path`` opened with ``flags`` and held under an exclusive ``flock``."""
    if fcntl is None:  # pragma: no cover - not POSIX
        raise _no_fcntl(str(path))
    fd = os.open(path, flags, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield fd
    finally:
        os.close(fd)


def append_decisions(path: Path, records: list[dict[str, Any]]) -> None:
    """Append decision records to the decisions file: one write, fsynced, all or nothing."""
    data = b"".join(_jsonl.encode(record) for record in records)
    try:
        created = not path.exists()
        with _locked(path, os.O_RDWR | os.O_APPEND | os.O_CREAT) as fd:
            _jsonl.append_fd(path, fd, data)
    except OSError as exc:
        raise _jsonl.ContextFileError(path, None, f"cannot append: {_reason(exc)}") from exc
    if created:
        _jsonl.fsync_dir(path.parent)


def read_decisions(path: Path) -> tuple[list[dict[str, Any]], int]:
    """The decision records of the file (torn lines skipped) and the bytes read."""
    try:
        with _locked(path, os.O_RDONLY) as fd:
            data = _read_all(fd)
    except FileNotFoundError:
        return [], 0
    except OSError as exc:
        raise _jsonl.ContextFileError(path, None, f"cannot read: {_reason(exc)}") from exc
    return _journal.read_records(data), len(data)


def drop_decisions(path: Path, size: int) -> None:
    """Empty the decisions file, unless it grew past ``size`` bytes (a decision appended
    since it was read stays for the next read)."""
    with contextlib.suppress(FileNotFoundError), _locked(path, os.O_RDWR) as fd:
        if os.fstat(fd).st_size == size:
            os.ftruncate(fd, 0)
            os.fsync(fd)


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    return b"".join(chunks)


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc)
