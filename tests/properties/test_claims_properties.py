"""Property: a parallel batch ends as if its calls had run one by one in call order.

Each example draws a batch of 1..10 filesystem calls — ``read_file``, ``write_file``,
``edit_file`` and ``list_directory`` — over three files named five ways (a symlink to
``a.txt`` and a ``..`` detour to ``b.txt`` among them), and runs it twice, each time on a
fresh copy of one starting tree: once in parallel (the default batch), once with
``parallel`` off. The files and every call's answer (with the tree's path replaced by a
placeholder) must be the same. Edits draw their strings from a small alphabet so that they
often match, sometimes twice, sometimes not at all; a listing sees any write's temporary
file unless it is ordered against it.

The second property cancels the batch at a random point (the n-th of the calls' hook
events and tool entries): every call is still answered, in call order, with its real
result or the cancelled one, and a next batch on the same tools and files runs to the
end.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from amplifier_anyio.events import TOOL_POST, TOOL_PRE, TOOL_WAITING
from amplifier_anyio.interfaces import Claims
from amplifier_anyio.models import ToolCall, ToolResult
from amplifier_anyio.runtime import ToolBatch, ToolBatchConfig, cancelled_result
from amplifier_anyio.testing import MockContextManager, MockCoordinator
from amplifier_anyio.tools.filesystem import make_tools

pytestmark = pytest.mark.anyio

DEADLOCK = 30.0
"""Seconds before a batch that should end is declared hung (a failure, never a pass)."""

FILES = {"a.txt": "x y z\n", "b.txt": "y y\n", "c.txt": ""}
NAMES = ("a.txt", "b.txt", "c.txt", "link_a.txt", "sub/../b.txt")
WORDS = ("x", "y", "z", "w")


@attrs.frozen
class Op:
    tool: str
    arguments: dict[str, Any]


def ops() -> st.SearchStrategy[Op]:
    name = st.sampled_from(NAMES)
    text = st.lists(st.sampled_from(WORDS), max_size=4).map(" ".join)
    return st.one_of(
        st.builds(lambda n: Op("read_file", {"file_path": n}), name),
        st.builds(lambda n, t: Op("write_file", {"file_path": n, "content": t}), name, text),
        st.builds(
            lambda n, old, new, every: Op(
                "edit_file",
                {"file_path": n, "old_string": old, "new_string": new, "replace_all": every},
            ),
            name,
            st.sampled_from(WORDS),
            st.sampled_from((*WORDS, "", "v v")),
            st.booleans(),
        ),
        st.just(Op("list_directory", {"path": "."})),
    )


batches = st.lists(ops(), min_size=1, max_size=10)


@contextmanager
def tree() -> Iterator[Path]:
    """A fresh starting tree (its real path: the tools answer with real paths)."""
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(os.path.realpath(scratch))
        for name, text in FILES.items():
            (root / name).write_text(text)
        (root / "sub").mkdir()
        (root / "link_a.txt").symlink_to("a.txt")
        yield root


def snapshot(root: Path) -> dict[str, str]:
    return {
        str(path.relative_to(root)): "->" + os.readlink(path)
        if path.is_symlink()
        else (path.read_text() if path.is_file() else "<dir>")
        for path in sorted(root.rglob("*"))
    }


def calls_of(batch: list[Op], prefix: str = "c") -> list[ToolCall]:
    return [
        ToolCall(id=f"{prefix}{i}", name=op.tool, arguments=op.arguments)
        for i, op in enumerate(batch)
    ]


def assistant(calls: list[ToolCall]) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in calls],
    }


async def run(
    root: Path,
    calls: list[ToolCall],
    *,
    parallel: bool,
    tools: dict[str, Any] | None = None,
    coordinator: MockCoordinator | None = None,
) -> list[dict[str, Any]]:
    """One batch over ``root``; its tool messages."""
    if tools is None:
        tools = {t.name: t for t in make_tools(None, {"working_dir": str(root)})}
    coordinator = coordinator or MockCoordinator()
    context = MockContextManager()
    batch = ToolBatch(
        calls=calls,
        tools=tools,
        hooks=coordinator.hooks,
        coordinator=coordinator,
        config=ToolBatchConfig(parallel=parallel),
    )
    with anyio.fail_after(DEADLOCK):
        await batch.run(context, assistant(calls))
    return [m for m in context.messages if m["role"] == "tool"]


def answers(messages: list[dict[str, Any]], root: Path) -> list[str]:
    return [m["content"].replace(str(root), "<root>") for m in messages]


@given(batch=batches)
async def test_a_parallel_batch_ends_as_its_calls_one_by_one(
    anyio_backend: tuple[str, dict[str, object]], batch: list[Op]
) -> None:
    calls = calls_of(batch)
    with tree() as serial_root:
        serial = answers(await run(serial_root, calls, parallel=False), serial_root)
        serial_files = snapshot(serial_root)
    with tree() as root:
        parallel = answers(await run(root, calls, parallel=True), root)
        assert snapshot(root) == serial_files
    assert parallel == serial


class Cancelling:
    """Wraps a tool (same name, same claims); counts the batch's moments and cancels
    ``scope`` at the ``at``-th: a call entering ``execute``, or one of its hook events."""

    def __init__(self, tool: Any, moments: list[int], at: int, scope: anyio.CancelScope) -> None:
        self.tool = tool
        self.name = tool.name
        self.moments = moments
        self.at = at
        self.scope = scope

    def tick(self) -> None:
        self.moments[0] += 1
        if self.moments[0] == self.at:
            self.scope.cancel()

    def claims(self, tool_input: dict[str, Any]) -> Claims:
        return self.tool.claims(tool_input)  # type: ignore[no-any-return]

    async def execute(self, tool_input: dict[str, Any]) -> ToolResult:
        self.tick()
        result: ToolResult = await self.tool.execute(tool_input)
        return result


@settings(max_examples=max(10, settings().max_examples // 2))  # fsyncs: slow examples
@given(batch=batches, at=st.integers(min_value=1, max_value=40))
async def test_a_cancel_anywhere_answers_every_call_and_leaves_nothing_held(
    anyio_backend: tuple[str, dict[str, object]], batch: list[Op], at: int
) -> None:
    calls = calls_of(batch)
    with tree() as root:
        real = {t.name: t for t in make_tools(None, {"working_dir": str(root)})}
        moments = [0]
        coordinator = MockCoordinator()
        with anyio.CancelScope() as scope:
            tools = {name: Cancelling(t, moments, at, scope) for name, t in real.items()}
            ticker = next(iter(tools.values()))

            async def tick(_event: str, _data: dict[str, Any]) -> None:
                ticker.tick()

            for hook_event in (TOOL_PRE, TOOL_WAITING, TOOL_POST):
                coordinator.hooks.register(hook_event, tick, name="tick")
            context = MockContextManager()
            cancelled_batch = ToolBatch(
                calls=calls, tools=tools, hooks=coordinator.hooks, coordinator=coordinator
            )
            with anyio.fail_after(DEADLOCK):
                await cancelled_batch.run(context, assistant(calls))

        event("cancelled" if scope.cancelled_caught else "ran to the end")
        messages = [m for m in context.messages if m["role"] == "tool"]
        assert [m["tool_call_id"] for m in messages] == [c.id for c in calls]
        stopped = [
            m["content"] == cancelled_result(m["name"]).get_serialized_output() for m in messages
        ]
        assert all(
            s or "cancelled" not in m["content"] for s, m in zip(stopped, messages, strict=True)
        )
        assert any(stopped) <= scope.cancelled_caught

        # Nothing is left held: the same tools on the same files answer a whole batch.
        edits = [
            Op("edit_file", {"file_path": n, "old_string": "q", "new_string": "r"}) for n in NAMES
        ]
        writes = [Op("write_file", {"file_path": n, "content": n}) for n in NAMES]
        after = calls_of([*edits, *writes], prefix="n")
        done = await run(root, after, parallel=True, tools=real)
        assert len(done) == len(after)
        assert all("cancelled" not in m["content"] for m in done)
        assert (root / "a.txt").read_text() == "link_a.txt"
        assert (root / "b.txt").read_text() == "sub/../b.txt"
