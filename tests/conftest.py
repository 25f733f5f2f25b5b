"""Shared fixtures: every async test runs on asyncio and on trio.

The tiers (tests/tiers.py, docs/contributing.md): ``pytest`` deselects the tests marked
``slow`` and loads the Hypothesis profile ``dev``; ``pytest --full`` runs every test under
the profile ``ci``. ``-m`` (``pytest -m slow``) or a test named by its node id selects
without the tier; ``HYPOTHESIS_PROFILE`` or ``--hypothesis-profile`` picks the profile.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Generator
from pathlib import Path

import pytest
from hypothesis import settings
from trio.testing import MockClock

from tiers import register_profiles

register_profiles()

DESELECTED = pytest.StashKey[int]()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--full",
        action="store_true",
        help="the full tier: also the tests marked slow, Hypothesis at the ci profile",
    )


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--hypothesis-profile", None) is None:
        default = "ci" if config.getoption("--full") else "dev"
        settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or default)


def named(config: pytest.Config) -> list[str]:
    """The node ids given on the command line (``tests/x.py::test_y[trio]``), from the root."""
    found = []
    for arg in config.args:
        path, sep, rest = arg.partition("::")
        if sep:
            where = (config.invocation_params.dir / path).resolve()
            if where.is_relative_to(config.rootpath):
                found.append(f"{where.relative_to(config.rootpath).as_posix()}::{rest}")
    return found


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The default tier: deselect ``slow`` unless ``--full``, ``-m`` or the test's node id."""
    if config.getoption("--full") or config.getoption("markexpr"):
        return
    ids = named(config)
    keep, slow = [], []
    for item in items:
        chosen = any(item.nodeid == i or item.nodeid.startswith((f"{i}::", f"{i}[")) for i in ids)
        (slow if item.get_closest_marker("slow") and not chosen else keep).append(item)
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = keep
    config.stash[DESELECTED] = len(slow)
    if hasattr(config, "workeroutput"):  # an xdist worker: its controller prints the summary
        config.workeroutput["deselected"] = len(slow)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: object, error: object) -> None:
    """Under xdist (``-n auto``) every worker collects and deselects the same tests."""
    output = getattr(node, "workeroutput", {})
    config = getattr(node, "config", None)
    if config is not None and "deselected" in output:
        config.stash[DESELECTED] = output["deselected"]


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, config: pytest.Config
) -> None:
    deselected = config.stash.get(DESELECTED, 0)
    if deselected:
        tests = "test" if deselected == 1 else "tests"
        terminalreporter.write_line(
            f"the default tier: {deselected} slow {tests} deselected "
            "(pytest --full runs every test, pytest -m slow only those)"
        )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """In the default tier a test skipped for a missing package is a mistake: it would pass
    unseen on a lean install. Such a test carries ``tiers.needs(...)``."""
    report = yield
    if report.skipped and call.excinfo is not None and not item.get_closest_marker("slow"):
        reason = str(call.excinfo.value)
        if "could not import" in reason or "test-full" in reason:
            report.outcome = "failed"
            report.longrepr = (
                f"skipped for a missing package in the default tier ({reason}); "
                "mark it with tiers.needs(...) or add the package to the test extra"
            )
    return report


@pytest.fixture(
    scope="module",
    params=[
        pytest.param(("asyncio", {"debug": True}), id="asyncio"),
        pytest.param(("trio", {}), id="trio"),
    ],
)
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, object]]:
    """Module-scoped so that ``@given`` tests can run under it (hypothesis health check)."""
    return request.param  # type: ignore[no-any-return]


@pytest.fixture(params=["asyncio", "trio-autojump"])
def virtual_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, object]]:
    """asyncio with real time, or trio with a fresh autojump MockClock (virtual time).

    Use as ``anyio_backend`` override in timing tests: ``def anyio_backend(virtual_backend)``.
    """
    if request.param == "asyncio":
        return ("asyncio", {})
    return ("trio", {"clock": MockClock(autojump_threshold=0)})


# A module that imports a package of the test-full extra at its top cannot even be
# collected on a lean install; its tests carry tiers.needs(...) (the full tier), and here
# it is left out of collection where that package is missing.
# Every module of tests/temporal needs temporalio (a new one is left out without a list to
# keep in step: one that was not broke the lean install's collection).
_TEMPORAL = sorted(
    str(path.relative_to(Path(__file__).parent))
    for path in (Path(__file__).parent / "temporal").glob("test_*.py")
)
collect_ignore = [
    path
    for path, package in (
        ("integration/test_mcp_tasks.py", "mcp_types"),
        *((module, "temporalio") for module in _TEMPORAL),
    )
    if importlib.util.find_spec(package) is None
]
