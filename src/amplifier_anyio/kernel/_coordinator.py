"""The module coordinator: mount points, capabilities, contributions, cleanup, cancel.

Mount rules and messages follow upstream Amplifier: single-slot points (``orchestrator``,
``context``, ``module-source-resolver``) are replaced on mount; multi-slot points
(``providers``, ``tools``) need a name; hooks register with the HookRegistry directly.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from typing import Any

import anyio
import attrs

from ..errors import (
    ApprovalDeferred,
    ApprovalTimeoutError,
    InjectionTooLargeError,
    MountError,
    SessionError,
)
from ..events import TOOL_PRE
from ..interfaces import ApprovalSystem, DisplaySystem
from ..models import HookResult
from ._cancellation import CancellationToken
from ._foreign import hook_result_of
from ._handle import TurnHandle
from ._hooks import HookRegistry
from ._offload import run_blocking
from ._services import ServiceFunction, ServiceGroup, ServiceStatistics

__all__ = ("ModuleCoordinator", "CoordinatorStatistics", "MOUNT_POINTS")

logger = logging.getLogger(__name__)

_NOTHING_TO_DO = frozenset(("continue", "modify"))
"""Actions ``process_hook_result`` hands back as they are (without a user message)."""

MOUNT_POINTS = ("orchestrator", "providers", "tools", "context", "hooks", "module-source-resolver")
"""Every mount point, in upstream's order."""

_SINGLE = ("orchestrator", "context", "module-source-resolver")
_MULTI = ("providers", "tools")
_ALLOW = ("allow", "allow once", "allow always")


@attrs.frozen(kw_only=True)
class CoordinatorStatistics:
    """A snapshot of a coordinator: what is mounted and which module services run."""

    providers: int
    tools: int
    pending_cleanups: int
    services: tuple[ServiceStatistics, ...]
    """Every module service started so far, in start order, with its state."""


class ModuleCoordinator:
    """Where modules meet: mount points, capabilities, contribution channels and cleanup.

    ``session`` is anything with ``session_id``, ``parent_id`` and ``config`` (or None).
    """

    cleanup_timeout: float = 10.0
    """Seconds each cleanup function may take before it is abandoned."""

    display_timeout: float = 5.0
    """Seconds the display system may take to show one message (it runs in a thread)."""

    service_stop_timeout: float = 5.0
    """Seconds stopping one module service may wait for its task to end."""

    def __init__(
        self,
        session: Any = None,
        approval_system: ApprovalSystem | None = None,
        display_system: DisplaySystem | None = None,
    ) -> None:
        self.session = session
        self.approval_system = approval_system
        self.display_system = display_system
        self.hooks = HookRegistry()
        self._turn = TurnHandle(self.hooks)
        self.mount_points: dict[str, Any] = {
            "orchestrator": None,
            "providers": {},
            "tools": {},
            "context": None,
            "hooks": self.hooks,
            "module-source-resolver": None,
        }
        self.capabilities: dict[str, Any] = {}
        self.tool_executors: dict[str, Any] = {}
        """Tool name → the [`ToolExecutor`][amplifier_anyio.runtime.ToolExecutor] its calls run on
        (set by the session from the plan; a tool not listed runs in the batch itself)."""
        self.tool_specs: dict[str, Any] = {}
        """Tool name → the plan entry ([`ModuleSpec`][amplifier_anyio.ModuleSpec]) that mounted
        it."""
        self.provider_specs: dict[str, Any] = {}
        """Provider name → the plan entry that mounted it (its ``pricing`` prices the budget's
        dollars, §14)."""
        self.session_state: dict[str, Any] = {}
        """Free-form state modules share for the session's lifetime (amplifier-core's
        ``coordinator.session_state``; upstream orchestrators read ``goal`` from it)."""
        self.channels: dict[str, list[dict[str, Any]]] = {}
        self.loader: Any = None
        self.validating = False
        """True while `validate_plan` mounts a plan offline: a module checks its
        config and resources then, but creates no files, opens no connections and starts
        no work."""
        self._cleanup_fns: list[Callable[[], Any]] = []
        self._turn_injection_tokens = 0
        self._accepted: TurnHandle | None = None
        self._services: ServiceGroup | None = None

    # -- identity and config -------------------------------------------------------------

    @property
    def session_id(self) -> str | None:
        """The owning session's id."""
        return getattr(self.session, "session_id", None)

    @property
    def parent_id(self) -> str | None:
        """The owning session's parent id."""
        return getattr(self.session, "parent_id", None)

    @property
    def config(self) -> dict[str, Any]:
        """The owning session's mount plan as a dict (empty without a session)."""
        config = getattr(self.session, "config", None)
        return config if isinstance(config, dict) else {}

    @property
    def injection_size_limit(self) -> int | None:
        """Largest hook injection in characters, from ``session.injection_size_limit``."""
        limit = self.config.get("session", {}).get("injection_size_limit")
        return int(limit) if limit is not None else None

    @property
    def injection_budget_per_turn(self) -> int | None:
        """Token budget for hook injections per turn (a warning when exceeded)."""
        budget = self.config.get("session", {}).get("injection_budget_per_turn")
        return int(budget) if budget is not None else None

    # -- mount points --------------------------------------------------------------------

    async def mount(self, mount_point: str, module: Any, name: str | None = None) -> None:
        """Put ``module`` at ``mount_point`` (under ``name`` for providers and tools)."""
        await anyio.lowlevel.checkpoint()
        self._check_point(mount_point)
        if mount_point == "hooks":
            msg = "Hooks should be registered directly with the HookRegistry"
            raise MountError(msg)
        if mount_point in _SINGLE:
            if self.mount_points[mount_point] is not None:
                logger.info("replacing the module mounted at %s", mount_point)
            self.mount_points[mount_point] = module
            return
        key = name or getattr(module, "name", None)
        if not key:
            msg = f"Name required for {mount_point}"
            raise MountError(msg)
        self.mount_points[mount_point][key] = module

    async def unmount(self, mount_point: str, name: str | None = None) -> None:
        """Remove what is mounted at ``mount_point`` (a missing name is ignored)."""
        await anyio.lowlevel.checkpoint()
        self._check_point(mount_point)
        if mount_point in _SINGLE:
            self.mount_points[mount_point] = None
        elif mount_point in _MULTI:
            if not name:
                msg = f"Name required to unmount from {mount_point}"
                raise MountError(msg)
            self.mount_points[mount_point].pop(name, None)

    def get(self, mount_point: str, name: str | None = None) -> Any:
        """The module at a single-slot point, the live dict of a multi-slot point, or one entry."""
        self._check_point(mount_point)
        if mount_point in _MULTI:
            slot = self.mount_points[mount_point]
            return slot if name is None else slot.get(name)
        return self.mount_points[mount_point]

    @staticmethod
    def _check_point(mount_point: str) -> None:
        if mount_point not in MOUNT_POINTS:
            msg = f"Unknown mount point: {mount_point}"
            raise MountError(msg)

    # -- capabilities and contributions --------------------------------------------------

    def register_capability(self, name: str, value: Any) -> None:
        """Offer ``value`` under ``name`` (replacing any previous value)."""
        self.capabilities[name] = value

    def get_capability(self, name: str) -> Any:
        """The value offered under ``name``, or None."""
        return self.capabilities.get(name)

    def register_contributor(self, channel: str, name: str, callback: Callable[[], Any]) -> None:
        """Add a contributor to ``channel``; contributors run in registration order."""
        self.channels.setdefault(channel, []).append({"name": name, "callback": callback})

    async def collect_contributions(self, channel: str) -> list[Any]:
        """Ask every contributor of ``channel``; None answers are dropped, failures skipped."""
        await anyio.lowlevel.checkpoint()
        contributions: list[Any] = []
        for contributor in tuple(self.channels.get(channel, ())):
            try:
                value = contributor["callback"]()
                if inspect.isawaitable(value):
                    value = await value
            except Exception:
                logger.exception("contributor %s of %s failed", contributor["name"], channel)
                continue
            if value is not None:
                contributions.append(value)
        return contributions

    # -- cleanup -------------------------------------------------------------------------

    def register_cleanup(self, fn: Any) -> None:
        """Run ``fn`` (sync or async) at cleanup; None and non-callables are ignored."""
        if callable(fn):
            self._cleanup_fns.append(fn)

    async def cleanup(self) -> None:
        """Run the cleanups in reverse order, each shielded and bounded.

        One failing does not stop the rest. A host cancellation that arrives meanwhile is
        delivered at the next checkpoint after the last cleanup.
        """
        fatal: BaseException | None = None
        with anyio.CancelScope(shield=True):
            while self._cleanup_fns:
                fn = self._cleanup_fns.pop()
                error = await self._run_cleanup(fn)
                if fatal is None and error is not None:
                    fatal = error
        if fatal is not None:
            raise fatal
        await anyio.lowlevel.checkpoint()

    async def _run_cleanup(self, fn: Callable[[], Any]) -> BaseException | None:
        cancelled = anyio.get_cancelled_exc_class()
        with anyio.move_on_after(self.cleanup_timeout) as scope:
            try:
                result = fn()
                if inspect.isawaitable(result):
                    await result
            except cancelled:
                raise  # our own deadline: move_on_after absorbs it just below
            except Exception:
                logger.exception("cleanup %r failed", fn)
            except BaseException as exc:  # noqa: BLE001 - KeyboardInterrupt etc.: re-raised after the rest
                return exc
        if scope.cancelled_caught:
            logger.warning("cleanup %r gave up after %ss", fn, self.cleanup_timeout)
        return None

    # -- module services -----------------------------------------------------------------

    async def start_service(self, fn: ServiceFunction, *, name: str) -> Any:
        """Run ``fn(task_status=...)`` in the session's task group until the session ends.

        Returns what ``fn`` passes to ``task_status.started()``; an exception ``fn``
        raises before that is raised here. The service is stopped (its cancel scope
        cancelled, bounded) at cleanup, in reverse order with the modules' cleanups.
        Raises [`SessionError`][amplifier_anyio.SessionError] when the session was not opened with
        ``async with`` (only then does it own a task group) or is closed. While `validate_plan`
        mounts the plan (``validating``), nothing is started and None is returned.
        """
        group = self._services
        if self.validating:  # validate_plan: a service would be work, and none may start
            await anyio.lowlevel.checkpoint()
            return None
        if group is None or group.closed:
            await anyio.lowlevel.checkpoint()
            if group is None:
                msg = (
                    f"module service {name!r} needs the session's task group: "
                    "open the session with `async with AmplifierSession(...)`"
                )
            else:
                msg = f"module service {name!r} cannot start: the session is closing"
            raise SessionError(msg)
        value, service = await group.start(fn, name=name)
        self.register_cleanup(partial(group.stop, service))
        return value

    def _bind_services(self, group: ServiceGroup | None) -> None:
        """The session hands over (or withdraws) the task group services run in."""
        self._services = group

    def statistics(self) -> CoordinatorStatistics:
        """Mounted providers and tools, cleanups still to run, and the module services."""
        services = self._services.statistics() if self._services is not None else ()
        return CoordinatorStatistics(
            providers=len(self.mount_points["providers"]),
            tools=len(self.mount_points["tools"]),
            pending_cleanups=len(self._cleanup_fns),
            services=services,
        )

    # -- cancellation ------------------------------------------------------------------

    @property
    def turn(self) -> TurnHandle:
        """The current (or last) turn's handle; replaced by
        [`begin_turn`][amplifier_anyio.ModuleCoordinator.begin_turn]."""
        return self._turn

    @property
    def cancellation(self) -> CancellationToken:
        """The current (or last) turn's token: a read-only view for upstream modules.

        Code of the turn itself holds its `TurnHandle` instead, so nothing it does
        can reach a later turn."""
        return self._turn.token

    async def request_cancel(self, immediate: bool = False, *, reason: str | None = None) -> None:
        """Cancel the current turn: ``cancel:requested``, the callbacks, then its scopes.

        The turn is looked up once, before any await (`TurnHandle.request_cancel`):
        a slow ``cancel:requested`` hook cannot make the cancel land on the next turn.
        Nothing happens when the turn is already at (or past) the requested level.
        ``reason`` (who cancels and why) reaches the cancelled scopes.
        """
        why = reason or "coordinator.request_cancel(immediate=True)"
        await self._turn.request_cancel(immediate, reason=why)

    def request_cancel_nowait(self, immediate: bool = False, *, reason: str | None = None) -> bool:
        """Cancel the current turn now, from synchronous code (`TurnHandle.cancel`).

        The turn emits ``cancel:requested`` and runs the callbacks before its terminal
        events. Returns True if the state changed. ``reason`` as in `request_cancel`.
        """
        why = reason or "coordinator.request_cancel_nowait(immediate=True)"
        return self._turn.cancel(immediate, reason=why)

    def cancel_flush_due(self) -> bool:
        """Whether the current turn has a ``cancel:requested`` or callback still due."""
        return self._turn.cancel_flush_due()

    async def flush_cancel_request(self) -> None:
        """The current turn's `TurnHandle.flush_cancel`."""
        await self._turn.flush_cancel()

    # -- turns ---------------------------------------------------------------------------

    def accept_turn(
        self, token: CancellationToken | None = None, *, parent: TurnHandle | None = None
    ) -> TurnHandle:
        """Accept a new turn: a fresh handle (with ``token``, or a fresh one) becomes
        [`turn`][amplifier_anyio.ModuleCoordinator.turn].

        Synchronous, so a session calls it on the first line of ``run()``: a cancel that
        arrives while the turn is still starting lands on the turn's own handle. The next
        [`claim_turn`][amplifier_anyio.ModuleCoordinator.claim_turn] hands this handle to the turn
        engine.
        """
        handle = TurnHandle(self.hooks, token or CancellationToken(), parent=parent)
        self._turn = handle
        self._accepted = handle
        self._turn_injection_tokens = 0
        return handle

    def begin_turn(self, token: CancellationToken | None = None) -> CancellationToken:
        """[`accept_turn`][amplifier_anyio.ModuleCoordinator.accept_turn], returning the new turn's
        token."""
        return self.accept_turn(token).token

    def claim_turn(self, token: CancellationToken | None = None) -> TurnHandle:
        """The handle of the turn about to run: a new one for ``token``, else the one
        accepted by [`begin_turn`][amplifier_anyio.ModuleCoordinator.begin_turn], else a fresh one.
        Each is claimed once."""
        if token is not None or self._accepted is None:
            self.begin_turn(token)
        accepted, self._accepted = self._accepted, None
        assert accepted is not None
        return accepted

    # -- hook results --------------------------------------------------------------------

    async def process_hook_result(
        self, result: HookResult, event: str, hook_name: str = "unknown"
    ) -> HookResult:
        """Carry out a hook's answer: persist injections, ask for approval, show messages.

        Approval fails closed: no approval system, a timeout whose default is deny, or any
        answer other than allow / allow once / allow always gives ``deny``. The answer
        ``defer`` to a ``tool:pre`` question raises
        [`ApprovalDeferred`][amplifier_anyio.ApprovalDeferred]: the tool batch holds the call for an
        approval that outlives the turn (``docs/durable.md``); to any other event it is a deny.
        """
        if (
            type(result) is HookResult
            and result.action in _NOTHING_TO_DO
            and not result.user_message
        ):
            # A plain continue / modify has nothing to carry out: it returns at once, with
            # no checkpoint. The rule "an async function always checkpoints" is kept by the
            # callers, which checkpoint around every emit anyway (the tool batch's task
            # start and the tool itself, the turn's provider call); a checkpoint here cost
            # two scheduler passes per tool call with one tool:pre / tool:post handler.
            return result
        await anyio.lowlevel.checkpoint()
        if not isinstance(result, HookResult):  # an amplifier-core one, from a foreign caller
            converted = hook_result_of(result, origin=f"hook {hook_name!r} on {event}")  # type: ignore[unreachable]
            result = converted if converted is not None else HookResult()
        if result.action == "inject_context" and result.context_injection:
            await self._inject(result, event, hook_name)
        if result.action == "ask_user":
            return await self._ask(result, event)
        if result.user_message:
            await self._show(result, hook_name)
        return result

    async def _inject(self, result: HookResult, event: str, hook_name: str) -> None:
        content = result.context_injection or ""
        limit = self.injection_size_limit
        if limit is not None and len(content) > limit:
            msg = f"context injection from {hook_name} is {len(content)} characters, over {limit}"
            raise InjectionTooLargeError(msg)
        self._turn_injection_tokens += len(content) // 4
        budget = self.injection_budget_per_turn
        if budget is not None and self._turn_injection_tokens > budget:
            logger.warning(
                "hook injections this turn ~%s tokens, over budget %s",
                self._turn_injection_tokens,
                budget,
            )
        context = self.mount_points["context"]
        if result.ephemeral or context is None:
            return
        await context.add_message(
            {
                "role": result.context_injection_role,
                "content": content,
                "metadata": {
                    "source": "hook",
                    "hook_name": hook_name,
                    "event": event,
                    "timestamp": datetime.now(UTC).isoformat(),
                },
            }
        )

    async def _ask(self, result: HookResult, event: str = "") -> HookResult:
        """Ask the approval system; anything but a clear allow is a deny (fail closed).

        An allow returns ``continue`` carrying the result's data (a hook may have
        modified it before another asked); a timeout takes ``approval_default``; no
        system, an exception, ``None`` or any other answer denies — except that a
        ``defer`` answer, or a ``defer`` default with no system or no answer in time,
        holds a ``tool:pre`` call (`ApprovalDeferred`).
        """
        prompt = result.approval_prompt or "Allow this operation?"
        deferring = result.approval_default == "defer" and event == TOOL_PRE
        if self.approval_system is None:
            if deferring:  # nobody to ask now: held for a decision from outside
                raise ApprovalDeferred(prompt)
            return HookResult(action="deny", reason="No approval system available")
        decision: object = None
        timed_out = False
        with anyio.move_on_after(result.approval_timeout) as bound:
            try:
                decision = await self.approval_system.request_approval(
                    prompt=prompt,
                    options=result.approval_options or ["Allow", "Deny"],
                    timeout=result.approval_timeout,
                    default=result.approval_default,
                )
            except (ApprovalTimeoutError, TimeoutError):
                timed_out = True
            except Exception:
                logger.exception("the approval system failed; denied: %s", prompt)
                return HookResult(action="deny", reason=f"Approval failed - denied: {prompt}")
        if timed_out or bound.cancelled_caught:
            if result.approval_default == "allow":
                return HookResult(action="continue", data=result.data)
            if deferring:
                raise ApprovalDeferred(prompt)
            return HookResult(
                action="deny", reason=f"Approval timeout - denied by default: {prompt}"
            )
        if isinstance(decision, str) and decision.strip().lower() == "defer" and event == TOOL_PRE:
            raise ApprovalDeferred(prompt)
        if isinstance(decision, str) and decision.strip().lower() in _ALLOW:
            return HookResult(action="continue", data=result.data)
        if not isinstance(decision, str):
            logger.warning("the approval system answered %r, not an option; denied", decision)
        return HookResult(action="deny", reason=f"User denied: {prompt}")

    async def _show(self, result: HookResult, hook_name: str) -> None:
        """Show a hook's user message: in a worker thread (a display system may block),
        waiting at most [`display_timeout`][amplifier_anyio.ModuleCoordinator.display_timeout]; a
        display that fails is logged."""
        source = f"hook:{result.user_message_source or hook_name}"
        if self.display_system is None:
            logger.info("[%s] %s", source, result.user_message)
            return
        show = self.display_system.show_message
        with anyio.move_on_after(self.display_timeout) as bound:
            try:
                await run_blocking(
                    show, result.user_message or "", result.user_message_level, source
                )
            except Exception:
                logger.exception("the display system failed to show a message from %s", source)
        if bound.cancelled_caught:
            logger.error("the display system did not return within %s s", self.display_timeout)
