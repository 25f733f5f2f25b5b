"""Public names imported on first use (PEP 562), for the packages that re-export them.

A package lists each name with the submodule that defines it; importing the package then
costs nothing beyond this module, and ``amplifier_anyio.providers`` need not import httpx
for a plan that only uses the scripted provider.
"""

from __future__ import annotations

import importlib
import sys
import warnings
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

__all__ = ("lazy_names", "moved")


def lazy_names(
    package: str, namespace: dict[str, Any], names: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``: each of ``names`` (name -> submodule)
    is imported from its submodule on first use and kept in ``namespace`` (the package's
    ``globals()``), so later lookups never come back here."""

    def __getattr__(name: str) -> Any:  # noqa: N807 - the module hook's own name
        module = names.get(name)
        if module is None:
            msg = f"module {package!r} has no attribute {name!r}"
            raise AttributeError(msg)
        value = getattr(importlib.import_module(f".{module}", package), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:  # noqa: N807 - the module hook's own name
        return sorted({*namespace, *names})

    return __getattr__, __dir__


def moved(old: str, new: ModuleType, where: str) -> None:
    """Leave ``new`` under the name ``old`` of a moved module, warning once that it moved.

    Called by the alias package left at the old path (a package, so that version control
    follows the file to its new place): private names and patches then reach the one
    module. ``where`` says what to import instead.
    """
    warnings.warn(
        f"{old} is deprecated: {where} (this alias goes in the next release)",
        DeprecationWarning,
        stacklevel=3,  # the import statement, past the alias package
    )
    sys.modules[old] = new
