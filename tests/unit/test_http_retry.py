"""The shared HTTP layer: retries in virtual time, Retry-After, error mapping, secrets."""

from __future__ import annotations

import email.utils
import random
from collections.abc import Callable
from typing import Any

import anyio
import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from amplifier_anyio.errors import (
    AccessDeniedError,
    AuthenticationError,
    ContentFilterError,
    ContextLengthError,
    InvalidRequestError,
    LLMError,
    LLMTimeoutError,
    NetworkError,
    NotFoundError,
    ProviderUnavailableError,
    QuotaExceededError,
    RateLimitError,
)
from amplifier_anyio.models import ToolCall
from amplifier_anyio.providers._http import (
    INVALID_ARGUMENTS_KEY,
    HTTPClient,
    RetryPolicy,
    decode_tool_arguments,
    invalid_tool_call,
    parse_retry_after,
)
from amplifier_anyio.providers._sse import SSEDecoder, SSEEvent
from amplifier_anyio.testing import EventRecorder

pytestmark = pytest.mark.anyio

SECRET = "sk-test-0123456789abcdef"
NOW = 1_700_000_000.0  # a fixed wall-clock time for HTTP-date Retry-After values
NO_JITTER = RetryPolicy(max_retries=3, initial_delay=1.0, backoff_factor=2.0, jitter=0.0)


@pytest.fixture
def anyio_backend(virtual_backend: Any) -> Any:
    return virtual_backend


class Script:
    """A MockTransport handler answering from a list, recording every request."""

    def __init__(self, *answers: httpx.Response | Exception | Callable[[], Any]) -> None:
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> Any:
        self.requests.append(request)
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        if callable(answer):
            return answer()
        return answer


def error(
    status: int, message: str = "boom", kind: str = "api_error", **headers: str
) -> httpx.Response:
    body = {"error": {"message": message, "type": kind, "param": None, "code": None}}
    return httpx.Response(status, json=body, headers=headers)


OK = httpx.Response(200, json={"ok": True})


class Clock:
    """Sleeps in virtual time on trio; on asyncio records the delay and does not wait."""

    def __init__(self, backend: Any) -> None:
        self.virtual = backend[0] == "trio"
        self.delays: list[float] = []

    async def sleep(self, delay: float) -> None:
        self.delays.append(delay)
        await anyio.sleep(delay if self.virtual else 0)


@pytest.fixture
def clock(anyio_backend: Any) -> Clock:
    return Clock(anyio_backend)


def client(
    script: Script, clock: Clock, hooks: Any = None, retry: RetryPolicy = NO_JITTER, **kw: Any
) -> HTTPClient:
    return HTTPClient(
        provider="test",
        base_url="https://llm.example/v1",
        headers={"authorization": f"Bearer {SECRET}"},
        secrets=(SECRET,),
        retry=retry,
        hooks=hooks,
        transport=httpx.MockTransport(script),
        sleep=clock.sleep,
        wall_time=lambda: NOW,
        **kw,
    )


async def test_backoff_sequence_with_retry_after_seconds(clock: Clock) -> None:
    script = Script(
        error(500),
        error(503),
        error(429, "slow down", "rate_limit_error", **{"retry-after": "7"}),
        OK,
    )
    hooks = EventRecorder()
    http = client(script, clock, hooks)
    started = anyio.current_time()
    assert await http.request_json("POST", "chat/completions", json_body={}) == {"ok": True}
    assert clock.delays == [1.0, 2.0, 7.0]
    if clock.virtual:
        assert anyio.current_time() - started == pytest.approx(10.0)
    retries = [data for name, data in hooks.events if name == "provider:retry"]
    assert [(r["attempt"], r["delay"], r["status_code"], r["retry_after"]) for r in retries] == [
        (1, 1.0, 500, None),
        (2, 2.0, 503, None),
        (3, 7.0, 429, 7.0),
    ]
    assert retries[2]["provider"] == "test"
    assert retries[2]["error"]["type"] == "RateLimitError"
    assert "slow down" in retries[2]["error"]["msg"]
    assert len(script.requests) == 4
    await http.aclose()


async def test_retry_after_http_date_is_honoured(clock: Clock) -> None:
    when = email.utils.formatdate(NOW + 30, usegmt=True)
    script = Script(error(529, "Overloaded", "overloaded_error", **{"retry-after": when}), OK)
    http = client(script, clock)
    await http.request_json("GET", "models")
    assert clock.delays == [30.0]
    await http.aclose()


async def test_retry_after_beyond_max_delay_fails_at_once(clock: Clock) -> None:
    script = Script(error(429, "wait an hour", "rate_limit_error", **{"retry-after": "3600"}), OK)
    http = client(script, clock)
    with pytest.raises(RateLimitError) as info:
        await http.request_json("GET", "models")
    assert info.value.retry_after == 3600.0
    assert info.value.retryable
    assert clock.delays == []
    assert len(script.requests) == 1
    await http.aclose()


async def test_attempts_are_capped_and_delays_capped_at_max_delay(clock: Clock) -> None:
    script = Script(error(529, "Overloaded", "overloaded_error"))
    policy = RetryPolicy(max_retries=4, initial_delay=1.0, max_delay=3.0, jitter=0.0)
    http = client(script, clock, retry=policy)
    with pytest.raises(ProviderUnavailableError) as info:
        await http.request_json("POST", "messages", json_body={})
    assert info.value.status_code == 529
    assert clock.delays == [1.0, 2.0, 3.0, 3.0]
    assert len(script.requests) == 5
    await http.aclose()


async def test_total_time_cap_stops_retrying(clock: Clock) -> None:
    script = Script(error(500))
    policy = RetryPolicy(max_retries=10, initial_delay=1.0, max_elapsed=5.0, jitter=0.0)
    http = client(script, clock, retry=policy)
    with pytest.raises(ProviderUnavailableError):
        await http.request_json("GET", "models")
    # 1 + 2 fit in 5 s; the next (4 s) would end at 7 s. On asyncio no time passes, so
    # the cap is reached later there: assert only what both backends must agree on.
    assert clock.delays[:2] == [1.0, 2.0]
    if clock.virtual:
        assert clock.delays == [1.0, 2.0]
    await http.aclose()


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
async def test_client_errors_are_not_retried(clock: Clock, status: int) -> None:
    script = Script(error(status, "no", "invalid_request_error"), OK)
    hooks = EventRecorder()
    http = client(script, clock, hooks)
    with pytest.raises(LLMError) as info:
        await http.request_json("GET", "models")
    assert not info.value.retryable
    assert info.value.status_code == status
    assert len(script.requests) == 1
    assert hooks.events == []
    await http.aclose()


async def test_transport_errors_are_retried_as_network_errors(clock: Clock) -> None:
    script = Script(httpx.ConnectError("connection refused"), httpx.ReadError("reset"), OK)
    hooks = EventRecorder()
    http = client(script, clock, hooks)
    assert await http.request_json("GET", "models") == {"ok": True}
    retries = [data for name, data in hooks.events if name == "provider:retry"]
    assert [r["error"]["type"] for r in retries] == ["NetworkError", "NetworkError"]
    assert [r["status_code"] for r in retries] == [None, None]
    await http.aclose()


async def test_transport_errors_exhausted_raise_network_error_from_cause(clock: Clock) -> None:
    script = Script(httpx.ConnectError("connection refused"))
    http = client(script, clock, retry=RetryPolicy(max_retries=1, jitter=0.0))
    with pytest.raises(NetworkError) as info:
        await http.request_json("GET", "models")
    assert isinstance(info.value.__cause__, httpx.ConnectError)
    assert len(script.requests) == 2
    await http.aclose()


async def test_request_deadline_becomes_retryable_timeout(clock: Clock) -> None:
    calls = 0

    async def hang(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        await anyio.sleep_forever()
        raise AssertionError

    http = HTTPClient(
        provider="test",
        base_url="https://llm.example/v1",
        headers={},
        timeout=0.05,
        retry=RetryPolicy(max_retries=1, jitter=0.0, initial_delay=0.0),
        transport=httpx.MockTransport(hang),
        sleep=clock.sleep,
    )
    with pytest.raises(LLMTimeoutError) as info:
        await http.request_json("GET", "models")
    assert info.value.retryable
    assert isinstance(info.value, TimeoutError)
    assert calls == 2
    await http.aclose()


async def test_cancel_during_backoff_propagates_without_retrying() -> None:
    script = Script(error(500), OK)
    delays: list[float] = []

    async def sleep(delay: float) -> None:
        delays.append(delay)
        await anyio.sleep(delay)

    http = HTTPClient(
        provider="test",
        base_url="https://llm.example/v1",
        headers={},
        retry=RetryPolicy(initial_delay=100.0, jitter=0.0),
        transport=httpx.MockTransport(script),
        sleep=sleep,
    )
    with anyio.move_on_after(0.1) as scope:
        await http.request_json("GET", "models")
    assert scope.cancelled_caught
    assert delays == [60.0]  # capped at max_delay
    assert len(script.requests) == 1
    await http.aclose()


async def test_host_cancel_during_request_is_never_retried(clock: Clock) -> None:
    started = anyio.Event()
    calls = 0

    async def hang(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        started.set()
        await anyio.sleep_forever()
        raise AssertionError

    http = HTTPClient(
        provider="test",
        base_url="https://llm.example/v1",
        headers={},
        transport=httpx.MockTransport(hang),
        sleep=clock.sleep,
    )
    async with anyio.create_task_group() as tg:
        tg.start_soon(http.request_json, "GET", "models")
        await started.wait()
        tg.cancel_scope.cancel()
    assert calls == 1
    assert clock.delays == []
    await http.aclose()


async def test_a_failing_retry_hook_does_not_stop_the_retry(clock: Clock) -> None:
    class Broken:
        async def emit(self, event: str, data: dict[str, Any]) -> None:
            raise RuntimeError("observer bug")

    script = Script(error(503), OK)
    http = client(script, clock, Broken())
    assert await http.request_json("GET", "models") == {"ok": True}
    await http.aclose()


async def test_secrets_never_appear_in_errors_events_or_reprs(clock: Clock) -> None:
    echo = f"Incorrect API key provided: {SECRET}"
    script = Script(error(500, echo), httpx.ConnectError(f"bad header {SECRET}"), error(401, echo))
    hooks = EventRecorder()
    http = client(script, clock, hooks)
    with pytest.raises(AuthenticationError) as info:
        await http.request_json("GET", "models")
    exc = info.value
    for text in (str(exc), repr(exc), repr(exc.body), repr(http), repr(hooks.events)):
        assert SECRET not in text
    assert "***" in str(exc)
    assert len(hooks.events) == 2
    await http.aclose()
    assert http.is_closed


MAPPING = [
    (
        400,
        "This model's maximum context length is 128000 tokens",
        "invalid_request_error",
        ContextLengthError,
    ),
    (
        400,
        "prompt is too long: 210000 tokens > 200000 maximum",
        "invalid_request_error",
        ContextLengthError,
    ),
    (
        400,
        "Your request was rejected by our content policy",
        "invalid_request_error",
        ContentFilterError,
    ),
    (400, "messages: field required", "invalid_request_error", InvalidRequestError),
    (401, "invalid x-api-key", "authentication_error", AuthenticationError),
    (403, "not allowed", "permission_error", AccessDeniedError),
    (404, "model: no-such-model", "not_found_error", NotFoundError),
    (429, "You exceeded your current quota", "insufficient_quota", QuotaExceededError),
    (429, "Rate limit reached", "rate_limit_error", RateLimitError),
    (500, "internal", "api_error", ProviderUnavailableError),
    (529, "Overloaded", "overloaded_error", ProviderUnavailableError),
]


@pytest.mark.parametrize(("status", "message", "kind", "expected"), MAPPING)
async def test_errors_map_to_the_llm_error_family(
    clock: Clock, status: int, message: str, kind: str, expected: type[LLMError]
) -> None:
    script = Script(error(status, message, kind))
    http = client(script, clock, retry=RetryPolicy(max_retries=0))
    with pytest.raises(LLMError) as info:
        await http.request_json("POST", "chat/completions", json_body={})
    assert type(info.value) is expected
    assert info.value.status_code == status
    assert info.value.provider == "test"
    assert message in str(info.value)
    await http.aclose()


async def test_a_non_json_error_body_still_maps(clock: Clock) -> None:
    script = Script(httpx.Response(502, text="<html>Bad gateway</html>"))
    http = client(script, clock, retry=RetryPolicy(max_retries=0))
    with pytest.raises(ProviderUnavailableError, match="Bad gateway"):
        await http.request_json("GET", "models")
    await http.aclose()


# -- pure helpers ---------------------------------------------------------------------


def test_parse_retry_after_forms() -> None:
    date = email.utils.formatdate(NOW + 12, usegmt=True)
    assert parse_retry_after(httpx.Headers({"retry-after": "2.5"}), NOW) == 2.5
    assert parse_retry_after(httpx.Headers({"retry-after": date}), NOW) == 12.0
    assert parse_retry_after(httpx.Headers({"retry-after": date}), NOW + 60) == 0.0
    assert (
        parse_retry_after(httpx.Headers({"retry-after-ms": "1500", "retry-after": "9"}), NOW) == 1.5
    )
    assert parse_retry_after(httpx.Headers({"retry-after": "soon"}), NOW) is None
    assert parse_retry_after(httpx.Headers({"retry-after": "-3"}), NOW) is None
    assert parse_retry_after(httpx.Headers({}), NOW) is None


@given(
    retry=st.integers(1, 12),
    retry_after=st.none() | st.floats(0, 60),
    jitter=st.floats(0, 1),
    seed=st.integers(0, 2**32),
)
def test_delay_stays_within_its_bounds(
    retry: int, retry_after: float | None, jitter: float, seed: int
) -> None:
    policy = RetryPolicy(initial_delay=0.5, backoff_factor=2.0, max_delay=60.0, jitter=jitter)
    delay = policy.delay(retry, retry_after, random.Random(seed))
    base = min(0.5 * 2.0 ** (retry - 1), 60.0)
    assert delay <= 60.0
    assert delay >= (retry_after or 0.0)
    assert delay >= base * (1 - jitter) - 1e-9 or delay == retry_after


def test_tool_arguments_decode_or_carry_a_marker() -> None:
    assert decode_tool_arguments('{"path": "a.txt"}') == {"path": "a.txt"}
    assert decode_tool_arguments("") == {}
    bad = decode_tool_arguments('{"path": "a.txt"')
    assert bad[INVALID_ARGUMENTS_KEY]["raw"] == '{"path": "a.txt"'
    assert "invalid JSON" in bad[INVALID_ARGUMENTS_KEY]["error"]
    assert (
        "expected a JSON object" in decode_tool_arguments("[1, 2]")[INVALID_ARGUMENTS_KEY]["error"]
    )
    err = invalid_tool_call(
        ToolCall(id="call_9", name="read_file", arguments=bad), provider="openai"
    )
    assert err is not None
    assert err.tool_name == "read_file"
    assert err.raw_arguments == '{"path": "a.txt"'
    assert "call_9" in str(err)
    assert invalid_tool_call(ToolCall(id="c", name="t", arguments={"x": 1})) is None


def test_sse_decoder_follows_the_event_stream_rules() -> None:
    lines = [
        ": keep-alive comment",
        "event: message_start",
        'data: {"a":',
        "data: 1}",
        "",
        "",
        "data:no-space",
        "id: 7",
        "retry: 1000",
        "",
        "event: ping",
        "",
        "data: [DONE]",
    ]
    decoder = SSEDecoder()
    events = [e for line in lines if (e := decoder.feed(line)) is not None]
    events.append(decoder.flush())
    assert events == [
        SSEEvent(event="message_start", data='{"a":\n1}'),
        SSEEvent(event="message", data="no-space", id="7"),
        SSEEvent(event="message", data="[DONE]", id="7"),
    ]
    assert decoder.flush() is None


# -- a wrong address: the URL called and the fix --------------------------------------------


@pytest.mark.parametrize(
    ("base_url", "path", "note"),
    [
        (
            "http://127.0.0.1:8080",
            "chat/completions",
            "(POST http://127.0.0.1:8080/chat/completions; OpenAI-compatible servers serve the "
            "API under /v1: use the base URL http://127.0.0.1:8080/v1)",
        ),
        (
            "http://127.0.0.1:8080/v1/v1",
            "messages",
            "(POST http://127.0.0.1:8080/v1/v1/messages; the base URL ends in /v1, which the "
            "provider adds itself: use http://127.0.0.1:8080 (Anthropic's base URL is the API "
            "root, without /v1))",
        ),
        (
            "https://llm.example/v1",
            "chat/completions",
            "(POST https://llm.example/v1/chat/completions)",
        ),
    ],
)
async def test_a_404_names_the_url_called_and_the_fix_for_a_usual_slip(
    clock: Clock, base_url: str, path: str, note: str
) -> None:
    script = Script(httpx.Response(404, text="404 page not found"))
    http = HTTPClient(
        provider="test",
        base_url=base_url,
        headers={},
        retry=RetryPolicy(max_retries=0),
        transport=httpx.MockTransport(script),
        sleep=clock.sleep,
    )

    with pytest.raises(NotFoundError) as info:
        await http.request_json("POST", path, json_body={}, params={"key": SECRET})

    assert str(info.value) == f"test returned HTTP 404: 404 page not found {note}"
    assert SECRET not in str(info.value)
    await http.aclose()


async def test_other_statuses_do_not_name_the_url(clock: Clock) -> None:
    script = Script(error(401, "bad key", "authentication_error"))
    http = client(script, clock, retry=RetryPolicy(max_retries=0))

    with pytest.raises(AuthenticationError) as info:
        await http.request_json("POST", "chat/completions", json_body={})

    assert str(info.value) == "test returned HTTP 401: bad key"
    await http.aclose()
