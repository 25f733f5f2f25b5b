"""hooks-record: appends ``{"event", "index"?, "prompt"?, "status"?}`` of each of
``events`` to the JSON-lines file ``path``; ``inject`` maps an event to the text of an
ephemeral injection its handler answers with; ``rewrite`` maps a tool name to the keys
its ``tool:pre`` handler sets in the call's input (a ``modify``); ``inputs: true`` records
the ``tool_input`` of the events that carry one too."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio

from amplifier_anyio.models import HookResult

KEPT = ("index", "prompt", "status", "tool_call_id")


def _append(path: Path, line: dict[str, Any]) -> None:
    with path.open("a") as lines:  # one short line: no need for a thread
        lines.write(json.dumps(line) + "\n")


async def mount(coordinator: Any, config: dict[str, Any] | None = None) -> None:
    config = config or {}
    path = Path(config["path"])
    inject: dict[str, str] = dict(config.get("inject") or {})
    rewrite: dict[str, dict[str, Any]] = dict(config.get("rewrite") or {})
    kept = (*KEPT, "tool_input") if config.get("inputs") else KEPT

    def handler_of(event: str) -> Any:
        async def handler(name: str, data: dict[str, Any]) -> HookResult:
            await anyio.lowlevel.checkpoint()
            _append(path, {"event": name, **{k: data[k] for k in kept if k in data}})
            keys = rewrite.get(data.get("tool_name", "")) if name == "tool:pre" else None
            if keys:
                changed = {**data, "tool_input": {**(data.get("tool_input") or {}), **keys}}
                return HookResult(action="modify", data=changed)
            if event in inject:
                return HookResult(
                    action="inject_context", context_injection=inject[event], ephemeral=True
                )
            return HookResult()

        return handler

    for event in config.get("events", []):
        coordinator.hooks.register(event, handler_of(event), name=f"record-{event}")
