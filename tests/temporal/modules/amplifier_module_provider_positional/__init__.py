"""provider-positional: answers the request by its position in the conversation (the
number of assistant messages it holds; ``scripts`` picks a script by the first user
message, ``replies`` is the one for any other), so every process gives one request the same
answer: a scripted provider that survives a worker's death. ``record: PATH`` appends the
content of each request's last message to PATH as a JSON line (what the model was sent)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio

from amplifier_anyio.models import ChatRequest, ChatResponse, structure
from amplifier_anyio.providers.scripted import ScriptedProvider


async def mount(coordinator: Any, config: dict[str, Any] | None = None) -> None:
    config = config or {}
    scripts = {
        prompt: [structure(r, ChatResponse) for r in replies]
        for prompt, replies in (config.get("scripts") or {"": config.get("replies", [])}).items()
    }
    latency = float(config.get("latency", 0))
    record = Path(config["record"]) if config.get("record") else None

    async def reply(request: ChatRequest) -> ChatResponse:
        await anyio.sleep(latency)
        if record is not None and request.messages:
            last = request.messages[-1].content
            with record.open("a") as lines:
                lines.write(json.dumps(last if isinstance(last, str) else str(last)) + "\n")
        first = next((m.content for m in request.messages if m.role == "user"), "")
        replies = scripts.get(first if isinstance(first, str) else "") or scripts[""]
        position = sum(1 for m in request.messages if m.role == "assistant")
        return replies[min(position, len(replies) - 1)]

    await coordinator.mount(
        "providers", ScriptedProvider(reply, name="positional"), name="positional"
    )
