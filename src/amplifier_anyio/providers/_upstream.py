"""Our providers called by an upstream (amplifier-core) orchestrator.

Upstream's loops build a pydantic ``ChatRequest``, call ``provider.complete(request)``
and read the answer the way they read amplifier-core's pydantic models: attributes
(``response.content``, ``.tool_calls``, ``.usage``, ``block.type``…) and
``model_dump()``. `answers_upstream` wraps a provider's ``complete``: a request of ours
goes through untouched and gets our [`ChatResponse`][amplifier_anyio.ChatResponse]; any
other request (recognised by its shape, amplifier_core is never imported) is converted by
``kernel._foreign.chat_request_of``, and its caller gets the answer in an `UpstreamView`
and our errors as amplifier-core's error classes as well, so that upstream's
``except LLMError`` sees them. Our own models stay as they are.

Only ``complete`` serves upstream callers. Our streaming contract is ``open_stream()``;
a provider of ours has no ``stream`` attribute, because upstream loop-streaming takes a
path that never runs tool calls whenever a provider has one (``docs/upstream.md``).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Awaitable, Callable, Mapping
from decimal import Decimal
from typing import Any, TypeVar, cast

import attrs

from ..errors import LLMError
from ..models import ChatRequest, ChatResponse

__all__ = ("answers_upstream", "UpstreamView", "upstream_error", "unwrap")

F = TypeVar("F", bound=Callable[..., Awaitable[ChatResponse]])

_UPSTREAM_ERRORS = "amplifier_core.llm_errors"
_MIXED: dict[tuple[type[LLMError], type[Exception]], type[LLMError]] = {}
_UPSTREAM_ONLY: dict[type, Mapping[str, Any]] = {ChatResponse: {"degradation": None}}
"""Fields amplifier-core's model has and ours lacks, with the value ours means."""


def answers_upstream(complete: F) -> F:
    """Let ``complete`` (a provider method) serve upstream callers too.

    The declared signature is kept for our callers; at run time a request that is not our
    ``ChatRequest`` is converted, the answer comes back as an `UpstreamView` and an
    ``LLMError`` as `upstream_error` makes it. The session learns how each such call
    ended (``kernel._foreign.provider_call_ended``), so that an orchestrator that swallows
    the error still fails its turn.
    """

    @functools.wraps(complete)
    async def serve(self: Any, request: Any, /, *args: Any, **kwargs: Any) -> Any:
        if isinstance(request, ChatRequest):
            return await complete(self, request, *args, **kwargs)
        # Only an upstream caller pays for the kernel's converters.
        from ..kernel._foreign import chat_request_of, provider_call_ended  # noqa: PLC0415

        try:
            ours = chat_request_of(request, origin=f"provider {self.name!r}")
            response = await complete(self, ours, *args, **kwargs)
        except Exception as exc:
            provider_call_ended(exc)
            if isinstance(exc, LLMError):
                raise upstream_error(exc) from exc
            raise
        provider_call_ended(None)
        return UpstreamView(response)

    return cast("F", serve)


def unwrap(value: Any) -> Any:
    """The value of ours inside an `UpstreamView` (anything else as it is)."""
    return object.__getattribute__(value, "_value") if isinstance(value, UpstreamView) else value


class UpstreamView:
    """One of our attrs values read the way amplifier-core's pydantic models are read.

    Attributes are the value's own (attrs values and lists of them inside are viewed the
    same way; a content block's ``type`` is its tag); ``model_dump()`` gives every field,
    as pydantic does, with the block's ``type``; a field only upstream's model has
    (``ChatResponse.degradation``) reads as None. ``unwrap`` gives the value back.
    """

    __slots__ = ("_value",)

    def __init__(self, value: Any) -> None:
        object.__setattr__(self, "_value", value)

    def __getattr__(self, name: str) -> Any:
        value = object.__getattribute__(self, "_value")
        try:
            found = getattr(value, name)
        except AttributeError:
            defaults = _UPSTREAM_ONLY.get(type(value), {})
            if name in defaults:
                return defaults[name]
            raise
        return _view(found)

    def __setattr__(self, name: str, value: Any) -> None:
        msg = f"{type(unwrap(self)).__name__} is read-only"
        raise AttributeError(msg)

    def model_dump(
        self, *, mode: str = "python", exclude_none: bool = False, **_options: Any
    ) -> dict[str, Any]:
        """Every field as plain data, as pydantic's ``model_dump`` gives it: with
        ``mode="json"`` a ``Decimal`` (``Usage.cost_usd``) is its text; other options
        change nothing here."""
        dumped: dict[str, Any] = _dump(unwrap(self), exclude_none=exclude_none, json=mode == "json")
        return dumped

    def model_dump_json(self, *, exclude_none: bool = False, **_options: Any) -> str:
        """``model_dump(mode="json")`` as JSON text."""
        import json  # noqa: PLC0415 - rarely asked for

        return json.dumps(self.model_dump(mode="json", exclude_none=exclude_none))

    def __eq__(self, other: object) -> bool:
        return bool(unwrap(self) == unwrap(other))

    def __hash__(self) -> int:
        return hash(unwrap(self))

    def __repr__(self) -> str:
        return f"UpstreamView({unwrap(self)!r})"


def _view(value: Any) -> Any:
    if attrs.has(type(value)):
        return UpstreamView(value)
    if isinstance(value, list):
        return [_view(item) for item in value]
    return value


def _dump(value: Any, *, exclude_none: bool, json: bool) -> Any:
    if json and isinstance(value, Decimal):
        return str(value)
    if attrs.has(type(value)):
        fields: dict[str, Any] = {}
        tag = getattr(type(value), "type", None)
        if isinstance(tag, str):  # a content block: its tag is a class attribute here
            fields["type"] = tag
        for field in attrs.fields(type(value)):
            item = getattr(value, field.name)
            if item is None and exclude_none:
                continue
            fields[field.name] = _dump(item, exclude_none=exclude_none, json=json)
        return fields
    if isinstance(value, list | tuple):
        return [_dump(item, exclude_none=exclude_none, json=json) for item in value]
    if isinstance(value, dict):
        return {k: _dump(v, exclude_none=exclude_none, json=json) for k, v in value.items()}
    return value


def upstream_error(exc: LLMError) -> LLMError:
    """``exc`` as an instance of our class and of amplifier-core's class of the same name
    too (``RateLimitError``…, else its ``LLMError``), when an upstream module has loaded
    ``amplifier_core.llm_errors``; else ``exc`` itself.

    Upstream loops catch ``amplifier_core.llm_errors.LLMError`` to report ``retryable``
    and ``status_code`` before re-raising; the error keeps every field of ours, and
    upstream's ``delay_multiplier`` (1.0).
    """
    module = sys.modules.get(_UPSTREAM_ERRORS)  # loaded by the caller; never imported here
    if module is None:
        return exc
    ours = type(exc)
    theirs = next(
        (
            found
            for cls in ours.__mro__
            if isinstance(found := getattr(module, cls.__name__, None), type)
            and issubclass(found, Exception)
        ),
        None,
    )
    if theirs is None or isinstance(exc, theirs):
        return exc
    mixed = _MIXED.get((ours, theirs))
    if mixed is None:
        mixed = cast(
            "type[LLMError]",
            type(ours.__name__, (ours, theirs), {"__module__": ours.__module__}),
        )
        _MIXED[(ours, theirs)] = mixed
    translated = Exception.__new__(mixed, *exc.args)
    translated.__dict__.update(exc.__dict__)
    translated.__dict__.setdefault("delay_multiplier", 1.0)
    return translated
