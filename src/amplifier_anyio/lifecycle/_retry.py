"""RetryPolicy: how many attempts a step gets and how long to wait between them."""

from __future__ import annotations

import random

import attrs

from ..errors import ConfigError, OrchestrationError
from ..models._validators import number

__all__ = ("RetryPolicy",)


def _fraction(_inst: object, attribute: attrs.Attribute[float], value: float) -> None:
    number(minimum=0.0, exclusive=False)(_inst, attribute, value)
    if value > 1:
        msg = f"{attribute.name}: expected a number from 0 to 1, got {value!r}"
        raise ConfigError(msg)


@attrs.frozen(kw_only=True)
class RetryPolicy:
    """Exponential backoff with jitter, for the RETRY strategy.

    ``max_attempts`` is the total number of attempts of a step, first one included (3:
    the step runs at most three times). Before attempt ``n + 1`` the step waits
    [`delay`][amplifier_anyio.lifecycle.RetryPolicy.delay] ``(n)`` seconds on anyio's clock: the
    nominal delay ``min(base_delay * multiplier ** (n - 1), max_delay)``, moved by a random fraction
    of itself up to ``± jitter``, and never more than ``max_delay`` (see
    [`bounds`][amplifier_anyio.lifecycle.RetryPolicy.bounds]).

    A failure is retried when it is *recoverable*: an instance of one of ``retry_on``
    (every ``Exception`` by default; a step timeout is a `TimeoutError`), except an
    [`OrchestrationError`][amplifier_anyio.errors.OrchestrationError] that says it is not
    recoverable.
    """

    max_attempts: int = attrs.field(
        default=3, validator=number(minimum=1, exclusive=False, integer=True)
    )
    base_delay: float = attrs.field(default=0.5, validator=number(minimum=0.0, exclusive=False))
    max_delay: float = attrs.field(default=30.0, validator=number(minimum=0.0, exclusive=False))
    multiplier: float = attrs.field(default=2.0, validator=number(minimum=1.0, exclusive=False))
    jitter: float = attrs.field(default=0.1, validator=_fraction)
    retry_on: tuple[type[BaseException], ...] = (Exception,)

    def bounds(self, attempt: int) -> tuple[float, float]:
        """The least and the most [`delay`][amplifier_anyio.lifecycle.RetryPolicy.delay] may wait
        after failed attempt ``attempt`` (≥ 1)."""
        if attempt < 1:
            msg = f"attempt: expected an integer >= 1, got {attempt!r}"
            raise ValueError(msg)
        # The exponent is capped so a long run of attempts cannot overflow a float.
        nominal = min(self.base_delay * self.multiplier ** min(attempt - 1, 64), self.max_delay)
        low = nominal * (1 - self.jitter)
        high = min(nominal * (1 + self.jitter), self.max_delay)
        return low, high

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """Seconds to wait after failed attempt ``attempt`` before the next one (jittered)."""
        low, high = self.bounds(attempt)
        return (rng or random).uniform(low, high)

    def is_recoverable(self, error: BaseException) -> bool:
        """Whether a step that failed with ``error`` may be retried."""
        if isinstance(error, OrchestrationError):
            return error.recoverable
        return isinstance(error, self.retry_on)
