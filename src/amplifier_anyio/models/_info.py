"""Descriptions of providers, models and modules."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal, TypeAlias

import attrs

from ._validators import one_of

__all__ = ("ModuleType", "ProviderInfo", "ModelInfo", "ModuleInfo")

ModuleType: TypeAlias = Literal["orchestrator", "provider", "tool", "context", "hook", "resolver"]
_MODULE_TYPES = ("orchestrator", "provider", "tool", "context", "hook", "resolver")


def _strings(values: Iterable[str]) -> tuple[str, ...]:
    if isinstance(values, str):  # tuple("KEY") would quietly give ('K', 'E', 'Y')
        msg = f"expected a list of strings, not the string {values!r}"
        raise TypeError(msg)
    return tuple(values)


@attrs.frozen(kw_only=True)
class ProviderInfo:
    """What a provider is and needs: credentials, capabilities, default settings.

    ``defaults`` may hold ``context_window``, ``max_output_tokens`` and ``model``; context
    managers read them to size the request budget.
    """

    id: str
    display_name: str
    credential_env_vars: tuple[str, ...] = attrs.field(default=(), converter=_strings)
    capabilities: tuple[str, ...] = attrs.field(default=(), converter=_strings)
    defaults: dict[str, Any] = attrs.field(factory=dict)


@attrs.frozen(kw_only=True)
class ModelInfo:
    """One model a provider offers."""

    id: str
    display_name: str
    context_window: int
    max_output_tokens: int
    capabilities: tuple[str, ...] = attrs.field(default=(), converter=_strings)
    defaults: dict[str, Any] = attrs.field(factory=dict)


@attrs.frozen(kw_only=True)
class ModuleInfo:
    """A module's identity and where it mounts."""

    id: str
    name: str
    version: str
    type: ModuleType = attrs.field(validator=one_of(_MODULE_TYPES))
    mount_point: str
    description: str = ""
    config_schema: dict[str, Any] | None = None
