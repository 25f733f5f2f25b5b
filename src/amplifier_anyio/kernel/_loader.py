"""Finding a module's ``mount`` function by its id.

Lookup order: a source resolver mounted at ``module-source-resolver``; then the plan
entry's explicit ``source`` (a directory, or a ``git+…`` URL cloned into a cache, see
`_sources`); then the entry points of group ``amplifier.modules``; then a package
``amplifier_module_<id>`` (dashes become underscores) on the search paths or
importable from ``sys.path``. An explicit source comes before the built-in entry points
so that ``{module: context-simple, source: ./mine}`` mounts *that* code; a source that
cannot be used is a warning (and the next place is tried). Two entry points of one
name are a warning naming both (the first found is used). Where each module came from
is kept ([`ModuleLoader.origin_of`][amplifier_anyio.ModuleLoader.origin_of]). Imports run in a
worker thread: they read files.

The entry points are read once per process, not per load: ``importlib.metadata`` caches
each ``sys.path`` directory's listing (keyed on its modification time) but reads every
installed distribution's ``entry_points.txt`` again on each call, milliseconds a call.
The loader keeps one index of the group, valid while ``sys.path`` and the modification
time of each of its entries (what ``importlib.metadata``'s own cache is keyed on) and
``sys.meta_path`` stay the same: installing or removing a distribution changes its
directory, so the next load scans again. An entry point whose module is imported already
is loaded on the event loop (no file is read) after one check of the paths per loader (a
``stat`` of each ``sys.path`` entry; a session has one loader, so a session opening finds
its imported modules with one check); anything else still goes to a worker thread, whose
look-up checks the paths again.
[`ModuleLoader.refresh`][amplifier_anyio.ModuleLoader.refresh] drops the index for the
changes that leave those unchanged (an ``entry_points.txt`` edited in place).
"""

from __future__ import annotations

import builtins
import importlib
import importlib.util
import inspect
import logging
import os
import sys
import threading
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import attrs

from ..errors import ModuleLoadError, ModuleNotFoundError
from ._sources import fetch_git_source, is_git_source

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

__all__ = ("ModuleLoader", "ENTRY_POINT_GROUP", "package_name", "on_session_ready_of")

logger = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "amplifier.modules"
"""The entry-point group every module registers its ``mount`` under."""

Mount = Callable[..., Awaitable[Any]]
BoundMount = Callable[[Any], Awaitable[Any]]


def package_name(module_id: str) -> str:
    """The package a module id maps to: ``tool-bash`` → ``amplifier_module_tool_bash``."""
    return "amplifier_module_" + module_id.replace("-", "_").replace(".", "_")


def on_session_ready_of(mount: Callable[..., Any]) -> Callable[[Any], Any] | None:
    """A module's optional ``on_session_ready(coordinator)``: the mount function's
    ``__on_session_ready__``, else ``on_session_ready`` in the module defining ``mount``."""
    ready = getattr(mount, "__on_session_ready__", None)
    if ready is None:
        # The module defining mount, else the package above it (amplifier-core's contract:
        # a module-level function of the module's package, whose mount may live deeper).
        name = getattr(mount, "__module__", None) or ""
        while name and ready is None:
            ready = getattr(sys.modules.get(name), "on_session_ready", None)
            name = name.rpartition(".")[0]
    return ready if callable(ready) else None


class ModuleLoader:
    """Loads modules for a coordinator; [`cleanup`][amplifier_anyio.ModuleLoader.cleanup] undoes its
    ``sys.path`` changes."""

    def __init__(
        self,
        coordinator: Any = None,
        search_paths: list[str | Path] | None = None,
        *,
        cache_dir: str | Path | None = None,
    ) -> None:
        self.coordinator = coordinator
        self.search_paths = [Path(p) for p in search_paths or ()]
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        """Where ``git+…`` sources are cloned (None: `default_cache_dir`)."""
        self._added_paths: list[str] = []
        self._cache: dict[tuple[str, str | None], Mount] = {}
        self._origins: dict[tuple[str, str | None], str] = {}
        self._warnings: dict[tuple[str, str | None], list[str]] = {}
        self._fresh: _Index | None = None  # the index this loader found up to date

    def origin_of(self, module_id: str, source_hint: str | None = None) -> str | None:
        """Where the module loaded for ``(module_id, source_hint)`` came from, once found:
        ``entry point 'x' = pkg:mount (dist 1.0)``, ``source /dir (package p)``, …"""
        return self._origins.get((module_id, source_hint))

    def warnings_of(self, module_id: str, source_hint: str | None = None) -> tuple[str, ...]:
        """What finding it warned about (an unusable source, two entry points of one name)."""
        return tuple(self._warnings.get((module_id, source_hint), ()))

    async def load(
        self,
        module_id: str,
        config: dict[str, Any] | None = None,
        source_hint: str | None = None,
        coordinator: Any = None,
    ) -> BoundMount:
        """Find ``module_id`` and return ``mount(coordinator)`` with ``config`` bound."""
        mount = await self.find(module_id, source_hint, coordinator)
        bound_config = dict(config or {})

        async def mount_with_config(target: Any) -> Any:
            result = mount(target, bound_config)
            return await result if inspect.isawaitable(result) else result

        # As upstream: the module's optional on_session_ready travels with its mount.
        mount_with_config.__on_session_ready__ = on_session_ready_of(mount)  # type: ignore[attr-defined]
        return mount_with_config

    async def find(
        self, module_id: str, source_hint: str | None = None, coordinator: Any = None
    ) -> Mount:
        """The module's own ``mount`` function (found once, then cached); its module may
        declare a config schema ([`schema_of`][amplifier_anyio.config_schema.schema_of])."""
        key = (module_id, source_hint)
        mount = self._cache.get(key)
        if mount is None:
            coordinator = coordinator or self.coordinator
            mount = self._find_imported(module_id, source_hint, coordinator)
            if mount is None:
                mount = await self._find(module_id, source_hint, coordinator)
                self._cache[key] = mount
                return mount
            self._cache[key] = mount
        await anyio.lowlevel.checkpoint()
        return mount

    @staticmethod
    def refresh() -> None:
        """Forget the process-wide index of entry points: the next load reads the
        installed distributions again.

        Rarely needed: the index is read again by itself when ``sys.path`` or the
        modification time of one of its entries changes (a distribution installed or
        removed). Call it after a change that leaves those alone, such as an
        ``entry_points.txt`` edited in place; it also clears the import system's caches
        (`importlib.invalidate_caches`).
        """
        global _index  # noqa: PLW0603 - the one process-wide index
        with _index_lock:
            _index = None
        importlib.invalidate_caches()

    def _find_imported(
        self, module_id: str, source_hint: str | None, coordinator: Any
    ) -> Mount | None:
        """The module's mount when no file needs reading: no resolver, no source, a fresh
        entry-point index naming it, and its module imported already; else None."""
        if source_hint is not None:
            return None
        if coordinator is not None and coordinator.get("module-source-resolver") is not None:
            return None
        index = _index
        if index is None:
            return None
        if index is not self._fresh:
            # The paths are checked once per loader (a session opens with one): a stat of
            # every sys.path entry is most of what finding an imported module costs.
            if index.state != _path_state():
                return None
            self._fresh = index
        entry = index.by_name.get(module_id)
        if entry is None or not _imported(entry.entry_point.module):
            return None
        mount = _load_entry_point(module_id, entry)
        self._found(module_id, source_hint, entry.origin, list(entry.notes))
        return mount

    def share_found(self, other: ModuleLoader) -> None:
        """Start from what ``other`` has found (a sub-agent's loader, from its parent's:
        the same ids find the same code, with no second search or import)."""
        self._cache.update(other._cache)
        self._origins.update(other._origins)
        self._warnings.update(other._warnings)

    def cleanup(self) -> None:
        """Remove the ``sys.path`` entries this loader added."""
        while self._added_paths:
            path = self._added_paths.pop()
            if path in sys.path:
                sys.path.remove(path)

    async def _find(self, module_id: str, source_hint: str | None, coordinator: Any) -> Mount:
        tried: list[str] = []
        resolver = coordinator.get("module-source-resolver") if coordinator is not None else None
        resolved = None
        if resolver is not None:
            resolved = await self._resolve(resolver, module_id, source_hint, tried)
        source_path: Path | None = None
        if resolved is None and source_hint is not None and is_git_source(source_hint):
            try:
                source_path = await fetch_git_source(source_hint, self.cache_dir)
            except ModuleLoadError as exc:
                tried.append(f"source {source_hint!r}: {exc.reason}")
        notes: list[str] = []
        # Everything below reads the file system or imports: one trip to a worker thread.
        mount, origin = await anyio.to_thread.run_sync(
            partial(self._find_sync, module_id, source_hint, resolved, source_path, tried, notes)
        )
        self._found(module_id, source_hint, origin, notes)
        return mount

    def _found(
        self, module_id: str, source_hint: str | None, origin: str, notes: list[str]
    ) -> None:
        key = (module_id, source_hint)
        self._origins[key] = origin
        self._warnings[key] = notes
        for note in notes:
            logger.warning("module %r: %s", module_id, note)

    async def _resolve(
        self, resolver: Any, module_id: str, source_hint: str | None, tried: list[str]
    ) -> Path | None:
        """Ask the mounted resolver; a synchronous one runs in a worker thread (it reads
        the file system, or even fetches)."""
        try:
            resolve_async = getattr(resolver, "async_resolve", None)
            if resolve_async is not None:
                source = await resolve_async(module_id, source_hint=source_hint, profile_hint=None)
                return Path(await anyio.to_thread.run_sync(source.resolve))
            return await anyio.to_thread.run_sync(
                partial(_resolve_sync, resolver, module_id, source_hint)
            )
        except (ModuleNotFoundError, builtins.ModuleNotFoundError, LookupError) as exc:
            tried.append(f"source resolver: {exc}")
            return None
        except Exception as exc:
            msg = f"the module source resolver failed: {type(exc).__name__}: {exc}"
            raise ModuleLoadError(module_id, msg) from exc

    def _find_sync(  # noqa: PLR0917 - private, called once through partial()
        self,
        module_id: str,
        source_hint: str | None,
        resolved: Path | None,
        source_path: Path | None,
        tried: list[str],
        notes: list[str],
    ) -> tuple[Mount, str]:
        if resolved is not None:
            mount, package = self._import_from(module_id, resolved)
            return mount, f"source resolver: {resolved} (package {package})"
        source_problem = None
        if source_hint is not None:
            path = source_path or Path(source_hint).expanduser()
            if path.is_dir():
                mount, package = self._import_from(module_id, path)
                where = f"{source_hint} ({path})" if source_path is not None else source_hint
                return mount, f"source {where} (package {package})"
            if source_path is None and not is_git_source(source_hint):
                tried.append(f"source {source_hint!r}: not a directory")
            source_problem = tried[-1]
        found = self._from_entry_point(module_id, tried, notes)
        if found is None:
            for path in self.search_paths:
                if (path / package_name(module_id)).is_dir():
                    mount, package = self._import_from(module_id, path)
                    found = mount, f"search path {path} (package {package})"
                    break
        if found is None:
            found = self._from_package(module_id, tried)
        if found is None:
            raise ModuleNotFoundError(module_id, tried)
        if source_problem is not None:
            notes.append(f"{source_problem}; using {found[1]} instead")
        return found

    def _from_entry_point(
        self, module_id: str, tried: list[str], notes: list[str]
    ) -> tuple[Mount, str] | None:
        entry = _entry_point_index().by_name.get(module_id)
        if entry is None:
            tried.append(f"entry point {module_id!r} in group {ENTRY_POINT_GROUP!r}: none")
            return None
        notes.extend(entry.notes)
        return _load_entry_point(module_id, entry), entry.origin

    def _from_package(self, module_id: str, tried: list[str]) -> tuple[Mount, str] | None:
        name = package_name(module_id)
        if importlib.util.find_spec(name) is None:
            tried.append(f"package {name!r}: not importable")
            return None
        return _import_mount(module_id, name), f"package {name} (sys.path)"

    def _import_from(self, module_id: str, path: Path) -> tuple[Mount, str]:
        """Import the module's package from ``path`` (the package itself or its parent)."""
        if (path / "__init__.py").is_file():
            root, name = path.parent, path.name
        else:
            root, name = path, package_name(module_id)
            if not (path / name).is_dir():
                candidates = sorted(p.name for p in path.glob("amplifier_module_*") if p.is_dir())
                if len(candidates) != 1:
                    raise ModuleLoadError(module_id, f"{path} holds no package {name!r}")
                name = candidates[0]
        root_text = str(root.resolve())
        if root_text not in sys.path:
            sys.path.insert(0, root_text)
            self._added_paths.append(root_text)
        return _import_mount(module_id, name), name


# -- the process-wide entry-point index ----------------------------------------------------


@attrs.frozen
class _Entry:
    """The entry point a module id resolves to, described once."""

    entry_point: EntryPoint
    origin: str
    notes: tuple[str, ...]
    """A warning when more than one entry point has the name (the first is used)."""


@attrs.frozen
class _Index:
    """The group's entry points by name, and the state of the paths they were read from."""

    state: tuple[object, ...]
    by_name: dict[str, _Entry]


_index: _Index | None = None
_index_lock = threading.Lock()  # one scan at a time (event loops in several threads)


def _path_state() -> tuple[object, ...]:
    """What the installed distributions seen by ``importlib.metadata`` depend on:
    ``sys.path``, each entry's modification time (the key of its own directory cache),
    the working directory for relative entries, and the finders on ``sys.meta_path``."""
    state: list[object] = [tuple(map(id, sys.meta_path))]
    relative = False
    for entry in sys.path:
        relative = relative or not os.path.isabs(entry)
        try:
            stat = os.stat(entry or ".")
        except (OSError, ValueError):
            state.append((entry, None))
        else:
            state.append((entry, stat.st_mtime_ns, stat.st_ino))
    if relative:
        state.append(os.getcwd())
    return tuple(state)


def _entry_point_index() -> _Index:
    """The current index, scanning the distributions if the paths changed (blocking: a
    worker thread's work)."""
    global _index  # noqa: PLW0603 - the one process-wide index
    state = _path_state()
    index = _index
    if index is not None and index.state == state:
        return index
    with _index_lock:
        index = _index
        if index is None or index.state != state:
            # The state is taken before the scan: a change during it makes the next
            # look-up scan again rather than keep a stale index.
            index = _Index(state, _scan_entry_points())
            _index = index
    return index


def _scan_entry_points() -> dict[str, _Entry]:
    import importlib.metadata  # noqa: PLC0415 - ~20 ms of `import amplifier_anyio`

    found: dict[str, dict[tuple[str, str], tuple[EntryPoint, str]]] = {}
    labels: dict[int, str] = {}
    for entry_point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        label = _dist_label(entry_point, labels)
        unique = found.setdefault(entry_point.name, {})
        unique.setdefault((entry_point.value, label), (entry_point, label))
    by_name = {}
    for name, unique in found.items():
        candidates = [_describe_entry_point(ep, label) for ep, label in unique.values()]
        notes: tuple[str, ...] = ()
        if len(candidates) > 1:
            notes = (
                f"{len(candidates)} entry points named {name!r}: {' and '.join(candidates)}; "
                f"using the first, {candidates[0]}",
            )
        first = next(iter(unique.values()))[0]
        by_name[name] = _Entry(entry_point=first, origin=candidates[0], notes=notes)
    return by_name


def _imported(module: str) -> bool:
    """Whether importing ``module`` reads no file: it is imported and not being imported."""
    found = sys.modules.get(module)
    spec = getattr(found, "__spec__", None)
    return found is not None and not getattr(spec, "_initializing", False)


def _load_entry_point(module_id: str, entry: _Entry) -> Mount:
    try:
        return _checked(module_id, entry.entry_point.load())
    except ModuleLoadError:
        raise
    except Exception as exc:
        msg = f"entry point {entry.entry_point.value}: {exc}"
        raise ModuleLoadError(module_id, msg) from exc


def _dist_label(entry_point: EntryPoint, labels: dict[int, str]) -> str:
    dist = getattr(entry_point, "dist", None)
    if dist is None:
        return "unknown distribution"
    label = labels.get(id(dist))
    if label is None:  # reading the metadata file once per distribution
        label = labels[id(dist)] = f"{dist.metadata['Name']} {dist.version}"
    return label


def _describe_entry_point(entry_point: EntryPoint, label: str) -> str:
    return f"entry point {entry_point.name!r} = {entry_point.value} ({label})"


def _resolve_sync(resolver: Any, module_id: str, source_hint: str | None) -> Path:
    source = resolver.resolve(module_id, source_hint=source_hint, profile_hint=None)
    return Path(source.resolve())


def _import_mount(module_id: str, package: str) -> Mount:
    try:
        module = importlib.import_module(package)
    except Exception as exc:
        raise ModuleLoadError(
            module_id, f"importing {package}: {type(exc).__name__}: {exc}"
        ) from exc
    return _checked(module_id, getattr(module, "mount", None))


def _checked(module_id: str, mount: Any) -> Mount:
    if mount is None:
        raise ModuleLoadError(module_id, "it has no mount() function")
    if not callable(mount):
        raise ModuleLoadError(module_id, f"mount is a {type(mount).__name__}, not a function")
    return mount  # type: ignore[no-any-return]
