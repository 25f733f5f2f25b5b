"""Seeded fault plans: provider errors, tool failures and hangs, cancel points (DESIGN §16).

A `FaultPlan` is a seed and a few rates. Applied to a session's coordinator
(`FaultPlan.apply`), it wraps the mounted providers and tools and registers one
hook; each fault is then a pure function of the seed and *where* it strikes, never of
timing:

- the n-th provider call of the session (counted from 0) may fail with a 429 carrying a
  ``Retry-After`` (`RateLimitError`), a 5xx
  (`ProviderUnavailableError`), a timeout
  (`LLMTimeoutError`), or — an ``open_stream()`` call — a stream
  cut after a few events (`StreamError`; a ``complete()``
  call gets a dropped connection, `NetworkError`). The error
  is the one the provider's HTTP layer raises once its own retries are spent;
- a tool call, named by the number of provider calls before it and its index in its
  batch, may fail (an exception: the call's error result) or hang until cancelled (give
  the orchestrator a ``tool_timeout``, or the turn a deadline, when hangs are drawn);
- the turn may be cancelled, gracefully or immediately, at the k-th emission of one
  event: ``execution:start``, ``provider:request``, ``provider:response`` or
  ``content_block:delta`` — events a turn emits one at a time, so the k-th is the same in
  every run.

So the same seed gives the same run: the same events, the same statuses and the same
record of what struck (`FaultRun.injected`). That record is in *plan order* — by where each
fault strikes (the provider calls before it, then a batch's tool calls by their index) —
never in the order the faults arrived, which for the tool calls of one batch is the
scheduler's.
`fault_plans` is a Hypothesis strategy of plans; a failing property shows the plan
it drew, seed first (``FaultPlan(seed=1234, …)``), and that line rebuilds it.
"""

from __future__ import annotations

import inspect
import random
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import anyio
import anyio.lowlevel
import attrs

from ..errors import (
    ConfigError,
    LLMError,
    LLMTimeoutError,
    NetworkError,
    ProviderUnavailableError,
    RateLimitError,
    StreamError,
)
from ..events import CONTENT_BLOCK_DELTA, EXECUTION_START, PROVIDER_REQUEST, PROVIDER_RESPONSE
from ..kernel._tracing import current_tool_call
from ..models import ChatRequest, ChatResponse, ToolResult
from ..runtime._streaming import stream_opener

if TYPE_CHECKING:
    from hypothesis.strategies import SearchStrategy

__all__ = (
    "PROVIDER_FAULTS",
    "TOOL_FAULTS",
    "CANCEL_EVENTS",
    "ProviderFault",
    "ToolFault",
    "CancelPoint",
    "FaultPlan",
    "FaultRun",
    "InjectedToolFault",
    "fault_plans",
)

PROVIDER_FAULTS = ("rate_limit", "server_error", "timeout", "stream_cut")
"""The provider faults a plan may draw."""
TOOL_FAULTS = ("fail", "hang")
"""The tool faults a plan may draw."""
CANCEL_EVENTS = (EXECUTION_START, PROVIDER_REQUEST, PROVIDER_RESPONSE, CONTENT_BLOCK_DELTA)
"""The events a cancel point may be placed on: a turn emits each one at a time."""

_SERVER_ERRORS = (500, 502, 503, 529)


class InjectedToolFault(RuntimeError):  # noqa: N818 - named for what it is
    """The failure a fault plan gives a tool call (the call's error result)."""


@attrs.frozen(kw_only=True)
class ProviderFault:
    """One provider call's fault."""

    kind: str
    status_code: int | None = None
    retry_after: float | None = None
    after_events: int = 0
    """``stream_cut``: how many events arrive before the cut."""

    def error(self, provider: str, *, streaming: bool) -> LLMError:
        """The error the call raises."""
        if self.kind == "rate_limit":
            return RateLimitError(
                "Rate limit exceeded (fault plan)",
                provider=provider,
                status_code=429,
                retryable=True,
                retry_after=self.retry_after,
            )
        if self.kind == "server_error":
            return ProviderUnavailableError(
                f"Server error {self.status_code} (fault plan)",
                provider=provider,
                status_code=self.status_code,
                retryable=True,
            )
        if self.kind == "timeout":
            return LLMTimeoutError("Timed out (fault plan)", provider=provider, retryable=True)
        if streaming:
            return StreamError(
                f"the stream broke off after {self.after_events} events (fault plan)",
                provider=provider,
                retryable=True,
            )
        return NetworkError(
            "the connection dropped mid-response (fault plan)", provider=provider, retryable=True
        )


@attrs.frozen(kw_only=True)
class ToolFault:
    """One tool call's fault: ``fail`` or ``hang``."""

    kind: str


@attrs.frozen(kw_only=True)
class CancelPoint:
    """Cancel the turn at the ``occurrence``-th (from 1) emission of ``event``."""

    event: str
    occurrence: int
    immediate: bool


def _rate(name: str) -> Callable[[Any, Any, float], None]:
    def check(_instance: Any, _attribute: Any, value: float) -> None:
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
            msg = f"{name}: expected a number from 0 to 1, got {value!r}"
            raise ConfigError(msg)

    return check


def _subset(name: str, allowed: tuple[str, ...]) -> Callable[[Any, Any, tuple[str, ...]], None]:
    def check(_instance: Any, _attribute: Any, value: tuple[str, ...]) -> None:
        unknown = [v for v in value if v not in allowed]
        if unknown:
            msg = f"{name}: unknown {unknown[0]!r} (known: {', '.join(allowed)})"
            raise ConfigError(msg)

    return check


@attrs.frozen(kw_only=True)
class FaultPlan:
    """A seeded plan of faults (see the module docstring). Every fault it gives is a pure
    function of ``seed`` and where it strikes; the rates are each fault's probability."""

    seed: int
    provider_rate: float = attrs.field(default=0.25, validator=_rate("provider_rate"))
    tool_rate: float = attrs.field(default=0.25, validator=_rate("tool_rate"))
    cancel_rate: float = attrs.field(default=0.5, validator=_rate("cancel_rate"))
    provider_kinds: tuple[str, ...] = attrs.field(
        default=PROVIDER_FAULTS,
        converter=tuple,
        validator=_subset("provider_kinds", PROVIDER_FAULTS),
    )
    tool_kinds: tuple[str, ...] = attrs.field(
        default=TOOL_FAULTS, converter=tuple, validator=_subset("tool_kinds", TOOL_FAULTS)
    )
    cancel_events: tuple[str, ...] = attrs.field(
        default=CANCEL_EVENTS, converter=tuple, validator=_subset("cancel_events", CANCEL_EVENTS)
    )
    max_occurrence: int = 3
    """A cancel point is on one of the first ``max_occurrence`` emissions of its event."""

    def _random(self, *where: object) -> random.Random:
        # A str seed is hashed with SHA-512: the same on every run and every machine.
        return random.Random(":".join(str(part) for part in (self.seed, *where)))

    @property
    def cancel(self) -> CancelPoint | None:
        """The plan's cancel point, if it has one."""
        rng = self._random("cancel")
        if not self.cancel_events or rng.random() >= self.cancel_rate:
            return None
        return CancelPoint(
            event=rng.choice(self.cancel_events),
            occurrence=rng.randint(1, max(1, self.max_occurrence)),
            immediate=rng.random() < 0.5,
        )

    def provider_fault(self, ordinal: int) -> ProviderFault | None:
        """The fault of the session's provider call number ``ordinal`` (from 0), if any."""
        rng = self._random("provider", ordinal)
        if not self.provider_kinds or rng.random() >= self.provider_rate:
            return None
        kind = rng.choice(self.provider_kinds)
        return ProviderFault(
            kind=kind,
            status_code=rng.choice(_SERVER_ERRORS) if kind == "server_error" else None,
            retry_after=float(rng.randint(1, 30)) if kind == "rate_limit" else None,
            after_events=rng.randint(0, 4),
        )

    def tool_fault(self, after: int, index: int, occurrence: int = 0) -> ToolFault | None:
        """The fault of the tool call at ``index`` of a batch asked for after ``after``
        provider calls (``occurrence``: several batches between two provider calls)."""
        rng = self._random("tool", after, index, occurrence)
        if not self.tool_kinds or rng.random() >= self.tool_rate:
            return None
        return ToolFault(kind=rng.choice(self.tool_kinds))

    def apply(self, coordinator: Any) -> FaultRun:
        """Wrap ``coordinator``'s mounted providers and tools and register the cancel
        point; `FaultRun.remove` undoes it. Apply it once the modules are mounted
        (after ``async with AmplifierSession(...)``)."""
        run = FaultRun(self, coordinator)
        run._install()
        return run


@attrs.define(eq=False)
class FaultRun:
    """A fault plan applied to one coordinator; ``injected`` says what struck, in plan order."""

    plan: FaultPlan
    coordinator: Any
    provider_calls: int = 0
    _struck: list[tuple[tuple[int, int, int, int], str]] = attrs.Factory(list)
    _tool_seen: dict[tuple[int, int], int] = attrs.Factory(dict)
    _originals: list[tuple[dict[str, Any], str, Any]] = attrs.Factory(list)
    _unregister: Callable[[], None] | None = None
    _emissions: int = 0

    @property
    def injected(self) -> list[str]:
        """One line per fault that struck (``provider call 2 (scripted): rate_limit``, …),
        in plan order: by the number of provider calls made before it, then — between two
        provider calls — a cancel point, the tool calls (by batch, then by index in their
        batch), the next provider call. The same seed gives the same list, whatever order
        the tool calls of a batch started in."""
        return [line for _, line in sorted(self._struck, key=lambda item: item[0])]

    def _strike(self, where: tuple[int, int, int, int], line: str) -> None:
        self._struck.append((where, line))

    def _install(self) -> None:
        providers: dict[str, Any] = self.coordinator.get("providers")
        tools: dict[str, Any] = self.coordinator.get("tools")
        for name, provider in list(providers.items()):
            providers[name] = _FaultyProvider(provider, self, name)
            self._originals.append((providers, name, provider))
        for name, tool in list(tools.items()):
            tools[name] = _FaultyTool(tool, self, name)
            self._originals.append((tools, name, tool))
        point = self.plan.cancel
        if point is not None:
            self._unregister = self.coordinator.hooks.register(
                point.event, self._cancel_hook(point), priority=-1_000_000, name="fault-plan"
            )

    def remove(self) -> None:
        """Put the original modules back and drop the cancel point."""
        for mounted, name, original in self._originals:
            if isinstance(mounted.get(name), _FaultyProvider | _FaultyTool):
                mounted[name] = original
        self._originals.clear()
        if self._unregister is not None:
            self._unregister()
            self._unregister = None

    def _cancel_hook(self, point: CancelPoint) -> Callable[[str, dict[str, Any]], Awaitable[None]]:
        async def cancel(event: str, data: dict[str, Any]) -> None:
            # async: it runs on the loop (a synchronous handler would run in a thread)
            await anyio.lowlevel.checkpoint()
            self._emissions += 1
            if self._emissions == point.occurrence:
                level = "immediate" if point.immediate else "graceful"
                line = f"cancel ({level}) at {event} #{point.occurrence}"
                self._strike((self.provider_calls, 0, 0, 0), line)
                self.coordinator.request_cancel_nowait(point.immediate)

        return cancel

    def _next_provider_fault(self, name: str) -> tuple[int, ProviderFault | None]:
        ordinal = self.provider_calls
        self.provider_calls += 1
        fault = self.plan.provider_fault(ordinal)
        if fault is not None:
            self._strike((ordinal, 2, 0, 0), f"provider call {ordinal} ({name}): {fault.kind}")
        return ordinal, fault

    def _next_tool_fault(self, name: str) -> ToolFault | None:
        call = current_tool_call()
        index = call.index if call is not None else -1
        where = (self.provider_calls, index)
        occurrence = self._tool_seen.get(where, 0)
        self._tool_seen[where] = occurrence + 1
        fault = self.plan.tool_fault(*where, occurrence)
        if fault is not None:
            self._strike(
                (self.provider_calls, 1, occurrence, index),
                f"tool call {index} after provider call {self.provider_calls - 1} "
                f"({name}): {fault.kind}",
            )
        return fault


class _FaultyProvider:
    def __init__(self, inner: Any, run: FaultRun, name: str) -> None:
        self._inner = inner
        self._run = run
        self._name = name
        opener = stream_opener(inner)
        if opener is not None:
            self._opener = opener
            self.open_stream = self._stream

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    @property
    def name(self) -> str:
        return str(getattr(self._inner, "name", self._name))

    async def complete(self, request: ChatRequest, **kwargs: Any) -> ChatResponse:
        _, fault = self._run._next_provider_fault(self._name)
        if fault is not None:
            await anyio.lowlevel.checkpoint()
            raise fault.error(self._name, streaming=False)
        response: ChatResponse = await self._inner.complete(request, **kwargs)
        return response

    @asynccontextmanager
    async def _stream(
        self, request: ChatRequest, **kwargs: Any
    ) -> AsyncIterator[AsyncIterator[dict[str, Any]]]:
        _, fault = self._run._next_provider_fault(self._name)
        await anyio.lowlevel.checkpoint()
        if fault is not None and fault.kind != "stream_cut":
            raise fault.error(self._name, streaming=True)
        async with self._opener(request, **kwargs) as events:
            cut = fault.after_events if fault is not None else None
            relayed = _cut(events, cut, fault, self._name)
            try:
                yield relayed
            finally:
                await relayed.aclose()


async def _cut(
    events: AsyncIterator[dict[str, Any]],
    after: int | None,
    fault: ProviderFault | None,
    provider: str,
) -> AsyncGenerator[dict[str, Any], None]:
    """The stream's events; with a cut, ``after`` of them and then the StreamError (never
    the final response)."""
    count = 0
    async for event in events:
        if (
            after is not None
            and fault is not None
            and (count >= after or event.get("type") == "response")
        ):
            raise fault.error(provider, streaming=True)
        count += 1
        yield event


class _FaultyTool:
    def __init__(self, inner: Any, run: FaultRun, name: str) -> None:
        self._inner = inner
        self._run = run
        self._name = name

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    @property
    def name(self) -> str:
        return str(getattr(self._inner, "name", self._name))

    async def execute(self, input: dict[str, Any]) -> Any:
        fault = self._run._next_tool_fault(self._name)
        await anyio.lowlevel.checkpoint()
        if fault is not None and fault.kind == "hang":
            await anyio.sleep_forever()
        if fault is not None:
            msg = f"{self._name} failed (fault plan)"
            raise InjectedToolFault(msg)
        execute = self._inner.execute
        if not inspect.iscoroutinefunction(execute):
            return await anyio.to_thread.run_sync(execute, input)
        result: ToolResult = await execute(input)
        return result


def fault_plans(
    *,
    provider_kinds: tuple[str, ...] = PROVIDER_FAULTS,
    tool_kinds: tuple[str, ...] = TOOL_FAULTS,
    cancel_events: tuple[str, ...] = CANCEL_EVENTS,
) -> SearchStrategy[FaultPlan]:
    """A Hypothesis strategy of fault plans (needs the ``test`` extra): a seed, and rates
    from none to often. A failing property shows ``FaultPlan(seed=…, …)``: that line
    rebuilds the plan, and the run it gives."""
    from hypothesis import strategies as st  # noqa: PLC0415 - hypothesis is a test extra

    rates = st.sampled_from((0.0, 0.25, 0.5))
    return st.builds(
        FaultPlan,
        seed=st.integers(min_value=0, max_value=2**32 - 1),
        provider_rate=rates,
        tool_rate=rates,
        cancel_rate=st.sampled_from((0.0, 0.5, 1.0)),
        provider_kinds=st.just(provider_kinds),
        tool_kinds=st.just(tool_kinds),
        cancel_events=st.just(cancel_events),
    )
