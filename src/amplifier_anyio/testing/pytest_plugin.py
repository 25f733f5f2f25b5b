"""A pytest plugin, registered by installing amplifier_anyio: the Hypothesis settings the
strategies of `amplifier_anyio.testing.strategies` need.

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
"""

from __future__ import annotations

from typing import Any

__all__ = ("PROFILE", "CI_PROFILE", "pytest_configure")

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


def pytest_configure(config: Any) -> None:
    """Load `PROFILE` unless a profile was already chosen."""
    if not _REGISTERED:
        return
    from hypothesis import settings  # noqa: PLC0415 - only with hypothesis

    current = settings.get_current_profile_name()
    if current == "default":
        settings.load_profile(PROFILE)
    elif current == "ci" and _BUILTIN_CI is not None and settings.get_profile("ci") is _BUILTIN_CI:
        settings.load_profile(CI_PROFILE)
