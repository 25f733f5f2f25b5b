"""Finding a module's ``mount`` function by its id.

Lookup order, as upstream: a source resolver mounted at ``module-source-resolver``; then
the entry points of group ``amplifier.modules``; then a package ``amplifier_module_<id>``
(dashes become underscores) importable from ``sys.path`` or from the plan's ``source``
directory. Imports run in a worker thread: they read files.
"""

from __future__ import annotations

import builtins
import importlib
import importlib.metadata
import importlib.util
import inspect
import logging
import sys
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

import anyio

from ..errors import ModuleLoadError, ModuleNotFoundError

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
        module = sys.modules.get(getattr(mount, "__module__", None) or "")
        ready = getattr(module, "on_session_ready", None)
    return ready if callable(ready) else None


class ModuleLoader:
    """Loads modules for a coordinator; :meth:`cleanup` undoes its ``sys.path`` changes."""

    def __init__(
        self, coordinator: Any = None, search_paths: list[str | Path] | None = None
    ) -> None:
        self.coordinator = coordinator
        self.search_paths = [Path(p) for p in search_paths or ()]
        self._added_paths: list[str] = []
        self._cache: dict[tuple[str, str | None], Mount] = {}

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
        declare a config schema (:func:`~amplifier_anyio.config_schema.schema_of`)."""
        key = (module_id, source_hint)
        mount = self._cache.get(key)
        if mount is None:
            mount = await self._find(module_id, source_hint, coordinator or self.coordinator)
            self._cache[key] = mount
        else:
            await anyio.lowlevel.checkpoint()
        return mount

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
        # Everything below reads the file system or imports: one trip to a worker thread.
        return await anyio.to_thread.run_sync(
            partial(self._find_sync, module_id, source_hint, resolved, tried)
        )

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

    def _find_sync(
        self, module_id: str, source_hint: str | None, resolved: Path | None, tried: list[str]
    ) -> Mount:
        if resolved is not None:
            return self._import_from(module_id, resolved)
        mount = self._from_entry_point(module_id, tried)
        if mount is not None:
            return mount
        if source_hint is not None:
            path = Path(source_hint).expanduser()
            if path.is_dir():
                return self._import_from(module_id, path)
            tried.append(f"source {source_hint!r}: not a directory")
        for path in self.search_paths:
            if (path / package_name(module_id)).is_dir():
                return self._import_from(module_id, path)
        mount = self._from_package(module_id, tried)
        if mount is not None:
            return mount
        raise ModuleNotFoundError(module_id, tried)

    def _from_entry_point(self, module_id: str, tried: list[str]) -> Mount | None:
        found = importlib.metadata.entry_points(group=ENTRY_POINT_GROUP).select(name=module_id)
        for entry_point in found:
            try:
                return _checked(module_id, entry_point.load())
            except ModuleLoadError:
                raise
            except Exception as exc:
                raise ModuleLoadError(module_id, f"entry point {entry_point.value}: {exc}") from exc
        tried.append(f"entry point {module_id!r} in group {ENTRY_POINT_GROUP!r}: none")
        return None

    def _from_package(self, module_id: str, tried: list[str]) -> Mount | None:
        name = package_name(module_id)
        if importlib.util.find_spec(name) is None:
            tried.append(f"package {name!r}: not importable")
            return None
        return _import_mount(module_id, name)

    def _import_from(self, module_id: str, path: Path) -> Mount:
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
        return _import_mount(module_id, name)


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
