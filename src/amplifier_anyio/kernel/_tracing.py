"""Context variables that tie events and tool code to the turn and batch they run in.

A turn sets its ``trace_id``; the tool batch sets a
[`ToolCallContext`][amplifier_anyio.ToolCallContext] around each tool call. Because they are context
variables, every task spawned inside the turn sees them, and tasks of another turn never do.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import anyio
import attrs

__all__ = (
    "ToolCallContext",
    "current_trace_id",
    "current_tool_call",
    "trace_scope",
    "tool_call_scope",
)

_trace_id: ContextVar[str | None] = ContextVar("amplifier_trace_id", default=None)
_tool_call: ContextVar[ToolCallContext | tuple[Any, ...] | None] = ContextVar(
    "amplifier_tool_call", default=None
)
"""The running tool call: its context, or (on the tool batch's hot path) a deferred one,
``(build, *args)``, that [`current_tool_call`][amplifier_anyio.current_tool_call] builds only when a
tool asks."""


@attrs.frozen(kw_only=True)
class ToolCallContext:
    """What a running tool can learn about its own call."""

    tool_call_id: str
    tool_name: str
    parallel_group_id: str
    index: int
    trace_id: str | None
    idempotency_key: str | None = None
    """Stable across re-runs of this call after a crash (a journaling context assigns it):
    a tool with an outside side effect passes it on (an idempotency header) so that the
    outside world can recognise a repeat."""
    approved: bool = False
    """The call runs because someone allowed it after it was deferred."""
    batch: Sequence[Any] = attrs.field(default=(), eq=False, repr=False)
    """Every call of the call's batch (``ToolCall`` values, in order): a sub-agent spawned
    by this call is told apart from its siblings' (its cassette lane) by them."""
    on_note: Callable[[Mapping[str, Any]], Awaitable[None]] | None = attrs.field(
        default=None, eq=False, repr=False
    )
    """Where ``note_resume`` keeps its fields
    (the tool batch's; None outside a batch: the note is dropped)."""

    async def note_resume(self, **fields: Any) -> None:
        """Attach to this call what resumes its work should it be cut before it answers.

        A cancel that stops the call before it has a result answers it "cancelled"
        (``cancelled_result``), and a crash, with a context that journals calls
        (context-persistent), answers it "interrupted" on load; that answer then carries
        ``fields`` too (JSON values, beside ``error`` / ``cancelled`` / ``tool``, which
        they never replace), so the model can pick the work up: tool-task notes
        ``session_id`` as soon as its sub-agent has one. A later note adds to (and
        overrides) an earlier one; a call that answers keeps its own result.
        """
        if self.on_note is None:
            await anyio.lowlevel.checkpoint()
            return
        await self.on_note(dict(fields))


def current_trace_id() -> str | None:
    """The trace id of the turn this task runs in, or None outside a turn."""
    return _trace_id.get()


def current_tool_call() -> ToolCallContext | None:
    """The tool call this task is executing, or None outside tool code."""
    call = _tool_call.get()
    if type(call) is tuple:  # deferred by the tool batch: most tools never ask
        build, *args = call
        built: ToolCallContext = build(*args)
        return built
    return call  # type: ignore[return-value]


@contextmanager
def trace_scope(trace_id: str) -> Iterator[str]:
    """Make ``trace_id`` the current trace id for the duration of the block."""
    token = _trace_id.set(trace_id)
    try:
        yield trace_id
    finally:
        _trace_id.reset(token)


class tool_call_scope:  # noqa: N801 - used like the context-manager functions beside it
    """Expose ``call`` to tool code run inside the block.

    A class rather than a generator: it runs once per tool call, on the hot path.
    """

    __slots__ = ("_call", "_token")

    def __init__(self, call: ToolCallContext) -> None:
        self._call = call

    def __enter__(self) -> ToolCallContext:
        self._token = _tool_call.set(self._call)
        return self._call

    def __exit__(self, *exc_info: object) -> None:
        _tool_call.reset(self._token)
