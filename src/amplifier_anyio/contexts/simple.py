"""context-simple: the whole conversation in memory, a compacted view per request.

History is never changed by compaction: :meth:`SimpleContextManager.get_messages` always
returns everything that was added. :meth:`~SimpleContextManager.get_messages_for_request`
returns everything while the history's estimate stays at or under
``compaction_threshold x budget``; above it, the view of
:func:`~amplifier_anyio.contexts.compaction.compact` sized to ``target_usage x budget``
(or to the whole budget when the protected messages alone are larger than that), and the
``context:pre_compact`` / ``context:post_compact`` events are emitted.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import anyio.lowlevel

from ..config_schema import ConfigSchema, Setting
from ..errors import ConfigError, ValidationError
from ..events import CONTEXT_POST_COMPACT, CONTEXT_PRE_COMPACT
from ..kernel._foreign import plain_message
from ._messages import copy_message, estimate_tokens, hand_out
from .compaction import Estimator, _compact

if TYPE_CHECKING:
    from ..interfaces import Cleanup

__all__ = ("SimpleContextManager", "mount", "settings_from_config", "DEFAULTS")

logger = logging.getLogger(__name__)

DEFAULTS: dict[str, Any] = {
    "max_tokens": 200_000,
    "compaction_threshold": 0.92,
    "target_usage": 0.5,
    "safety_margin": 1000,
}
"""Configuration defaults shared by context-simple and context-persistent."""


class SimpleContextManager:
    """An in-memory :class:`~amplifier_anyio.interfaces.ContextManager` with compaction.

    ``max_tokens`` is the budget when neither the call nor the provider gives one;
    ``compaction_threshold`` is the fraction of the budget above which the view is
    compacted, down to ``target_usage`` of the budget; ``safety_margin`` is subtracted
    from a provider's ``context_window - max_output_tokens``. ``estimator`` estimates
    one message (default: about characters / 4 of its JSON); estimates are made once,
    when a message is added. ``hooks`` is anything with ``async emit(event, data)``.
    """

    def __init__(
        self,
        *,
        max_tokens: int = DEFAULTS["max_tokens"],
        compaction_threshold: float = DEFAULTS["compaction_threshold"],
        target_usage: float = DEFAULTS["target_usage"],
        safety_margin: int = DEFAULTS["safety_margin"],
        estimator: Estimator | None = None,
        hooks: Any | None = None,
    ) -> None:
        _check_settings(max_tokens, compaction_threshold, target_usage, safety_margin)
        self.max_tokens = max_tokens
        self.compaction_threshold = compaction_threshold
        self.target_usage = target_usage
        self.safety_margin = safety_margin
        self.estimator: Estimator = estimator or estimate_tokens
        self.hooks = hooks
        self._messages: list[dict[str, Any]] = []
        self._costs: list[int] = []
        # one slot per stored message for its converted Message (see _messages.hand_out)
        self._slots: list[list[Any]] = []
        self._total = 0

    @property
    def token_estimate(self) -> int:
        """The estimated size of the whole history, in tokens."""
        return self._total

    async def add_message(self, message: dict[str, Any]) -> None:
        """Append a copy of ``message`` to the history. Always accepted once it has a role."""
        stored, cost = self._prepare(message)
        await anyio.lowlevel.checkpoint()
        self._append(stored, cost)

    async def add_messages(self, messages: list[dict[str, Any]]) -> None:
        """Append copies of several messages at once (one tool batch's results)."""
        prepared = [self._prepare(message) for message in messages]
        await anyio.lowlevel.checkpoint()
        for stored, cost in prepared:
            self._append(stored, cost)

    async def get_messages(self) -> list[dict[str, Any]]:
        """The full history: a deep copy, so callers cannot change it."""
        await self._ready()
        return [copy_message(message) for message in self._messages]

    async def set_messages(self, messages: list[dict[str, Any]]) -> None:
        """Replace the history with copies of ``messages``."""
        prepared = [self._prepare(message) for message in messages]
        await self._ready()
        self._replace(prepared)

    async def clear(self) -> None:
        """Forget every message."""
        await self._ready()
        self._replace([])

    async def get_messages_for_request(
        self, token_budget: int | None = None, provider: Any | None = None
    ) -> list[dict[str, Any]]:
        """The messages to send now: all of them, or a compacted view (copies either way)."""
        await self._ready()
        budget = self.resolve_budget(token_budget, provider)
        # a snapshot: emitting events awaits, and other tasks may add messages meanwhile
        messages, costs, total = list(self._messages), list(self._costs), self._total
        slots = self._slots  # replaced, never changed in place, by set_messages / clear
        if total <= self.compaction_threshold * budget:
            return hand_out(messages, slots[: len(messages)])  # unused if the lengths differ
        target = int(budget * self.target_usage)
        await self._emit(
            CONTEXT_PRE_COMPACT,
            {"messages": len(messages), "tokens": total, "budget": budget, "target": target},
        )
        outcome = _compact(messages, target, self.estimator, costs)
        if outcome.protected_tokens > target:
            # the protected messages alone fill the target: use the whole budget instead
            target = budget
            outcome = _compact(messages, target, self.estimator, costs)
        await self._emit(
            CONTEXT_POST_COMPACT,
            {
                "messages_before": len(messages),
                "messages_after": len(outcome.messages),
                "messages_dropped": outcome.dropped,
                "tokens_before": total,
                "tokens_after": outcome.tokens,
                "budget": budget,
                "target": target,
            },
        )
        if outcome.kept is None or len(slots) < len(messages):
            return [copy_message(message) for message in outcome.messages]
        # the view's own slots: the kept messages' (in order), a fresh one for the notice
        by_id = {id(messages[index]): slots[index] for index in outcome.kept}
        return hand_out(outcome.messages, [by_id.get(id(m), []) for m in outcome.messages])

    async def should_compact(self) -> bool:
        """Whether the stored history needs compacting: never (amplifier-core's protocol).

        Compaction here is of the view each request gets
        (:meth:`get_messages_for_request`), never of the history; so, as upstream's
        context-simple, this is False and :meth:`compact` does nothing. Upstream
        orchestrators call both after each tool round.
        """
        await anyio.lowlevel.checkpoint()
        return False

    async def compact(self) -> None:
        """Nothing to do: the history is never compacted (see :meth:`should_compact`)."""
        await anyio.lowlevel.checkpoint()

    def resolve_budget(self, token_budget: int | None = None, provider: Any | None = None) -> int:
        """The request budget: the argument, else the provider's window, else ``max_tokens``."""
        if token_budget is not None:
            return token_budget
        if provider is not None:
            from_provider = self._provider_budget(provider)
            if from_provider is not None:
                return from_provider
        return self.max_tokens

    def _provider_budget(self, provider: Any) -> int | None:
        try:
            info = provider.get_info()
        except Exception:
            logger.exception("provider.get_info() failed; using max_tokens")
            return None
        defaults = info.get("defaults") if isinstance(info, Mapping) else info.defaults
        if not isinstance(defaults, Mapping):
            return None
        window = defaults.get("context_window")
        output = defaults.get("max_output_tokens")
        if not isinstance(window, int) or not isinstance(output, int):
            return None
        budget = window - output - self.safety_margin
        if budget <= 0:
            logger.warning("provider window %d leaves no room for input; using max_tokens", window)
            return None
        return budget

    def _prepare(self, message: Any) -> tuple[dict[str, Any], int]:
        if not isinstance(message, Mapping):
            raise ValidationError([f"message: expected a dict, got {type(message).__name__}"])
        if not isinstance(message.get("role"), str):
            raise ValidationError(["message.role: required (a string)"])
        # An amplifier-core orchestrator stores its pydantic blocks as they are.
        stored = copy_message(plain_message(dict(message)))
        return stored, self.estimator(stored)

    def _append(self, stored: dict[str, Any], cost: int) -> None:
        self._messages.append(stored)
        self._costs.append(cost)
        self._slots.append([])
        self._total += cost

    def _replace(self, prepared: list[tuple[dict[str, Any], int]]) -> None:
        self._messages = [stored for stored, _ in prepared]
        self._costs = [cost for _, cost in prepared]
        self._slots = [[] for _ in prepared]
        self._total = sum(self._costs)

    async def _ready(self) -> None:
        """Await whatever must happen before the history is read (a checkpoint here)."""
        await anyio.lowlevel.checkpoint()

    async def _emit(self, event: str, data: dict[str, Any]) -> None:
        if self.hooks is None:
            return
        try:
            await self.hooks.emit(event, data)
        except Exception:
            # a broken hook must not cost the request its messages
            logger.exception("emitting %s failed", event)


_ALIASES = {"compaction_threshold": ("compaction_threshold", "compact_threshold")}
"""Config keys read for a setting, first found wins (Amplifier says ``compact_threshold``)."""


def _check_setting(setting: str, value: object, label: str) -> None:
    """Raise ``ConfigError("<label>: expected ..., got <value>")`` unless ``value`` fits.

    ``max_tokens`` is an int > 0 and ``safety_margin`` an int >= 0; the two fractions are
    finite real numbers with 0 < value <= 1. A bool is never a number here.
    """
    if isinstance(value, bool):
        ok = False
    elif setting in ("max_tokens", "safety_margin"):
        ok = isinstance(value, int) and value >= (1 if setting == "max_tokens" else 0)
    else:
        ok = isinstance(value, int | float) and 0 < value <= 1  # NaN fails the comparison
    if not ok:
        expected = {
            "max_tokens": "a positive integer",
            "safety_margin": "an integer >= 0",
        }.get(setting, "a number with 0 < value <= 1")
        raise ConfigError(f"{label}: expected {expected}, got {value!r}")


def _check_settings(
    max_tokens: int, threshold: float, target_usage: float, safety_margin: int
) -> None:
    _check_setting("max_tokens", max_tokens, "max_tokens")
    _check_setting("compaction_threshold", threshold, "compaction_threshold")
    _check_setting("target_usage", target_usage, "target_usage")
    _check_setting("safety_margin", safety_margin, "safety_margin")


def settings_from_config(
    config: Mapping[str, Any], module: str = "context-simple"
) -> dict[str, Any]:
    """The constructor keywords for a module config, every value checked.

    A missing or null key takes its default (``compact_threshold`` is accepted for
    ``compaction_threshold``). A bad value raises :class:`ConfigError` naming the key as
    ``<module>.<key>``, e.g. ``context-simple.max_tokens: expected a positive integer,
    got 'lots'``.
    """
    settings = dict(DEFAULTS)
    for setting in DEFAULTS:
        for key in _ALIASES.get(setting, (setting,)):
            value = config.get(key)
            if value is not None:
                _check_setting(setting, value, f"{module}.{key}")
                settings[setting] = value
                break
    return settings


async def mount(coordinator: Any, config: dict[str, Any] | None = None) -> Cleanup | None:
    """Entry point of ``context-simple``: build from ``config`` and mount at ``context``."""
    manager = SimpleContextManager(
        **settings_from_config(config or {}), hooks=getattr(coordinator, "hooks", None)
    )
    await coordinator.mount("context", manager)
    return None


_SETTINGS = {
    "max_tokens": Setting((int,), "token budget when the provider gives none"),
    "compaction_threshold": Setting((float,), "share of the budget that triggers compaction"),
    "target_usage": Setting((float,), "share of the budget kept after compaction"),
    "safety_margin": Setting((int,), "tokens kept free for the answer"),
}

CONFIG_SCHEMA = ConfigSchema(
    "context-simple", _SETTINGS, aliases={"compact_threshold": "compaction_threshold"}
)
"""The keys context-simple accepts (Amplifier's ``compact_threshold`` too)."""
