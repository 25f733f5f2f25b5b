"""The process executor's workers run the cleanups of the modules they mounted.

A tool module (written to a ``source`` directory here) answers with its worker's pid and,
when mounted, returns a cleanup that writes ``cleaned-<pid>`` into a directory. A turn
runs its calls on the ``process`` executor; once the session has closed, every worker
that ran a call has run that cleanup and is gone. (A cancelled call's worker is killed:
``tests/properties/test_executor_invariants.py``.)
"""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path
from typing import Any

import anyio
import pytest

from amplifier_anyio import AmplifierSession, TurnStatus
from amplifier_anyio.runtime import ProcessExecutor

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(sys.platform == "win32", reason="pids and /proc"),
]

MODULE = textwrap.dedent(
    """
    import os
    import time
    from pathlib import Path


    class WhereAmI:
        name = "where"
        description = "the worker's pid"
        input_schema = {"type": "object"}

        def execute(self, tool_input):
            time.sleep(tool_input.get("sleep", 0))
            return str(os.getpid())


    async def mount(coordinator, config):
        await coordinator.mount("tools", WhereAmI(), name="where")
        marks = Path(config["marks"])

        def cleanup():
            (marks / f"cleaned-{os.getpid()}").write_text("bye")

        return cleanup
    """
)


def plan(source: Path, marks: Path, calls: list[dict[str, Any]]) -> dict[str, Any]:
    calls_ = [{"id": f"w{i}", "name": "where", "arguments": a} for i, a in enumerate(calls)]
    replies = [
        {"content": [], "tool_calls": calls_},
        {"content": [{"type": "text", "text": "done"}]},
    ]
    return {
        "session": {
            "orchestrator": "loop-basic",
            "context": "context-simple",
            "executor": {"module": "process", "config": {"max_workers": 2}},
        },
        "providers": [{"module": "provider-scripted", "config": {"responses": replies}}],
        "tools": [{"module": "tool-where", "source": str(source), "config": {"marks": str(marks)}}],
    }


@pytest.fixture
def source(tmp_path: Path) -> Path:
    package = tmp_path / "modules" / "amplifier_module_tool_where"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(MODULE, encoding="utf-8")
    return tmp_path / "modules"


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in (b"Z", b"X")


async def marks_of(marks: Path) -> list[str]:
    return sorted([entry.name async for entry in anyio.Path(marks).iterdir()])


async def test_workers_run_their_modules_cleanups_when_the_session_ends(
    tmp_path: Path, source: Path
) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    the_plan = plan(source, marks, [{"sleep": 0.2}, {"sleep": 0.2}, {}])
    async with AmplifierSession(the_plan) as session:
        result = await session.run("where")
        messages = await session.coordinator.get("context").get_messages()
        (executor,) = {id(e): e for e in session.coordinator.tool_executors.values()}.values()
        assert isinstance(executor, ProcessExecutor)
        assert executor.workers >= 1
        assert await marks_of(marks) == []  # the workers live on until the session ends
    assert result.status is TurnStatus.SUCCESS
    pids = {int(m["content"]) for m in messages if m["role"] == "tool"}
    assert os.getpid() not in pids
    # the session's own mount of the module (in this process) and every worker's
    assert await marks_of(marks) == sorted(f"cleaned-{pid}" for pid in {*pids, os.getpid()})
    assert executor.workers == 0
    assert not any(alive(pid) for pid in pids)
