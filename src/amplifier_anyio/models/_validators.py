"""The one validator the closed model fields share."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs


def one_of(allowed: tuple[Any, ...], *, optional: bool = False) -> Callable[..., None]:
    """Reject any value outside ``allowed`` (and None unless ``optional``), naming the field."""

    def check(_inst: object, attribute: attrs.Attribute[Any], value: Any) -> None:
        if value is None and optional:
            return
        if value not in allowed:
            choices = ", ".join(repr(a) for a in allowed)
            msg = f"{attribute.name} must be one of {choices}, not {value!r}"
            raise ValueError(msg)

    return check
