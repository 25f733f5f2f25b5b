"""No-progress detection: a model that repeats the same failing tool call is stopped.

A [`ProgressWatch`][amplifier_anyio.runtime.ProgressWatch] is fed every finished tool call of
a turn, in call order, and answers what the turn should do next: nothing, remind the model,
or stop. It is pure and deterministic (no clock, no I/O): the same calls give the same
answers on every backend, in every orchestrator and in any engine that feeds it.

Two calls are *the same* when they name the same tool with the same arguments (compared as
canonical JSON: sorted keys, no whitespace) and were answered with the same error text, ids
left out (a run of 8 or more hex digits, such as a UUID or a sub-agent's session id, compares
equal to any other: a delegation that fails the same way names a new child each time). A
success, or any other call, starts the count again. With ``repeats`` N (3 by default):

- the Nth same failure in a row answers ``remind``: the engine tells the model, once, in its
  next request, that the call keeps failing the same way;
- the 2Nth answers ``stop``: the turn ends ``incomplete`` with
  ``finish_reason="no_progress"`` and a problem line naming the call and the error.

A model that repeats one failing call for ever therefore costs at most 2N provider calls per
turn — and, since each sub-agent's turn has its own watch, 2N per child turn.

An orchestrator's config takes ``no_progress: {repeats: 3}`` (on, the default), or
``no_progress: off`` (``false``) to turn it off.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Mapping
from typing import Any, Final

import attrs

from ..errors import ConfigError

__all__ = (
    "NO_PROGRESS_FINISH_REASON",
    "DEFAULT_REPEATS",
    "ProgressVerdict",
    "ProgressWatch",
    "no_progress_repeats",
)

NO_PROGRESS_FINISH_REASON: Final = "no_progress"
"""The ``finish_reason`` of a turn stopped for repeating a failing call (status ``incomplete``)."""

DEFAULT_REPEATS: Final = 3
"""Same failures in a row before the reminder (the turn stops at twice as many)."""

_IDS = re.compile(r"[0-9a-fA-F]{8,}(?:[-_][0-9a-fA-F]{4,})*")
_ERROR_PREVIEW = 200  # characters of the error quoted in the reminder and the problem line


class ProgressVerdict(enum.StrEnum):
    """What the turn should do after a finished call."""

    NONE = "none"
    """Go on."""
    REMIND = "remind"
    """Tell the model (once) that the call keeps failing the same way."""
    STOP = "stop"
    """End the turn ``incomplete`` / ``no_progress``."""


def no_progress_repeats(value: Any, field: str) -> int | None:
    """The ``repeats`` of an orchestrator's ``no_progress`` config; None when it is off.

    ``None`` or ``true`` or ``on``: the default (3); ``false`` or ``off``: off;
    ``{repeats: N}`` with N an integer ≥ 1. Anything else is a ConfigError naming ``field``.
    """
    if value is None or value is True or value == "on":
        return DEFAULT_REPEATS
    if value is False or value == "off":
        return None
    if isinstance(value, Mapping):
        unknown = sorted(str(k) for k in value if k != "repeats")
        if unknown:
            raise ConfigError(f"{field}: unknown key {unknown[0]!r} (known: repeats)")
        repeats = value.get("repeats", DEFAULT_REPEATS)
        if isinstance(repeats, int) and not isinstance(repeats, bool) and repeats >= 1:
            return repeats
        raise ConfigError(f"{field}.repeats: expected an integer >= 1, got {repeats!r}")
    msg = f"{field}: expected off or a table {{repeats: N}}, got {value!r}"
    raise ConfigError(msg)


def _canonical(arguments: Any) -> str:
    try:
        return json.dumps(arguments, sort_keys=True, separators=(",", ":"), default=str)
    except (TypeError, ValueError):  # keys that do not sort: their text still identifies them
        return repr(arguments)


@attrs.define(eq=False)
class ProgressWatch:
    """The run of same failures a turn's tool calls are in (``repeats``: N; see the module)."""

    repeats: int = DEFAULT_REPEATS
    _key: tuple[str, str, str] | None = attrs.field(default=None, init=False)
    _count: int = attrs.field(default=0, init=False)

    @property
    def count(self) -> int:
        """How many same failures in a row so far."""
        return self._count

    def observe(self, name: str, arguments: Any, error: str | None) -> ProgressVerdict:
        """One finished call: its tool, its arguments and its error text (None: it
        succeeded). The answer for this call (``remind`` at N, ``stop`` from 2N)."""
        if error is None:
            self._key, self._count = None, 0
            return ProgressVerdict.NONE
        key = (name, _canonical(arguments), _IDS.sub("#", error))
        if key == self._key:
            self._count += 1
        else:
            self._key, self._count = key, 1
        if self._count >= 2 * self.repeats:
            return ProgressVerdict.STOP
        if self._count == self.repeats:
            return ProgressVerdict.REMIND
        return ProgressVerdict.NONE

    def reminder(self) -> str:
        """The text the model gets with ``remind``."""
        name, arguments, error = self._key or ("", "", "")
        return (
            f"The tool call {name} with arguments {arguments[:_ERROR_PREVIEW]} has failed "
            f"{self._count} times in a row with the same error: {error[:_ERROR_PREVIEW]}. "
            "Repeating it will not help: change the arguments, use another tool, or answer "
            f"without it. The turn stops if it fails the same way {self.repeats} more times."
        )

    def problem(self) -> str:
        """The problem line of a turn stopped with ``stop``."""
        name, _, error = self._key or ("", "", "")
        return (
            f"no_progress: {name} was called {self._count} times in a row with the same "
            f"arguments and failed the same way each time ({error[:_ERROR_PREVIEW]})"
        )
