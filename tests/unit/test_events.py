"""The event taxonomy: upstream's names in upstream's order, then ours, all well formed."""

from __future__ import annotations

import re
from pathlib import Path

from amplifier_anyio import events
from amplifier_anyio.events import ALL_EVENTS, EMITTED_EVENTS, RESERVED_EVENTS

SRC = Path(events.__file__).parent

# amplifier-core's ALL_EVENTS, in its order (43 names).
UPSTREAM_EVENTS = (
    "session:start",
    "session:end",
    "session:fork",
    "session:resume",
    "prompt:submit",
    "prompt:complete",
    "plan:start",
    "plan:end",
    "provider:request",
    "provider:response",
    "provider:retry",
    "provider:error",
    "provider:throttle",
    "provider:tool_sequence_repaired",
    "provider:resolve",
    "llm:request",
    "llm:response",
    "content_block:start",
    "content_block:delta",
    "content_block:end",
    "thinking:delta",
    "thinking:final",
    "tool:pre",
    "tool:post",
    "tool:error",
    "context:pre_compact",
    "context:post_compact",
    "context:compaction",
    "context:include",
    "orchestrator:complete",
    "execution:start",
    "execution:end",
    "user:notification",
    "artifact:write",
    "artifact:read",
    "policy:violation",
    "approval:required",
    "approval:granted",
    "approval:denied",
    "cancel:requested",
    "cancel:completed",
    "module:on_session_ready_failed",
    "module:load_failed",
)

# Emitted by amplifier_anyio but not listed upstream.
OUR_EVENTS = (
    "session:config",
    "tool:selecting",
    "tool:selected",
    "tool:waiting",
    "task:agent_spawned",
    "task:agent_resumed",
    "task:agent_completed",
    "provider:failover",
    "provider:hedge",
    "provider:hedge_settled",
    "provider:cache",
    "hook:slow",
    *(
        f"lifecycle:{stage}"
        for stage in (
            "initialize",
            "plan",
            "route",
            "execute",
            "aggregate",
            "complete",
            "failed",
            "cancelled",
        )
    ),
)

NAME = re.compile(r"[a-z][a-z_]*(:[a-z][a-z_]*){1,2}")


def _constants() -> dict[str, str]:
    return {
        name: value
        for name, value in vars(events).items()
        if name.isupper() and name != "ALL_EVENTS" and isinstance(value, str)
    }


def test_upstream_names_come_first_in_upstream_order() -> None:
    assert len(UPSTREAM_EVENTS) == 43
    assert ALL_EVENTS[: len(UPSTREAM_EVENTS)] == UPSTREAM_EVENTS


def test_our_additions_follow() -> None:
    assert ALL_EVENTS[len(UPSTREAM_EVENTS) :] == OUR_EVENTS


def test_no_duplicates() -> None:
    assert len(set(ALL_EVENTS)) == len(ALL_EVENTS)


def test_naming_convention() -> None:
    bad = [name for name in ALL_EVENTS if not NAME.fullmatch(name)]
    assert not bad


def test_every_constant_is_listed_and_every_listed_name_has_a_constant() -> None:
    assert sorted(_constants().values()) == sorted(ALL_EVENTS)


def test_constant_name_is_upper_snake_of_its_value() -> None:
    mismatched = {
        name: value
        for name, value in _constants().items()
        if name != value.replace(":", "_").upper()
    }
    assert not mismatched


def test_every_constant_is_exported() -> None:
    collections = {
        "ALL_EVENTS",
        "EMITTED_EVENTS",
        "RESERVED_EVENTS",
        "LIFECYCLE_EVENTS",
        "GATE_EVENTS",
    }
    assert set(_constants()) | collections == set(events.__all__)


def _emitted_in_source(name: str, value: str) -> bool:
    """Whether some module other than events.py refers to the event (by constant or string)."""
    for path in SRC.rglob("*.py"):
        if path.name == "events.py":
            continue
        text = path.read_text()
        if re.search(rf"\b{name}\b", text) or f'"{value}"' in text:
            return True
    return False


def test_emitted_and_reserved_events_are_what_the_source_says() -> None:
    constants = {
        value: name
        for name, value in vars(events).items()
        if name.isupper() and isinstance(value, str)
    }
    assert set(EMITTED_EVENTS) | RESERVED_EVENTS == set(ALL_EVENTS)
    assert not set(EMITTED_EVENTS) & RESERVED_EVENTS
    for value in ALL_EVENTS:
        used = _emitted_in_source(constants[value], value)
        assert used == (value in EMITTED_EVENTS), value
