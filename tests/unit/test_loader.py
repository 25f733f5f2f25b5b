"""ModuleLoader: resolver, entry points, source directories and sys.path; errors; caching.

Every module here is written to a temporary directory by the test. Entry points come from a
real ``*.dist-info`` directory (``entry_points.txt``, group ``amplifier.modules``) on
``sys.path``, so ``importlib.metadata`` finds them as it finds installed packages. The
``sandbox`` fixture restores ``sys.path`` and forgets the imported test packages after each
test.
"""

from __future__ import annotations

import builtins
import importlib
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from amplifier_anyio import AmplifierSession, ModuleLoader
from amplifier_anyio.errors import AmplifierError, ModuleLoadError, ModuleNotFoundError
from amplifier_anyio.kernel import ENTRY_POINT_GROUP, ModuleCoordinator, package_name

pytestmark = pytest.mark.anyio

MODULE_BODY = """
IMPORTS = globals().get("IMPORTS", 0) + 1


async def mount(coordinator, config):
    return ({label!r}, config)
"""


class Sandbox:
    """Writes module packages and entry points under ``root`` with names unique to one test."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.tag = uuid.uuid4().hex[:8]
        self.module_id = f"probe-{self.tag}"
        self.package = package_name(self.module_id)

    def directory(self, name: str) -> Path:
        path = self.root / name
        path.mkdir(exist_ok=True)
        return path

    def write_package(
        self, where: Path, label: str, *, name: str | None = None, body: str = ""
    ) -> Path:
        package = where / (name or self.package)
        package.mkdir()
        (package / "__init__.py").write_text(
            body or MODULE_BODY.format(label=label), encoding="utf-8"
        )
        importlib.invalidate_caches()
        return package

    def add_entry_point(self, target: str) -> Path:
        """A distribution on sys.path whose entry point ``<module_id> = target``."""
        site = self.directory("site")
        dist_info = site / f"amp_probe_{self.tag}-1.0.dist-info"
        dist_info.mkdir()
        (dist_info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: amp-probe-{self.tag}\nVersion: 1.0\n", encoding="utf-8"
        )
        (dist_info / "entry_points.txt").write_text(
            f"[{ENTRY_POINT_GROUP}]\n{self.module_id} = {target}\n", encoding="utf-8"
        )
        sys.path.append(str(site))
        importlib.invalidate_caches()
        return site


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[Sandbox]:
    path_before = list(sys.path)
    modules_before = set(sys.modules)
    box = Sandbox(tmp_path)
    yield box
    sys.path[:] = path_before
    for name in set(sys.modules) - modules_before:
        if box.tag in name:
            del sys.modules[name]
    importlib.invalidate_caches()


class Source:
    def __init__(self, path: Path) -> None:
        self.path = path

    def resolve(self) -> Path:
        return self.path


class Resolver:
    """A module-source resolver that knows one directory, or refuses with ``refusal``."""

    def __init__(self, path: Path | None = None, refusal: BaseException | None = None) -> None:
        self.path = path
        self.refusal = refusal
        self.asked: list[tuple[str, Any]] = []

    def resolve(self, module_id: str, source_hint: Any = None, profile_hint: Any = None) -> Source:
        self.asked.append((module_id, source_hint))
        if self.refusal is not None:
            raise self.refusal
        assert self.path is not None
        return Source(self.path)


class AsyncResolver(Resolver):
    async def async_resolve(
        self, module_id: str, source_hint: Any = None, profile_hint: Any = None
    ) -> Source:
        await anyio.lowlevel.checkpoint()
        return self.resolve(module_id, source_hint, profile_hint)


async def with_resolver(resolver: Resolver) -> ModuleCoordinator:
    coordinator = ModuleCoordinator()
    await coordinator.mount("module-source-resolver", resolver)
    return coordinator


# -- where modules come from -----------------------------------------------------------------


async def test_an_entry_point_is_loaded(sandbox: Sandbox) -> None:
    site = sandbox.add_entry_point(f"ep_{sandbox.tag}:mount")
    sandbox.write_package(site, "entry point", name=f"ep_{sandbox.tag}")
    loader = ModuleLoader()

    mount = await loader.load(sandbox.module_id, {"model": "m"})

    assert await mount(None) == ("entry point", {"model": "m"})


async def test_an_entry_point_wins_over_a_package_of_the_same_id(sandbox: Sandbox) -> None:
    site = sandbox.add_entry_point(f"ep_{sandbox.tag}:mount")
    sandbox.write_package(site, "entry point", name=f"ep_{sandbox.tag}")
    modules = sandbox.directory("modules")
    sandbox.write_package(modules, "on sys.path")
    sys.path.append(str(modules))

    mount = await ModuleLoader().load(sandbox.module_id)

    assert await mount(None) == ("entry point", {})


async def test_an_explicit_source_wins_over_an_entry_point_of_the_same_id(
    sandbox: Sandbox,
) -> None:
    site = sandbox.add_entry_point(f"ep_{sandbox.tag}:mount")
    sandbox.write_package(site, "entry point", name=f"ep_{sandbox.tag}")
    modules = sandbox.directory("modules")
    sandbox.write_package(modules, "source dir")
    loader = ModuleLoader()

    mount = await loader.load(sandbox.module_id, source_hint=str(modules))

    assert await mount(None) == ("source dir", {})
    assert loader.origin_of(sandbox.module_id, str(modules)) == (
        f"source {modules} (package {sandbox.package})"
    )


async def test_the_built_in_modules_are_entry_points() -> None:
    coordinator = ModuleCoordinator()
    mount = await ModuleLoader().load("tool-demo", {"delay": 0})

    assert await mount(coordinator) is None
    assert sorted(coordinator.get("tools")) == ["reverse_words", "word_count"]


@pytest.mark.parametrize("point_at", ["parent", "package"])
async def test_a_source_directory_holding_the_package(sandbox: Sandbox, point_at: str) -> None:
    modules = sandbox.directory("modules")
    package = sandbox.write_package(modules, "source dir")
    source = modules if point_at == "parent" else package
    loader = ModuleLoader()

    mount = await loader.load(sandbox.module_id, {"a": 1}, source_hint=str(source))

    assert await mount(None) == ("source dir", {"a": 1})
    assert str(modules.resolve()) in sys.path
    loader.cleanup()
    assert str(modules.resolve()) not in sys.path


async def test_a_package_importable_from_sys_path(sandbox: Sandbox) -> None:
    where = sandbox.directory("on-path")
    sandbox.write_package(where, "sys.path")
    sys.path.insert(0, str(where))
    importlib.invalidate_caches()

    mount = await ModuleLoader().load(sandbox.module_id)

    assert await mount(None) == ("sys.path", {})


async def test_a_search_path_given_to_the_loader(sandbox: Sandbox) -> None:
    where = sandbox.directory("search")
    sandbox.write_package(where, "search path")
    loader = ModuleLoader(search_paths=[where])

    mount = await loader.load(sandbox.module_id)

    assert await mount(None) == ("search path", {})
    loader.cleanup()
    assert str(where.resolve()) not in sys.path


async def test_a_synchronous_mount_function_works(sandbox: Sandbox) -> None:
    modules = sandbox.directory("modules")
    sandbox.write_package(modules, "", body="def mount(coordinator, config):\n    return 'sync'\n")

    mount = await ModuleLoader().load(sandbox.module_id, source_hint=str(modules))

    assert await mount(None) == "sync"


# -- the resolver ----------------------------------------------------------------------------


@pytest.mark.parametrize("resolver_class", [Resolver, AsyncResolver])
async def test_a_mounted_resolver_wins_over_entry_point_and_filesystem(
    sandbox: Sandbox, resolver_class: type[Resolver]
) -> None:
    site = sandbox.add_entry_point(f"ep_{sandbox.tag}:mount")
    sandbox.write_package(site, "entry point", name=f"ep_{sandbox.tag}")
    on_path = sandbox.directory("on-path")
    sandbox.write_package(on_path, "sys.path")
    sys.path.append(str(on_path))
    resolved = sandbox.directory("resolved")
    sandbox.write_package(resolved, "resolver")
    resolver = resolver_class(resolved)
    loader = ModuleLoader(coordinator=await with_resolver(resolver))

    mount = await loader.load(sandbox.module_id, {"k": "v"}, source_hint="hint")

    assert await mount(None) == ("resolver", {"k": "v"})
    assert resolver.asked == [(sandbox.module_id, "hint")]


async def test_the_coordinator_given_to_load_supplies_the_resolver(sandbox: Sandbox) -> None:
    resolved = sandbox.directory("resolved")
    sandbox.write_package(resolved, "resolver")
    coordinator = await with_resolver(Resolver(resolved))

    mount = await ModuleLoader().load(sandbox.module_id, coordinator=coordinator)

    assert await mount(coordinator) == ("resolver", {})


@pytest.mark.parametrize(
    "refusal",
    [ModuleNotFoundError("x", ["resolver: unknown id"]), builtins.ModuleNotFoundError("no")],
    ids=["amplifier", "builtin"],
)
async def test_a_resolver_that_does_not_know_the_id_falls_back(
    sandbox: Sandbox, refusal: BaseException
) -> None:
    site = sandbox.add_entry_point(f"ep_{sandbox.tag}:mount")
    sandbox.write_package(site, "entry point", name=f"ep_{sandbox.tag}")
    resolver = Resolver(refusal=refusal)
    loader = ModuleLoader(coordinator=await with_resolver(resolver))

    mount = await loader.load(sandbox.module_id)

    assert await mount(None) == ("entry point", {})
    assert resolver.asked == [(sandbox.module_id, None)]


async def test_a_resolver_failing_otherwise_is_not_hidden(sandbox: Sandbox) -> None:
    loader = ModuleLoader(
        coordinator=await with_resolver(Resolver(refusal=PermissionError("cache locked")))
    )

    # One error type for a failed load, with the resolver's own error named and chained.
    with pytest.raises(ModuleLoadError, match="PermissionError: cache locked") as caught:
        await loader.load(sandbox.module_id)
    assert isinstance(caught.value.__cause__, PermissionError)


class ThreadRecordingResolver(Resolver):
    """A synchronous resolver that records which thread asked it."""

    def resolve(self, module_id: str, source_hint: Any = None, profile_hint: Any = None) -> Source:
        self.thread = threading.current_thread()
        return super().resolve(module_id, source_hint, profile_hint)


async def test_a_synchronous_resolver_runs_off_the_event_loop(sandbox: Sandbox) -> None:
    modules = sandbox.directory("resolved")
    sandbox.write_package(modules, "resolved")
    resolver = ThreadRecordingResolver(modules)
    loader = ModuleLoader(coordinator=await with_resolver(resolver))

    mount = await loader.load(sandbox.module_id)
    assert await mount(None) == ("resolved", {})
    loader.cleanup()

    # It may read the disk or fetch: never on the loop's own thread.
    assert resolver.thread is not threading.current_thread()


# -- errors ----------------------------------------------------------------------------------


async def test_not_found_says_what_was_tried(sandbox: Sandbox) -> None:
    missing = sandbox.root / "missing"
    refusal = ModuleNotFoundError(sandbox.module_id, ["not in the workspace"])
    loader = ModuleLoader(coordinator=await with_resolver(Resolver(refusal=refusal)))

    with pytest.raises(ModuleNotFoundError) as caught:
        await loader.load(sandbox.module_id, source_hint=str(missing))

    error = caught.value
    assert isinstance(error, AmplifierError)
    assert error.module_id == sandbox.module_id
    assert len(error.tried) == 4
    resolver, source, entry_point, package = error.tried
    assert resolver.startswith("source resolver: ")
    assert "not in the workspace" in resolver
    assert entry_point == f"entry point {sandbox.module_id!r} in group 'amplifier.modules': none"
    assert source == f"source {str(missing)!r}: not a directory"
    assert package == f"package {sandbox.package!r}: not importable"
    assert str(error).startswith(f"module {sandbox.module_id!r} not found (tried: ")
    assert all(attempt in str(error) for attempt in error.tried)


async def test_a_missing_dependency_is_a_load_error_not_not_found(sandbox: Sandbox) -> None:
    modules = sandbox.directory("modules")
    body = f"import dependency_{sandbox.tag}_absent\n\n\nasync def mount(c, config):\n    pass\n"
    sandbox.write_package(modules, "", body=body)

    with pytest.raises(ModuleLoadError) as caught:
        await ModuleLoader().load(sandbox.module_id, source_hint=str(modules))

    assert caught.value.module_id == sandbox.module_id
    assert f"importing {sandbox.package}: ModuleNotFoundError" in str(caught.value)
    assert f"dependency_{sandbox.tag}_absent" in str(caught.value)


async def test_an_import_error_is_a_load_error(sandbox: Sandbox) -> None:
    modules = sandbox.directory("modules")
    sandbox.write_package(modules, "", body="raise RuntimeError('broken at import')\n")

    with pytest.raises(ModuleLoadError, match="RuntimeError: broken at import"):
        await ModuleLoader().load(sandbox.module_id, source_hint=str(modules))


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ("VERSION = 1\n", "it has no mount() function"),
        ("mount = 'not callable'\n", "mount is a str, not a function"),
    ],
)
async def test_a_package_without_a_mount_function_is_a_load_error(
    sandbox: Sandbox, body: str, reason: str
) -> None:
    modules = sandbox.directory("modules")
    sandbox.write_package(modules, "", body=body)

    with pytest.raises(ModuleLoadError) as caught:
        await ModuleLoader().load(sandbox.module_id, source_hint=str(modules))

    assert str(caught.value) == f"module {sandbox.module_id!r} could not be loaded: {reason}"


async def test_a_broken_entry_point_is_a_load_error(sandbox: Sandbox) -> None:
    site = sandbox.add_entry_point(f"ep_{sandbox.tag}:no_such_function")
    sandbox.write_package(site, "entry point", name=f"ep_{sandbox.tag}")

    with pytest.raises(ModuleLoadError, match=f"entry point ep_{sandbox.tag}:no_such_function"):
        await ModuleLoader().load(sandbox.module_id)


# -- caching, config and cleanup -------------------------------------------------------------


async def test_config_is_bound_per_load_and_the_module_imported_once(sandbox: Sandbox) -> None:
    modules = sandbox.directory("modules")
    sandbox.write_package(modules, "cached")
    loader = ModuleLoader()
    first_config = {"name": "first"}

    first = await loader.load(sandbox.module_id, first_config, source_hint=str(modules))
    second = await loader.load(sandbox.module_id, {"name": "second"}, source_hint=str(modules))
    first_config["name"] = "changed after load"

    assert await first(None) == ("cached", {"name": "first"})
    assert await second(None) == ("cached", {"name": "second"})
    assert sys.modules[sandbox.package].IMPORTS == 1


async def test_cleanup_removes_only_the_sys_path_entries_it_added(sandbox: Sandbox) -> None:
    already = sandbox.directory("already")
    sandbox.write_package(already, "already", name=package_name(f"a-{sandbox.tag}"))
    added = sandbox.directory("added")
    sandbox.write_package(added, "added")
    sys.path.insert(0, str(already.resolve()))
    loader = ModuleLoader()

    await loader.load(f"a-{sandbox.tag}", source_hint=str(already))
    await loader.load(sandbox.module_id, source_hint=str(added))
    assert str(added.resolve()) in sys.path
    loader.cleanup()

    assert str(added.resolve()) not in sys.path
    assert str(already.resolve()) in sys.path
    loader.cleanup()  # twice is harmless


# -- the entry points are read once per process ------------------------------------------------


class CountingScans:
    """Counts the loader's reads of the installed distributions' entry points."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import importlib.metadata  # noqa: PLC0415 - what the loader calls

        self.calls = 0
        real = importlib.metadata.entry_points

        def counting(**selection: Any) -> Any:
            self.calls += 1
            return real(**selection)

        monkeypatch.setattr(importlib.metadata, "entry_points", counting)
        ModuleLoader.refresh()


@pytest.fixture
def scans(monkeypatch: pytest.MonkeyPatch) -> Iterator[CountingScans]:
    counter = CountingScans(monkeypatch)
    yield counter
    ModuleLoader.refresh()  # no index built under the patch outlives the test


async def test_a_second_session_in_the_process_does_not_scan_the_distributions(
    scans: CountingScans,
) -> None:
    plan = {
        "session": {"orchestrator": "loop-basic", "context": "context-simple"},
        "providers": [{"module": "provider-scripted", "config": {"responses": []}}],
    }
    async with AmplifierSession(plan):
        pass
    assert scans.calls == 1

    async with AmplifierSession(plan) as second:
        pass

    assert scans.calls == 1
    origin = second.loader.origin_of("provider-scripted") or ""
    assert origin.startswith("entry point 'provider-scripted' = amplifier_anyio.")


async def test_a_module_already_imported_is_found_without_a_worker_thread(
    scans: CountingScans, monkeypatch: pytest.MonkeyPatch
) -> None:
    await ModuleLoader().load("tool-demo")  # the index, and the import
    hops: list[Any] = []
    real = anyio.to_thread.run_sync

    async def counting(*args: Any, **kwargs: Any) -> Any:
        hops.append(args[0])
        return await real(*args, **kwargs)

    monkeypatch.setattr(anyio.to_thread, "run_sync", counting)

    mount = await ModuleLoader().load("tool-demo", {"delay": 0})

    assert hops == []
    coordinator = ModuleCoordinator()
    await mount(coordinator)
    assert sorted(coordinator.get("tools")) == ["reverse_words", "word_count"]


async def test_a_distribution_installed_later_is_found_without_a_refresh(
    sandbox: Sandbox, scans: CountingScans
) -> None:
    site = sandbox.add_entry_point(f"ep_{sandbox.tag}:mount")
    sandbox.write_package(site, "first", name=f"ep_{sandbox.tag}")
    await ModuleLoader().load(sandbox.module_id)
    later = f"later-{sandbox.tag}"
    with pytest.raises(ModuleNotFoundError):
        await ModuleLoader().load(later)
    scanned = scans.calls

    # Installed into a directory already on sys.path: sys.path itself does not change.
    dist_info = site / f"amp_later_{sandbox.tag}-1.0.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: amp-later-{sandbox.tag}\nVersion: 1.0\n", encoding="utf-8"
    )
    (dist_info / "entry_points.txt").write_text(
        f"[{ENTRY_POINT_GROUP}]\n{later} = ep_{sandbox.tag}:mount\n", encoding="utf-8"
    )
    mount = await ModuleLoader().load(later)

    assert await mount(None) == ("first", {})
    assert scans.calls == scanned + 1


async def test_a_directory_added_to_sys_path_is_read_without_a_refresh(
    sandbox: Sandbox, scans: CountingScans
) -> None:
    await ModuleLoader().load("tool-demo")  # the index, before the directory is on sys.path
    scanned = scans.calls
    sandbox.write_package(sandbox.directory("code"), "first", name=f"ep_{sandbox.tag}")
    sys.path.append(str(sandbox.root / "code"))

    site = sandbox.add_entry_point(f"ep_{sandbox.tag}:mount")  # a new sys.path entry
    mount = await ModuleLoader().load(sandbox.module_id)

    assert await mount(None) == ("first", {})
    assert scans.calls == scanned + 1
    assert str(site) in sys.path


async def test_one_loader_sees_a_distribution_installed_after_its_first_load(
    sandbox: Sandbox, scans: CountingScans
) -> None:
    # A loader checks the index's paths once (a session opening), then trusts it for the
    # modules it names: a name it does not know still makes it look again.
    loader = ModuleLoader()
    site = sandbox.add_entry_point(f"ep_{sandbox.tag}:mount")
    sandbox.write_package(site, "first", name=f"ep_{sandbox.tag}")
    await loader.load(sandbox.module_id)
    await loader.load("tool-demo")
    later = f"later-{sandbox.tag}"
    dist_info = site / f"amp_late_{sandbox.tag}-1.0.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: amp-late-{sandbox.tag}\nVersion: 1.0\n", encoding="utf-8"
    )
    (dist_info / "entry_points.txt").write_text(
        f"[{ENTRY_POINT_GROUP}]\n{later} = ep_{sandbox.tag}:mount\n", encoding="utf-8"
    )

    mount = await loader.load(later)

    assert await mount(None) == ("first", {})
    assert loader.origin_of(later) == (
        f"entry point {later!r} = ep_{sandbox.tag}:mount (amp-late-{sandbox.tag} 1.0)"
    )


async def test_refresh_reads_the_distributions_again(scans: CountingScans) -> None:
    await ModuleLoader().load("tool-demo")
    await ModuleLoader().load("tool-demo")
    assert scans.calls == 1

    ModuleLoader.refresh()
    await ModuleLoader().load("tool-demo")

    assert scans.calls == 2


async def test_two_entry_points_of_one_name_are_reported_to_every_loader(
    sandbox: Sandbox, scans: CountingScans
) -> None:
    site = sandbox.add_entry_point(f"ep_{sandbox.tag}:mount")
    sandbox.write_package(site, "first", name=f"ep_{sandbox.tag}")
    other = sandbox.directory("other-site")
    dist_info = other / f"amp_other_{sandbox.tag}-2.0.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: amp-other-{sandbox.tag}\nVersion: 2.0\n", encoding="utf-8"
    )
    (dist_info / "entry_points.txt").write_text(
        f"[{ENTRY_POINT_GROUP}]\n{sandbox.module_id} = elsewhere_{sandbox.tag}:mount\n",
        encoding="utf-8",
    )
    sys.path.append(str(other))

    first, second = ModuleLoader(), ModuleLoader()
    await first.load(sandbox.module_id)
    await second.load(sandbox.module_id)  # from the index, the module imported already

    assert scans.calls == 1
    for loader in (first, second):
        [warning] = loader.warnings_of(sandbox.module_id)
        assert f"2 entry points named {sandbox.module_id!r}" in warning
        assert loader.origin_of(sandbox.module_id) == (
            f"entry point {sandbox.module_id!r} = ep_{sandbox.tag}:mount "
            f"(amp-probe-{sandbox.tag} 1.0)"
        )
