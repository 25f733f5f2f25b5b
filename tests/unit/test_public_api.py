"""Every public module's ``__all__`` says exactly what it offers.

Modules are discovered, not listed: a module added anywhere under ``amplifier_anyio``
is checked without editing this file. A module is public when no part of its dotted
name starts with an underscore.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import warnings
from types import ModuleType

import pytest

import amplifier_anyio
from tiers import needs


def _public_module_names() -> list[str]:
    with warnings.catch_warnings():  # the walk imports the deprecated alias packages
        warnings.simplefilter("ignore", DeprecationWarning)
        walk = pkgutil.walk_packages(
            amplifier_anyio.__path__,
            prefix="amplifier_anyio.",
            # A package that fails to import is reported by the tests below, not here.
            onerror=lambda _name: None,
        )
        names = [info.name for info in walk]
    public = [n for n in names if not any(part.startswith("_") for part in n.split("."))]
    return sorted(["amplifier_anyio", *(n for n in public if n not in DEPRECATED)])


DEPRECATED = frozenset(
    {
        "amplifier_anyio.tools.mcp",
        "amplifier_anyio.mcp_server",
        "amplifier_anyio.mcp_tasks",
        "amplifier_anyio.testing.cassette",
        "amplifier_anyio.providers.pricing",
    }
)
"""Old paths kept for one release: importing one warns (tests/unit/test_mcp_moves.py)."""


PUBLIC_MODULES = _public_module_names()
FULL_TIER = {
    "amplifier_anyio.mcp": "mcp",
    "amplifier_anyio.mcp.client": "mcp",
    "amplifier_anyio.mcp.tasks": "mcp",
    "amplifier_anyio.temporal": "temporalio",
}
"""Public modules that import a package of the test-full extra, and the package."""
MODULE_PARAMS = [
    pytest.param(name, marks=needs(FULL_TIER[name])) if name in FULL_TIER else name
    for name in PUBLIC_MODULES
]


def _import(name: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        missing = (exc.name or "").split(".")[0]
        if missing and missing != "amplifier_anyio":
            # a failure in the default tier (tests/conftest.py): list the module in FULL_TIER
            pytest.skip(f"could not import {name}: it needs the optional dependency {missing!r}")
        raise


def _all(module: ModuleType) -> tuple[str, ...]:
    # A missing __all__ is reported once, by the first test; here it just lists nothing.
    return tuple(getattr(module, "__all__", ()))


def _is_api_object(obj: object) -> bool:
    return inspect.isclass(obj) or inspect.isfunction(obj)


def test_discovery_finds_the_known_modules() -> None:
    assert {
        "amplifier_anyio",
        "amplifier_anyio.errors",
        "amplifier_anyio.events",
        "amplifier_anyio.models",
        "amplifier_anyio.kernel",
        "amplifier_anyio.runtime",
        "amplifier_anyio.testing.strategies",
    } <= set(PUBLIC_MODULES)
    assert "amplifier_anyio.models._validators" not in PUBLIC_MODULES


@pytest.mark.parametrize("package", ["kernel", "runtime", "models"])
def test_the_core_packages_offer_their_names_only_through_the_package(package: str) -> None:
    """As anyio and httpx do: the implementation modules are private, so what a user may
    import is exactly the package's ``__all__`` (a module can be reorganised freely)."""
    public = [n for n in PUBLIC_MODULES if n.startswith(f"amplifier_anyio.{package}.")]
    assert public == []
    assert _all(_import(f"amplifier_anyio.{package}"))


@pytest.mark.parametrize("name", MODULE_PARAMS)
def test_all_is_a_tuple_of_unique_existing_names(name: str) -> None:
    module = _import(name)
    exported = getattr(module, "__all__", None)
    assert exported is not None, f"{name} has no __all__"
    assert isinstance(exported, tuple), f"{name}.__all__ is not a tuple"
    assert all(isinstance(item, str) for item in exported)
    duplicates = sorted({item for item in exported if exported.count(item) > 1})
    assert not duplicates, f"listed twice in {name}.__all__: {duplicates}"
    missing = [item for item in exported if not hasattr(module, item)]
    assert not missing, f"listed in {name}.__all__ but not defined: {missing}"


@pytest.mark.parametrize("name", MODULE_PARAMS)
def test_every_public_class_and_function_defined_here_is_listed(name: str) -> None:
    module = _import(name)
    exported = set(_all(module))
    unlisted = sorted(
        attr
        for attr, obj in vars(module).items()
        if not attr.startswith("_")
        and _is_api_object(obj)
        and getattr(obj, "__module__", None) == name
        and attr not in exported
    )
    assert not unlisted, f"public in {name} but missing from __all__: {unlisted}"


@pytest.mark.parametrize("name", MODULE_PARAMS)
def test_every_listed_class_and_function_has_a_docstring(name: str) -> None:
    module = _import(name)
    undocumented = sorted(
        item
        for item in _all(module)
        if _is_api_object(obj := getattr(module, item, None)) and not inspect.getdoc(obj)
    )
    assert not undocumented, f"no docstring in {name}: {undocumented}"
