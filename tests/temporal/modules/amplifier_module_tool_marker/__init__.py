"""tool-marker: each run of a call appends its idempotency key to ``<dir>/<call id>``
(the side effect, first), then waits ``delay`` seconds and answers. ``idempotent: true``
mounts it as a tool that declares itself idempotent; ``guarded: true`` as one that asks for
an approval (``ApprovalDeferred``, before any mark) until the call is allowed."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import anyio

from amplifier_anyio import ApprovalDeferred, current_tool_call
from amplifier_anyio.models import ToolResult


class MarkerTool:
    description = "Leave a mark, wait, answer."

    def __init__(
        self, directory: Path, *, name: str, idempotent: bool, guarded: bool = False
    ) -> None:
        self.input_schema = {"type": "object", "properties": {"delay": {"type": "number"}}}
        self.directory = directory
        self.name = name
        self.idempotent = idempotent
        self.guarded = guarded

    async def execute(self, input: dict[str, Any]) -> ToolResult:
        call = current_tool_call()
        assert call is not None
        if self.guarded and not call.approved:
            raise ApprovalDeferred(f"may {self.name} run with {input}?")
        with (self.directory / call.tool_call_id).open("a") as marks:
            marks.write(f"{call.idempotency_key}\n")
            marks.flush()
            os.fsync(marks.fileno())
        await anyio.sleep(float(input.get("delay", 0)))
        return ToolResult(output={"done": call.tool_call_id})


async def mount(coordinator: Any, config: dict[str, Any] | None = None) -> None:
    config = config or {}
    directory = Path(config["dir"])
    await anyio.Path(directory).mkdir(parents=True, exist_ok=True)
    idempotent = bool(config.get("idempotent", False))
    name = str(config.get("name", "marker"))
    guarded = bool(config.get("guarded", False))
    tool = MarkerTool(directory, name=name, idempotent=idempotent, guarded=guarded)
    await coordinator.mount("tools", tool, name=name)
