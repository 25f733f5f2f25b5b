"""Tools that do real work, for the executors' benchmark, tests and examples.

- ``hash_work`` (synchronous, CPU-bound): ``rounds`` rounds of SHA-256 over a 64-byte
  block (about 0.4 µs a round on a current x86 core). It holds the GIL, so in-process
  executors (local, thread) run such calls one at a time, and process / cluster executors
  spread them over cores.
- ``probe`` (async): sleeps ``sleep`` seconds, then raises ``RuntimeError(fail)`` when
  ``fail`` is given, else answers ``{"value": value, "pid": <process id>}`` — what an
  executor test needs to see where, whether and how a call ran.

Both are importable wherever the package is installed, so a worker process or a Dask
worker can rebuild them from the plan entry ``{module: tool-compute}``. Declared
``idempotent = True``: running a call twice is harmless (an executor may retry it once
when its worker died).
"""

from __future__ import annotations

import hashlib
import math
import os
from typing import Any

import anyio

from ..config_schema import ConfigSchema
from ..errors import ConfigError
from ..models import ToolResult

__all__ = ("HashWorkTool", "ProbeTool", "hash_rounds", "mount")

_MAX_ROUNDS = 100_000_000


def hash_rounds(rounds: int) -> str:
    """``rounds`` chained SHA-256 digests of a 64-byte block; the last one, in hex."""
    block = b"\0" * 64
    for _ in range(rounds):
        block = hashlib.sha256(block).digest() * 2
    return block[:32].hex()


class HashWorkTool:
    """CPU-bound work: chained SHA-256 rounds (synchronous)."""

    name = "hash_work"
    description = "Hash a block `rounds` times (CPU-bound work for benchmarks)."
    idempotent = True
    input_schema: dict[str, Any] = {  # noqa: RUF012 - read-only schema
        "type": "object",
        "properties": {"rounds": {"type": "integer", "minimum": 0}},
        "required": ["rounds"],
    }

    def execute(self, input: dict[str, Any]) -> ToolResult:
        """Hash, answer the digest and the round count."""
        rounds = input.get("rounds")
        if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 0:
            return ToolResult(success=False, error={"message": "'rounds' must be an integer >= 0"})
        if rounds > _MAX_ROUNDS:
            return ToolResult(success=False, error={"message": f"'rounds' > {_MAX_ROUNDS}"})
        return ToolResult(output={"digest": hash_rounds(rounds), "rounds": rounds})


class ProbeTool:
    """Sleeps, then answers (or raises): where and whether a call ran."""

    name = "probe"
    description = "Sleep `sleep` seconds, then answer `value` (or raise `fail`)."
    idempotent = True
    input_schema: dict[str, Any] = {  # noqa: RUF012 - read-only schema
        "type": "object",
        "properties": {
            "sleep": {"type": "number", "minimum": 0},
            "value": {},
            "fail": {"type": "string"},
        },
    }

    async def execute(self, input: dict[str, Any]) -> ToolResult:
        """Sleep, then raise or answer."""
        sleep = input.get("sleep", 0)
        if isinstance(sleep, bool) or not isinstance(sleep, int | float) or not sleep >= 0:
            return ToolResult(success=False, error={"message": "'sleep' must be seconds >= 0"})
        if math.isfinite(sleep):
            await anyio.sleep(sleep)
        else:
            await anyio.sleep_forever()
        fail = input.get("fail")
        if fail is not None:
            raise RuntimeError(str(fail))
        return ToolResult(output={"value": input.get("value"), "pid": os.getpid()})


async def mount(coordinator: Any, config: dict[str, Any] | None = None) -> None:
    """Mount ``hash_work`` and ``probe`` (no config)."""
    for key in config or {}:
        raise ConfigError(f"tool-compute.{key}: unknown key (the module takes no config)")
    for tool in (HashWorkTool(), ProbeTool()):
        await coordinator.mount("tools", tool, name=tool.name)


CONFIG_SCHEMA = ConfigSchema("tool-compute", {})
