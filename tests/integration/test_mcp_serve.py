"""``amplifier-anyio mcp serve``: the SDK's own stdio client lists and calls ``run``.

The served session uses the offline demo plan (the scripted model calls two demo tools);
the client runs on the test's backend and the server on the other one, so each backend is
tested as a server and as a client.
"""

from __future__ import annotations

import sys
from typing import Any

import pytest

from tiers import needs, optional

mcp = optional("mcp")
pytestmark = [pytest.mark.anyio, *needs("mcp")]

ENTRY = "from amplifier_anyio.cli import main; main()"


async def test_the_sdk_client_lists_and_calls_run(anyio_backend: Any) -> None:
    served = "trio" if anyio_backend[0] == "asyncio" else "asyncio"
    params = mcp.StdioServerParameters(
        command=sys.executable, args=["-c", ENTRY, "mcp", "serve", "--backend", served]
    )
    async with mcp.Client(params) as client:
        [tool] = (await client.list_tools()).tools
        assert tool.name == "run"
        assert tool.input_schema["required"] == ["prompt"]
        result = await client.call_tool("run", {"prompt": "count the words of hello big world"})
        assert not result.is_error
        [block] = result.content
        assert "7 words" in block.text
        assert result.structured_content == {
            "text": block.text,
            "status": "success",
            "turn_count": 2,
            "error": None,
        }
        # The session keeps its conversation: a second turn runs in it.
        again = await client.call_tool("run", {"prompt": "one two"})
        assert "2 words" in again.content[0].text
