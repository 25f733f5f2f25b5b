"""tool-filesystem: ``read_file``, ``write_file``, ``edit_file``, ``list_directory``, ``glob``.

Input names and result shapes are upstream Amplifier's (tool-filesystem for the first
three, tool-search's ``glob``), so prompts written for upstream work. Unlike upstream:

- reads are confined too (``allowed_read_paths``, default: the working directory), and
  every access is confined twice — after resolving symlinks and ``..``, and again when
  the file is opened, from the root's directory descriptor without following any
  symlink (`amplifier_anyio.tools._paths`), so a symlink swapped in between the check
  and the open cannot lead out;
- a file with several hard links is not read or edited (a hard link can alias a file
  outside the allowed paths and no path check can tell), unless ``allow_hard_links``;
- writes are atomic: a temporary file in the same directory, fsync, rename;
- all file I/O runs in worker threads, and the read-only tools give up after
  ``io_timeout`` seconds (a hung network file system does not hang the turn);
- binary and non-UTF-8 files are refused with a clear error, and files over
  ``max_file_bytes`` are refused instead of loaded;
- each call claims the resolved path it touches (``claims()``: ``read_file``,
  ``list_directory`` and ``glob`` read it, ``write_file`` and ``edit_file`` write it), so
  parallel calls of one reply on one file run in call order (``docs/concurrency.md``).

See ``docs/tool-filesystem.md`` for the configuration, the results and the limits.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import stat
import uuid
from collections.abc import Callable
from contextlib import suppress
from typing import Any, ClassVar, TypeVar

import anyio
import anyio.from_thread
import anyio.to_thread
import attrs

from ..config_schema import ConfigSchema
from ..errors import ConfigError, ValidationError
from ..events import ARTIFACT_READ, ARTIFACT_WRITE
from ..interfaces import Claims
from ..models import ToolResult, structure
from ..models._validators import number
from ._paths import DIR_FLAGS, Area, PathRefused, Walked, check_text, swapped_message

__all__ = (
    "FilesystemConfig",
    "Filesystem",
    "DEFAULT_EXCLUSIONS",
    "ReadFileTool",
    "WriteFileTool",
    "EditFileTool",
    "ListDirectoryTool",
    "GlobTool",
    "make_tools",
    "mount",
)

logger = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_EXCLUSIONS = (
    "node_modules",
    ".venv",
    "venv",
    ".git",
    "__pycache__",
    ".mypy_cache",
    ".pytest_cache",
    ".ruff_cache",
    ".tox",
    "dist",
    "build",
    ".next",
    "target",
    "vendor",
    ".idea",
    ".vscode",
    "coverage",
)
"""Directories ``glob`` does not descend into unless ``include_ignored`` is true."""

_BINARY_PROBE = 8192
_TRUNCATED = "... [truncated]"


@attrs.frozen(kw_only=True)
class FilesystemConfig:
    """tool-filesystem's settings (sizes in bytes, times in seconds).

    ``working_dir`` is where relative paths start (default: the ``session.working_dir``
    capability, else the process's working directory). ``allowed_read_paths`` /
    ``allowed_write_paths`` default to ``[working_dir]``; give ``["/"]`` for no limit.
    """

    working_dir: str | None = None
    allowed_read_paths: tuple[str, ...] | None = None
    allowed_write_paths: tuple[str, ...] | None = None
    max_file_bytes: int = attrs.field(
        default=10 * 1024 * 1024, validator=number(minimum=1, exclusive=False, integer=True)
    )
    max_line_length: int = attrs.field(
        default=2000, validator=number(minimum=1, exclusive=False, integer=True)
    )
    default_line_limit: int = attrs.field(
        default=2000, validator=number(minimum=1, exclusive=False, integer=True)
    )
    max_results: int = attrs.field(
        default=500, validator=number(minimum=1, exclusive=False, integer=True)
    )
    max_scanned_entries: int = attrs.field(
        default=100_000, validator=number(minimum=1, exclusive=False, integer=True)
    )
    io_timeout: float | None = attrs.field(default=60.0, validator=number(optional=True))
    allow_hard_links: bool = False

    @classmethod
    def from_dict(cls, config: dict[str, Any] | None) -> FilesystemConfig:
        """Parse a plan's tool config; errors name the key."""
        config = dict(config or {})
        known = {a.name for a in attrs.fields(cls)}
        for key in sorted(set(config) - known):
            logger.warning("tool-filesystem: ignoring unknown config key %r", key)
            config.pop(key)
        for key in ("allowed_read_paths", "allowed_write_paths"):
            if isinstance(config.get(key), str):
                config[key] = [config[key]]
        try:
            return structure(config, cls)
        except ValidationError as exc:
            raise ConfigError("; ".join(exc.errors)) from exc


class _Refusal(Exception):  # noqa: N818 - an answer for the model, not an error of ours
    """An operation that ends in an error result; ``details`` go into ``error``."""

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.details = details


class Filesystem:
    """What the five tools share: the config, the two areas and the event sink."""

    def __init__(self, config: FilesystemConfig, working_dir: str, coordinator: Any) -> None:
        self.config = config
        self.working_dir = working_dir
        self.coordinator = coordinator
        self.read_area = Area(config.allowed_read_paths or (working_dir,), "read", working_dir)
        self.write_area = Area(config.allowed_write_paths or (working_dir,), "write", working_dir)

    async def run(self, fn: Callable[[], T], *, read_only: bool) -> T:
        """``fn()`` in a worker thread. A read-only operation is abandoned on cancel or
        after ``io_timeout``; a write is always waited for (it is short and atomic)."""
        if not read_only:
            return await anyio.to_thread.run_sync(fn)
        timeout = self.config.io_timeout
        with anyio.move_on_after(timeout if timeout is not None else float("inf")) as scope:
            return await anyio.to_thread.run_sync(fn, abandon_on_cancel=True)
        assert scope.cancelled_caught
        msg = f"timed out after {timeout:g} s waiting for the file system"
        raise _Refusal(msg, type="TimeoutError")

    async def emit(self, event: str, data: dict[str, Any]) -> None:
        """Emit an artifact event when the tools were mounted in a session."""
        hooks = getattr(self.coordinator, "hooks", None)
        if hooks is not None:
            await hooks.emit(event, data)

    def check_file(self, path: str, info: os.stat_result) -> None:
        """Refuse what is not a plain, single-link file within the size cap."""
        if stat.S_ISDIR(info.st_mode):
            raise _Refusal(f"{path} is a directory", type="IsADirectoryError")
        if not stat.S_ISREG(info.st_mode):
            raise _Refusal(f"{path} is not a regular file", type="NotARegularFile")
        self.check_links(path, info)
        self.check_size(path, info.st_size)

    def check_links(self, path: str, info: os.stat_result) -> None:
        """Refuse a file with several hard links (unless ``allow_hard_links``)."""
        if info.st_nlink > 1 and not self.config.allow_hard_links:
            msg = (
                f"Access denied: {path} has {info.st_nlink} hard links; a hard link may "
                "alias a file outside the allowed paths (set allow_hard_links to permit)"
            )
            raise _Refusal(msg, type="AccessDenied")

    def check_size(self, path: str, size: int) -> None:
        """Refuse more than ``max_file_bytes``."""
        cap = self.config.max_file_bytes
        if size > cap:
            msg = f"File too large: {path} is {size} bytes (max_file_bytes is {cap})"
            raise _Refusal(msg, type="FileTooLarge", size_bytes=size)

    def read_text(self, path: str, fd: int) -> tuple[str, int]:
        """The UTF-8 text of an open file and its size in bytes."""
        self.check_file(path, os.fstat(fd))
        data = _read_fd(fd, self.config.max_file_bytes + 1)
        self.check_size(path, len(data))
        return _decode(path, data), len(data)

    @staticmethod
    def open_for_reading(path: str, area: Area, walked: Walked) -> int:
        """The walk's last entry, opened without following a symlink or blocking on a FIFO."""
        return area.open_entry(path, walked, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)

    def write_atomic(self, path: str, walked: Walked, data: bytes) -> None:
        """Replace the walk's last entry with ``data``: temp file, fsync, rename, fsync dir."""
        name = walked.name
        if name is None:
            raise _Refusal(f"{path} is a directory", type="IsADirectoryError")
        dir_fd = walked.dir_fd
        mode: int | None = None
        try:
            current = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            pass
        else:
            if stat.S_ISLNK(current.st_mode):
                # The resolved path held no symlink when it was checked: one was swapped in.
                raise PathRefused(swapped_message(path, name))
            if stat.S_ISDIR(current.st_mode):
                raise _Refusal(f"{path} is a directory", type="IsADirectoryError")
            if not stat.S_ISREG(current.st_mode):
                raise _Refusal(f"{path} is not a regular file", type="NotARegularFile")
            self.check_links(path, current)
            mode = stat.S_IMODE(current.st_mode)
        temp = f".{uuid.uuid4().hex[:12]}.amplifier-tmp"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
        fd = os.open(temp, flags, 0o666, dir_fd=dir_fd)
        try:
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                if mode is not None:
                    os.fchmod(fd, mode)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.rename(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            with suppress(OSError):
                os.unlink(temp, dir_fd=dir_fd)
            raise
        os.fsync(dir_fd)

    def listing(self, fd: int, real: str) -> tuple[list[dict[str, Any]], str]:
        """The entries of an open directory (directories first) and upstream's text."""
        entries: list[dict[str, Any]] = []
        with os.scandir(fd) as scan:
            for entry in scan:
                kind = _kind(entry)
                size = None
                if kind == "file":
                    try:
                        size = entry.stat(follow_symlinks=False).st_size
                    except OSError:
                        size = None
                entries.append({"name": entry.name, "type": kind, "size": size})
        entries.sort(key=lambda e: (e["type"] != "dir", e["name"]))
        labels = {"dir": "DIR ", "file": "FILE", "link": "LINK"}
        lines = [f"  {labels.get(e['type'], 'OTHER')} {e['name']}" for e in entries]
        return entries, f"Directory: {real}\n\n" + "\n".join(lines)


def _kind(entry: os.DirEntry[str]) -> str:
    try:
        if entry.is_symlink():
            return "link"
        if entry.is_dir(follow_symlinks=False):
            return "dir"
        if entry.is_file(follow_symlinks=False):
            return "file"
    except OSError:
        pass
    return "other"


def _read_fd(fd: int, limit: int) -> bytes:
    chunks: list[bytes] = []
    remaining = limit
    while remaining > 0:
        chunk = os.read(fd, min(remaining, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def _decode(path: str, data: bytes) -> str:
    if b"\x00" in data[:_BINARY_PROBE]:
        msg = f"Cannot read {path}: it is a binary file (it contains NUL bytes)"
        raise _Refusal(msg, type="BinaryFile")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        msg = f"Cannot read {path}: not a text file or encoding issue (not UTF-8)"
        raise _Refusal(msg, type="UnicodeDecodeError") from exc


def _error(message: str, **details: Any) -> ToolResult:
    return ToolResult(success=False, output=message, error={"message": message, **details})


def _string(
    input: dict[str, Any], key: str, *, required: bool = True, allow_empty: bool = False
) -> str:
    """``input[key]`` as a string; missing is ``""`` unless ``required``."""
    value = input.get(key)
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (not value and not allow_empty):
        raise _Refusal(f"{key} is required and must be a string", type="InvalidInput")
    return value


def _positive(input: dict[str, Any], key: str, default: int) -> int:
    value = input.get(key)
    if value is None:
        return default
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _Refusal(f"{key} must be an integer >= 1, got {value!r}", type="InvalidInput")
    return value


class _FsTool:
    """The shape every filesystem tool shares: parse, run off the loop, map failures."""

    name = ""
    description = ""
    input_schema: ClassVar[dict[str, Any]] = {}
    path_input: ClassVar[str] = "file_path"
    """The input naming the path the call touches."""
    path_default: ClassVar[str | None] = None
    """The path when the input gives none (``.`` for the directory tools)."""
    writes: ClassVar[bool] = False
    """Whether the call writes its path (else it only reads it)."""

    def __init__(self, fs: Filesystem) -> None:
        self.fs = fs

    def claims(self, input: dict[str, Any]) -> Claims:
        """The resolved real path this call reads or writes (symlinks and ``..``
        resolved, so two names of one file are one key).

        A path outside the allowed roots, or one that cannot be resolved, is claimed as
        given (the call fails anyway); an input without a usable path claims nothing.
        Blocks (it resolves the path): the batch calls it in a worker thread.
        """
        path = input.get(self.path_input) if isinstance(input, dict) else None
        if path is None or path == "":
            path = self.path_default
        if not isinstance(path, str) or not path:
            return Claims()
        area = self.fs.write_area if self.writes else self.fs.read_area
        try:
            key = area.resolve(path)[0]
        except (PathRefused, OSError, ValueError):
            key = path
        return Claims(writes=(key,)) if self.writes else Claims(reads=(key,))

    async def execute(self, input: dict[str, Any]) -> ToolResult:
        """Run the operation; every refusal and OS error is an error result naming the path."""
        try:
            return await self.run(input)
        except _Refusal as exc:
            return _error(str(exc), **exc.details)
        except PathRefused as exc:
            return _error(str(exc), type="AccessDenied")
        except OSError as exc:
            return _error(self.os_error_message(input, exc), **_os_details(exc))

    async def run(self, input: dict[str, Any]) -> ToolResult:
        raise NotImplementedError

    def os_error_message(self, input: dict[str, Any], exc: OSError) -> str:
        path = input.get("file_path", input.get("path", "."))
        if exc.errno == errno.ENOENT:
            return f"Path not found: {path}"
        if exc.errno == errno.ENAMETOOLONG:
            return f"Invalid path {path!r}: file name too long"
        return f"Cannot {self.name.split('_')[0]} {path}: {exc.strerror or exc}"


def _os_details(exc: OSError) -> dict[str, Any]:
    details: dict[str, Any] = {"type": type(exc).__name__}
    if exc.errno is not None:
        details["errno"] = errno.errorcode.get(exc.errno, exc.errno)
    return details


class ReadFileTool(_FsTool):
    """``read_file``: a text file in ``cat -n`` lines (or a directory's listing)."""

    name = "read_file"
    description = (
        "Read a text file (or list a directory). Lines come numbered from 1 in cat -n "
        "style; by default up to 2000 lines from the start, longer lines are cut. Use "
        "offset (1-indexed line) and limit (number of lines) for long files. Binary "
        "files are refused."
    )
    input_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "file_path": {"type": "string", "description": "The path of the file to read."},
            "offset": {"type": "integer", "description": "The first line to read (1-indexed)."},
            "limit": {"type": "integer", "description": "How many lines to read."},
        },
        "required": ["file_path"],
    }

    async def run(self, input: dict[str, Any]) -> ToolResult:
        """Read the file (in a worker thread) and format its lines."""
        path = _string(input, "file_path")
        offset = _positive(input, "offset", 1)
        limit = _positive(input, "limit", self.fs.config.default_line_limit)
        output, size = await self.fs.run(lambda: self._read(path, offset, limit), read_only=True)
        if not output.get("is_directory"):
            await self.fs.emit(ARTIFACT_READ, {"path": output["file_path"], "bytes": size})
        return ToolResult(output=output)

    def _read(self, path: str, offset: int, limit: int) -> tuple[dict[str, Any], int]:
        area = self.fs.read_area
        real, root = area.resolve(path)
        with area.walk(path, real, root) as walked:
            fd = self.fs.open_for_reading(path, area, walked)
            try:
                if stat.S_ISDIR(os.fstat(fd).st_mode):
                    entries, content = self.fs.listing(fd, real)
                    listing = {"file_path": real, "content": content, "is_directory": True}
                    return {**listing, "entry_count": len(entries)}, 0
                text, size = self.fs.read_text(path, fd)
            finally:
                os.close(fd)
        lines = text.splitlines()
        selected = lines[offset - 1 : offset - 1 + limit]
        width = self.fs.config.max_line_length
        numbered = [
            f"{n:6d}\t{line[:width] + _TRUNCATED if len(line) > width else line}"
            for n, line in enumerate(selected, start=offset)
        ]
        output: dict[str, Any] = {
            "file_path": real,
            "content": "\n".join(numbered),
            "total_lines": len(lines),
            "lines_read": len(selected),
            "offset": offset,
        }
        if not lines:
            output["warning"] = "File exists but has empty contents"
        return output, size


class WriteFileTool(_FsTool):
    """``write_file``: create or replace a file, atomically."""

    name = "write_file"
    writes = True
    description = (
        "Write a file (creating missing parent directories), replacing it if it exists. "
        "The write is atomic: readers see the old or the new content, never a mix."
    )
    input_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "file_path": {"type": "string", "description": "The path of the file to write."},
            "content": {"type": "string", "description": "The whole new content."},
        },
        "required": ["file_path", "content"],
    }

    async def run(self, input: dict[str, Any]) -> ToolResult:
        """Write in a worker thread; answer ``{file_path, bytes}``."""
        path = _string(input, "file_path")
        data = _string(input, "content", allow_empty=True).encode("utf-8")
        self.fs.check_size(path, len(data))
        real = await self.fs.run(lambda: self._write(path, data), read_only=False)
        await self.fs.emit(ARTIFACT_WRITE, {"path": real, "bytes": len(data)})
        return ToolResult(output={"file_path": real, "bytes": len(data)})

    def _write(self, path: str, data: bytes) -> str:
        area = self.fs.write_area
        real, root = area.resolve(path)
        with area.walk(path, real, root, create=True) as walked:
            self.fs.write_atomic(path, walked, data)
        return real


class EditFileTool(_FsTool):
    """``edit_file``: replace an exact string that occurs once (or every occurrence)."""

    name = "edit_file"
    writes = True
    description = (
        "Replace old_string with new_string in a file. old_string must match exactly and "
        "occur exactly once, unless replace_all is true (then every occurrence changes)."
    )
    input_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "file_path": {"type": "string", "description": "The path of the file to edit."},
            "old_string": {"type": "string", "description": "The exact text to replace."},
            "new_string": {"type": "string", "description": "The text to put in its place."},
            "replace_all": {
                "type": "boolean",
                "description": "Replace every occurrence (default false).",
                "default": False,
            },
        },
        "required": ["file_path", "old_string", "new_string"],
    }

    async def run(self, input: dict[str, Any]) -> ToolResult:
        """Edit in a worker thread; answer ``{file_path, replacements_made, bytes_written}``."""
        path = _string(input, "file_path")
        old = _string(input, "old_string")
        new = _string(input, "new_string", allow_empty=True)
        if not old:
            raise _Refusal("old_string must not be empty", type="InvalidInput")
        if old == new:
            raise _Refusal("old_string and new_string are the same", type="InvalidInput")
        replace_all = input.get("replace_all", False) is True
        output = await self.fs.run(lambda: self._edit(path, old, new, replace_all), read_only=False)
        written = {"path": output["file_path"], "bytes": output["bytes_written"]}
        await self.fs.emit(ARTIFACT_WRITE, written)
        return ToolResult(output=output)

    def _edit(self, path: str, old: str, new: str, replace_all: bool) -> dict[str, Any]:
        area = self.fs.write_area
        real, root = area.resolve(path)
        if self.fs.read_area.root_of(real) is None:  # an edit reads the file too
            msg = f"Access denied: {path} is not within allowed read paths"
            raise PathRefused(msg)
        with area.walk(path, real, root) as walked:
            fd = self.fs.open_for_reading(path, area, walked)
            try:
                text, _ = self.fs.read_text(path, fd)
            finally:
                os.close(fd)
            count = text.count(old)
            if count == 0:
                raise _Refusal(f"old_string not found in {path}", type="NotFound")
            if count > 1 and not replace_all:
                msg = (
                    f"old_string appears {count} times in {path}; give more surrounding "
                    "context to make it unique, or set replace_all"
                )
                raise _Refusal(msg, type="NotUnique", occurrences=count)
            data = text.replace(old, new).encode("utf-8")
            self.fs.check_size(path, len(data))
            self.fs.write_atomic(path, walked, data)
        return {"file_path": real, "replacements_made": count, "bytes_written": len(data)}


class ListDirectoryTool(_FsTool):
    """``list_directory``: a directory's entries, directories first."""

    name = "list_directory"
    path_input = "path"
    path_default = "."
    description = (
        "List a directory: its entries (directories first) with their type and size. "
        "Symbolic links are shown as LINK and not followed."
    )
    input_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "The directory (default: '.')."},
        },
    }

    async def run(self, input: dict[str, Any]) -> ToolResult:
        """List in a worker thread."""
        path = _string(input, "path", required=False) or "."
        output = await self.fs.run(lambda: self._list(path), read_only=True)
        return ToolResult(output=output)

    def _list(self, path: str) -> dict[str, Any]:
        area = self.fs.read_area
        real, root = area.resolve(path)
        with area.walk(path, real, root) as walked:
            fd = area.open_entry(path, walked, DIR_FLAGS)
            try:
                entries, content = self.fs.listing(fd, real)
            finally:
                os.close(fd)
        cap = self.fs.config.max_results
        output: dict[str, Any] = {
            "path": real,
            "content": content,
            "is_directory": True,
            "entry_count": len(entries),
            "entries": entries[:cap],
        }
        if len(entries) > cap:
            output["results_capped"] = True
        return output

    def os_error_message(self, input: dict[str, Any], exc: OSError) -> str:
        path = input.get("path") or "."
        if exc.errno == errno.ENOTDIR:
            return f"Not a directory: {path}"
        return super().os_error_message({"path": path}, exc)


class GlobTool(_FsTool):
    """``glob``: files under a directory whose relative path matches a pattern."""

    name = "glob"
    path_input = "path"
    path_default = "."
    description = (
        "Find files by glob pattern ('**/*.py', 'src/*.ts') under path (default '.'), "
        "newest first. Skips node_modules, .git, .venv and the like unless "
        "include_ignored is true. Symbolic links are reported, never followed."
    )
    input_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "pattern": {"type": "string", "description": "Glob pattern, relative to path."},
            "path": {"type": "string", "description": "Directory to search (default '.')."},
            "type": {
                "type": "string",
                "enum": ["file", "dir", "any"],
                "description": "Only files, only directories, or any (default any).",
            },
            "include_ignored": {
                "type": "boolean",
                "description": "Search node_modules, .git, .venv, … too (default false).",
            },
        },
        "required": ["pattern"],
    }

    async def run(self, input: dict[str, Any]) -> ToolResult:
        """Search in a worker thread; the shape is upstream tool-search's."""
        pattern = _string(input, "pattern")
        path = _string(input, "path", required=False) or "."
        kind = input.get("type") or "any"
        if kind not in ("file", "dir", "any"):
            raise _Refusal(f"type must be file, dir or any, got {kind!r}", type="InvalidInput")
        include_ignored = input.get("include_ignored", False) is True
        regex, depth = _compile(pattern)
        budget = self.fs.config.max_scanned_entries
        search = _Search(regex, depth, kind, include_ignored, budget)
        output = await self.fs.run(lambda: self._glob(pattern, path, search), read_only=True)
        return ToolResult(output=output)

    def _glob(self, pattern: str, path: str, search: _Search) -> dict[str, Any]:
        area = self.fs.read_area
        real, root = area.resolve(path)
        with area.walk(path, real, root) as walked:
            fd = area.open_entry(path, walked, DIR_FLAGS)
            try:
                search.visit(fd, "", 0)
            finally:
                os.close(fd)
        found = sorted(search.found, key=lambda m: m[0], reverse=True)
        cap = self.fs.config.max_results
        matches = [
            {"path": os.path.join(real, rel), "type": t, "size": size}
            for _, rel, t, size in found[:cap]
        ]
        output: dict[str, Any] = {
            "pattern": pattern,
            "base_path": real,
            "total_files": len(found),
            "count": len(matches),
            "matches": matches,
        }
        if len(found) > cap:
            output["results_capped"] = True
        if search.scan_capped:
            output["scan_capped"] = True
        return output

    def os_error_message(self, input: dict[str, Any], exc: OSError) -> str:
        path = input.get("path") or "."
        if exc.errno == errno.ENOTDIR:
            return f"Not a directory: {path}"
        return super().os_error_message({"path": path}, exc)


@attrs.define(eq=False)
class _Search:
    """One glob walk over directory descriptors: nothing is reached through a symlink."""

    regex: re.Pattern[str]
    depth: int | None
    kind: str
    include_ignored: bool
    budget: int
    found: list[tuple[float, str, str, int | None]] = attrs.field(factory=list)
    scan_capped: bool = False

    def visit(self, dir_fd: int, prefix: str, level: int) -> None:
        with os.scandir(dir_fd) as scan:
            entries = list(scan)
        for entry in entries:
            if self.budget <= 0:
                self.scan_capped = True
                return
            self.budget -= 1
            if self.budget % 512 == 0:
                anyio.from_thread.check_cancelled()
            kind = _kind(entry)
            if kind == "dir" and not self.include_ignored and entry.name in DEFAULT_EXCLUSIONS:
                continue
            relative = prefix + entry.name
            if self.kind in ("any", kind) and self.regex.fullmatch(relative + "/"):
                self._add(entry, relative, kind)
            if kind == "dir" and (self.depth is None or level + 1 < self.depth):
                self._descend(dir_fd, entry.name, relative, level)

    def _add(self, entry: os.DirEntry[str], relative: str, kind: str) -> None:
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            return
        size = info.st_size if kind == "file" else None
        self.found.append((info.st_mtime, relative, kind, size))

    def _descend(self, dir_fd: int, name: str, relative: str, level: int) -> None:
        try:
            child = os.open(name, DIR_FLAGS, dir_fd=dir_fd)
        except OSError:
            return  # gone, unreadable, or swapped for a symlink: not followed
        try:
            self.visit(child, relative + "/", level + 1)
        finally:
            os.close(child)


def _compile(pattern: str) -> tuple[re.Pattern[str], int | None]:
    """The regex a relative path plus ``/`` must match, and how deep to look (None: all)."""
    check_text(pattern, "pattern")
    if pattern.startswith(("/", "~")) or os.path.isabs(pattern):
        msg = f"Access denied: pattern {pattern!r} must be relative; give the directory as path"
        raise PathRefused(msg)
    segments = [s for s in pattern.split("/") if s not in ("", ".")]
    if ".." in segments:
        msg = (
            f"Access denied: pattern {pattern!r} must not contain '..'; give the directory as path"
        )
        raise PathRefused(msg)
    if not segments:
        raise _Refusal(f"pattern {pattern!r} matches nothing", type="InvalidInput")
    parts = ["(?:[^/]+/)*" if s == "**" else _segment(s) + "/" for s in segments]
    depth = None if "**" in segments else len(segments)
    return re.compile("".join(parts), re.DOTALL), depth


def _segment(segment: str) -> str:
    """One path segment of a glob as a regex: ``*``, ``?`` and ``[...]`` classes."""
    out: list[str] = []
    i = 0
    while i < len(segment):
        char = segment[i]
        i += 1
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[":
            end = segment.find("]", i + 1 if segment[i : i + 1] in ("!", "]") else i)
            if end == -1:
                out.append(re.escape(char))
                continue
            body = segment[i:end]
            i = end + 1
            negate = body.startswith("!")
            body = body[1:] if negate else body
            escaped = body.replace("\\", "\\\\").replace("^", "\\^")
            out.append(f"[{'^/' if negate else ''}{escaped}]")
        else:
            out.append(re.escape(char))
    return "".join(out)


def _working_dir(coordinator: Any, config: FilesystemConfig) -> str:
    if config.working_dir is not None:
        return os.path.realpath(os.path.expanduser(config.working_dir))
    get = getattr(coordinator, "get_capability", None)
    offered = get("session.working_dir") if get is not None else None
    return os.path.realpath(str(offered) if offered else os.getcwd())


def make_tools(coordinator: Any, config: dict[str, Any] | None = None) -> list[_FsTool]:
    """The five tools over one shared [`Filesystem`][amplifier_anyio.tools.filesystem.Filesystem]
    (for tests and embedding)."""
    parsed = FilesystemConfig.from_dict(config)
    fs = Filesystem(parsed, _working_dir(coordinator, parsed), coordinator)
    kinds = (ReadFileTool, WriteFileTool, EditFileTool, ListDirectoryTool, GlobTool)
    return [kind(fs) for kind in kinds]


async def mount(coordinator: Any, config: dict[str, Any] | None = None) -> None:
    """Mount ``read_file``, ``write_file``, ``edit_file``, ``list_directory`` and ``glob``."""
    for tool in make_tools(coordinator, config):
        await coordinator.mount("tools", tool, name=tool.name)


CONFIG_SCHEMA = ConfigSchema.from_attrs("tool-filesystem", FilesystemConfig)
"""The keys tool-filesystem accepts (checked by ``validate --strict``)."""
