"""Validators shared by the closed model fields and the modules' numeric settings."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import attrs

from ..errors import ConfigError, ValidationError


def one_of(allowed: tuple[Any, ...], *, optional: bool = False) -> Callable[..., None]:
    """Reject any value outside ``allowed`` (and None unless ``optional``), naming the field:
    a [`ValidationError`][amplifier_anyio.ValidationError] (also a ``ValueError``)."""

    def check(_inst: object, attribute: attrs.Attribute[Any], value: Any) -> None:
        if value is None and optional:
            return
        if value not in allowed:
            choices = ", ".join(repr(a) for a in allowed)
            raise ValidationError([f"{attribute.name} must be one of {choices}, not {value!r}"])

    return check


def number(
    *, minimum: float = 0.0, exclusive: bool = True, optional: bool = False, integer: bool = False
) -> Callable[..., None]:
    """A finite number (an int when ``integer``) above ``minimum``; a ConfigError naming
    the field otherwise. Booleans are not numbers here."""

    def check(_inst: object, attribute: attrs.Attribute[Any], value: Any) -> None:
        if value is None and optional:
            return
        kinds = (int,) if integer else (int, float)
        ok = isinstance(value, kinds) and not isinstance(value, bool) and math.isfinite(value)
        if ok and (value > minimum if exclusive else value >= minimum):
            return
        bound = f"{'>' if exclusive else '>='} {minimum:g}"
        what = "an integer" if integer else "a finite number"
        msg = f"{attribute.name}: expected {what} {bound}, got {value!r}"
        raise ConfigError(msg)

    return check
