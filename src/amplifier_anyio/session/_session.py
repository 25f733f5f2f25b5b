"""AmplifierSession: load a mount plan, run turns, clean up.

``async with AmplifierSession(plan) as session`` loads the modules (orchestrator,
context, providers, tools, hooks — in that order) and, on exit, emits ``session:end`` and
runs every cleanup in reverse, shielded and bounded. A module that fails to load stops
the session from starting (an error naming the module and the cause), unless its plan
entry says ``optional: true``: then it is reported as ``module:load_failed`` and the
session goes on without it.

``run()`` never turns the host's own cancellation into a return value: if the host
cancels, the turn closes its events, the cancellation propagates, and ``async with``
still cleans up.

The life cycle follows httpx's client: UNOPENED → OPENED → CLOSED
([`SessionState`][amplifier_anyio.SessionState]). Modules are mounted once, under a lock, by ``async
with`` or the first ``run()``; one turn runs at a time; a closed session refuses every use with
[`SessionError`][amplifier_anyio.SessionError] rather than silently mounting everything again. Once
every module is mounted, each module's optional ``on_session_ready(coordinator)`` runs (a failure is
logged and emitted as ``module:on_session_ready_failed``, and the session goes on).

``async with`` also owns a task group for the session's lifetime, where module services
run ([`ModuleCoordinator.start_service`][amplifier_anyio.ModuleCoordinator.start_service]).
``__aenter__`` enters the group and ``__aexit__`` leaves it — a class with both methods, as anyio's
own task group and portal are, not a generator, so nothing ever yields from inside the group. The
host's block runs inside the group's scope; services never cancel it (a service's failure is
logged, see `_services`), the session stops them at cleanup, and the group is then
left with no exception passed in, so a host's error leaves the block as it entered it
(never wrapped in an exception group); only the host's cancellation is handed to the
group as it is, so that the scope it belongs to catches it. ``__aenter__`` and
``__aexit__`` must run in the same task (as for any cancel scope). A session used
without ``async with`` has no task group: a module that starts a service then fails to
mount with a [`SessionError`][amplifier_anyio.SessionError] saying so.
"""

from __future__ import annotations

import enum
import inspect
import logging
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from decimal import Decimal
from functools import partial
from pathlib import Path
from typing import Any, Literal

import anyio
import attrs
from anyio.abc import TaskGroup

from ..errors import (
    ConfigError,
    ModuleLoadError,
    ModuleNotFoundError,
    SessionError,
    describe,
    unwrap_group,
)
from ..events import (
    CANCEL_COMPLETED,
    MODULE_LOAD_FAILED,
    MODULE_ON_SESSION_READY_FAILED,
    SESSION_END,
    SESSION_FORK,
    SESSION_RESUME,
    SESSION_START,
)
from ..interfaces import ApprovalSystem, DisplaySystem
from ..kernel._coordinator import ModuleCoordinator
from ..kernel._foreign import module_scope, watch_provider_calls
from ..kernel._handle import TurnHandle
from ..kernel._loader import ModuleLoader
from ..kernel._mount_plan import ModuleSpec, MountPlan
from ..kernel._services import ServiceGroup
from ..kernel._turns import TurnResult, TurnStatus
from ._agents import ROOT_LANE, ChildSetup, Delegation, SessionLimits, agents_of
from ._bundles import plan_of, resolve_plan
from ._event_stream import TurnEventStream
from ._validation import schema_problems

__all__ = ("AmplifierSession", "SessionState", "SessionStatus", "TurnResult", "TurnStatus")

logger = logging.getLogger(__name__)

_END_TIMEOUT = 10.0  # seconds the shielded session:end emit may take
_MOUNT_POINT_OF = {"orchestrator": "orchestrator", "context": "context", "provider": "providers"}
_MULTI_OF = {"provider": "providers", "tool": "tools"}
_EXECUTOR_STOP_TIMEOUT = 10.0  # seconds an executor's stop() may take at cleanup


async def _serve_executor(executor: Any, *, task_status: Any) -> None:
    """An executor's life as a module service: start, run until stopped, stop (shielded)."""
    await executor.start()
    try:
        task_status.started(executor)
        await anyio.sleep_forever()
    finally:
        with anyio.CancelScope(shield=True), anyio.move_on_after(_EXECUTOR_STOP_TIMEOUT) as bound:
            await executor.stop()
        if bound.cancelled_caught:
            logger.error("executor %r did not stop within %s s", executor, _EXECUTOR_STOP_TIMEOUT)


class SessionState(enum.Enum):
    """Where a session is in its life cycle; it only moves forward."""

    UNOPENED = "unopened"
    """Nothing mounted yet."""
    OPENED = "opened"
    """Modules mounted (by ``async with`` or the first ``run()``); turns may run."""
    CLOSED = "closed"
    """Cleaned up; any further use raises [`SessionError`][amplifier_anyio.SessionError]."""


@attrs.define(eq=False)
class SessionStatus:
    """Live counters of a session."""

    session_id: str
    started_at: datetime = attrs.field(factory=lambda: datetime.now(UTC))
    ended_at: datetime | None = None
    status: Literal["running", "completed", "failed", "cancelled"] = "running"
    turns: int = 0
    total_input_tokens: int = 0
    total_output_tokens: int = 0
    cost_usd: Decimal | None = None
    """What the turns cost, where the providers had prices (``pricing``); None: unknown."""
    last_error: dict[str, Any] | None = None


class AmplifierSession:
    """One agent session over a mount plan (a dict, a MountPlan, or a YAML/TOML path)."""

    def __init__(
        self,
        plan: dict[str, Any] | MountPlan | str | Path,
        *,
        session_id: str | None = None,
        parent_id: str | None = None,
        approval_system: ApprovalSystem | None = None,
        display_system: DisplaySystem | None = None,
        is_resumed: bool = False,
        loader: ModuleLoader | None = None,
        strict: bool = False,
    ) -> None:
        self.plan: MountPlan | None = None
        self.strict = strict
        """Refuse to start on a config key or type the modules' schemas do not accept."""
        self._plan_path: Path | None = None
        if isinstance(plan, MountPlan):
            self.plan = plan
        elif isinstance(plan, dict):
            self.plan = MountPlan.from_dict(plan)
        elif isinstance(plan, str | Path):
            self._plan_path = Path(plan)
        else:  # a caller without a type checker
            msg = f"<plan>: expected a dict, a MountPlan or a file path, got {type(plan).__name__}"  # type: ignore[unreachable]
            raise ConfigError(msg)
        self.session_id = session_id or str(uuid.uuid4())
        self.parent_id = parent_id
        self.lane = ROOT_LANE
        """Where this session's calls go in a cassette (``docs/testing.md``): ``root`` for a
        top-level session; a sub-agent's session is given its agent path (``root/<agent>``,
        ``root/<agent>@<call id>`` when one batch starts that agent twice) by the spawner
        (session/_agents), before it opens."""
        self.is_resumed = is_resumed
        self.coordinator = ModuleCoordinator(self, approval_system, display_system)
        self.coordinator.hooks.set_default_fields(session_id=self.session_id, parent_id=parent_id)
        self.loader = loader or ModuleLoader(coordinator=self.coordinator)
        self.coordinator.loader = self.loader
        self.status = SessionStatus(session_id=self.session_id)
        self.last_result: TurnResult | None = None
        self._state = SessionState.UNOPENED
        self._entered = False
        self._init_lock = anyio.Lock()
        self._started = False
        self._turn: TurnHandle | None = None
        self._task_group: TaskGroup | None = None
        self._services: ServiceGroup | None = None
        self._ready_hooks: list[tuple[str, Any]] = []
        # -- sub-agents (§14, session/_agents.py) --
        self.depth = 0
        """How many delegations below the root session this one is."""
        self.agent_name: str | None = None
        """The agent this session runs (None for a root session)."""
        self.child_setup: list[ChildSetup] = []
        """Called with each child session (and theirs) once it is opened, before its
        turn: a host mounts in-process modules or registers hooks there."""
        self.limits = SessionLimits()
        """The plan's ``session.budget`` and ``session.max_agent_depth``."""
        self._parent_turn: TurnHandle | None = None  # a child's: the turn it runs under

    @property
    def state(self) -> SessionState:
        """Where the session is in its life cycle."""
        return self._state

    @property
    def initialized(self) -> bool:
        """True while the session's modules are mounted (state OPENED)."""
        return self._state is SessionState.OPENED

    @property
    def config(self) -> dict[str, Any]:
        """The plan as a dict (empty until a file plan was read)."""
        return self.plan.raw if self.plan is not None else {}

    async def __aenter__(self) -> AmplifierSession:
        # Entered once; an explicit initialize() before it is fine (it is idempotent).
        if self._entered or self._state is SessionState.CLOSED:
            msg = f"a session can be entered once (this one is {self._state.value})"
            raise SessionError(msg)
        self._entered = True
        group = anyio.create_task_group()
        await group.__aenter__()
        self._task_group = group
        self._services = ServiceGroup(group, stop_timeout=self.coordinator.service_stop_timeout)
        self.coordinator._bind_services(self._services)
        try:
            await self.initialize()
        except BaseException as exc:
            # initialize() has undone its mounts (stopping their services): leave the group.
            await self._leave_task_group((type(exc), exc, exc.__traceback__))
            raise
        return self

    async def __aexit__(self, *exc_info: Any) -> bool | None:
        try:
            await self.cleanup()
        finally:
            suppress = await self._leave_task_group(exc_info)
        return suppress

    async def _leave_task_group(self, exc_info: tuple[Any, Any, Any]) -> bool | None:
        """Leave the services' task group once every service was stopped (or given up on).

        Only the host's cancellation is passed in (the scope it belongs to must see it);
        anything else stays the host's, never wrapped in a group.
        """
        group, self._task_group = self._task_group, None
        if self._services is not None:
            self._services.closed = True
        if group is None:
            return None
        try:
            if isinstance(exc_info[1], anyio.get_cancelled_exc_class()):
                return await group.__aexit__(*exc_info)
            await group.__aexit__(None, None, None)
        except BaseExceptionGroup as eg:  # a service's KeyboardInterrupt / SystemExit
            raise unwrap_group(eg) from None
        return None

    # -- loading ---------------------------------------------------------------------------

    async def initialize(self) -> None:
        """Load and mount the plan's modules, once (concurrent callers wait for it)."""
        async with self._init_lock:
            self._check_open()
            if self._state is SessionState.OPENED:
                return
            await self._initialize()

    def _check_open(self) -> None:
        if self._state is SessionState.CLOSED:
            msg = "the session is closed"
            raise SessionError(msg)

    async def _initialize(self) -> None:
        plan = self.plan
        source = plan if plan is not None else self._plan_path
        assert source is not None
        # A file, or upstream's includes / agents / profile features (session/_bundles).
        resolved = await resolve_plan(source, strict=self.strict)
        if resolved is not None:
            for warning in resolved.warnings:
                logger.warning("%s", warning)
            plan = self.plan = plan_of(resolved)
        assert plan is not None
        await self._check_schemas(plan)
        self.limits = SessionLimits.from_settings(plan.session_settings)
        if agents_of(plan.raw):
            Delegation(self).register()  # before the mounts: a module may look for them
        try:
            await self._mount_required("orchestrator", plan.orchestrator)
            await self._mount_required("context", plan.context)
            for kind, specs in (
                ("provider", plan.providers),
                ("tool", plan.tools),
                ("hook", plan.hooks),
            ):
                for spec in specs:
                    await self._mount_entry(kind, spec)
            await self._mount_executors(plan)
            if plan.providers_policy is not None:  # failover and hedging (runtime/_race)
                self.coordinator.register_capability("providers_policy", plan.providers_policy)
            if plan.cassette is not None:  # record / replay (DESIGN §16): wraps what is mounted
                from ..runtime._cassette import install_cassette  # noqa: PLC0415 - tests only

                await install_cassette(self.coordinator, plan.cassette)
            await self._session_ready()
            if plan.instruction:
                await self._add_instruction(plan.instruction)
        except BaseException:
            await self._undo_mounts()
            raise
        self._state = SessionState.OPENED
        if self.parent_id is not None:
            await self.coordinator.hooks.emit(
                SESSION_FORK, {"parent": self.parent_id, "session_id": self.session_id}
            )

    async def _add_instruction(self, text: str) -> None:
        """The plan's instruction first in the history, as a system message, unless the
        history (a resumed one) has a system message already."""
        context = self.coordinator.get("context")
        messages = await context.get_messages()
        if any(message.get("role") == "system" for message in messages):
            return
        if messages:
            await context.set_messages([{"role": "system", "content": text}, *messages])
        else:
            await context.add_message({"role": "system", "content": text})

    async def _check_schemas(self, plan: MountPlan) -> None:
        """Every schema problem of the plan before any module is mounted: unknown keys
        are warnings (errors when strict); errors come as one ConfigError listing all."""
        # a sub-agent's agents were checked when its root session started
        report = await schema_problems(
            plan, self.loader, strict=self.strict, agents=self.depth == 0
        )
        for warning in report.warnings:
            logger.warning("%s", warning)
        if report.errors:
            raise ConfigError("; ".join(report.errors))

    async def _undo_mounts(self) -> None:
        """Clean up what a failed start mounted; the start's own error stays the one raised."""
        self._ready_hooks.clear()
        try:
            # Shielded; each cleanup function is bounded by coordinator.cleanup_timeout.
            with anyio.CancelScope(shield=True):
                await self.coordinator.cleanup()
        except BaseException:  # logged; the start's own error is re-raised by the caller
            # Even a module's SystemExit in cleanup must not replace the error the host
            # needs to see (issue 11); nothing outside can cancel inside the shield.
            logger.exception("cleaning up after a failed session start failed too")
        finally:
            self.loader.cleanup()

    async def _mount(self, kind: str, spec: ModuleSpec) -> None:
        assert self.plan is not None
        if spec.problem is not None:  # an optional entry that cannot load as written
            raise ConfigError(spec.problem)
        mount = await self.loader.load(spec.module, spec.config, spec.source, self.coordinator)
        before = dict(self.coordinator.get(_MULTI_OF[kind])) if kind in _MULTI_OF else {}
        mounted = _mounted_objects(self.coordinator)
        try:
            with module_scope(spec.module):
                cleanup = await mount(self.coordinator)
        except SessionError:
            raise  # the session used the wrong way (a service without `async with`): the host's
        except ConfigError as exc:
            # A bad value in the plan stays a ConfigError (whichever module or key), and
            # still says which plan entry it is.
            raise ConfigError(f"{kind} {spec.module!r}: {exc}") from exc
        except Exception as exc:
            # Whatever the module raised, the caller learns which plan entry failed.
            raise ModuleLoadError(spec.module, describe(exc), kind=kind) from exc
        self.coordinator.register_cleanup(cleanup)
        ready = getattr(mount, "__on_session_ready__", None)
        if callable(ready):
            self._ready_hooks.append((spec.module, ready))
        # An object the module mounted may define on_session_ready too (a method).
        for obj in _mounted_objects(self.coordinator).values():
            if id(obj) in mounted:
                continue
            method = getattr(obj, "on_session_ready", None)
            if callable(method) and getattr(method, "__func__", method) is not ready:
                self._ready_hooks.append((spec.module, method))
        if kind == "provider" and spec.instance_id:
            self._rename_provider(before, spec)
        if kind in _MULTI_OF:  # which plan entry mounted each tool / provider
            specs = (
                self.coordinator.tool_specs if kind == "tool" else self.coordinator.provider_specs
            )
            for name, mounted in self.coordinator.get(_MULTI_OF[kind]).items():
                if before.get(name) is not mounted:
                    specs[name] = spec

    async def _mount_executors(self, plan: MountPlan) -> None:
        """Choose each tool's executor: its entry's ``executor``, else the session's.

        ``local`` (or none) leaves a tool on the batch's own path. One executor object is
        built per distinct plan entry; a module executor (``executor-dask``) is loaded as
        a module whose ``mount`` returns it, and started as a module service.
        """
        from ..runtime._executors import builtin_executor  # noqa: PLC0415 - runtime needs kernel

        built: dict[int, Any] = {}

        async def build(spec: ModuleSpec, field: str) -> Any:
            if id(spec) in built:
                return built[id(spec)]
            try:
                executor = builtin_executor(spec.module, spec.config, field)
            except LookupError:
                executor = await self._mount_executor_module(spec, field)
            if executor is not None and getattr(executor, "needs_service", True):
                await self.coordinator.start_service(
                    partial(_serve_executor, executor), name=f"executor:{spec.module}"
                )
            elif executor is not None:  # a built-in's workers end with the session
                self.coordinator.register_cleanup(executor.stop)
            built[id(spec)] = executor
            return executor

        default = None
        if plan.executor is not None:
            default = await build(plan.executor, "session.executor")
        executors: dict[str, Any] = {}
        for name, spec in self.coordinator.tool_specs.items():
            index = plan.tools.index(spec)
            chosen = (
                await build(spec.executor, f"tools[{index}].executor")
                if spec.executor is not None
                else default
            )
            if chosen is not None:
                executors[name] = chosen
        self.coordinator.tool_executors = executors

    async def _mount_executor_module(self, spec: ModuleSpec, field: str) -> Any:
        mount = await self.loader.load(spec.module, spec.config, spec.source, self.coordinator)
        try:
            executor = await mount(self.coordinator)
        except (ConfigError, SessionError):
            raise
        except Exception as exc:
            raise ModuleLoadError(spec.module, describe(exc), kind="executor") from exc
        if not callable(getattr(executor, "run", None)):
            msg = f"{field}.module: {spec.module!r} is not an executor (its mount returned none)"
            raise ConfigError(msg)
        return executor

    def _rename_provider(self, before: dict[str, Any], spec: ModuleSpec) -> None:
        """Mount what the entry added under its ``instance_id``: one provider takes it,
        several keep their names behind it (``<instance_id>-<name>``): none is lost."""
        providers = self.coordinator.get("providers")
        added = [
            name for name in providers if name not in before or providers[name] is not before[name]
        ]
        if len(added) == 1:
            providers[spec.instance_id] = providers.pop(added[0])
            return
        for name in added:
            providers[f"{spec.instance_id}-{name}"] = providers.pop(name)

    async def _session_ready(self) -> None:
        """Call each mounted module's ``on_session_ready(coordinator)``, in mount order.

        A failure is logged and emitted as ``module:on_session_ready_failed``; the session
        goes on. Cancellation propagates.
        """
        hooks, self._ready_hooks = self._ready_hooks, []
        for module_id, ready in hooks:
            try:
                with module_scope(module_id):
                    result = ready(self.coordinator)
                    if inspect.isawaitable(result):
                        await result
            except Exception as exc:
                logger.exception("on_session_ready of module %r failed", module_id)
                await self.coordinator.hooks.emit(
                    MODULE_ON_SESSION_READY_FAILED,
                    {"module_id": module_id, "error": f"{type(exc).__name__}: {exc}"},
                )

    async def _mount_required(self, kind: str, spec: ModuleSpec) -> None:
        await self._mount(kind, spec)
        if self.coordinator.get(_MOUNT_POINT_OF[kind]) is None:
            msg = f"session.{kind}: module {spec.module!r} mounted nothing at {kind!r}"
            raise ConfigError(msg)

    async def _mount_entry(self, kind: str, spec: ModuleSpec) -> None:
        """Mount a provider, tool or hook; its failure fails the start unless ``optional``.

        Either way the failure is emitted as ``module:load_failed``.
        """
        try:
            await self._mount(kind, spec)
        except Exception as exc:
            await self.coordinator.hooks.emit(
                MODULE_LOAD_FAILED,
                {
                    "module_type": kind,
                    "module_id": spec.module,
                    "instance_id": spec.instance_id,
                    "error": str(_original(exc)),
                    "reason_code": _reason_code(_original(exc)),
                    "optional": spec.optional,
                },
            )
            if not spec.optional:
                raise
            logger.warning("optional %s %r not loaded: %s", kind, spec.module, exc)

    # -- turns -----------------------------------------------------------------------------

    async def run(self, prompt: str) -> TurnResult:
        """Run one turn. A turn cancelled through the session returns status ``cancelled``.

        Raises [`SessionError`][amplifier_anyio.SessionError] when a turn is already running or the
        session is closed; mounts the plan's modules first if ``async with`` did not.
        """
        handle = self._accept_turn()
        try:
            return await self._run_accepted(prompt, handle)
        finally:
            self._release_turn(handle)

    async def resume(self, approvals: Mapping[str, str] | None = None) -> TurnResult:
        """Continue the turn the context's history ends in (``docs/durable.md``).

        ``approvals`` maps the call ids of ``TurnResult.pending_approvals`` to ``"allow"``
        or ``"deny"``; they are recorded (in the transcript's journal), the allowed calls
        run, the denied ones are answered as denied, and the turn goes on with the
        provider. Without approvals it continues a turn a crash left unfinished (running
        again only calls whose tools are idempotent). This works in a later process that
        opened the same transcript. A turn whose history already ends with its answer
        returns that answer without a provider call; calls still undecided end the turn
        ``awaiting_approval`` again.

        Raises [`SessionError`][amplifier_anyio.SessionError] when a turn is running, the
        orchestrator or the context cannot resume (loop-basic / loop-streaming / loop-events with
        context-persistent can), or an approval names a call that is not pending.
        """
        handle = self._accept_turn()
        try:
            return await self._run_accepted("", handle, approvals=approvals or {})
        finally:
            self._release_turn(handle)

    def _release_turn(self, handle: TurnHandle) -> None:
        """The turn is over: ``cancel()`` no longer reaches it, and another may start."""
        if self._turn is handle:
            self._turn = None
        handle.finish()

    def _accept_turn(self) -> TurnHandle:
        """Take the turn on, before any await: from here on ``cancel()`` reaches it."""
        self._check_open()
        if self._turn is not None:
            msg = "a turn is already running in this session"
            raise SessionError(msg)
        self._turn = self.coordinator.accept_turn(parent=self._parent_turn)
        return self._turn

    async def _run_accepted(
        self, prompt: str, handle: TurnHandle, approvals: Mapping[str, str] | None = None
    ) -> TurnResult:
        try:
            if self._state is not SessionState.OPENED:  # mounted already: no lock to take
                await self.initialize()
            handle.budget.limits = self.limits.budget
            if not self._started:
                await self._announce(handle)
            if approvals is None:
                result = await self._run_turn(prompt)
            else:
                result = await self._resume_turn(approvals)
            # A cancel() that arrived while the turn was closing its events is recorded
            # now rather than dropped. Shielded: the turn has ended and said how, so a host
            # cancel arriving now is delivered at the host's next checkpoint instead of
            # turning a finished turn into an exception. (Nothing due: nothing to flush.)
            if handle.cancel_flush_due():
                deadline = anyio.current_time() + _END_TIMEOUT
                with anyio.CancelScope(shield=True, deadline=deadline):
                    await handle.flush_cancel()
        except anyio.get_cancelled_exc_class():
            self.status.status = "cancelled"
            raise
        except BaseException as exc:
            self.status.status = "failed"
            self.status.last_error = {"type": type(exc).__name__, "message": str(exc)}
            raise
        self._record(result)
        self.last_result = result
        return result

    async def execute(self, prompt: str) -> str:
        """Amplifier's call: the answer's text; raises the turn's own exception if it failed."""
        result = await self.run(prompt)
        if result.error is not None:
            raise result.error
        return result.text

    def stream(self, prompt: str) -> TurnEventStream:
        """Run one turn while the host reads its events as a stream.

        ``async with session.stream(prompt) as events:`` gives a receive stream of
        ``(name, data)`` pairs that ends with the turn. The turn is accepted when the
        block is entered (a [`SessionError`][amplifier_anyio.SessionError] then, if one is running);
        leaving the block before the turn is over cancels it (immediately) and waits for it. The
        TurnResult is then in ``.result`` of the stream object and in `last_result`.
        """
        return TurnEventStream(self, prompt)

    def cancel(self, immediate: bool = False, *, reason: str | None = None) -> bool:
        """Ask the running turn to stop: before its next provider call, or (immediate) now.

        Returns whether a turn was in progress (also one still starting: mounting
        modules, running ``session:start`` hooks). Synchronous and safe from any task of
        the session's event loop; from another thread use
        ``anyio.from_thread.run_sync(session.cancel, True)``. ``reason`` says who cancels
        and why (default ``"session.cancel(immediate=True)"``): an immediate cancel passes
        it to the scopes it cancels, and it is logged at debug level.
        """
        handle = self._turn
        if handle is None:
            return False
        handle.cancel(immediate, reason=reason or "session.cancel(immediate=True)")
        return True

    async def _announce(self, handle: TurnHandle) -> None:
        """Deliver ``session:start`` (``session:resume``) to every handler, once.

        The hooks belong to the turn they announce: its immediate cancel (or the host's)
        interrupts the handler that is running, and the handlers after it still get the
        event (``HookRegistry.announce``), so no observer sees ``session:end`` without a
        start. The turn itself then ends cancelled.
        """
        if self._started:
            return
        self._started = True
        event = SESSION_RESUME if self.is_resumed else SESSION_START
        payload: dict[str, Any] = {"session_id": self.session_id, "parent_id": self.parent_id}
        metadata = self.config.get("session", {}).get("metadata")
        if metadata:
            payload["metadata"] = metadata
        with anyio.CancelScope() as scope, handle.bind_scope(scope):
            await self.coordinator.hooks.announce(event, payload)
        handle.announced = True

    async def _run_turn(self, prompt: str) -> TurnResult:
        coordinator = self.coordinator
        orchestrator = coordinator.get("orchestrator")
        if orchestrator is None:
            msg = "No orchestrator module mounted"
            raise SessionError(msg)
        args = (
            prompt,
            coordinator.get("context"),
            coordinator.get("providers"),
            coordinator.get("tools"),
            coordinator.hooks,
        )
        run_turn = getattr(orchestrator, "run_turn", None)
        if run_turn is not None:
            result: TurnResult = await run_turn(*args, coordinator=coordinator)
            return result
        return await self._run_foreign(orchestrator, args)

    async def _resume_turn(self, approvals: Mapping[str, str]) -> TurnResult:
        coordinator = self.coordinator
        orchestrator = coordinator.get("orchestrator")
        resume_turn = getattr(orchestrator, "resume_turn", None)
        if resume_turn is None or getattr(orchestrator, "resumable", True) is False:
            name = getattr(orchestrator, "name", type(orchestrator).__name__)
            msg = f"the orchestrator {name!r} cannot resume a turn"
            raise SessionError(msg)
        context = coordinator.get("context")
        if getattr(context, "resume_work", None) is None:
            name = getattr(context, "name", type(context).__name__)
            msg = f"the context {name!r} cannot resume a turn (context-persistent can)"
            raise SessionError(msg)
        _check_held_tools(context, coordinator.get("tools"), approvals)  # before any decision
        if approvals:
            decide = getattr(context, "journal_decide", None)
            if decide is None:
                msg = "the context cannot keep approvals (context-persistent can)"
                raise SessionError(msg)
            try:
                await decide(dict(approvals))
            except ValueError as exc:
                raise SessionError(str(exc)) from exc
        messages = await context.get_messages()
        prompt = next(
            (
                m["content"]
                for m in reversed(messages)
                if m.get("role") == "user" and isinstance(m.get("content"), str)
            ),
            "",
        )
        result: TurnResult = await resume_turn(
            prompt,
            context,
            coordinator.get("providers"),
            coordinator.get("tools"),
            coordinator.hooks,
            coordinator=coordinator,
        )
        return result

    async def _run_foreign(self, orchestrator: Any, args: tuple[Any, ...]) -> TurnResult:
        """An orchestrator with only ``execute``: the session binds the turn's cancel scope."""
        handle = self.coordinator.claim_turn()
        token = handle.token
        text, status, error = "", TurnStatus.SUCCESS, None
        with (
            anyio.CancelScope() as scope,
            handle.bind_scope(scope),
            watch_provider_calls() as calls,
        ):
            try:
                text = await orchestrator.execute(*args, coordinator=self.coordinator)
            except Exception as exc:  # noqa: BLE001 - reported in the TurnResult
                status, error = TurnStatus.ERROR, exc
        if error is None and calls.failure is not None:
            # Its last provider call failed and it answered anyway (upstream loop-events
            # answers "Error getting response: …"): a failed turn, not a success.
            status, error = TurnStatus.ERROR, calls.failure
        if scope.cancelled_caught or (token.is_cancelled and status is TurnStatus.SUCCESS):
            status = TurnStatus.CANCELLED
            with anyio.CancelScope(shield=True), anyio.move_on_after(_END_TIMEOUT):
                await handle.flush_cancel()
                await self.coordinator.hooks.emit(
                    CANCEL_COMPLETED, {"was_immediate": token.is_immediate}
                )
        return TurnResult(text=str(text or ""), status=status, error=error)

    def _record(self, result: TurnResult) -> None:
        status = self.status
        status.turns += 1
        status.total_input_tokens += result.usage.input_tokens
        status.total_output_tokens += result.usage.output_tokens
        if result.usage.cost_usd is not None:
            status.cost_usd = (status.cost_usd or Decimal(0)) + result.usage.cost_usd
        if result.error is not None:
            status.status = "failed"
            status.last_error = {"type": type(result.error).__name__, "message": str(result.error)}
        elif result.status is TurnStatus.CANCELLED:
            status.status = "cancelled"
        else:
            status.status = "completed"

    # -- the end ---------------------------------------------------------------------------

    async def cleanup(self) -> None:
        """Emit ``session:end`` (if opened), run cleanups in reverse, shielded and bounded.

        The session is CLOSED afterwards, whatever happened; a second call does nothing.
        """
        if self._state is SessionState.CLOSED:
            await anyio.lowlevel.checkpoint()
            return
        try:
            if self._state is SessionState.OPENED:
                self.status.ended_at = datetime.now(UTC)
                with anyio.CancelScope(shield=True), anyio.move_on_after(_END_TIMEOUT):
                    await self.coordinator.hooks.emit(
                        SESSION_END, {"session_id": self.session_id, "status": self.status.status}
                    )
            await self.coordinator.cleanup()
        finally:
            self._state = SessionState.CLOSED
            if self._services is not None:
                self._services.closed = True
            self.loader.cleanup()


def _mounted_objects(coordinator: ModuleCoordinator) -> dict[int, Any]:
    """Every object at a mount point, by id (to tell what one mount added)."""
    points = coordinator.mount_points
    found = [points["orchestrator"], points["context"], points["module-source-resolver"]]
    found.extend(points["providers"].values())
    found.extend(points["tools"].values())
    return {id(obj): obj for obj in found if obj is not None}


def _original(exc: BaseException) -> BaseException:
    """What a module's ``mount`` raised, when the session wrapped it to name the module."""
    wrapped = isinstance(exc, ModuleLoadError) and exc.kind != "module"
    wrapped = wrapped or (isinstance(exc, ConfigError) and isinstance(exc.__cause__, ConfigError))
    return exc.__cause__ if wrapped and exc.__cause__ is not None else exc


def _reason_code(exc: BaseException) -> str:
    if isinstance(exc, ModuleNotFoundError):
        return "not_found"
    if isinstance(exc, ModuleLoadError):
        return "load_error"
    if isinstance(exc, ConfigError):
        return "config_error"
    return "mount_error"


def _check_held_tools(context: Any, tools: Any, approvals: Mapping[str, str]) -> None:
    """Refuse a resume under a plan without the tool of a held call (it would be answered
    "not found" and its approval used up), before any decision is recorded."""
    held_calls = getattr(context, "held_calls", None)
    if held_calls is None:
        return
    mounted = tools or {}
    for call_id, tool in held_calls():
        if tool not in mounted and approvals.get(call_id) != "deny":
            msg = (
                f"cannot resume: the held call {call_id} needs the tool {tool!r}, which this "
                "session does not mount (resume it under the plan it ran under)"
            )
            raise SessionError(msg)
