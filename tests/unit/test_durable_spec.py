"""``session.durable`` (DESIGN §17): defaults; a bad value is one line naming the key."""

from __future__ import annotations

from typing import Any

import pytest

from amplifier_anyio.errors import ConfigError
from amplifier_anyio.kernel._mount_plan import DurableSpec, MountPlan


def plan(durable: Any) -> dict[str, Any]:
    return {
        "session": {"orchestrator": "loop-basic", "context": "context-simple", "durable": durable}
    }


def test_defaults_and_overrides() -> None:
    parsed = MountPlan.from_dict(plan({"task_queue": "q", "tools": {"heartbeat_timeout": 2}}))
    assert parsed.durable is not None
    assert parsed.durable.task_queue == "q"
    assert parsed.durable.tools.heartbeat_timeout == 2.0
    assert parsed.durable.address == "127.0.0.1:7233"
    assert parsed.durable.workflow_task_timeout == 10.0
    timed = MountPlan.from_dict(plan({"workflow_task_timeout": 3})).durable
    assert timed is not None
    assert timed.workflow_task_timeout == 3.0
    assert DurableSpec.from_value(parsed.durable.to_dict()) == parsed.durable
    assert MountPlan.from_dict(plan(None)).durable is None


@pytest.mark.parametrize(
    ("durable", "key"),
    [
        ("yes", "session.durable"),
        ({"engine": "dbos"}, "session.durable.engine"),
        ({"adress": "x"}, "session.durable.adress"),
        ({"address": ""}, "session.durable.address"),
        ({"provider": {"maximum_attempts": 0}}, "session.durable.provider.maximum_attempts"),
        ({"tools": {"heartbeat_timeout": "soon"}}, "session.durable.tools.heartbeat_timeout"),
        ({"tools": []}, "session.durable.tools"),
        ({"continue_as_new_after_turns": True}, "session.durable.continue_as_new_after_turns"),
        ({"sticky_timeout": -1}, "session.durable.sticky_timeout"),
        ({"workflow_task_timeout": 0}, "session.durable.workflow_task_timeout"),
        ({"workflow_task_timeout": 121}, "session.durable.workflow_task_timeout"),
    ],
)
def test_bad_value_is_one_line_naming_the_key(durable: Any, key: str) -> None:
    with pytest.raises(ConfigError) as info:
        MountPlan.from_dict(plan(durable))
    message = str(info.value)
    assert message.startswith(f"{key}: ")
    assert "\n" not in message
