"""Upstream plans as written: ``${VAR}``, ``includes``, ``agents``, explicit sources before
entry points, duplicate entry points, ``git+`` sources, and what ``validate`` reports.

Modules are packages written to a temporary directory; entry points come from a real
``*.dist-info`` on ``sys.path``; git sources are a bare repository the test makes with the
``git`` command (``git+file://``), so nothing touches the network.
"""

from __future__ import annotations

import importlib
import logging
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from amplifier_anyio import AmplifierSession, ModuleLoader
from amplifier_anyio.errors import ConfigError, ModuleNotFoundError
from amplifier_anyio.kernel import ENTRY_POINT_GROUP, MountPlan
from amplifier_anyio.kernel._sources import GitSource
from amplifier_anyio.session import validate_plan

pytestmark = pytest.mark.anyio

BASE = {"session": {"orchestrator": "loop-basic", "context": "context-simple"}}

CONTEXT_BODY = '''
"""A context module of our own, named like the built-in one."""

from amplifier_anyio.contexts.simple import SimpleContextManager


class MarkedContext(SimpleContextManager):
    marker = {label!r}


async def mount(coordinator, config):
    await coordinator.mount("context", MarkedContext())
'''


class Place:
    """Packages and distributions under one temporary root, names unique to the test."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.tag = uuid.uuid4().hex[:8]

    def package(self, where: Path, name: str, body: str) -> Path:
        package = where / name
        package.mkdir(parents=True)
        (package / "__init__.py").write_text(body, encoding="utf-8")
        importlib.invalidate_caches()
        return package

    def distribution(self, dist: str, entry_points: dict[str, str]) -> Path:
        site = self.root / f"site-{dist}"
        site.mkdir()
        info = site / f"{dist}_{self.tag}-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {dist}-{self.tag}\nVersion: 1.0\n", encoding="utf-8"
        )
        lines = "\n".join(f"{name} = {target}" for name, target in entry_points.items())
        (info / "entry_points.txt").write_text(
            f"[{ENTRY_POINT_GROUP}]\n{lines}\n", encoding="utf-8"
        )
        sys.path.append(str(site))
        importlib.invalidate_caches()
        return site


@pytest.fixture
def place(tmp_path: Path) -> Iterator[Place]:
    path_before = list(sys.path)
    modules_before = set(sys.modules)
    box = Place(tmp_path)
    yield box
    sys.path[:] = path_before
    for name in set(sys.modules) - modules_before:
        if box.tag in name:
            del sys.modules[name]
    importlib.invalidate_caches()


# -- ${VAR}, includes, agents ----------------------------------------------------------------


def test_variables_are_expanded_in_plan_values(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROBE_MODEL", "gpt-probe")
    monkeypatch.delenv("PROBE_UNSET", raising=False)
    plan = MountPlan.from_dict(
        {
            "session": {"orchestrator": "loop-basic", "context": "context-simple"},
            "providers": [
                {
                    "module": "provider-scripted",
                    "config": {
                        "model": "${PROBE_MODEL}",
                        "url": "http://${PROBE_UNSET:localhost}:${PROBE_UNSET:8080}/v1",
                        "nested": [{"key": "${PROBE_MODEL}-x"}],
                        "empty_default": "${PROBE_UNSET:}",
                    },
                }
            ],
        }
    )

    assert plan.providers[0].config == {
        "model": "gpt-probe",
        "url": "http://localhost:8080/v1",
        "nested": [{"key": "gpt-probe-x"}],
        "empty_default": "",
    }


def test_an_unset_variable_without_default_names_the_field(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("PROBE_UNSET", raising=False)
    plan = {**BASE, "providers": [{"module": "p", "config": {"api_key": "${PROBE_UNSET}"}}]}

    with pytest.raises(ConfigError) as caught:
        MountPlan.from_dict(plan)

    assert str(caught.value) == (
        "providers[0].config.api_key: environment variable PROBE_UNSET is not set"
    )


async def test_an_optional_entry_with_an_unset_variable_is_left_out_with_a_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv("PROBE_UNSET", raising=False)
    plan = {
        **BASE,
        "providers": [
            {"module": "provider-scripted", "config": {"responses": []}},
            {
                "module": "provider-openai",
                "optional": True,
                "config": {"api_key": "${PROBE_UNSET}"},
            },
        ],
    }

    report = await validate_plan(plan)
    async with AmplifierSession(plan) as session:
        mounted = sorted(session.coordinator.get("providers"))

    assert report.ok
    assert any("PROBE_UNSET is not set" in w for w in report.warnings)
    assert mounted == ["scripted"]
    assert "providers[1].config.api_key: environment variable PROBE_UNSET" in caplog.text


@pytest.mark.parametrize("agents", ["all", ["reviewer", "coder"], {"r": {"x": "${NOT_EXPANDED}"}}])
def test_agents_pass_through_untouched(agents: Any) -> None:
    plan = MountPlan.from_dict({**BASE, "agents": agents})

    assert plan.agents == agents
    assert plan.to_dict()["agents"] == agents


async def test_an_include_that_cannot_be_resolved_is_reported_not_dropped() -> None:
    # Includes are resolved now (docs/upstream.md); one that cannot be is still never
    # dropped silently: a warning, an error when strict. (An unknown name: no network.)
    plan = {**BASE, "includes": ["bundle:x"]}

    relaxed = await validate_plan(plan)
    strict = await validate_plan(plan, strict=True)

    assert relaxed.ok
    assert any("includes: 'bundle:x' skipped" in w for w in relaxed.warnings)
    assert not strict.ok
    assert any("includes: 'bundle:x' skipped" in e for e in strict.errors)
    assert MountPlan.from_dict(plan).includes == ("bundle:x",)


async def test_a_strict_session_refuses_an_unresolved_include_and_a_relaxed_one_warns(
    caplog: pytest.LogCaptureFixture,
) -> None:
    plan = {
        **BASE,
        "providers": [{"module": "provider-scripted", "config": {"responses": []}}],
        "includes": ["bundle:x"],
    }

    with pytest.raises(ConfigError, match="includes: 'bundle:x' skipped"):
        async with AmplifierSession(plan, strict=True):
            pass
    async with AmplifierSession(plan):
        pass
    assert "includes: 'bundle:x' skipped" in caplog.text


# -- where modules come from -----------------------------------------------------------------


async def test_an_explicit_source_mounts_that_code_not_the_built_in(place: Place) -> None:
    modules = place.root / "mine"
    place.package(modules, "amplifier_module_context_simple", CONTEXT_BODY.format(label="mine"))
    plan = {
        "session": {
            "orchestrator": "loop-basic",
            "context": {"module": "context-simple", "source": str(modules)},
        }
    }

    async with AmplifierSession(plan) as session:
        context = session.coordinator.get("context")
        assert getattr(context, "marker", None) == "mine"
    sys.modules.pop("amplifier_module_context_simple", None)

    report = await validate_plan(plan)
    assert f"context 'context-simple': source {modules}" in "\n".join(report.modules)
    sys.modules.pop("amplifier_module_context_simple", None)


async def test_two_entry_points_of_one_name_are_a_warning_naming_both(
    place: Place, caplog: pytest.LogCaptureFixture
) -> None:
    module_id = f"dup-{place.tag}"
    first = place.distribution("first", {module_id: f"first_{place.tag}:mount"})
    place.package(first, f"first_{place.tag}", "async def mount(c, config):\n    return 'first'\n")
    second = place.distribution("second", {module_id: f"second_{place.tag}:mount"})
    place.package(second, f"second_{place.tag}", "async def mount(c, config):\n    return 'x'\n")
    loader = ModuleLoader()

    with caplog.at_level(logging.WARNING):
        mount = await loader.load(module_id)

    assert await mount(None) == "first"
    [warning] = loader.warnings_of(module_id)
    assert f"2 entry points named {module_id!r}" in warning
    assert f"first_{place.tag}:mount (first-{place.tag} 1.0)" in warning
    assert f"second_{place.tag}:mount (second-{place.tag} 1.0)" in warning
    assert warning in caplog.text


async def test_validate_names_origin_and_warns_of_duplicates(place: Place) -> None:
    module_id = f"dup-{place.tag}"
    body = "async def mount(c, config):\n    return None\n"
    for dist in ("first", "second"):
        site = place.distribution(dist, {module_id: f"{dist}_{place.tag}:mount"})
        place.package(site, f"{dist}_{place.tag}", body)
    plan = {**BASE, "tools": [{"module": module_id}]}

    report = await validate_plan(plan)

    assert report.ok
    assert report.modules[0].startswith(
        "orchestrator 'loop-basic': entry point 'loop-basic' = "
        "amplifier_anyio.orchestrators.loop_basic:mount"
    )
    assert report.modules[2].startswith(
        f"tool {module_id!r}: entry point {module_id!r} = first_{place.tag}:mount"
    )
    assert any(f"2 entry points named {module_id!r}" in w for w in report.warnings)


async def test_an_unusable_source_is_a_warning_before_the_fallback(place: Place) -> None:
    missing = place.root / "missing"
    loader = ModuleLoader()

    await loader.load("tool-demo", source_hint=str(missing))

    [warning] = loader.warnings_of("tool-demo", str(missing))
    assert warning.startswith(f"source {str(missing)!r}: not a directory; using entry point")


# -- git sources -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "git+https://github.com/microsoft/amplifier-module-x@main",
            GitSource(url="https://github.com/microsoft/amplifier-module-x", ref="main"),
        ),
        (
            "git+https://host/r.git@v1.2#subdirectory=modules/tool",
            GitSource(url="https://host/r.git", ref="v1.2", subdirectory="modules/tool"),
        ),
        ("git+ssh://git@host/r.git", GitSource(url="ssh://git@host/r.git")),
        ("git+file:///srv/r.git@abc123", GitSource(url="file:///srv/r.git", ref="abc123")),
    ],
)
def test_git_sources_parse(text: str, expected: GitSource) -> None:
    assert GitSource.parse(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "https://host/r",
        "git+nothing",
        "git+https://h/r#subdirectory=../up",
        "git+https://h/r@--upload-pack=evil",
    ],
)
def test_bad_git_sources_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="git"):
        GitSource.parse(text)


def git(*args: str, cwd: Path | None = None) -> None:
    subprocess.run(
        ["git", "-c", "init.defaultBranch=main", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        env={
            "GIT_AUTHOR_NAME": "t",
            "GIT_AUTHOR_EMAIL": "t@example.invalid",
            "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@example.invalid",
            "HOME": str(cwd or Path.cwd()),
            "PATH": "/usr/bin:/bin:/usr/local/bin",
        },
    )


@pytest.fixture
def bare_repo(place: Place) -> Path:
    """A bare repository with tag v1 (a module answering 'v1') and main ('v2'), the
    package under ``modules/``."""
    if shutil.which("git") is None:
        pytest.skip("the git command is not installed on this machine")
    work = place.root / "work"
    work.mkdir()
    git("init", "-q", cwd=work)
    package = f"amplifier_module_git_{place.tag}"
    for version in ("v1", "v2"):
        target = work / "modules" / package
        target.mkdir(parents=True, exist_ok=True)
        (target / "__init__.py").write_text(
            f"async def mount(coordinator, config):\n    return {version!r}\n", encoding="utf-8"
        )
        git("add", "-A", cwd=work)
        git("commit", "-q", "-m", version, cwd=work)
        if version == "v1":
            git("tag", "v1", cwd=work)
    bare = place.root / "repo.git"
    git("clone", "-q", "--bare", str(work), str(bare))
    return bare


async def test_a_git_source_is_cloned_once_into_the_cache(place: Place, bare_repo: Path) -> None:
    module_id = f"git-{place.tag}"
    cache = place.root / "cache"
    source = f"git+file://{bare_repo}@v1#subdirectory=modules"

    loader = ModuleLoader(cache_dir=cache)
    mount = await loader.load(module_id, source_hint=source)

    assert await mount(None) == "v1"
    assert loader.origin_of(module_id, source).startswith(f"source {source} ({cache}")
    [clone] = list(cache.iterdir())
    assert clone.name == GitSource.parse(source).key
    loader.cleanup()
    sys.modules.pop(f"amplifier_module_git_{place.tag}", None)

    shutil.rmtree(bare_repo)  # a second load needs no repository: the cache has it
    again = ModuleLoader(cache_dir=cache)
    assert await (await again.load(module_id, source_hint=source))(None) == "v1"
    again.cleanup()
    sys.modules.pop(f"amplifier_module_git_{place.tag}", None)


async def test_git_refs_are_cached_apart(place: Place, bare_repo: Path) -> None:
    module_id = f"git-{place.tag}"
    cache = place.root / "cache"
    head = f"git+file://{bare_repo}#subdirectory=modules"

    loader = ModuleLoader(cache_dir=cache)
    assert await (await loader.load(module_id, source_hint=head))(None) == "v2"
    loader.cleanup()
    sys.modules.pop(f"amplifier_module_git_{place.tag}", None)

    assert len(list(cache.iterdir())) == 1
    tagged = ModuleLoader(cache_dir=cache)
    at_v1 = f"git+file://{bare_repo}@v1#subdirectory=modules"
    assert await (await tagged.load(module_id, source_hint=at_v1))(None) == "v1"
    tagged.cleanup()
    sys.modules.pop(f"amplifier_module_git_{place.tag}", None)
    assert len(list(cache.iterdir())) == 2


async def test_a_git_source_that_cannot_be_cloned_says_why(place: Place) -> None:
    if shutil.which("git") is None:
        pytest.skip("the git command is not installed on this machine")
    missing = place.root / "nowhere.git"
    loader = ModuleLoader(cache_dir=place.root / "cache")

    with pytest.raises(ModuleNotFoundError) as caught:
        await loader.load(f"git-{place.tag}", source_hint=f"git+file://{missing}")

    [source_attempt] = [t for t in caught.value.tried if t.startswith("source")]
    assert "git clone failed" in source_attempt
    assert not list((place.root / "cache").glob(".partial-*"))  # nothing half-cloned is kept
