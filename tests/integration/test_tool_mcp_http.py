"""tool-mcp over streamable HTTP against the SDK's MCPServer in a subprocess on 127.0.0.1.

One server process serves the whole module (both backends; tags keep the tests apart);
it is stopped by pid at the end.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from _servers import ServerProcess
from amplifier_anyio import AmplifierSession, TurnStatus
from amplifier_anyio.providers.scripted import ScriptedProvider
from tiers import needs

pytestmark = [pytest.mark.anyio, *needs("mcp")]

SERVER = str(Path(__file__).with_name("_mcp_test_server.py"))


def mcp_server_command(port: int) -> list[str]:
    return [sys.executable, SERVER, str(port)]


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    home = tmp_path_factory.mktemp("mcp-http")
    server = ServerProcess(
        lambda port: [sys.executable, SERVER, str(port)], home, what="the MCP server"
    )
    try:
        yield f"{server.url}/mcp"
    finally:
        server.stop()


def plan(url: str, replies: list[dict[str, Any]], **server: Any) -> dict[str, Any]:
    return {
        "session": {"orchestrator": "loop-basic", "context": "context-simple"},
        "orchestrator": {"config": {"tool_timeout": 3}},
        "providers": [{"module": "provider-scripted", "config": {"responses": replies}}],
        "tools": [
            {"module": "tool-mcp", "config": {"servers": [{"name": "h", "url": url, **server}]}}
        ],
    }


def calls(*specs: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    tool_calls = [
        {"id": f"call-{i}", "name": name, "arguments": arguments}
        for i, (name, arguments) in enumerate(specs)
    ]
    return {"content": [{"type": "text", "text": "calling"}], "tool_calls": tool_calls}


def text(value: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": value}]}


async def tool_messages(session: AmplifierSession) -> list[dict[str, Any]]:
    messages = await session.coordinator.get("context").get_messages()
    return [m for m in messages if m["role"] == "tool"]


async def test_five_parallel_calls_one_timed_out_then_the_connection_is_reused(
    url: str, anyio_backend: Any
) -> None:
    tag = anyio_backend[0]
    batch = calls(
        *[("h__slow", {"seconds": 1.5, "tag": f"{tag}-{i}"}) for i in range(4)],
        ("h__slow", {"seconds": 120, "tag": f"{tag}-stuck"}),
    )
    replies = [batch, calls(("h__echo", {"text": "again"})), text("done")]
    async with AmplifierSession(plan(url, replies)) as session:
        result = await session.run("go")
        assert result.status is TurnStatus.SUCCESS
        first, second = (await tool_messages(session))[:5], (await tool_messages(session))[5:]
        assert [m["content"] for m in first[:4]] == [f"{tag}-{i}" for i in range(4)]
        assert "timed out after 3" in first[4]["content"]
        assert [m["content"] for m in second] == ["again"]
        stats = session.coordinator.get("tools")["h__stats"]
        # The server was told: its handler of the stuck call was cancelled (the cancel
        # notification and later requests are separate HTTP requests: wait for it).
        with anyio.fail_after(10):
            while f"{tag}-stuck" not in (await stats.execute({})).output["cancelled"]:  # noqa: ASYNC110
                await anyio.sleep(0.02)
        counters = (await stats.execute({})).output
        assert counters["max_active"] >= 5  # the five calls ran on the server at once
        assert stats.connection.connects == 1  # one connection for every call


async def test_images_errors_headers_and_a_per_server_timeout(url: str) -> None:
    replies = [
        calls(
            ("h__picture", {}),
            ("h__fail", {}),
            ("h__slow", {"seconds": 60, "tag": "t"}),
            ("h__header", {"name": "X-Team"}),
        ),
        text("done"),
    ]
    headers = {"X-Team": "blue"}
    async with AmplifierSession(plan(url, replies, timeout=0.5, headers=headers)) as session:
        await session.run("go")
        picture, fail, slow, header = await tool_messages(session)
    assert header["content"] == "blue"

    output = json.loads(picture["content"])
    assert output["content"][0] == {"type": "text", "text": "a pixel"}
    image = output["content"][1]
    assert image["type"] == "image"
    assert image["source"]["media_type"] == "image/png"
    assert fail["content"] == "Error: Error executing tool fail: this tool always fails"
    assert "'h': slow timed out after 0.5 s" in slow["content"]


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_a_changed_tool_list_is_mounted_at_the_next_turn(
    url: str, anyio_backend: Any, mode: str
) -> None:
    added = f"extra_{anyio_backend[0]}_{mode}"
    async with AmplifierSession(plan(url, [], mode=mode)) as session:
        script = iter([calls(("h__grow", {"name": added})), text("grown"), text("listed")])
        provider = ScriptedProvider(lambda _request: next(script))
        await session.coordinator.mount("providers", provider, name="scripted")
        assert f"h__{added}" not in session.coordinator.get("tools")
        grown = await session.run("grow")
        assert grown.status is TurnStatus.SUCCESS, grown
        connection = session.coordinator.get("tools")["h__grow"].connection
        with anyio.fail_after(10):
            while connection.pending is None:  # noqa: ASYNC110 - the listing is the service's
                await anyio.sleep(0.02)
        # Not mounted mid-session: only when the next turn starts.
        assert f"h__{added}" not in session.coordinator.get("tools")
        await session.run("list")
        tools = session.coordinator.get("tools")
        assert f"h__{added}" in tools
        assert f"h__{added}" in {spec.name for spec in provider.requests[-1].tools or []}
        assert (await tools[f"h__{added}"].execute({})).output == f"{added}!"
