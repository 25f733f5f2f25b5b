"""Shared fixtures: every async test runs on asyncio and on trio."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings
from trio.testing import MockClock

settings.register_profile(
    "ci",
    derandomize=True,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("fast", max_examples=10, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


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
