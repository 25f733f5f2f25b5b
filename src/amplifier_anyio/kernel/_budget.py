"""The budget tree: what one turn may spend, counted across every sub-agent below it.

A plan sets the limits in its ``session`` table::

    session:
      budget: {max_tokens: 200000, max_cost_usd: 2.5, max_tool_calls: 400}

Each accepted turn has a [`BudgetMeter`][amplifier_anyio.BudgetMeter] (on its
[`TurnHandle`][amplifier_anyio.TurnHandle]); a sub-agent's turn has a meter whose parent is the
meter of the turn it runs in. Everything a turn spends is charged to its meter *and to every
meter above it*, so a child never spends more than any ancestor has left: its effective limit is
its own limit or an ancestor's remaining one, whichever runs out first.

- Tokens and dollars are charged after each provider response (dollars when the provider
  prices its calls: ``pricing`` in its plan entry's ``config``); a limit is *reached* once
  the spending meets it, since the next call could only go over.
- Once a limit is reached no provider call and no tool call starts anywhere below the
  meter that ran out; calls already in flight finish and are charged, so what a turn
  spends is at most its limit plus what the calls in flight at that moment cost.
- Tool calls are charged before a batch runs: a batch that would take the count past the
  limit does not start.

When a limit is reached, the highest turn whose limit it is is cancelled at once (an
immediate cancel of its token, which reaches every sub-agent below it); that turn ends
``incomplete`` with ``finish_reason="budget"``, the cancelled ones below it
``cancelled``. Usage charged by sub-agents is also kept apart
([`BudgetMeter.below`][amplifier_anyio.BudgetMeter.below]): the engine adds it to the turn's
``TurnResult.usage``, so a parent's result counts what its children spent.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from ..errors import ConfigError
from ..models import Usage

__all__ = ("Budget", "BudgetMeter", "BudgetStatistics", "BUDGET_FINISH_REASON")

BUDGET_FINISH_REASON = "budget"
"""The ``finish_reason`` of a turn whose budget ran out (its status is ``incomplete``)."""

_LIMITS = ("max_tokens", "max_cost_usd", "max_tool_calls")


def _limit(
    value: Any, field: str, *, integer: bool
) -> int | float | None:  # a positive number or None
    if value is None:
        return None
    kinds = (int,) if integer else (int, float)
    ok = isinstance(value, kinds) and not isinstance(value, bool) and math.isfinite(value)
    if ok and value > 0:
        return value  # type: ignore[no-any-return]
    what = "an integer" if integer else "a finite number"
    raise ConfigError(f"{field}: expected {what} > 0, got {value!r}")


@attrs.frozen(kw_only=True)
class Budget:
    """The limits of one turn (None: no limit on that count)."""

    max_tokens: int | None = None
    """Tokens of every provider call of the turn and its sub-agents (total tokens)."""
    max_cost_usd: float | None = None
    """Dollars, from the providers' ``pricing``; calls of a provider without prices cost 0."""
    max_tool_calls: int | None = None
    """Tool calls run by the turn and its sub-agents."""

    @classmethod
    def from_config(cls, value: Any, field: str = "session.budget") -> Budget:
        """The limits of a plan's ``budget`` table; a bad value is a ConfigError naming
        its key (``session.budget.max_tokens: expected an integer > 0, got 0``)."""
        if value is None:
            return cls()
        if not isinstance(value, Mapping):
            raise ConfigError(f"{field}: expected a table, got {type(value).__name__}")
        unknown = sorted(str(k) for k in value if k not in _LIMITS)
        if unknown:
            known = ", ".join(_LIMITS)
            raise ConfigError(f"{field}: unknown key {unknown[0]!r} (known: {known})")
        tokens = _limit(value.get("max_tokens"), f"{field}.max_tokens", integer=True)
        cost = _limit(value.get("max_cost_usd"), f"{field}.max_cost_usd", integer=False)
        calls = _limit(value.get("max_tool_calls"), f"{field}.max_tool_calls", integer=True)
        return cls(
            max_tokens=None if tokens is None else int(tokens),
            max_cost_usd=None if cost is None else float(cost),
            max_tool_calls=None if calls is None else int(calls),
        )

    @property
    def unlimited(self) -> bool:
        """No limit at all."""
        return self.max_tokens is None and self.max_cost_usd is None and self.max_tool_calls is None


def _tokens(usage: Usage) -> int:
    return usage.total_tokens or usage.input_tokens + usage.output_tokens


@attrs.frozen(kw_only=True)
class BudgetStatistics:
    """A snapshot of a meter: its limits, what was spent under it, and whether it ran out."""

    limits: Budget
    tokens: int
    cost_usd: float
    tool_calls: int
    exhausted: str | None


@attrs.define(eq=False)
class BudgetMeter:
    """What one turn (and everything below it) has spent, against its limits.

    ``on_exhausted`` is called once, when one of this meter's own limits is reached (the
    turn handle cancels its turn there). A meter with a ``parent`` charges it too.
    """

    limits: Budget = attrs.field(factory=Budget)
    parent: BudgetMeter | None = None
    on_exhausted: Callable[[], object] | None = attrs.field(default=None, repr=False)
    tokens: int = 0
    cost_usd: float = 0.0
    tool_calls: int = 0
    below: Usage = attrs.field(factory=Usage)
    """Usage charged by the turns of sub-agents below this one (not by this turn)."""
    exhausted: str | None = None
    """Which limit ran out (``"max_tokens: 1000 reached (1042 spent)"``), as it stood when
    it ran out, or None. [`report`][amplifier_anyio.kernel.BudgetMeter.report] gives what was
    really spent by the end (calls in flight then finish and are counted)."""
    _limit_hit: str | None = attrs.field(default=None, init=False, repr=False)

    def chain(self) -> list[BudgetMeter]:
        """This meter and every one above it, nearest first."""
        found: list[BudgetMeter] = []
        meter: BudgetMeter | None = self
        while meter is not None:
            found.append(meter)
            meter = meter.parent
        return found

    def charge_usage(self, usage: Usage, cost_usd: float = 0.0) -> bool:
        """Charge one provider response here and above; False if a limit was reached (the
        turn owning the highest such limit is cancelled)."""
        tokens = _tokens(usage)
        crossed: BudgetMeter | None = None
        for depth, meter in enumerate(self.chain()):
            meter.tokens += tokens
            meter.cost_usd += cost_usd
            if depth:
                meter.below = meter.below + usage
            reached = meter._reached()
            if reached is not None:
                crossed = meter
                crossed._exhaust(*reached)
        return crossed is None

    def charge_tool_calls(self, count: int) -> bool:
        """Charge ``count`` tool calls about to run, unless they would take some meter past
        its limit: then nothing is charged, the turn owning the highest such limit is
        cancelled, and the answer is False. Once any meter of the chain has run out, no
        call starts: the answer is False and nothing is charged."""
        if self.over is not None:
            return False
        over: BudgetMeter | None = None
        for meter in self.chain():
            limit = meter.limits.max_tool_calls
            if limit is not None and meter.tool_calls + count > limit:
                over = meter
        if over is not None:
            limit = over.limits.max_tool_calls
            over._exhaust(
                f"max_tool_calls: {limit} reached ({over.tool_calls} run, {count} more asked)",
                "max_tool_calls",
            )
            return False
        for meter in self.chain():
            meter.tool_calls += count
        return True

    @property
    def over(self) -> str | None:
        """The reason this meter or one above it ran out, nearest first; None if none did."""
        return next((m.exhausted for m in self.chain() if m.exhausted is not None), None)

    def remaining(self) -> Budget:
        """What is left under this meter and every one above it (None: no limit)."""

        def least(values: list[float]) -> float | None:
            return max(0.0, min(values)) if values else None

        chain = self.chain()
        tokens = least(
            [m.limits.max_tokens - m.tokens for m in chain if m.limits.max_tokens is not None]
        )
        cost = least(
            [m.limits.max_cost_usd - m.cost_usd for m in chain if m.limits.max_cost_usd is not None]
        )
        calls = least(
            [
                m.limits.max_tool_calls - m.tool_calls
                for m in chain
                if m.limits.max_tool_calls is not None
            ]
        )
        return Budget(
            max_tokens=None if tokens is None else int(tokens),
            max_cost_usd=cost,
            max_tool_calls=None if calls is None else int(calls),
        )

    def report(self) -> str | None:
        """The limit that ran out here with what was really spent under this meter by now
        (``"max_tokens: 2000 reached (5010 spent)"``): the calls in flight when it ran out
        finish and are counted. None if none of this meter's limits ran out."""
        limits = self.limits
        if self._limit_hit == "max_tokens":
            return f"max_tokens: {limits.max_tokens} reached ({self.tokens} spent)"
        if self._limit_hit == "max_cost_usd":
            return f"max_cost_usd: {limits.max_cost_usd:g} reached ({self.cost_usd:.6g} spent)"
        return self.exhausted

    def _reached(self) -> tuple[str, str] | None:
        limits = self.limits
        if limits.max_tokens is not None and self.tokens >= limits.max_tokens:
            return f"max_tokens: {limits.max_tokens} reached ({self.tokens} spent)", "max_tokens"
        if limits.max_cost_usd is not None and self.cost_usd >= limits.max_cost_usd:
            spent = f"max_cost_usd: {limits.max_cost_usd:g} reached ({self.cost_usd:.6g} spent)"
            return spent, "max_cost_usd"
        return None

    def _exhaust(self, reason: str, limit: str) -> None:
        if self.exhausted is not None:
            return
        self.exhausted, self._limit_hit = reason, limit
        if self.on_exhausted is not None:
            self.on_exhausted()

    def statistics(self) -> BudgetStatistics:
        """A snapshot of the meter."""
        return BudgetStatistics(
            limits=self.limits,
            tokens=self.tokens,
            cost_usd=self.cost_usd,
            tool_calls=self.tool_calls,
            exhausted=self.exhausted,
        )
