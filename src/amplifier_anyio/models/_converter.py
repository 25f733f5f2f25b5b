"""The project's cattrs converter, and readable errors for bad payloads.

One converter, owned here and never the global one, so module authors' own cattrs hooks
cannot change how messages serialise. Unstructured values are JSON-ready dicts that omit
fields left at their default.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable
from decimal import Decimal
from typing import Any, TypeVar, get_args

import cattrs
import cattrs.cols
from cattrs.preconf.json import make_converter

from ..errors import ConfigError, ValidationError
from ._messages import BLOCK_TYPES, ContentBlock

__all__ = ("converter", "structure", "unstructure")

T = TypeVar("T")

converter = make_converter(omit_if_default=True, detailed_validation=True)
"""The converter every part of amplifier_anyio uses."""

_JSON_LEAVES: tuple[type, ...] = (str, int, float, bool, dict, list, types.NoneType)


class _PayloadError(ValueError):
    """A problem whose message is already the readable text to report."""


def _structure_block(data: Any, _cls: Any) -> ContentBlock:
    if not isinstance(data, dict):
        msg = f"expected a content block object, got {type(data).__name__}"
        raise _PayloadError(msg)
    tag = data.get("type")
    cls = BLOCK_TYPES.get(tag) if isinstance(tag, str) else None
    if cls is None:
        msg = "missing block type" if tag is None else f"unknown block type {tag!r}"
        raise _PayloadError(msg)
    fields = {k: v for k, v in data.items() if k != "type"}
    return converter.structure(fields, cls)


def _unstructure_block(cls: type[Any]) -> Callable[[Any], dict[str, Any]]:
    base = converter.gen_unstructure_attrs_fromdict(cls)

    def unstructure_block(block: Any) -> dict[str, Any]:
        return {"type": cls.type, **base(block)}

    return unstructure_block


def _structure_content(data: Any, _cls: Any) -> str | list[ContentBlock]:
    if isinstance(data, str):
        return data
    if isinstance(data, list):
        return converter.structure(data, list[ContentBlock])
    msg = f"expected a string or a list of content blocks, got {type(data).__name__}"
    raise _PayloadError(msg)


def _is_plain(tp: Any) -> bool:
    if tp is Any:
        return True
    origin = typing.get_origin(tp) or tp
    return origin in _JSON_LEAVES and all(_is_plain(a) for a in get_args(tp))


def _is_plain_json_union(tp: Any) -> bool:
    """A union of plain JSON types only (``str | dict[str, Any] | None`` and the like)."""
    if typing.get_origin(tp) not in (typing.Union, types.UnionType):
        return False
    return all(_is_plain(a) for a in get_args(tp))


def _plain_union_factory(tp: Any) -> Callable[[Any, Any], Any]:
    kinds = tuple((typing.get_origin(a) or a) for a in get_args(tp))
    names = " | ".join(k.__name__ for k in kinds)
    takes_float, takes_bool = float in kinds, bool in kinds

    def structure_plain_union(data: Any, _cls: Any) -> Any:
        if takes_float and isinstance(data, int) and not isinstance(data, bool):
            return float(data)
        if isinstance(data, kinds) and (takes_bool or not isinstance(data, bool)):
            return data
        msg = f"expected {names}, got {type(data).__name__}"
        raise _PayloadError(msg)

    return structure_plain_union


def _strict(kind: type, *also: type) -> Callable[[Any, Any], Any]:
    accepted = (kind, *also)

    def structure_exact(data: Any, _cls: Any) -> Any:
        # bool is an int in Python but never a valid count, text or temperature here.
        value: Any = data
        if isinstance(value, accepted) and (kind is bool or not isinstance(value, bool)):
            return float(value) if kind is float else value  # type: ignore[arg-type]
        msg = f"expected {kind.__name__}, got {type(data).__name__}"
        raise _PayloadError(msg)

    return structure_exact


def _structure_decimal(data: Any, _cls: Any) -> Decimal:
    # Money: text or an integer, never a float (0.1 is not a price a provider quoted).
    if isinstance(data, Decimal):
        value = data
    elif isinstance(data, str):
        try:
            value = Decimal(data)
        except ArithmeticError as exc:
            msg = f"expected a decimal number as text, got {data!r}"
            raise _PayloadError(msg) from exc
    elif isinstance(data, int) and not isinstance(data, bool):
        value = Decimal(data)
    else:
        msg = f"expected a decimal number as text, got {type(data).__name__}"
        raise _PayloadError(msg)
    if not value.is_finite():
        msg = f"expected a finite decimal number, got {data!r}"
        raise _PayloadError(msg)
    return value


converter.register_structure_hook(Decimal, _structure_decimal)
converter.register_unstructure_hook(Decimal, str)

# cattrs would coerce (str(3) == "3"); a payload of the wrong type is a bad payload.
converter.register_structure_hook(str, _strict(str))
converter.register_structure_hook(int, _strict(int))
converter.register_structure_hook(float, _strict(float, int))
converter.register_structure_hook(bool, _strict(bool))


def _is_optional_literal(tp: Any) -> bool:
    args = get_args(tp) if typing.get_origin(tp) in (typing.Union, types.UnionType) else ()
    rest = [a for a in args if a is not types.NoneType]
    return len(args) == 2 and len(rest) == 1 and typing.get_origin(rest[0]) is typing.Literal


def _structure_optional_literal(data: Any, tp: Any) -> Any:
    if data is None:
        return None
    (literal,) = (a for a in get_args(tp) if a is not types.NoneType)
    if data in get_args(literal):
        return data
    choices = ", ".join(repr(a) for a in get_args(literal))
    msg = f"must be one of {choices} (or null), not {data!r}"
    raise _PayloadError(msg)


def _is_sequence(tp: Any) -> bool:
    return typing.get_origin(tp) in (list, tuple) and tp is not tuple


def _sequence_factory(tp: Any) -> Callable[[Any, Any], Any]:
    if typing.get_origin(tp) is tuple:
        inner = cattrs.cols.homogenous_tuple_structure_factory(tp, converter)
    else:
        inner = cattrs.cols.list_structure_factory(tp, converter)

    def structure_sequence(data: Any, cls: Any) -> Any:
        # cattrs would iterate any iterable: a string would become a list of characters.
        if not isinstance(data, list | tuple):
            msg = f"expected a list, got {type(data).__name__}"
            raise _PayloadError(msg)
        return inner(data, cls)

    return structure_sequence


# Predicate hooks: the JSON preconf's union passthrough would otherwise win over
# hooks registered by type (later function hooks take precedence).
converter.register_structure_hook_factory(_is_sequence, _sequence_factory)
converter.register_structure_hook_factory(_is_plain_json_union, _plain_union_factory)
converter.register_structure_hook_func(_is_optional_literal, _structure_optional_literal)
converter.register_structure_hook_func(lambda t: t == ContentBlock, _structure_block)
converter.register_structure_hook_func(lambda t: t == str | list[ContentBlock], _structure_content)
for _block_cls in BLOCK_TYPES.values():
    converter.register_unstructure_hook(_block_cls, _unstructure_block(_block_cls))
converter.register_unstructure_hook(ContentBlock, lambda b: converter.unstructure(b, type(b)))


def _describe(exc: BaseException, expected: Any) -> str:
    if isinstance(exc, _PayloadError):
        return str(exc)
    if isinstance(exc, KeyError):
        return "required field missing"
    if typing.get_origin(expected) is typing.Literal:
        choices = ", ".join(repr(a) for a in get_args(expected))
        return f"must be one of {choices}"
    if isinstance(exc, ValueError) and str(exc):
        return str(exc)
    name = getattr(expected, "__name__", None) or str(expected)
    if isinstance(exc, TypeError):
        return f"expected {name}: {exc}"
    return f"invalid value, expected {name}"


def _readable(path: str) -> str:
    return path.removeprefix("$").removeprefix(".") or "<root>"


def structure(data: Any, cls: type[T]) -> T:
    """Build a ``cls`` from plain data, or raise
    [`ValidationError`][amplifier_anyio.ValidationError] naming each path.

    >>> structure({"role": "user", "content": [{"type": "txt"}]}, Message)
    Traceback (most recent call last):
    ValidationError: content[0]: unknown block type 'txt'
    """
    try:
        return converter.structure(data, cls)
    except (cattrs.BaseValidationError, cattrs.StructureHandlerNotFoundError) as exc:
        lines = cattrs.transform_error(exc, path="$", format_exception=_describe)
        raise ValidationError([_split(line) for line in lines]) from exc
    except ConfigError as exc:  # a field's validator: its message already names the field
        raise ValidationError([str(exc)]) from exc
    except (ValueError, TypeError, KeyError) as exc:
        raise ValidationError([f"{cls.__name__}: {_describe(exc, cls)}"]) from exc


def _split(line: str) -> str:
    message, _, path = line.rpartition(" @ ")
    if message and path == "$":  # a validator of the whole value: its message names the field
        return message
    return f"{_readable(path)}: {message}" if message else line


def unstructure(obj: Any) -> Any:
    """Turn a model (or a list / dict of models) into JSON-ready plain data."""
    return converter.unstructure(obj)
