"""The CLI's terminal printers: chat's event printer listens only while ``/events`` is on;
the start's warning lines never hold the loop.

A listener on every event costs each emit a thread hop (the printer is ``blocking=True``)
and turns on the ordering of a batch's tool events; with events off a chat turn pays
neither.
"""

from __future__ import annotations

import contextlib
import io
import sys
import time
from typing import Any

import pytest

from amplifier_anyio import AmplifierSession
from amplifier_anyio.cli._common import enter_session
from amplifier_anyio.cli.chat import _Repl
from amplifier_anyio.events import ALL_EVENTS, HOOK_SLOW, TOOL_POST, TOOL_PRE

pytestmark = pytest.mark.anyio

PLAN = {
    "session": {"orchestrator": "loop-basic", "context": "context-simple"},
    "providers": [{"module": "provider-scripted", "config": {"demo": True}}],
    "tools": [{"module": "tool-demo"}],
}


def _printers(session: AmplifierSession) -> int:
    counts = session.coordinator.hooks.statistics().handlers
    return sum(counts.get(event, 0) for event in ALL_EVENTS)


async def test_the_printer_is_registered_only_while_events_are_on() -> None:
    async with AmplifierSession(PLAN) as session:
        hooks = session.coordinator.hooks
        repl = _Repl(session.plan, system=None, events=False, log=None, strict=False, resumed=None)
        repl._attach(session)
        assert not hooks.has_handlers(TOOL_PRE)
        assert not hooks.has_handlers(TOOL_POST)
        off = _printers(session)

        repl._show_events(session, on=True)
        assert hooks.has_handlers(TOOL_PRE)
        on = _printers(session)
        assert on - off == len(set(ALL_EVENTS))  # one printer per event
        repl._show_events(session, on=True)  # on twice: still one printer
        assert _printers(session) == on

        repl._show_events(session, on=False)
        assert not hooks.has_handlers(TOOL_PRE)
        assert _printers(session) == off
        result = await session.run("count my words")
        assert result.status == "success"
        repl._show_events(session, on=False)  # off twice: nothing to stop


async def test_events_on_from_the_start_registers_the_printer() -> None:
    async with AmplifierSession(PLAN) as session:
        repl = _Repl(session.plan, system=None, events=True, log=None, strict=False, resumed=None)
        repl._attach(session)
        assert session.coordinator.hooks.has_handlers(TOOL_PRE)


class SlowTerminal(io.StringIO):
    """A terminal whose every write takes 0.2 s (a slow ssh session, a full pipe)."""

    def write(self, text: str) -> int:
        time.sleep(0.2)
        return super().write(text)


async def test_the_start_warnings_never_hold_the_loop_on_a_slow_terminal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The CLI's warning and retry lines are terminal writes, which can block: they run in
    a thread (``blocking=True``), so a slow terminal never holds the session's loop. (Before,
    they ran on it: a slow write was reported as the hook ``cli-warn`` holding the event
    loop, one more warning line, as a loaded machine once showed.)"""
    terminal = SlowTerminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    plan = {**PLAN, "tools": [*PLAN["tools"], {"module": "tool-dmeo", "optional": True}]}
    session = AmplifierSession(plan)
    slow: list[dict[str, Any]] = []
    session.coordinator.hooks.register(HOOK_SLOW, lambda _event, data: slow.append(data))
    async with contextlib.AsyncExitStack() as stack:
        await enter_session(stack, session)
        result = await session.run("count my words")
    assert result.status == "success"
    assert "warning: tool 'tool-dmeo' not loaded" in terminal.getvalue()
    assert slow == []
