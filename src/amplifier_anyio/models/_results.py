"""Tool results, hook results and context injections."""

from __future__ import annotations

import json
import re
from decimal import Decimal
from typing import Any, Literal, TypeAlias

import attrs

from ._validators import one_of

__all__ = (
    "HookAction",
    "HOOK_ACTIONS",
    "ToolResult",
    "HookResult",
    "ContextInjection",
)

HookAction: TypeAlias = Literal["continue", "deny", "modify", "inject_context", "ask_user"]
HOOK_ACTIONS: tuple[HookAction, ...] = ("continue", "deny", "modify", "inject_context", "ask_user")
"""The five hook actions, in no particular precedence."""

_INJECTION_ROLES = ("system", "user", "assistant")
_MESSAGE_LEVELS = ("info", "warning", "error")

# Control characters (C0 except tab/newline/CR, DEL, C1) and lone surrogates break
# providers' JSON parsers, so tool output never carries them.
_UNSAFE_CHARS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff]")


def _json_default(value: object) -> str:
    if isinstance(value, Decimal):
        return str(value)
    msg = f"Object of type {type(value).__name__} is not JSON serializable"
    raise TypeError(msg)


@attrs.frozen(kw_only=True)
class ToolResult:
    """What a tool returns.

    A failure with no output takes ``error["message"]`` as its output, as upstream does.
    """

    success: bool = True
    output: Any = None
    error: dict[str, Any] | None = None

    def __attrs_post_init__(self) -> None:
        if not self.success and self.output is None and self.error and "message" in self.error:
            object.__setattr__(self, "output", self.error["message"])

    def get_serialized_output(self) -> str:
        """The output as the text a model sees.

        JSON for a dict or list (Decimals as strings), ``str()`` otherwise, with control
        characters and lone surrogates removed; ``Success`` / ``Error: …`` when empty.
        """
        if self.output is None:
            return "Success" if self.success else f"Error: {self._error_message()}"
        if isinstance(self.output, dict | list):
            text = json.dumps(self.output, default=_json_default)
        else:
            text = str(self.output)
        if text.isprintable():  # no control character, no surrogate: nothing to remove
            return text
        return _UNSAFE_CHARS.sub("", text)

    def _error_message(self) -> str:
        if self.error and "message" in self.error:
            return str(self.error["message"])
        return "Failed"

    def __str__(self) -> str:
        if self.success:
            return "Success" if self.output is None else str(self.output)
        return f"Error: {self._error_message()}" if self.error else "Failed"


@attrs.frozen(kw_only=True)
class ContextInjection:
    """One injection a hook asked for, as recorded by the coordinator."""

    content: str
    role: Literal["system", "user", "assistant"] = attrs.field(
        default="system", validator=one_of(_INJECTION_ROLES)
    )
    ephemeral: bool = False
    append_to_last_tool_result: bool = False
    hook_name: str = "unknown"
    event: str = ""


@attrs.frozen(kw_only=True, slots=False)
class HookResult:
    """What a hook handler answers.

    ``action`` is exactly one of [`HOOK_ACTIONS`][amplifier_anyio.models.HOOK_ACTIONS]; the other
    closed fields (roles, levels, the approval default) are checked when the object is built.
    """

    action: HookAction = attrs.field(default="continue", validator=one_of(HOOK_ACTIONS))
    data: dict[str, Any] | None = None
    reason: str | None = None
    context_injection: str | None = None
    context_injection_role: Literal["system", "user", "assistant"] = attrs.field(
        default="system", validator=one_of(_INJECTION_ROLES)
    )
    ephemeral: bool = False
    approval_prompt: str | None = None
    approval_options: list[str] | None = None
    approval_timeout: float = 300.0
    approval_default: Literal["allow", "deny", "defer"] = attrs.field(
        default="deny", validator=one_of(("allow", "deny", "defer"))
    )
    """What applies when nobody answers in time (or there is nobody to ask): ``defer``
    holds a ``tool:pre`` call for an approval that outlives the turn (a denial elsewhere)."""
    suppress_output: bool = False
    user_message: str | None = None
    user_message_level: Literal["info", "warning", "error"] = attrs.field(
        default="info", validator=one_of(_MESSAGE_LEVELS)
    )
    user_message_source: str | None = None
    append_to_last_tool_result: bool = False
    priority: int = 0


# Every emit returns a HookResult, so building one is on the hot path of every event. The
# registry's own results ("continue" / "modify" with data) are known to be valid, so they
# skip the validated __init__ (which costs more than the rest of an emit): such a result's
# attribute dict holds only ``data`` (and ``action`` unless it is "continue"), and every
# other field reads its default from the class. attrs removes the class attributes of
# fields; they are put back here (every default is an immutable value), which changes
# nothing for objects built by __init__, whose attribute dict holds every field.
_TRUSTED = frozenset({"data"})
for _field in attrs.fields(HookResult):
    if _field.name not in _TRUSTED:
        setattr(HookResult, _field.name, _field.default)
del _field
_new = object.__new__


def _trusted_result(action: Literal["continue", "modify"], data: dict[str, Any]) -> HookResult:
    """A ``continue``/``modify`` HookResult carrying ``data``, built without validation."""
    result = _new(HookResult)
    fields = result.__dict__
    fields["action"] = action
    fields["data"] = data
    return result
