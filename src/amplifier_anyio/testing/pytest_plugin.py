"""A pytest plugin, registered by installing amplifier_anyio: the Hypothesis settings the
strategies of `amplifier_anyio.testing.strategies` need, and the ``cassette`` fixture.

Whole conversations are large, rich examples; Hypothesis's default health checks take them
for a mistake (``too_slow``, ``data_too_large``, ``large_base_example``), so a module
author's first property would fail before it tested anything. The plugin registers the
profile ``amplifier-anyio`` (those checks suppressed, no deadline) and
``amplifier-anyio-ci`` (the same, derandomised, so CI runs are reproducible), and loads
the first one **only** when the project has not chosen a profile itself — a conftest that
loads its own profile wins, and ``-p no:amplifier_anyio`` turns the plugin off.

On a CI machine (``CI`` or a vendor's variable set) Hypothesis loads its built-in ``ci``
profile by itself; that is not the project's choice either, so the plugin loads
``amplifier-anyio-ci`` in its place (derandomised, as Hypothesis's own ``ci`` is). A project
that registers a profile of its own named ``ci`` keeps it.

**Cassettes.** The ``cassette`` fixture gives each test a
`CassetteSpec` — a file of its own under ``tests/cassettes/``
(the ini option ``cassette_dir``), named from the test's node id
(``tests/unit/test_x.py::test_y[trio]`` → ``tests/cassettes/unit/test_x/test_y[trio].jsonl``)
— for the plan's ``session.cassette`` (``cassette.to_dict()``) or
`install_cassette`. ``--cassette-mode`` takes VCR's
modes: ``once`` (replay the file when it exists, else record it: the default on a
developer's machine), ``none`` (replay only; a missing file or a new call fails: the
default when the ``CI`` variable is set), ``new_episodes`` (replay what is recorded, record
what is past the end) and ``all`` (record everything again). ``@pytest.mark.cassette(tools=
True)`` records and replays the test's tool results too.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from ..kernel._mount_plan import CassetteSpec

__all__ = (
    "PROFILE",
    "CI_PROFILE",
    "CASSETTE_MODES",
    "pytest_addoption",
    "pytest_configure",
    "cassette",
    "cassette_path",
)

CASSETTE_MODES: dict[str, str] = {
    "none": "replay",
    "once": "auto",
    "new_episodes": "new_episodes",
    "all": "record",
}
"""``--cassette-mode`` (VCR's names) → the cassette's own mode."""

PROFILE = "amplifier-anyio"
"""Health checks the strategies trip suppressed, no deadline."""

CI_PROFILE = "amplifier-anyio-ci"
"""`PROFILE`, derandomised."""


_BUILTIN_CI: object = None
"""Hypothesis's own ``ci`` profile as it was before any conftest ran."""


def _register() -> bool:
    """Register both profiles; False when Hypothesis is not installed."""
    global _BUILTIN_CI  # noqa: PLW0603 - a snapshot taken once, at import
    try:
        from hypothesis import HealthCheck, settings  # noqa: PLC0415 - only with hypothesis
    except ImportError:  # the runtime does not need hypothesis; nothing to configure
        return False
    try:
        _BUILTIN_CI = settings.get_profile("ci")
    except Exception:  # noqa: BLE001 - an old Hypothesis without a built-in ci profile
        _BUILTIN_CI = None
    relaxed: dict[str, Any] = {
        "deadline": None,
        "suppress_health_check": [
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.large_base_example,
        ],
    }
    settings.register_profile(PROFILE, **relaxed)
    settings.register_profile(CI_PROFILE, derandomize=True, **relaxed)
    return True


# At import, before any plugin's pytest_configure: ``--hypothesis-profile=amplifier-anyio-ci``
# finds the profile whichever plugin configures first.
_REGISTERED = _register()


def pytest_addoption(parser: Any) -> None:
    """``--cassette-mode`` and the ini option ``cassette_dir``."""
    group = parser.getgroup("amplifier-anyio")
    group.addoption(
        "--cassette-mode",
        choices=tuple(CASSETTE_MODES),
        default=None,
        help="VCR's record modes for the cassette fixture: once (default), none (default "
        "when CI is set: replay only), new_episodes, all (record everything again).",
    )
    parser.addini(
        "cassette_dir",
        "where the cassette fixture keeps its files, from the root directory",
        default="tests/cassettes",
    )


def pytest_configure(config: Any) -> None:
    """Load `PROFILE` unless a profile was already chosen; declare the marker."""
    config.addinivalue_line(
        "markers", "cassette(tools=False): options of the test's cassette fixture"
    )
    if not _REGISTERED:
        return
    from hypothesis import settings  # noqa: PLC0415 - only with hypothesis

    current = settings.get_current_profile_name()
    if current == "default":
        settings.load_profile(PROFILE)
    elif current == "ci" and _BUILTIN_CI is not None and settings.get_profile("ci") is _BUILTIN_CI:
        settings.load_profile(CI_PROFILE)


def cassette_path(root: Path, directory: str, nodeid: str) -> Path:
    """The cassette file of the test ``nodeid``: ``<root>/<directory>/<module path, a
    leading tests/ left out>/<test name>.jsonl``, characters a file name should not hold
    replaced by ``_``."""
    module, _, name = nodeid.partition("::")
    parts = list(Path(module).with_suffix("").parts)
    if parts and parts[0] == Path(directory).parts[0]:
        parts = parts[1:]
    file_name = re.sub(r"[^\w.\[\]=-]+", "_", name.replace("::", ".")) or "test"
    return root / directory / Path(*parts) / f"{file_name}.jsonl"


def _on_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


@pytest.fixture
def cassette(request: Any) -> CassetteSpec:
    """This test's cassette (see the module docstring): put ``cassette.to_dict()`` in the
    plan's ``session`` table as ``cassette``."""
    from ..kernel._mount_plan import CassetteSpec  # noqa: PLC0415 - only tests that use it

    config = request.config
    mode = config.getoption("--cassette-mode") or ("none" if _on_ci() else "once")
    marker = request.node.get_closest_marker("cassette")
    tools = bool(marker.kwargs.get("tools", False)) if marker is not None else False
    path = cassette_path(config.rootpath, config.getini("cassette_dir"), request.node.nodeid)
    return CassetteSpec(path=str(path), mode=CASSETTE_MODES[mode], tools=tools)
