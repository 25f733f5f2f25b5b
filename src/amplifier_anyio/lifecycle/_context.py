"""ExecutionContext: the immutable context every stage, step and event carries."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

import attrs

from ..errors import ValidationError
from ._frozen import FrozenDict, freeze, thaw

__all__ = ("ExecutionContext",)

_TEXT_FIELDS = (
    "request_id",
    "profile",
    "user_intent",
    "user_id",
    "memory_scope",
    "conversation_id",
    "session_id",
)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _to_utc(value: Any) -> dt.datetime:
    if isinstance(value, str):
        try:
            value = dt.datetime.fromisoformat(value)
        except ValueError:
            msg = f"created_at: not an ISO-8601 time: {value!r}"
            raise ValueError(msg) from None
    if not isinstance(value, dt.datetime):
        msg = f"created_at: expected a datetime, got {type(value).__name__}"
        raise TypeError(msg)
    if value.tzinfo is None or value.utcoffset() is None:
        msg = "created_at: a naive datetime is ambiguous (give it a time zone)"
        raise ValueError(msg)
    return value.astimezone(dt.UTC)


def _frozen_metadata(value: Mapping[str, Any] | None) -> FrozenDict:
    frozen = freeze(value or {})
    if not isinstance(frozen, FrozenDict):
        msg = f"metadata: expected a mapping, got {type(value).__name__}"
        raise TypeError(msg)
    return frozen


def _non_empty(_inst: object, attribute: attrs.Attribute[str], value: object) -> None:
    if not isinstance(value, str) or not value:
        msg = f"{attribute.name}: required (a non-empty string)"
        raise ValueError(msg)


def _text(_inst: object, attribute: attrs.Attribute[str], value: object) -> None:
    if not isinstance(value, str):
        msg = f"{attribute.name}: expected a string, got {type(value).__name__}"
        raise TypeError(msg)


@attrs.frozen(kw_only=True)
class ExecutionContext:
    """The immutable context passed through an orchestration, and nested ones.

    ``metadata`` is deeply read-only: mappings in it are
    [`FrozenDict`][amplifier_anyio.lifecycle.FrozenDict], lists are tuples, sets frozensets, and
    every attempt to change it raises `TypeError`. A context is hashable and compares by value.
    ``created_at`` is an aware UTC time.

    ``with_metadata`` / ``with_request_id`` / ``with_profile`` return a new context at
    the same level (same parent); ``child(**changes)`` returns a nested one whose
    ``parent_context`` is this context. ``to_dict`` / ``from_dict`` round-trip exactly,
    parents included.
    """

    trace_id: str = attrs.field(validator=_non_empty)
    request_id: str = attrs.field(default="", validator=_text)
    profile: str = attrs.field(default="default", validator=_text)
    user_intent: str = attrs.field(default="", validator=_text)
    user_id: str = attrs.field(default="", validator=_text)
    memory_scope: str = attrs.field(default="", validator=_text)
    conversation_id: str = attrs.field(default="", validator=_text)
    session_id: str = attrs.field(default="", validator=_text)
    metadata: FrozenDict = attrs.field(factory=FrozenDict, converter=_frozen_metadata)
    parent_context: ExecutionContext | None = attrs.field(default=None)
    created_at: dt.datetime = attrs.field(factory=_now, converter=_to_utc)

    @parent_context.validator
    def _check_parent(self, _attribute: attrs.Attribute[Any], value: Any) -> None:
        if value is not None and not isinstance(value, ExecutionContext):
            msg = f"parent_context: expected an ExecutionContext, got {type(value).__name__}"
            raise TypeError(msg)

    # -- derived contexts ------------------------------------------------------------------

    def with_metadata(self, **kwargs: Any) -> ExecutionContext:
        """This context with ``kwargs`` merged into its metadata (same level, same parent)."""
        return attrs.evolve(self, metadata={**self.metadata, **kwargs})

    def with_request_id(self, request_id: str) -> ExecutionContext:
        """This context with another request id (same level, same parent)."""
        return attrs.evolve(self, request_id=request_id)

    def with_profile(self, profile: str) -> ExecutionContext:
        """This context with another profile (same level, same parent)."""
        return attrs.evolve(self, profile=profile)

    def child(self, **changes: Any) -> ExecutionContext:
        """A nested context: this one's fields with ``changes``, a fresh ``created_at``,
        and this context as its ``parent_context``."""
        if "parent_context" in changes:
            msg = "child(): parent_context is this context; it cannot be given"
            raise TypeError(msg)
        changes.setdefault("created_at", _now())
        return attrs.evolve(self, parent_context=self, **changes)

    @property
    def depth(self) -> int:
        """How many parents this context has."""
        depth, parent = 0, self.parent_context
        while parent is not None:
            depth, parent = depth + 1, parent.parent_context
        return depth

    def validate(self) -> list[str]:
        """The problems of this context and its parents (empty when it is consistent).

        A memory scope needs a user id, a conversation id needs a session id, and a
        nested context keeps its parent's trace id.
        """
        problems: list[str] = []
        if self.memory_scope and not self.user_id:
            problems.append("memory_scope is set but user_id is empty")
        if self.conversation_id and not self.session_id:
            problems.append("conversation_id is set but session_id is empty")
        parent = self.parent_context
        if parent is not None:
            if parent.trace_id != self.trace_id:
                problems.append(
                    f"trace_id {self.trace_id!r} differs from the parent's {parent.trace_id!r}"
                )
            problems.extend(f"parent_context: {p}" for p in parent.validate())
        return problems

    # -- serialisation ---------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """Plain data (metadata thawed to dicts and lists, the time as ISO-8601), parents
        included: ``ExecutionContext.from_dict(c.to_dict()) == c``."""
        data: dict[str, Any] = {"trace_id": self.trace_id}
        data.update((name, getattr(self, name)) for name in _TEXT_FIELDS)
        data["metadata"] = thaw(self.metadata)
        data["parent_context"] = (
            None if self.parent_context is None else self.parent_context.to_dict()
        )
        data["created_at"] = self.created_at.isoformat()
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ExecutionContext:
        """The context [`to_dict`][amplifier_anyio.lifecycle.ExecutionContext.to_dict] described.

        Raises [`ValidationError`][amplifier_anyio.ValidationError] whose lines name the path
        of each problem (``parent_context.trace_id: required ...``).
        """
        return cls._from_dict(data, "")

    @classmethod
    def _from_dict(cls, data: Any, path: str) -> ExecutionContext:
        if not isinstance(data, Mapping):
            raise ValidationError([f"{path or '$'}: expected a mapping, got {type(data).__name__}"])
        known = {a.name for a in attrs.fields(cls)}
        unknown = sorted(str(k) for k in data if k not in known)
        if unknown:
            raise ValidationError([f"{path}{key}: unknown field" for key in unknown])
        fields = dict(data)
        parent = fields.pop("parent_context", None)
        if parent is not None:
            fields["parent_context"] = cls._from_dict(parent, f"{path}parent_context.")
        if "trace_id" not in fields:
            raise ValidationError([f"{path}trace_id: required"])
        try:
            return cls(**fields)
        except (TypeError, ValueError) as exc:
            raise ValidationError([f"{path}{exc}"]) from exc
