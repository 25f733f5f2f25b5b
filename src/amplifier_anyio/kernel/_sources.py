"""Module sources given as git URLs: ``git+https://host/repo@ref#subdirectory=path``.

Upstream plans name a module's code as a git URL (``git+https://…``, ``git+file://…``,
``git+ssh://…``), with an optional ``@ref`` (branch, tag or commit) and an optional
``#subdirectory=``. [`fetch_git_source`][amplifier_anyio.kernel.fetch_git_source] clones it once
with the ``git`` command (run through `anyio.run_process`) into a cache directory keyed by URL and
ref, and returns the local directory to import from; later loads reuse the clone without
touching the network. A clone lands under a temporary name and is renamed into place,
so an interrupted clone is never mistaken for a finished one.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import uuid
from pathlib import Path

import anyio
import attrs

from ..errors import ModuleLoadError

__all__ = ("GitSource", "fetch_git_source", "is_git_source", "default_cache_dir")

_PREFIX = "git+"
_CLONE_TIMEOUT = 300.0


def is_git_source(source: str) -> bool:
    """Whether a plan's ``source`` is a git URL (``git+<scheme>://…``)."""
    return source.startswith(_PREFIX)


def default_cache_dir() -> Path:
    """Where clones are kept: ``$AMPLIFIER_ANYIO_MODULE_CACHE``, else
    ``$XDG_CACHE_HOME/amplifier-anyio/modules`` (``~/.cache/…``)."""
    explicit = os.environ.get("AMPLIFIER_ANYIO_MODULE_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "amplifier-anyio" / "modules"


@attrs.frozen(kw_only=True)
class GitSource:
    """A parsed git source: repository URL (without ``git+``), ref and subdirectory."""

    url: str
    ref: str | None = None
    subdirectory: str | None = None

    @classmethod
    def parse(cls, source: str) -> GitSource:
        """Parse ``git+<url>[@ref][#subdirectory=<path>]``; a ValueError names the problem."""
        if not is_git_source(source):
            msg = f"{source!r} is not a git source (git+https://…, git+file://…)"
            raise ValueError(msg)
        rest = source[len(_PREFIX) :]
        rest, _, fragment = rest.partition("#")
        subdirectory = None
        for part in filter(None, fragment.split("&")):
            key, _, value = part.partition("=")
            if key == "subdirectory" and value:
                subdirectory = value
        scheme, sep, location = rest.partition("://")
        if not sep or not location:
            msg = f"{source!r}: expected git+<scheme>://<location>"
            raise ValueError(msg)
        ref = None
        # A ref follows the last "@" of the path part (not a user@host prefix).
        path_start = location.find("/")
        at = location.rfind("@")
        if at > path_start >= 0 or (path_start < 0 and at > 0 and scheme == "file"):
            location, ref = location[:at], location[at + 1 :] or None
        if ref is not None and (ref.startswith("-") or any(c.isspace() for c in ref)):
            msg = f"{source!r}: {ref!r} is not a git ref"  # never an option to git
            raise ValueError(msg)
        if subdirectory is not None and (
            Path(subdirectory).is_absolute() or ".." in Path(subdirectory).parts
        ):
            msg = f"{source!r}: subdirectory must be a relative path inside the repository"
            raise ValueError(msg)
        return cls(url=f"{scheme}://{location}", ref=ref, subdirectory=subdirectory)

    @property
    def key(self) -> str:
        """The cache key: a hash of URL and ref (the subdirectory shares the clone)."""
        digest = hashlib.sha256(f"{self.url}@{self.ref or ''}".encode()).hexdigest()
        return digest[:24]


async def fetch_git_source(source: str, cache_dir: Path | None = None) -> Path:
    """The local directory of a git ``source``, cloned on first use.

    Every problem (a bad URL, no ``git``, a failed clone or checkout, a missing
    subdirectory) is a [`ModuleLoadError`][amplifier_anyio.ModuleLoadError] whose reason
    says what failed, with git's first ``fatal:`` line (the loader names the source).
    """
    try:
        parsed = GitSource.parse(source)
    except ValueError as exc:
        raise ModuleLoadError("<source>", str(exc)) from exc
    cache = cache_dir or default_cache_dir()
    target = cache / parsed.key
    if not await anyio.Path(target).is_dir():
        await _clone(parsed, cache, target, source)
    where = target / parsed.subdirectory if parsed.subdirectory else target
    if not await anyio.Path(where).is_dir():
        msg = f"{parsed.subdirectory!r} is not a directory of the repository"
        raise ModuleLoadError("<source>", msg)
    return where


async def _clone(parsed: GitSource, cache: Path, target: Path, source: str) -> None:
    await anyio.Path(cache).mkdir(parents=True, exist_ok=True)
    partial_dir = cache / f".partial-{parsed.key}-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0"}
    try:
        await _git(["clone", "--quiet", "--", parsed.url, str(partial_dir)], env, source)
        if parsed.ref:
            await _git(["-C", str(partial_dir), "checkout", "--quiet", parsed.ref], env, source)
        try:
            await anyio.Path(partial_dir).rename(target)
        except OSError:
            if not await anyio.Path(target).is_dir():  # not a concurrent clone that won
                raise
    finally:
        if await anyio.Path(partial_dir).exists():
            await anyio.to_thread.run_sync(shutil.rmtree, partial_dir, True)


async def _git(args: list[str], env: dict[str, str], source: str) -> None:
    try:
        with anyio.fail_after(_CLONE_TIMEOUT):
            await anyio.run_process(["git", *args], env=env, check=True)
    except FileNotFoundError as exc:
        msg = "the git command is not installed"
        raise ModuleLoadError("<source>", msg) from exc
    except subprocess.CalledProcessError as exc:
        lines = (exc.stderr or b"").decode("utf-8", "replace").strip().splitlines()
        fatal = [line for line in lines if line.startswith(("fatal:", "error:"))]
        detail = (fatal or lines or [f"exit status {exc.returncode}"])[0]
        msg = f"git {args[0] if args[0] != '-C' else args[2]} failed: {detail}"
        raise ModuleLoadError("<source>", msg) from exc
    except TimeoutError as exc:
        msg = f"git gave no result within {_CLONE_TIMEOUT:.0f} s"
        raise ModuleLoadError("<source>", msg) from exc
