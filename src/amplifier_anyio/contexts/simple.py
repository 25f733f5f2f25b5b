"""context-simple: the whole conversation in memory, a compacted view per request.

History is never changed by compaction:
[`SimpleContextManager.get_messages`][amplifier_anyio.contexts.SimpleContextManager.get_messages]
always returns everything that was added.
[`get_messages_for_request`][amplifier_anyio.contexts.SimpleContextManager.get_messages_for_request]
returns everything while the history's estimate stays at or under ``compaction_threshold x budget``.
Above it the view is compacted, as [`compact`][amplifier_anyio.contexts.compact] does, to
``target_usage x budget`` (or to the whole budget when the protected messages alone are larger than
that), and the ``context:pre_compact`` / ``context:post_compact`` events are emitted. The decision
is sticky: later requests keep the same cut and add what was added since, until the view's own
estimate exceeds the threshold again; only then is it compacted further.

[`request_view`][amplifier_anyio.contexts.SimpleContextManager.request_view] gives the same view as
converted ``Message`` models with every tool call answered, for the turn engine: kept from one
request to the next, so a request costs what was added since the last one, not the whole history.
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
from ._messages import copy_message, estimate_tokens, flat_cost, stored_model, to_model
from ._view import NOTICE, Cut, Repair, RequestView, Units
from .compaction import Estimator, compaction_notice

if TYPE_CHECKING:
    from ..models import Message

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
    """An in-memory [`ContextManager`][amplifier_anyio.interfaces.ContextManager] with compaction.

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
        self._total = 0
        # the request view, kept from one request to the next (see _view)
        self._models: list[Message | None] = []  # each stored message's, once converted
        self._units: Units | None = None  # built once compaction is needed
        self._reshaped = False  # an older unit changed since the view was last built
        self._cut: Cut | None = None  # None: the view is the whole history
        self._repair = Repair()
        self._notices: dict[int, tuple[dict[str, Any], int]] = {}
        self._notice_model: tuple[int, Message] | None = None

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
        """The messages to send now: all of them, or the compacted view (copies either way).

        Unanswered tool calls are left as they are (the turn engine answers them); see
        [`request_view`][amplifier_anyio.contexts.SimpleContextManager.request_view] for the form
        the turn engine uses.
        """
        await self._ready()
        events = self._update_view(self.resolve_budget(token_budget, provider))
        length, dict_at, _ = self._sequence()
        messages = [copy_message(dict_at(position)) for position in range(length)]
        await self._emit_all(events)
        return messages

    async def request_view(
        self, token_budget: int | None = None, provider: Any | None = None
    ) -> RequestView:
        """The view of
        [`get_messages_for_request`][amplifier_anyio.contexts.SimpleContextManager.get_messages_for_request]
        as the request sends it.

        The same messages (the same compaction, the same events), as this context's own
        converted [`Message`][amplifier_anyio.Message] models, with every tool call
        that no ``role: tool`` message right after it answers answered by the lost-result
        message (the turn engine's repair; its ids in ``repaired``). Nothing is copied:
        the models are shared from one request to the next and must not be changed. The
        work is proportional to what was added since the previous request.
        """
        await self._ready()
        events = self._update_view(self.resolve_budget(token_budget, provider))
        length, dict_at, model_at = self._sequence()
        cut = self._cut
        trailer: tuple[Message, ...] = ()
        if cut is not None and cut.notice and not cut.placed:
            trailer = (model_at(NOTICE),)
        view = self._repair.view(
            length - len(trailer), dict_at, model_at, trailer
        )  # the trailer is not part of the final run
        await self._emit_all(events)
        return view

    # -- the view (see _view) ------------------------------------------------------------

    def _sequence(
        self,
    ) -> tuple[int, Any, Any]:
        """``(length, dict_at, model_at)`` of the current view by position (``model_at``
        also takes `NOTICE`); the notice at the end counts in ``length``."""
        messages, models, cut = self._messages, self._models, self._cut

        def model_of(index: int) -> Message:
            if index == NOTICE:
                return self._notice_message()
            model = models[index]
            if model is None:
                model = models[index] = stored_model(messages[index])
            return model

        if cut is None:
            return len(messages), messages.__getitem__, model_of
        keys = cut.keys
        trailing = cut.notice and not cut.placed

        def dict_at(position: int) -> dict[str, Any]:
            key = keys[position] if position < len(keys) else NOTICE
            return self._notice_dict() if key == NOTICE else messages[key]

        def model_at(position: int) -> Message:
            if position == NOTICE:
                return model_of(NOTICE)
            return model_of(keys[position] if position < len(keys) else NOTICE)

        return len(keys) + trailing, dict_at, model_at

    def _notice(self, dropped: int) -> tuple[dict[str, Any], int]:
        found = self._notices.get(dropped)
        if found is None:
            notice = compaction_notice(dropped)
            found = self._notices[dropped] = (notice, self.estimator(notice))
        return found

    def _notice_dict(self) -> dict[str, Any]:
        assert self._cut is not None
        return self._notice(self._cut.dropped)[0]

    def _notice_message(self) -> Message:
        assert self._cut is not None
        dropped = self._cut.dropped
        if self._notice_model is None or self._notice_model[0] != dropped:
            self._notice_model = (dropped, to_model(self._notice(dropped)[0]))
        return self._notice_model[1]

    def _update_view(self, budget: int) -> list[tuple[str, dict[str, Any]]]:
        """Bring the view up to date for ``budget``; the events to emit (no await here,
        so the view is one consistent state)."""
        if self._total <= self.compaction_threshold * budget:
            if self._cut is not None:  # everything fits again
                self._cut = None
                self._repair.reset()
            return []
        units = self._feed_units()
        cut = self._cut
        if cut is None:
            cut = self._cut = Cut()
            self._rebuild(cut, units)
        elif self._reshaped:
            self._rebuild(cut, units)
        else:
            self._extend(cut, units)
        self._reshaped = False
        tokens = cut.kept_tokens + (self._notice(cut.dropped)[1] if cut.notice else 0)
        if tokens <= self.compaction_threshold * budget:
            return []
        return self._compact_view(cut, units, budget)

    def _feed_units(self) -> Units:
        units = self._units
        if units is None:
            units = self._units = Units()
        messages, costs = self._messages, self._costs
        for index in range(len(units), len(messages)):
            if units.add(messages[index], costs[index]):
                self._reshaped = True
        return units

    def _rebuild(self, cut: Cut, units: Units) -> None:
        """The view of ``cut`` over the whole history (when an older unit changed)."""
        find, protected, root, costs = units.find, units.protected, cut.root, self._costs
        keys: list[int] = []
        kept_tokens, last_dropped = 0, -1
        for index in range(len(units)):
            unit = find(index)
            if unit in protected or unit >= root:
                keys.append(index)
                kept_tokens += costs[index]
            else:
                last_dropped = index
        cut.keys, cut.kept_tokens, cut.last_dropped = keys, kept_tokens, last_dropped
        cut.dropped, cut.upto = len(units) - len(keys), len(units)
        self._place_notice(cut, units)
        self._repair.reset()

    def _extend(self, cut: Cut, units: Units) -> None:
        """Add the messages since the last request to the view."""
        find, protected, costs, keys = units.find, units.protected, self._costs, cut.keys
        for index in range(cut.upto, len(units)):
            unit = find(index)
            if unit not in protected and unit < cut.root:
                # a late answer to a call that was left out: it is left out too
                self._rebuild(cut, units)
                return
            if cut.notice and not cut.placed and unit == index:
                keys.append(NOTICE)  # the notice stands before the next unit's start
                cut.placed = True
            keys.append(index)
            cut.kept_tokens += costs[index]
        cut.upto = len(units)

    def _place_notice(self, cut: Cut, units: Units) -> None:
        """Whether the view has the notice (when it fits the target), and where."""
        notice_cost = self._notice(cut.dropped)[1]
        cut.notice = cut.dropped > 0 and cut.kept_tokens + notice_cost <= cut.target
        cut.placed = False
        if not cut.notice:
            return
        for position, index in enumerate(cut.keys):
            if index > cut.last_dropped and units.is_root(index):
                cut.keys.insert(position, NOTICE)
                cut.placed = True
                return

    def _compact_view(
        self, cut: Cut, units: Units, budget: int
    ) -> list[tuple[str, dict[str, Any]]]:
        """Compact the view to the target: drop its oldest unprotected units (the cut
        moves forward); as [`compact`][amplifier_anyio.contexts.compact] would choose over the
        view."""
        history, total = len(units), self._total
        target = int(budget * self.target_usage)
        pre = {"messages": history, "tokens": total, "budget": budget, "target": target}
        protected_tokens = units.protected_tokens
        if protected_tokens > target:
            # the protected messages alone fill the target: use the whole budget instead
            target = budget
        if cut.kept_tokens > target:
            reserve = self._notice(history)[1]
            if protected_tokens + reserve > target:
                reserve = 0
            room = target - protected_tokens - reserve
            unprotected = cut.kept_tokens - protected_tokens
            roots, protected, position = units.roots, units.protected, cut.roots_from
            cut_root = cut.root
            while unprotected > room and position < len(roots):
                root = roots[position]
                position += 1
                if root < cut_root or not units.is_root(root) or root in protected:
                    continue
                unprotected -= units.cost[root]
                cut_root = root + 1
            cut.roots_from = position
            if cut_root != cut.root:
                cut.root = cut_root
                self._drop(cut, units)
        cut.target = target
        if not cut.placed or not cut.notice:
            cut.keys = [index for index in cut.keys if index != NOTICE]
            self._place_notice(cut, units)
        self._repair.reset()
        notice_cost = self._notice(cut.dropped)[1] if cut.notice else 0
        post = {
            "messages_before": history,
            "messages_after": len(cut.keys) + (cut.notice and not cut.placed),
            "messages_dropped": cut.dropped,
            "tokens_before": total,
            "tokens_after": cut.kept_tokens + notice_cost,
            "budget": budget,
            "target": target,
        }
        return [(CONTEXT_PRE_COMPACT, pre), (CONTEXT_POST_COMPACT, post)]

    def _drop(self, cut: Cut, units: Units) -> None:
        """Take the units below the (moved) cut out of the view; place the notice anew."""
        find, protected, root, costs = units.find, units.protected, cut.root, self._costs
        keys: list[int] = []
        for index in cut.keys:
            if index == NOTICE:
                continue
            unit = find(index)
            if unit in protected or unit >= root:
                keys.append(index)
            else:
                cut.kept_tokens -= costs[index]
                cut.dropped += 1
                cut.last_dropped = max(cut.last_dropped, index)
        cut.keys = keys
        cut.placed = cut.notice = False

    async def _emit_all(self, events: list[tuple[str, dict[str, Any]]]) -> None:
        for event, data in events:
            await self._emit(event, data)

    async def should_compact(self) -> bool:
        """Whether the stored history needs compacting: never (amplifier-core's protocol).

        Compaction here is of the view each request gets
        ([`get_messages_for_request`][amplifier_anyio.contexts.SimpleContextManager.get_messages_for_request]),
        never of the history; so, as upstream's context-simple, this is False and
        [`compact`][amplifier_anyio.contexts.SimpleContextManager.compact] does nothing. Upstream
        orchestrators call both after each tool round.
        """
        await anyio.lowlevel.checkpoint()
        return False

    async def compact(self) -> None:
        """Nothing to do: the history is never compacted (see
        [`should_compact`][amplifier_anyio.contexts.SimpleContextManager.should_compact])."""
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
        if message.__class__ is dict and "role" in message and self.estimator is estimate_tokens:
            # The common message (a tool result, a prompt): strings only, so one shallow
            # copy is the whole copy, nothing needs making plain, and the estimate needs
            # no JSON. Anything else takes the general path below.
            cost = flat_cost(message)
            if cost is not None:
                return message.copy(), cost
        if message.__class__ is not dict and not isinstance(message, Mapping):
            raise ValidationError([f"message: expected a dict, got {type(message).__name__}"])
        if not isinstance(message.get("role"), str):
            raise ValidationError(["message.role: required (a string)"])
        # An amplifier-core orchestrator stores its pydantic blocks as they are. A plain
        # dict is copied once (by copy_message), any other mapping becomes one first.
        plain = plain_message(message if message.__class__ is dict else dict(message))
        stored = copy_message(plain)
        return stored, self.estimator(stored)

    def _append(self, stored: dict[str, Any], cost: int) -> None:
        self._messages.append(stored)
        self._costs.append(cost)
        self._models.append(None)
        self._total += cost

    def _replace(self, prepared: list[tuple[dict[str, Any], int]]) -> None:
        self._reset([stored for stored, _ in prepared], [cost for _, cost in prepared])

    def _reset(self, messages: list[dict[str, Any]], costs: list[int]) -> None:
        """A new history (the lists are taken as they are); nothing of the old view holds."""
        self._messages, self._costs, self._total = messages, costs, sum(costs)
        self._models = [None] * len(messages)
        self._units, self._cut, self._reshaped = None, None, False
        self._repair.reset()

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
    ``compaction_threshold``). A bad value raises [`ConfigError`][amplifier_anyio.ConfigError]
    naming the key as ``<module>.<key>``, e.g. ``context-simple.max_tokens: expected a positive
    integer, got 'lots'``.
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
