"""A sub-agent never out-waits its parent: the parent's ``turn_timeout`` bounds the
children (virtual time on trio; a short real deadline on asyncio)."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from _agents_kit import Children, calls, child_messages, of, paired, parent_reply, plan, task

from amplifier_anyio import AmplifierSession, TurnStatus
from amplifier_anyio.events import EXECUTION_END
from amplifier_anyio.providers.scripted import ScriptedProvider

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend(virtual_backend: tuple[str, dict[str, object]]) -> tuple[str, dict[str, object]]:
    return virtual_backend


@pytest.fixture
def s(anyio_backend: tuple[str, dict[str, object]]) -> float:
    """Seconds per scenario second: 1 on virtual time, 1/20 on the real clock."""
    return 1.0 if anyio_backend[0] == "trio" else 0.05


async def test_the_parents_turn_timeout_bounds_its_children(s: float) -> None:
    deadlines: list[float] = []
    slept: list[str] = []

    def probe(child: AmplifierSession) -> Any:
        async def body() -> str:
            deadlines.append(child.coordinator.turn.deadline)
            slept.append(child.session_id)
            await anyio.sleep(1000 * s)  # far beyond the parent's deadline
            return "woke"  # pragma: no cover

        return body

    children = Children(
        {
            "researcher": [calls(("probe", {}))],
            "writer": [calls(("probe", {}))],
        },
        probe,
    )
    parent = ScriptedProvider(parent_reply(calls(task("researcher"), task("writer"))))
    async with AmplifierSession(plan(turn_timeout=10 * s)) as session:
        session.child_setup.append(children)
        await session.coordinator.mount("providers", parent, name="scripted")
        start = anyio.current_time()
        result = await session.run("wait")
        elapsed = anyio.current_time() - start
        parent_deadline = session.coordinator.turn.deadline

    assert result.status is TurnStatus.CANCELLED
    assert elapsed < 500 * s  # the children's sleeps were cut at the parent's deadline
    assert len(slept) == 2
    assert all(deadline <= parent_deadline for deadline in deadlines)
    for child in children.sessions:
        assert paired(await child_messages(child))
        ends = of(children.recorders[child.session_id], EXECUTION_END)
        assert [e["status"] for e in ends] == ["cancelled"]
