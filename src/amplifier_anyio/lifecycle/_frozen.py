"""Deeply read-only values: what a context's metadata and a step's input are made of."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Set
from typing import Any, NoReturn

__all__ = ("FrozenDict", "freeze", "thaw")


class FrozenDict(Mapping[str, Any]):
    """A read-only, hashable mapping whose values are frozen too.

    Every way of changing it raises `TypeError`; it compares equal to a ``dict``
    with the same items.
    """

    __slots__ = ("_hash", "_items")

    def __init__(self, items: Mapping[str, Any] | None = None) -> None:
        self._items: dict[str, Any] = dict(items or {})
        self._hash: int | None = None

    def __getitem__(self, key: str) -> Any:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(frozenset(self._items.items()))
        return self._hash

    def __repr__(self) -> str:
        return f"FrozenDict({self._items!r})"

    def _read_only(self, *_args: Any, **_kwargs: Any) -> NoReturn:
        msg = "FrozenDict is read-only (build a new one, e.g. context.with_metadata(...))"
        raise TypeError(msg)

    __setitem__ = __delitem__ = _read_only
    clear = pop = popitem = setdefault = update = __ior__ = _read_only


def freeze(value: Any, path: str = "metadata") -> Any:
    """``value`` made deeply read-only and hashable.

    Mappings become [`FrozenDict`][amplifier_anyio.lifecycle.FrozenDict] (keys must be strings),
    lists and tuples tuples, sets frozensets, bytearrays bytes. Anything else must already be
    hashable; a value that is not raises `TypeError` naming its path (``metadata['a'][2]``).
    """
    if isinstance(value, FrozenDict):
        return value
    if isinstance(value, Mapping):
        frozen = {}
        for key, item in value.items():
            if not isinstance(key, str):
                msg = f"{path}: keys must be strings, not {type(key).__name__}"
                raise TypeError(msg)
            frozen[key] = freeze(item, f"{path}[{key!r}]")
        return FrozenDict(frozen)
    if isinstance(value, list | tuple):
        return tuple(freeze(item, f"{path}[{n}]") for n, item in enumerate(value))
    if isinstance(value, Set):
        return frozenset(freeze(item, f"{path}[...]") for item in value)
    if isinstance(value, bytearray):
        return bytes(value)
    try:
        hash(value)
    except TypeError:
        kind = type(value).__name__
        msg = f"{path}: a {kind} cannot be frozen (use a dict, a list or a hashable value)"
        raise TypeError(msg) from None
    return value


def thaw(value: Any) -> Any:
    """The plain ``dict`` / ``list`` form of a frozen value (for JSON and ``to_dict``)."""
    if isinstance(value, Mapping):
        return {key: thaw(item) for key, item in value.items()}
    if isinstance(value, tuple):
        return [thaw(item) for item in value]
    if isinstance(value, frozenset):
        return set(value)  # its items stay frozen: a set's items must be hashable
    return value
