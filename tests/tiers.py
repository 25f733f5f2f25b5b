"""The suite's two tiers and its Hypothesis budgets (docs/contributing.md).

* ``pytest`` runs the default tier: every test not marked ``slow``, Hypothesis at the ``dev``
  profile. ``pytest --full`` runs the full tier: every test, Hypothesis at the ``ci``
  profile. ``pytest -m slow`` runs only what the default tier leaves out.
* A test that sets its own example count states the count the ``ci`` profile runs and
  passes it through :func:`examples`, which gives the active profile's share of it.
* A test that needs a package of the ``test-full`` extra carries :func:`needs`: it is in
  the full tier, and skips naming the package where it is not installed.
"""

from __future__ import annotations

import importlib
import importlib.util
import math
from collections.abc import Callable
from types import ModuleType
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, settings

F = TypeVar("F", bound=Callable[..., Any])


def register_profiles() -> None:
    """``ci``: Hypothesis's 100 examples a test, derandomised (a CI run is reproducible).
    ``dev``: a tenth of them, drawn afresh on every run (successive runs cover new ground;
    the example database replays a failure first). ``fast``: a smoke run."""
    relaxed: dict[str, Any] = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow]}
    settings.register_profile("ci", max_examples=100, derandomize=True, print_blob=True, **relaxed)
    settings.register_profile("dev", max_examples=10, **relaxed)
    settings.register_profile("fast", max_examples=3, **relaxed)


def examples(ci: int) -> int:
    """A test's own example count: ``ci`` in the ``ci`` profile, scaled by the active
    profile's ``max_examples`` in another (a tenth in ``dev``, at least one: the simplest
    example Hypothesis draws, then random ones).

    A count is scaled rather than chosen per profile, so that ``HYPOTHESIS_PROFILE=ci``
    always runs what CI runs and a profile of one's own with ``max_examples=1000`` hunts ten
    times longer everywhere."""
    share = settings().max_examples / settings.get_profile("ci").max_examples
    return max(1, math.floor(ci * share))


class Marks(list[pytest.MarkDecorator]):
    """Marks that are also a decorator: ``@needs("x")``, ``pytestmark = [*needs("x")]``,
    ``pytest.param(..., marks=needs("x"))``."""

    def __call__(self, function: F) -> F:
        for mark in self:
            function = mark(function)
        return function


def needs(*modules: str) -> Marks:
    """The marks of a test that needs packages of the ``test-full`` extra: the full tier,
    and a skip naming the missing ones where they are not installed."""
    missing = [name for name in modules if importlib.util.find_spec(name) is None]
    reason = f"{', '.join(missing)} not installed: pip install -e '.[test-full]'"
    return Marks([pytest.mark.slow, pytest.mark.skipif(bool(missing), reason=reason)])


def optional(name: str) -> ModuleType | Any:
    """The module, or None when a package it needs is not installed (its tests carry
    :func:`needs`, so they skip naming it). A module of ours that is missing still fails."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if (exc.name or "").startswith("amplifier_anyio"):
            raise
        return None
