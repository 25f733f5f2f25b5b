"""Two small offline tools for the embedded demo plan: ``word_count`` and ``reverse_words``.

Each takes ``delay`` seconds (default 0.3) so that running them in parallel is visible:
the demo's tool round takes one delay, not two.
"""

from __future__ import annotations

import math
from typing import Any

import anyio

from ..config_schema import ConfigSchema, Setting
from ..errors import ConfigError
from ..models import ToolResult

__all__ = ("WordCountTool", "ReverseWordsTool", "mount")

_TEXT_SCHEMA = {
    "type": "object",
    "properties": {"text": {"type": "string", "description": "The text to look at."}},
    "required": ["text"],
}


class _TextTool:
    name = ""
    description = ""

    def __init__(self, delay: float = 0.3) -> None:
        self.delay = delay
        self.input_schema = dict(_TEXT_SCHEMA)

    async def execute(self, input: dict[str, Any]) -> ToolResult:
        """Check the input, wait the simulated delay, answer."""
        text = input.get("text")
        if not isinstance(text, str):
            return ToolResult(success=False, error={"message": "'text' must be a string"})
        await anyio.sleep(self.delay)
        return ToolResult(output=self.answer(text))

    def answer(self, text: str) -> Any:
        raise NotImplementedError


class WordCountTool(_TextTool):
    """Counts the words and characters of a text."""

    name = "word_count"
    description = "Count the words and characters of a text."

    def answer(self, text: str) -> Any:
        """Words and characters of ``text``."""
        return {"words": len(text.split()), "characters": len(text)}


class ReverseWordsTool(_TextTool):
    """Returns a text with its words in reverse order."""

    name = "reverse_words"
    description = "Reverse the order of the words of a text."

    def answer(self, text: str) -> Any:
        """``text`` with its words reversed."""
        return " ".join(reversed(text.split()))


async def mount(coordinator: Any, config: dict[str, Any] | None = None) -> None:
    """Mount both demo tools (config: ``delay`` in seconds)."""
    delay = (config or {}).get("delay", 0.3)
    if isinstance(delay, bool) or not isinstance(delay, int | float) or not 0 <= delay < math.inf:
        raise ConfigError(f"tool-demo.delay: expected a finite number >= 0, got {delay!r}")
    for tool in (WordCountTool(delay), ReverseWordsTool(delay)):
        await coordinator.mount("tools", tool, name=tool.name)


CONFIG_SCHEMA = ConfigSchema(
    "tool-demo", {"delay": Setting((float,), "seconds each demo tool takes")}
)
"""The keys tool-demo accepts."""
