"""``anthropic_version`` shapes the request, not only the header.

``2023-06-01`` takes ``temperature`` and ``top_p`` together; a later version (what a newer
SDK sends) takes one of them: ``temperature`` wins. The header carries the configured
version, checked on the wire through an ``httpx.MockTransport``.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from amplifier_anyio.errors import ConfigError
from amplifier_anyio.models import ChatRequest, Message
from amplifier_anyio.providers.anthropic import API_VERSION, AnthropicProvider, api_version

pytestmark = pytest.mark.anyio

NEWER = "2026-01-15"
REPLY = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-5",
    "content": [{"type": "text", "text": "ok"}],
    "stop_reason": "end_turn",
    "usage": {"input_tokens": 3, "output_tokens": 1},
}


def request(**sampling: Any) -> ChatRequest:
    return ChatRequest(messages=[Message(role="user", content="hi")], **sampling)


async def sent(version: str | None, **sampling: Any) -> tuple[str, dict[str, Any]]:
    """(the anthropic-version header, the JSON body) of one complete() call."""
    seen: list[httpx.Request] = []

    def server(req: httpx.Request) -> httpx.Response:
        seen.append(req)
        return httpx.Response(200, json=REPLY)

    config: dict[str, Any] = {"api_key": "sk-ant-version-test-0123456789"}
    if version is not None:
        config["anthropic_version"] = version
    provider = AnthropicProvider(config, transport=httpx.MockTransport(server))
    try:
        await provider.complete(request(**sampling))
    finally:
        await provider.http.aclose()
    [req] = seen
    return req.headers["anthropic-version"], json.loads(req.content)


async def test_the_default_version_sends_temperature_and_top_p_together() -> None:
    header, body = await sent(None, temperature=0.3, top_p=0.9)
    assert header == API_VERSION == "2023-06-01"
    assert (body["temperature"], body["top_p"]) == (0.3, 0.9)


async def test_a_newer_version_sends_only_temperature_when_both_are_set() -> None:
    header, body = await sent(NEWER, temperature=0.3, top_p=0.9)
    assert header == NEWER
    assert body["temperature"] == 0.3
    assert "top_p" not in body


async def test_a_newer_version_still_sends_top_p_alone() -> None:
    _, body = await sent(NEWER, top_p=0.9)
    assert body["top_p"] == 0.9
    assert "temperature" not in body


def test_version_capabilities() -> None:
    assert api_version("2023-06-01").sampling_together is True
    newer = api_version(NEWER)
    assert (newer.version, newer.sampling_together) == (NEWER, False)


@pytest.mark.parametrize(
    ("version", "words"),
    [("2023-01-01", "older than 2023-06-01"), ("v2023.06", "YYYY-MM-DD"), ("2023-6-1", "date")],
)
def test_an_unusable_version_is_refused_at_construction(version: str, words: str) -> None:
    with pytest.raises(ConfigError, match="anthropic_version") as caught:
        AnthropicProvider({"api_key": "sk-ant-x", "anthropic_version": version})
    assert words in str(caught.value)
