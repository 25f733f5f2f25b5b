"""Two example schedulers for the loop-events orchestrator.

A scheduler is a handler of ``tool:selecting``: loop-events asks every one of them before
each tool call and reduces their answers (any ``deny`` vetoes; else the ``modify`` with
the highest ``HookResult.priority`` picks ``{"tool", "arguments"}``; else the model's
choice stands). Both are hook modules a plan lists under ``hooks:``:

``hooks-scheduler-cost`` (`CostScheduler`)
    A per-turn cost budget. Each tool has a cost (``costs``, else ``default_cost``); a
    call whose cost would take the turn's spending above ``budget`` is vetoed. Costs are
    charged on ``tool:selected``, for the tool that was actually selected (a vetoed call
    costs nothing), and forgotten when the turn ends (``execution:end``).

``hooks-scheduler-router`` (`RouterScheduler`)
    A routing table. ``routes`` maps a tool name to another tool (``{web_search:
    fast_search}``) or to ``{tool, arguments}``, whose ``arguments`` are merged over the
    model's. A routed call gets ``modify`` with ``priority`` (so that several routers can
    be ranked); other calls are left alone.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

import anyio
import attrs

from ..config_schema import ConfigSchema
from ..errors import ConfigError, ValidationError
from ..events import EXECUTION_END, TOOL_SELECTED, TOOL_SELECTING
from ..kernel._tracing import current_trace_id
from ..models import HookResult, structure
from ..models._validators import number

__all__ = (
    "CostSchedulerConfig",
    "CostScheduler",
    "RouterSchedulerConfig",
    "RouterScheduler",
    "mount_cost",
    "mount_router",
    "COST_CONFIG_SCHEMA",
    "ROUTER_CONFIG_SCHEMA",
)

logger = logging.getLogger(__name__)


def _parse(cls: type[Any], module_id: str, config: dict[str, Any] | None) -> Any:
    """A plan's config as ``cls``; unknown keys are warned about, errors name the key."""
    config = dict(config or {})
    known = {a.name for a in attrs.fields(cls)}
    for key in sorted(set(config) - known):
        logger.warning("%s: ignoring unknown config key %r", module_id, key)
        config.pop(key)
    try:
        return structure(config, cls)
    except ValidationError as exc:
        raise ConfigError("; ".join(exc.errors)) from exc


def _costs(_inst: object, attribute: attrs.Attribute[Any], value: dict[str, float]) -> None:
    for tool, cost in value.items():
        ok = isinstance(cost, int | float) and not isinstance(cost, bool) and math.isfinite(cost)
        if not ok or cost < 0:
            msg = f"{attribute.name}.{tool}: expected a finite number >= 0, got {cost!r}"
            raise ConfigError(msg)


@attrs.frozen(kw_only=True)
class CostSchedulerConfig:
    """``budget``: what one turn may spend; ``costs``: per tool name; ``default_cost``:
    any other tool; ``priority``: where the handlers run among the hooks."""

    budget: float = attrs.field(default=100.0, validator=number(minimum=0.0, exclusive=False))
    costs: dict[str, float] = attrs.field(factory=dict, validator=_costs)
    default_cost: float = attrs.field(default=1.0, validator=number(minimum=0.0, exclusive=False))
    priority: int = 0

    @classmethod
    def from_dict(cls, config: dict[str, Any] | None) -> CostSchedulerConfig:
        """Parse a plan's config; errors name the key."""
        parsed: CostSchedulerConfig = _parse(cls, "hooks-scheduler-cost", config)
        return parsed


class CostScheduler:
    """Vetoes a tool once the turn's spending plus its cost would exceed the budget."""

    def __init__(self, config: CostSchedulerConfig | dict[str, Any] | None = None) -> None:
        if not isinstance(config, CostSchedulerConfig):
            config = CostSchedulerConfig.from_dict(config)
        self.config = config
        self._spent: dict[str | None, float] = {}

    def cost_of(self, tool: str) -> float:
        """What one call of ``tool`` costs."""
        return self.config.costs.get(tool, self.config.default_cost)

    def spent(self, trace_id: str | None = None) -> float:
        """What the turn ``trace_id`` (default: the current one) has spent so far."""
        return self._spent.get(trace_id or current_trace_id(), 0.0)

    def on_selecting(self, event: str, data: dict[str, Any]) -> HookResult:
        """``tool:selecting``: deny a call the budget cannot pay for."""
        tool = str(data.get("tool_name"))
        cost, spent, budget = self.cost_of(tool), self.spent(), self.config.budget
        if spent + cost > budget:
            reason = (
                f"cost budget exceeded: {tool} costs {cost:g}, "
                f"{spent:g} of {budget:g} already spent this turn"
            )
            return HookResult(action="deny", reason=reason)
        return HookResult()

    def on_selected(self, event: str, data: dict[str, Any]) -> None:
        """``tool:selected``: charge the tool that will run."""
        trace_id = current_trace_id()
        self._spent[trace_id] = self._spent.get(trace_id, 0.0) + self.cost_of(str(data.get("tool")))

    def on_turn_end(self, event: str, data: dict[str, Any]) -> None:
        """``execution:end``: the turn's spending is forgotten."""
        self._spent.pop(current_trace_id(), None)

    def register(self, hooks: Any, name: str = "hooks-scheduler-cost") -> Callable[[], None]:
        """Register the three handlers on ``hooks``; returns what unregisters them."""
        priority = self.config.priority
        undo = [
            hooks.register(TOOL_SELECTING, self.on_selecting, priority, name),
            hooks.register(TOOL_SELECTED, self.on_selected, priority, name),
            hooks.register(EXECUTION_END, self.on_turn_end, priority, name),
        ]

        def unregister() -> None:
            for fn in undo:
                fn()

        return unregister


@attrs.frozen(kw_only=True)
class _Route:
    """Where a routed call goes: another tool, arguments merged over the model's, or both."""

    tool: str | None = None
    arguments: dict[str, Any] = attrs.field(factory=dict)


def _route(name: str, value: Any) -> _Route:
    if isinstance(value, str) and value:
        return _Route(tool=value)
    if isinstance(value, dict) and set(value) <= {"tool", "arguments"} and value:
        tool, arguments = value.get("tool"), value.get("arguments", {})
        if (tool is None or (isinstance(tool, str) and tool)) and isinstance(arguments, dict):
            return _Route(tool=tool, arguments=arguments)
    msg = (
        f"routes.{name}: expected a tool name or a mapping with 'tool' and/or "
        f"'arguments' (a mapping), got {value!r}"
    )
    raise ConfigError(msg)


def _routes(value: Any) -> dict[str, _Route]:
    if not isinstance(value, dict):
        msg = f"routes: expected a mapping of tool names, got {value!r}"
        raise ConfigError(msg)
    return {str(name): _route(str(name), target) for name, target in value.items()}


@attrs.frozen(kw_only=True)
class RouterSchedulerConfig:
    """``routes``: tool name → tool name, or → ``{tool, arguments}``; ``priority``: the
    ``HookResult.priority`` of its answers (the highest modify wins)."""

    routes: dict[str, Any] = attrs.field(factory=dict)
    priority: int = 0

    @classmethod
    def from_dict(cls, config: dict[str, Any] | None) -> RouterSchedulerConfig:
        """Parse a plan's config; errors name the key."""
        parsed: RouterSchedulerConfig = _parse(cls, "hooks-scheduler-router", config)
        _routes(parsed.routes)  # a bad route is an error now, not at the first call
        return parsed


class RouterScheduler:
    """Rewrites the calls its table names (``modify``); leaves the others alone."""

    def __init__(self, config: RouterSchedulerConfig | dict[str, Any] | None = None) -> None:
        if not isinstance(config, RouterSchedulerConfig):
            config = RouterSchedulerConfig.from_dict(config)
        self.config = config
        self.routes = _routes(config.routes)

    def on_selecting(self, event: str, data: dict[str, Any]) -> HookResult | None:
        """``tool:selecting``: the routed choice, or None (no opinion)."""
        tool = data.get("tool_name")
        route = self.routes.get(tool) if isinstance(tool, str) else None
        if route is None:
            return None
        model_input = data.get("tool_input")
        arguments = {**(model_input if isinstance(model_input, dict) else {}), **route.arguments}
        choice = {"tool": route.tool or tool, "arguments": arguments}
        return HookResult(action="modify", data=choice, priority=self.config.priority)

    def register(self, hooks: Any, name: str = "hooks-scheduler-router") -> Callable[[], None]:
        """Register the handler on ``hooks``; returns its unregister."""
        unregister: Callable[[], None] = hooks.register(TOOL_SELECTING, self.on_selecting, 0, name)
        return unregister


async def mount_cost(coordinator: Any, config: dict[str, Any] | None = None) -> Callable[[], None]:
    """Mount ``hooks-scheduler-cost``; the cleanup unregisters it."""
    await anyio.lowlevel.checkpoint()
    return CostScheduler(config).register(coordinator.hooks)


async def mount_router(
    coordinator: Any, config: dict[str, Any] | None = None
) -> Callable[[], None]:
    """Mount ``hooks-scheduler-router``; the cleanup unregisters it."""
    await anyio.lowlevel.checkpoint()
    return RouterScheduler(config).register(coordinator.hooks)


COST_CONFIG_SCHEMA = ConfigSchema.from_attrs("hooks-scheduler-cost", CostSchedulerConfig)
"""The keys ``hooks-scheduler-cost`` accepts."""
ROUTER_CONFIG_SCHEMA = ConfigSchema.from_attrs("hooks-scheduler-router", RouterSchedulerConfig)
"""The keys ``hooks-scheduler-router`` accepts."""
mount_cost.config_schema = COST_CONFIG_SCHEMA  # type: ignore[attr-defined]
mount_router.config_schema = ROUTER_CONFIG_SCHEMA  # type: ignore[attr-defined]
