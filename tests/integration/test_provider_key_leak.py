"""End to end: an API key never leaves the provider, whatever the server echoes.

The key is configured with a trailing newline (as read from a key file); the server (an
``httpx.MockTransport``) answers with an error body that repeats the key in every form a
server or an HTTP library prints it: as is, JSON- and repr-escaped with the newline, quoted,
and cut short. A whole session turn runs; then no 12-character run of the key may appear in
``TurnResult.error`` (its message, repr, body and formatted traceback with its chained
causes), in the ``provider:error`` / ``provider:retry`` event data, or in any log record
(message and formatted exception).
"""

from __future__ import annotations

import json
import logging
import traceback
from typing import Any

import httpx
import pytest

from amplifier_anyio import AmplifierSession, TurnStatus
from amplifier_anyio.errors import LLMError
from amplifier_anyio.events import PROVIDER_ERROR, PROVIDER_RETRY
from amplifier_anyio.providers.anthropic import AnthropicProvider
from amplifier_anyio.providers.openai import OpenAIChatProvider
from amplifier_anyio.testing import EventRecorder

pytestmark = pytest.mark.anyio

KEY = "sk-proj-LEAKTEST-AbCdEf0123456789XyZ-tail"
CONFIGURED = KEY + "\n"  # a key file's trailing newline


def echoing_body(kind: str, status: int, request: httpx.Request) -> dict[str, Any]:
    """An error body repeating the key (and the header the server got) in many forms."""
    got = request.headers.get("authorization") or request.headers.get("x-api-key") or ""
    text = (
        f"Incorrect API key provided: {KEY}. You sent {got!r} "
        f"(raw {CONFIGURED!r}, json {json.dumps(CONFIGURED)}, prefix {KEY[:20]}..., "
        f"suffix ...{KEY[-14:]})"
    )
    if kind == "openai":
        kind_of = "invalid_request_error" if status == 401 else "server_error"
        return {"error": {"message": text, "type": kind_of, "code": KEY}}
    kind_of = "authentication_error" if status == 401 else "api_error"
    return {"type": "error", "error": {"type": kind_of, "message": text}}


def fragments(text: str) -> list[str]:
    """Every run of 12 characters of the key found in ``text``."""
    return [KEY[i : i + 12] for i in range(len(KEY) - 11) if KEY[i : i + 12] in text]


def make_provider(kind: str, server: Any, hooks: Any) -> OpenAIChatProvider | AnthropicProvider:
    config = {
        "api_key": CONFIGURED,
        "max_retries": 1,
        "retry_initial_delay": 0.01,
        "retry_jitter": 0.0,
    }
    transport = httpx.MockTransport(server)
    if kind == "openai":
        config["base_url"] = "https://llm.example/v1"
        return OpenAIChatProvider(config, hooks=hooks, transport=transport)
    config["base_url"] = "https://anthropic.example"
    return AnthropicProvider(config, hooks=hooks, transport=transport)


@pytest.mark.parametrize("status", [401, 503])
@pytest.mark.parametrize("orchestrator", ["loop-basic", "loop-streaming"])
@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_the_key_never_reaches_result_events_logs_or_traceback(
    kind: str, orchestrator: str, status: int, caplog: pytest.LogCaptureFixture
) -> None:
    sent: list[str] = []

    def server(request: httpx.Request) -> httpx.Response:
        sent.append(request.headers.get("authorization") or request.headers.get("x-api-key", ""))
        return httpx.Response(status, json=echoing_body(kind, status, request))

    caplog.set_level(logging.DEBUG)
    plan = {"session": {"orchestrator": orchestrator, "context": "context-simple"}}
    async with AmplifierSession(plan) as session:
        recorder = EventRecorder()
        recorder.attach(session.coordinator.hooks)
        provider = make_provider(kind, server, session.coordinator.hooks)
        await session.coordinator.mount("providers", provider, name=provider.name)
        session.coordinator.register_cleanup(provider.http.aclose)
        result = await session.run("hello")

    # the key was stripped, then sent as a valid header (once, or twice for the 503)
    assert sent == [f"Bearer {KEY}" if kind == "openai" else KEY] * (2 if status == 503 else 1)
    assert result.status is TurnStatus.ERROR
    error = result.error
    assert isinstance(error, LLMError)
    assert error.status_code == status
    assert "Incorrect API key provided" in str(error)  # the message is kept, masked

    places = {
        "str(error)": str(error),
        "repr(error)": repr(error),
        "error.body": json.dumps(error.body, default=str),
        "traceback": "".join(traceback.format_exception(error)),
    }
    for name in (PROVIDER_ERROR, PROVIDER_RETRY):
        for _, data in recorder.get_events(name):
            places[name] = places.get(name, "") + json.dumps(data, default=str)
    assert PROVIDER_ERROR in places
    assert (PROVIDER_RETRY in places) is (status == 503)
    formatter = logging.Formatter()
    places["logs"] = "\n".join(formatter.format(record) for record in caplog.records)
    assert caplog.records  # the failure was logged
    leaks = {name: fragments(text) for name, text in places.items() if fragments(text)}
    assert leaks == {}
