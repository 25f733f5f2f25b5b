"""Prices per million tokens, and what a call cost: ``Usage.cost_usd``.

A provider's ``pricing`` config is either one price for every model::

    pricing: {input_per_mtok: 3, output_per_mtok: 15, cache_read_per_mtok: 0.3,
              cache_write_per_mtok: 3.75}

or a table by model, where a key matches the model of that name and its dated snapshots
(``gpt-4o`` prices ``gpt-4o-2024-08-06``; the longest matching key wins) and ``"*"`` is
the price of every other model::

    pricing:
      gpt-4o: {input_per_mtok: 2.5, output_per_mtok: 10, cache_read_per_mtok: 1.25}
      gpt-4o-mini: {input_per_mtok: 0.15, output_per_mtok: 0.6}

Prices are dollars per million tokens, as the providers publish them, kept as `Decimal`
(a number in the config is read through its text: ``2.5`` is exactly 2.5). A cache price
left out is the input price. ``Usage.input_tokens`` counts cached tokens too (both HTTP
providers report it so), so a call costs::

    (input - cache_read - cache_write) * input + cache_read * cache_read_price
    + cache_write * cache_write_price + output * output_price      (per million tokens)

Reasoning tokens are output tokens (they are inside ``output_tokens``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Any, Final

import attrs

from ..errors import ConfigError
from ._messages import Usage

__all__ = ("Price", "PriceTable", "PRICE_KEYS")

PRICE_KEYS: Final = (
    "input_per_mtok",
    "output_per_mtok",
    "cache_read_per_mtok",
    "cache_write_per_mtok",
)
"""The keys of one price (dollars per million tokens); the first two are required."""

_MILLION: Final = Decimal(1_000_000)
_ANY_MODEL: Final = "*"


def _dollars(value: Any, key: str) -> Decimal:
    """A price from config: a number or numeric text, finite and >= 0."""
    if isinstance(value, bool) or not isinstance(value, int | float | str | Decimal):
        msg = f"{key}: expected a number of dollars per million tokens, got {value!r}"
        raise ConfigError(msg)
    if isinstance(value, float) and not math.isfinite(value):
        msg = f"{key}: expected a finite number >= 0, got {value!r}"
        raise ConfigError(msg)
    try:
        price = Decimal(str(value).strip())
    except InvalidOperation as exc:
        msg = f"{key}: expected a number of dollars per million tokens, got {value!r}"
        raise ConfigError(msg) from exc
    if not price.is_finite() or price < 0:
        msg = f"{key}: expected a finite number >= 0, got {value!r}"
        raise ConfigError(msg)
    return price


@attrs.frozen(kw_only=True)
class Price:
    """One model's prices, dollars per million tokens."""

    input_per_mtok: Decimal
    output_per_mtok: Decimal
    cache_read_per_mtok: Decimal | None = None
    """None: the input price."""
    cache_write_per_mtok: Decimal | None = None
    """None: the input price."""

    @classmethod
    def from_config(cls, value: Any, key: str = "pricing") -> Price:
        """A price from its table; a bad or unknown key is a ConfigError naming it."""
        if not isinstance(value, Mapping):
            msg = f"{key}: expected a table of prices per million tokens, got {value!r}"
            raise ConfigError(msg)
        unknown = sorted(str(k) for k in value if k not in PRICE_KEYS)
        if unknown:
            msg = f"{key}.{unknown[0]}: unknown price (known: {', '.join(PRICE_KEYS)})"
            raise ConfigError(msg)
        for required in PRICE_KEYS[:2]:
            if required not in value:
                msg = f"{key}.{required}: required (dollars per million tokens)"
                raise ConfigError(msg)
        prices = {k: _dollars(v, f"{key}.{k}") for k, v in value.items() if v is not None}
        return cls(**prices)

    def cost(self, usage: Usage) -> Decimal:
        """What ``usage`` costs at this price, in dollars."""
        read = usage.cache_read_tokens or 0
        write = usage.cache_write_tokens or 0
        fresh = max(0, usage.input_tokens - read - write)
        read_price = (
            self.input_per_mtok if self.cache_read_per_mtok is None else self.cache_read_per_mtok
        )
        write_price = (
            self.input_per_mtok if self.cache_write_per_mtok is None else self.cache_write_per_mtok
        )
        total = (
            fresh * self.input_per_mtok
            + read * read_price
            + write * write_price
            + usage.output_tokens * self.output_per_mtok
        )
        return total / _MILLION


@attrs.frozen
class PriceTable:
    """Prices by model (see the module docstring); empty: no price is known."""

    prices: Mapping[str, Price] = attrs.field(factory=dict)

    @classmethod
    def from_config(cls, value: Any, key: str = "pricing") -> PriceTable:
        """The table of a provider's ``pricing`` config (None: empty)."""
        if value is None:
            return cls()
        if isinstance(value, Mapping) and any(k in PRICE_KEYS for k in value):
            return cls({_ANY_MODEL: Price.from_config(value, key)})
        if not isinstance(value, Mapping):
            msg = f"{key}: expected a price table, got {type(value).__name__}"
            raise ConfigError(msg)
        return cls(
            {str(model): Price.from_config(v, f"{key}.{model}") for model, v in value.items()}
        )

    def __bool__(self) -> bool:
        return bool(self.prices)

    def price_of(self, *models: str | None) -> Price | None:
        """The price of the first of ``models`` the table names: its own key, else the
        longest key it is a snapshot of (``key-…``); else ``"*"``; else None."""
        for model in models:
            if not model:
                continue
            if model in self.prices:
                return self.prices[model]
            snapshots = [k for k in self.prices if k != _ANY_MODEL and model.startswith(f"{k}-")]
            if snapshots:
                return self.prices[max(snapshots, key=len)]
        return self.prices.get(_ANY_MODEL)

    def priced(self, usage: Usage | None, *models: str | None) -> Usage | None:
        """``usage`` with ``cost_usd`` at the price of the first of ``models`` the table
        knows (the model asked for, then the one that answered); unchanged when a cost is
        already set or no price applies."""
        if usage is None or usage.cost_usd is not None:
            return usage
        price = self.price_of(*models)
        return usage if price is None else attrs.evolve(usage, cost_usd=price.cost(usage))
