"""loop-basic: prompt → provider → tools (in parallel) → provider … → answer.

A short policy over the shared turn engine (`amplifier_anyio.runtime._turn`): each
response's tool calls run as one structured batch. The engine owns the turn's cancel
scope, the terminal events and the [`TurnResult`][amplifier_anyio.TurnResult]; see its docstring for
what holds on every path.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, ClassVar, Self

import attrs

from ..config_schema import ConfigSchema
from ..errors import ConfigError, ValidationError
from ..kernel._coordinator import ModuleCoordinator
from ..models import structure
from ..models._validators import number
from ..runtime._progress import no_progress_repeats
from ..runtime._tool_batch import ToolBatchConfig
from ..runtime._turn import ToolRunner, Turn, TurnConfig

if TYPE_CHECKING:
    from ..interfaces import ContextManager, Provider, Tool
    from ..kernel._cancellation import CancellationToken
    from ..kernel._hooks import HookRegistry
    from ..kernel._turns import TurnResult

__all__ = ("LoopBasicConfig", "LoopBasicOrchestrator", "mount")

logger = logging.getLogger(__name__)


@attrs.frozen(kw_only=True)
class LoopBasicConfig:
    """loop-basic's settings (``-1`` iterations: unlimited; times in seconds).

    ``event_timeout`` bounds each terminal event's hooks, ``write_timeout`` each shielded
    context write; ``abandon_sync_tools`` lets a cancel leave synchronous tools running
    in their threads (off by default: the turn waits for them).
    """

    max_iterations: int = attrs.field(
        default=-1, validator=number(minimum=-1, exclusive=False, integer=True)
    )
    parallel_tools: bool = True
    max_parallel_tools: int | None = attrs.field(
        default=None, validator=number(minimum=1, exclusive=False, optional=True, integer=True)
    )
    tool_timeout: float | None = attrs.field(default=None, validator=number(optional=True))
    turn_timeout: float | None = attrs.field(default=None, validator=number(optional=True))
    event_timeout: float = attrs.field(default=5.0, validator=number())
    write_timeout: float = attrs.field(default=5.0, validator=number())
    abandon_sync_tools: bool = False
    extended_thinking: bool = False
    reasoning_effort: str | None = None
    default_provider: str | None = None
    no_progress: dict[str, Any] | bool | str | None = attrs.field(
        default=None,
        metadata={"doc": "repeated failing tool calls: {repeats: 3} (the default) or off"},
    )

    module_id: ClassVar[str] = "loop-basic"

    @classmethod
    def from_dict(cls, config: dict[str, Any] | None) -> Self:
        """Parse a plan's orchestrator config; errors name the key. Unknown keys are
        dropped here: the session reports them (a warning, an error when strict) from
        the module's ``CONFIG_SCHEMA``."""
        known = {a.name for a in attrs.fields(cls)}
        config = {k: v for k, v in (config or {}).items() if k in known}
        try:
            parsed = structure(config, cls)
        except ValidationError as exc:
            raise ConfigError("; ".join(f"{cls.module_id}.{e}" for e in exc.errors)) from exc
        parsed.turn_config()  # a bad no_progress: a ConfigError naming it
        return parsed

    def turn_config(self) -> TurnConfig:
        """The engine's share of these settings."""
        return TurnConfig(
            max_iterations=self.max_iterations,
            turn_timeout=self.turn_timeout,
            event_timeout=self.event_timeout,
            extended_thinking=self.extended_thinking,
            reasoning_effort=self.reasoning_effort,
            default_provider=self.default_provider,
            no_progress=no_progress_repeats(self.no_progress, f"{self.module_id}.no_progress"),
        )

    def batch_config(self) -> ToolBatchConfig:
        """The tool batch's share of these settings."""
        return ToolBatchConfig(
            parallel=self.parallel_tools,
            max_parallel_tools=self.max_parallel_tools,
            tool_timeout=self.tool_timeout,
            write_timeout=self.write_timeout,
            abandon_sync_tools=self.abandon_sync_tools,
        )


class LoopBasicOrchestrator:
    """The basic agent loop with structured parallel tools.

    ``execute()`` is Amplifier's call (the answer as a string; a failed turn raises its
    exception). ``run_turn()`` returns the full [`TurnResult`][amplifier_anyio.TurnResult]; the last
    one stays in `last_result`. Turns never share state: one orchestrator may run several at once.
    """

    name = "loop-basic"
    streaming = False
    tool_runner: ToolRunner | None = None
    """The tool policy handed to the engine; None: one structured batch per response."""
    config_class: ClassVar[type[Any]] = LoopBasicConfig
    """The settings class (``from_dict``, ``turn_config()``, ``batch_config()``)."""
    turn_class: ClassVar[type[Turn]] = Turn
    """The engine's turn: an orchestrator with a loop of its own subclasses it."""
    resumable: ClassVar[bool] = True
    """Whether ``resume_turn`` can continue a held or interrupted turn."""

    def __init__(self, config: Any = None) -> None:
        if not isinstance(config, self.config_class):
            config = self.config_class.from_dict(config)
        self.config: Any = config
        self.last_result: TurnResult | None = None
        self._turn_config = config.turn_config()
        self._batch_config = config.batch_config()

    async def execute(
        self,
        prompt: str,
        context: ContextManager,
        providers: dict[str, Provider],
        tools: dict[str, Tool],
        hooks: HookRegistry,
        **kwargs: Any,
    ) -> str:
        """Run one turn and return its text; re-raise the turn's error if it failed."""
        result = await self.run_turn(
            prompt, context, providers, tools, hooks, coordinator=kwargs.get("coordinator")
        )
        if result.error is not None:
            raise result.error
        return result.text

    async def run_turn(
        self,
        prompt: str,
        context: ContextManager,
        providers: dict[str, Provider],
        tools: dict[str, Tool],
        hooks: HookRegistry,
        *,
        coordinator: ModuleCoordinator | None = None,
        cancellation: CancellationToken | None = None,
        resuming: bool = False,
    ) -> TurnResult:
        """Run one turn to its end and describe how it ended.

        Without ``coordinator`` the turn gets one of its own (with ``context`` mounted),
        so concurrent standalone turns share nothing. ``cancellation`` is the turn's
        token when the caller wants to hold it; otherwise the one a session accepted the
        turn with, or a fresh one. Errors are reported in the result (status ``error``);
        the host's own cancellation propagates after the terminal events.
        """
        standalone = coordinator is None
        if coordinator is None:
            coordinator = ModuleCoordinator()
        handle = coordinator.claim_turn(cancellation)
        if standalone:
            await coordinator.mount("context", context)
        turn = self.turn_class(
            prompt=prompt,
            context=context,
            providers=providers,
            tools=tools or {},
            hooks=hooks,
            coordinator=coordinator,
            handle=handle,
            config=self._turn_config,
            batch=self._batch_config,
            orchestrator=self.name,
            streaming=self.streaming,
            run_tools=self.tool_runner,
            resuming=resuming,
            **self.turn_options(),
        )
        self.last_result = await turn.run()
        return self.last_result

    def turn_options(self) -> dict[str, Any]:
        """Keyword arguments of `turn_class` beyond the engine's own (none here)."""
        return {}

    async def resume_turn(
        self,
        prompt: str,
        context: ContextManager,
        providers: dict[str, Provider],
        tools: dict[str, Tool],
        hooks: HookRegistry,
        *,
        coordinator: ModuleCoordinator | None = None,
        cancellation: CancellationToken | None = None,
    ) -> TurnResult:
        """Continue the turn ``context`` ends in (``session.resume``; ``docs/durable.md``):
        finish the held calls of its last batch, then go on as
        [`run_turn`][amplifier_anyio.orchestrators.LoopBasicOrchestrator.run_turn]."""
        return await self.run_turn(
            prompt,
            context,
            providers,
            tools,
            hooks,
            coordinator=coordinator,
            cancellation=cancellation,
            resuming=True,
        )


async def mount(coordinator: ModuleCoordinator, config: dict[str, Any] | None = None) -> None:
    """Mount loop-basic as the session's orchestrator."""
    await coordinator.mount("orchestrator", LoopBasicOrchestrator(config))


CONFIG_SCHEMA = ConfigSchema.from_attrs("loop-basic", LoopBasicConfig)
"""The keys loop-basic accepts (checked by ``validate --strict``)."""
