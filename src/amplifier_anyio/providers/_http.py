"""The HTTP layer the real providers share: one client, retries, SSE, error mapping.

`HTTPClient` owns one ``httpx.AsyncClient`` per provider instance. Every request
runs under a deadline; a failed attempt becomes an [`LLMError`][amplifier_anyio.LLMError]
subclass, and the retryable ones (408, 409, 429, 5xx, 529, timeouts, connection failures)
are repeated with exponential backoff and jitter, honouring ``Retry-After``, within a cap
on attempts and on total time. Each retry emits ``provider:retry`` before its sleep.

Secrets (API keys) never leave this module in clear: they are masked in error messages,
error bodies and event payloads, and never put in a repr.

Cancellation is never caught here except to close a response under a bounded shield; it
is never wrapped and never retried.
"""

from __future__ import annotations

import email.utils
import json
import logging
import math
import random
import time
import urllib.parse
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterable, Mapping
from contextlib import asynccontextmanager
from typing import Any, Final, Protocol

import anyio
import attrs
import httpx

from ..errors import (
    AccessDeniedError,
    AuthenticationError,
    ContentFilterError,
    ContextLengthError,
    InvalidRequestError,
    InvalidToolCallError,
    LLMError,
    LLMTimeoutError,
    MalformedResponseError,
    NetworkError,
    NotFoundError,
    ProviderUnavailableError,
    QuotaExceededError,
    RateLimitError,
    StreamError,
)
from ..events import PROVIDER_RETRY
from ..models import TextBlock, ToolCall, ToolResultBlock
from ..models._messages import INVALID_ARGUMENTS_KEY
from ._sse import LineSplitter, SSEDecoder, SSEEvent

__all__ = (
    "HookEmitter",
    "RetryPolicy",
    "HTTPClient",
    "RETRYABLE_STATUS_CODES",
    "parse_retry_after",
    "error_from_status",
    "error_from_payload",
    "drain",
    "INVALID_ARGUMENTS_KEY",
    "decode_tool_arguments",
    "encode_tool_arguments",
    "tool_output_text",
    "invalid_tool_call",
    "TRUNCATING_FINISH_REASONS",
    "truncated_arguments",
    "redact",
    "leaks",
)

logger = logging.getLogger(__name__)

RETRYABLE_STATUS_CODES: Final = frozenset({408, 409, 429, 500, 502, 503, 504, 529})
"""Statuses worth repeating; any other 5xx is retried too (see `error_from_status`)."""

_DRAIN_TIMEOUT: Final = 0.0  # after the last event nothing is waited for
_CLOSE_TIMEOUT: Final = 5.0  # httpx aclose can hang on half-closed sockets; never wait longer
_MAX_MESSAGE: Final = 500
_MASK: Final = "***"


class HookEmitter(Protocol):
    """Anything with ``await emit(event, data)``: the coordinator's hook registry."""

    async def emit(self, event: str, data: dict[str, Any]) -> Any:
        """Deliver one event."""


@attrs.frozen(kw_only=True)
class RetryPolicy:
    """How failed attempts are repeated.

    The n-th retry waits ``initial_delay * backoff_factor ** (n - 1)`` seconds, capped at
    ``max_delay``, multiplied by a random factor in ``[1 - jitter, 1 + jitter]`` (capped
    again), and never less than the server's ``Retry-After``. A ``Retry-After`` longer
    than ``max_delay`` is not waited for: the error is raised at once. No retry starts
    when it would end more than ``max_elapsed`` seconds after the first attempt began.
    """

    max_retries: int = attrs.field(default=3, validator=attrs.validators.ge(0))
    initial_delay: float = attrs.field(default=1.0, validator=attrs.validators.ge(0))
    backoff_factor: float = attrs.field(default=2.0, validator=attrs.validators.ge(1))
    max_delay: float = attrs.field(default=60.0, validator=attrs.validators.ge(0))
    max_elapsed: float = attrs.field(default=300.0, validator=attrs.validators.ge(0))
    jitter: float = attrs.field(
        default=0.2, validator=[attrs.validators.ge(0), attrs.validators.le(1)]
    )

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> RetryPolicy:
        """Read ``max_retries``, ``retry_initial_delay``, ``retry_max_delay``,
        ``retry_max_elapsed`` and ``retry_jitter`` from a module config."""
        keys = {
            "max_retries": "max_retries",
            "retry_initial_delay": "initial_delay",
            "retry_backoff_factor": "backoff_factor",
            "retry_max_delay": "max_delay",
            "retry_max_elapsed": "max_elapsed",
            "retry_jitter": "jitter",
        }
        return cls(**{field: config[key] for key, field in keys.items() if key in config})

    def delay(self, retry: int, retry_after: float | None, rng: random.Random) -> float:
        """Seconds to wait before retry number ``retry`` (1-based)."""
        base = min(self.initial_delay * self.backoff_factor ** (retry - 1), self.max_delay)
        if self.jitter:
            base = min(base * rng.uniform(1 - self.jitter, 1 + self.jitter), self.max_delay)
        return max(base, retry_after or 0.0)


_PARTIAL: Final = 12  # a run this long of a secret's text is masked wherever it appears


def _forms(secret: str) -> list[str]:
    """Every spelling of ``secret`` an error message may carry: as is, JSON- or
    repr-escaped, as escaped bytes, percent-encoded."""
    forms = [
        secret,
        json.dumps(secret)[1:-1],
        json.dumps(secret, ensure_ascii=False)[1:-1],
        repr(secret)[1:-1],
        repr(secret.encode("utf-8", "backslashreplace"))[2:-1],
        urllib.parse.quote(secret, safe=""),
        urllib.parse.quote_plus(secret),
    ]
    return [form for form in dict.fromkeys(forms) if form]


def _mask_runs(text: str, form: str) -> str:
    """``text`` with every run of at least ``_PARTIAL`` characters of ``form`` masked
    (a secret printed in part, or cut by a length limit, is still a secret)."""
    size = min(len(form), _PARTIAL)
    covered = bytearray(len(text))
    for start in range(len(form) - size + 1):
        window = form[start : start + size]
        at = text.find(window)
        while at != -1:
            covered[at : at + size] = b"\x01" * size
            at = text.find(window, at + 1)
    if not any(covered):
        return text
    pieces: list[str] = []
    index = 0
    while index < len(text):
        if covered[index]:
            while index < len(text) and covered[index]:
                index += 1
            pieces.append(_MASK)
        else:
            end = covered.find(1, index)
            end = len(text) if end == -1 else end
            pieces.append(text[index:end])
            index = end
    return "".join(pieces)


def redact(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every secret replaced by ``***``: in any escaped, quoted or
    percent-encoded form, and any run of 12 or more of its characters (a key printed in
    part)."""
    for secret in secrets:
        for form in _forms(secret) if secret else ():
            text = _mask_runs(text, form)
    return text


def leaks(text: str, secrets: Iterable[str]) -> bool:
    """Whether ``text`` repeats a secret in any form `redact` masks."""
    return redact(text, secrets) != text


def parse_retry_after(headers: Mapping[str, str], now: float) -> float | None:
    """The delay a response asks for, in seconds, or None.

    Reads ``retry-after-ms`` (OpenAI), then ``Retry-After`` as seconds or as an HTTP date
    (relative to ``now``, a Unix time). Negative or unreadable values give None.
    """
    millis = headers.get("retry-after-ms")
    if millis is not None:
        seconds = _float_or_none(millis)
        if seconds is not None:
            return seconds / 1000.0
    value = headers.get("retry-after")
    if value is None:
        return None
    seconds = _float_or_none(value)
    if seconds is not None:
        return seconds
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    return max(0.0, when.timestamp() - now)


def _float_or_none(value: str) -> float | None:
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def _error_fields(body: Any) -> tuple[str, str, str]:
    """(message, type, code) from an OpenAI- or Anthropic-style error body."""
    err = body.get("error") if isinstance(body, dict) else None
    if isinstance(err, dict):
        return (
            str(err.get("message") or ""),
            str(err.get("type") or ""),
            str(err.get("code") or ""),
        )
    if isinstance(err, str):
        return err, "", ""
    return "", "", ""


_CONTEXT_HINTS: Final = (
    "context_length_exceeded",
    "context length",
    "context window",
    "maximum context",
    "prompt is too long",
    "too many tokens",
    "input is too long",
)
_FILTER_HINTS: Final = ("content_filter", "content_policy", "content policy", "safety system")
_QUOTA_HINTS: Final = ("insufficient_quota", "quota", "billing", "credit balance")
_VALIDATION_HINTS: Final = (
    "validation error",
    "validationerror",
    "invalid_request_error",
    "field required",
    "input should be",
    "extra inputs are not permitted",
    "unprocessable",
)
"""Words of a request the server could not read: a 5xx saying so will fail again."""


def _classify(
    status: int | None, message: str, kind: str, code: str
) -> tuple[type[LLMError], bool]:
    """The error class for a failure, and whether repeating the request may help."""
    text = f"{message} {kind} {code}".lower()
    if status == 529 or kind == "overloaded_error":
        return ProviderUnavailableError, True
    if status == 429 or kind == "rate_limit_error":
        if any(hint in text for hint in _QUOTA_HINTS):
            return QuotaExceededError, False
        return RateLimitError, True
    if status == 401 or kind == "authentication_error":
        return AuthenticationError, False
    if status == 403 or kind == "permission_error":
        return AccessDeniedError, False
    if status == 404 or kind == "not_found_error":
        return NotFoundError, False
    if status == 408:
        return LLMTimeoutError, True
    if any(hint in text for hint in _CONTEXT_HINTS):
        return ContextLengthError, False
    if any(hint in text for hint in _FILTER_HINTS):
        return ContentFilterError, False
    if any(hint in text for hint in _VALIDATION_HINTS):
        # llama.cpp-style servers answer 500 to a request body they cannot validate
        return InvalidRequestError, False
    if kind in ("api_error", "server_error") or (
        status is not None and (status == 409 or status >= 500)
    ):
        return ProviderUnavailableError, True
    if status is not None and 400 <= status < 500:
        return InvalidRequestError, False
    return StreamError, False


def error_from_payload(
    body: Any,
    *,
    provider: str,
    model: str | None,
    status_code: int | None = None,
    retry_after: float | None = None,
    note: str = "",
    event: bool = False,
) -> LLMError:
    """Map an error body (an HTTP error response or an error event inside a stream);
    ``note`` ends the message (where the request went, what to change). ``event``: the
    body came in an answer, and ``status_code`` is the status its code stands for."""
    message, kind, code = _error_fields(body)
    cls, retryable = _classify(status_code, message, kind, code)
    where = "an error event" if event or status_code is None else f"HTTP {status_code}"
    detail = message or kind or code or "no details"
    text = f"{provider} returned {where}: {detail[:_MAX_MESSAGE]}"
    if note:
        text = f"{text} ({note})"
    return cls(
        text,
        provider=provider,
        model=model,
        status_code=status_code,
        retryable=retryable,
        retry_after=retry_after,
        body=body,
    )


def error_from_status(
    response: httpx.Response,
    *,
    provider: str,
    model: str | None,
    now: float,
    secrets: Iterable[str],
) -> LLMError:
    """Map a non-2xx response whose body has been read."""
    text = redact(response.text, secrets)
    try:
        body: Any = json.loads(text) if text else None
    except ValueError:
        body = {"error": text[:_MAX_MESSAGE]} if text else None
    retry_after = parse_retry_after(response.headers, now)
    return error_from_payload(
        body,
        provider=provider,
        model=model,
        status_code=response.status_code,
        retry_after=retry_after,
        note=_wrong_address(response, secrets),
    )


_OPENAI_ENDPOINTS: Final = ("/chat/completions", "/responses", "/models")


def _wrong_address(response: httpx.Response, secrets: Iterable[str]) -> str:
    """For a 404 or 405 — most often a base URL that is not the API's — the URL called
    and, for the usual slips, the fix: ``/v1`` twice (a base URL ending in ``/v1`` given
    to a provider that adds it), or an OpenAI-compatible path without ``/v1``."""
    if response.status_code not in (404, 405):
        return ""
    url = response.request.url
    called = redact(str(url.copy_with(query=None, fragment=None)), secrets)
    note = f"{response.request.method} {called}"
    root = str(url.copy_with(path="/", query=None, fragment=None)).rstrip("/")
    path = url.path
    if "/v1/v1/" in path:
        base = root + path[: path.index("/v1/v1/")]
        note += (
            f"; the base URL ends in /v1, which the provider adds itself: use {base} "
            "(Anthropic's base URL is the API root, without /v1)"
        )
    elif path in _OPENAI_ENDPOINTS:
        note += (
            "; OpenAI-compatible servers serve the API under /v1: "
            f"use the base URL {redact(root, secrets)}/v1"
        )
    return note


def decode_tool_arguments(raw: Any) -> dict[str, Any]:
    """Decode a tool call's JSON arguments.

    Empty text means no arguments. Text that is not a JSON object gives
    ``{INVALID_ARGUMENTS_KEY: {"raw": raw, "error": reason}}`` so one bad call cannot
    fail the whole response.
    """
    if isinstance(raw, dict):  # some compatible servers send the object itself
        return raw
    if raw is None or not str(raw).strip():
        return {}
    if not isinstance(raw, str):
        reason = f"expected JSON text, got {type(raw).__name__}"
        return {INVALID_ARGUMENTS_KEY: {"raw": json.dumps(raw, default=str), "error": reason}}
    try:
        value = json.loads(raw)
    except ValueError as exc:
        return {INVALID_ARGUMENTS_KEY: {"raw": raw, "error": f"invalid JSON: {exc}"}}
    if not isinstance(value, dict):
        reason = f"expected a JSON object, got {type(value).__name__}"
        return {INVALID_ARGUMENTS_KEY: {"raw": raw, "error": reason}}
    return value


def encode_tool_arguments(arguments: dict[str, Any]) -> str:
    """A call's arguments as JSON text to send back; for a call whose arguments could not
    be decoded, the text the model produced (our marker is never sent)."""
    marker = arguments.get(INVALID_ARGUMENTS_KEY)
    if isinstance(marker, dict):
        return str(marker.get("raw") or "")
    return json.dumps(arguments)


def tool_output_text(output: Any) -> str:
    """A tool result's output as the text an OpenAI-style API takes: text blocks joined,
    anything else as JSON (``None`` as nothing)."""
    if isinstance(output, list) and all(isinstance(b, TextBlock | ToolResultBlock) for b in output):
        return "".join(b.text if isinstance(b, TextBlock) else _as_text(b.output) for b in output)
    return _as_text(output)


def _as_text(output: Any) -> str:
    if output is None:
        return ""
    return output if isinstance(output, str) else json.dumps(output, default=str)


TRUNCATING_FINISH_REASONS: Final = frozenset({"length", "max_tokens"})
"""Finish reasons that mean the output token limit cut the answer."""


def truncated_arguments(raw: str, finish_reason: str) -> dict[str, Any]:
    """The arguments of a tool call the output token limit cut off: the invalid-arguments
    marker naming the truncation, so the call becomes an error result, never a call."""
    reason = (
        f"the call was cut off by the output token limit (finish reason {finish_reason!r}) "
        "before its arguments were complete; ask for less output or raise the limit"
    )
    return {INVALID_ARGUMENTS_KEY: {"raw": raw, "error": reason}}


def invalid_tool_call(
    call: ToolCall, *, provider: str | None = None
) -> InvalidToolCallError | None:
    """The error for a call whose arguments could not be decoded, else None."""
    marker = call.arguments.get(INVALID_ARGUMENTS_KEY)
    if not isinstance(marker, dict):
        return None
    reason = marker.get("error", "invalid arguments")
    return InvalidToolCallError(
        f"tool call {call.id!r} to {call.name!r} has unusable arguments: {reason}",
        tool_name=call.name,
        raw_arguments=marker.get("raw"),
        provider=provider,
    )


def _transport_error(
    exc: Exception, *, provider: str, model: str | None, secrets: Iterable[str]
) -> LLMError:
    if isinstance(exc, httpx.LocalProtocolError):
        # The request itself is not valid HTTP, almost always a header value with a
        # newline or a control character: sending it again cannot help, and the
        # library's message repeats the value, which may be a credential.
        text = (
            f"{provider}: the request could not be sent: a header value is not valid HTTP "
            "(whitespace or a control character in an api key or a header?)"
        )
        return InvalidRequestError(text, provider=provider, model=model, retryable=False)
    detail = redact(str(exc) or type(exc).__name__, secrets)
    if isinstance(exc, httpx.TimeoutException | TimeoutError):
        cls: type[LLMError] = LLMTimeoutError
        text = f"{provider} did not answer in time ({detail})"
    else:
        cls = NetworkError
        text = f"could not reach {provider}: {detail}"
    return cls(text[: _MAX_MESSAGE * 2], provider=provider, model=model, retryable=True)


async def _close(resource: httpx.Response | AsyncGenerator[Any, None]) -> None:
    """Close under a bounded shield, so a cancelled caller still releases the connection."""
    with anyio.move_on_after(_CLOSE_TIMEOUT, shield=True):
        try:
            await resource.aclose()
        except Exception:  # a broken connection must not hide the caller's own error
            logger.debug("closing an HTTP response failed", exc_info=True)


async def _finish(events: AsyncGenerator[Any, None]) -> None:
    """End a stream left before its end (a cancelled caller, a race's loser): its
    generators, ours and httpx's, are run on under an immediate cancel, so the cancel
    raised at the innermost read finishes each of them. Closing only the outer one would
    leave httpx's to the garbage collector (trio reports each as a ResourceWarning)."""
    with anyio.CancelScope(shield=True), anyio.CancelScope() as scope:
        scope.cancel("HTTP stream left before its end: finishing its generators")
        try:
            async for _ in events:
                pass
        except Exception:  # a broken stream is being thrown away: its error changes nothing
            logger.debug("a stream failed while it was being closed", exc_info=True)
    await _close(events)  # already finished: returns at once


async def drain(events: AsyncIterator[Any], timeout: float = _DRAIN_TIMEOUT) -> None:
    """Finish a stream after its last meaningful event, waiting at most ``timeout`` (by
    default not at all: a server may keep the connection open after ``[DONE]``).

    The cancel at the first checkpoint past ``timeout`` runs through every async
    generator under the stream (ours and httpx's), so each finishes instead of being left
    to the garbage collector, which trio reports as a ResourceWarning. A failure while
    draining changes nothing: the answer is whole.
    """
    with anyio.move_on_after(timeout):
        try:
            async for _ in events:
                pass
        except LLMError:
            logger.debug("the stream failed after its last event", exc_info=True)


class _Body(httpx.ByteStream):
    """A request body sent as one chunk by an iterator object, not an async generator.

    httpcore iterates the body while it writes it; a request cancelled in that write (the
    loser of a hedged race, a turn cancelled mid-request) leaves the iteration unfinished,
    and an unfinished async generator (httpx's own body) is finalised by the garbage
    collector, which trio reports as a ResourceWarning. An iterator object is just freed.
    """

    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        self._data = data

    def __aiter__(self) -> AsyncIterator[bytes]:
        return _Once(self._data)


class _Once:
    """An async iterator of one chunk."""

    def __init__(self, chunk: bytes) -> None:
        self._chunk: bytes | None = chunk

    def __aiter__(self) -> _Once:
        return self

    async def __anext__(self) -> bytes:
        chunk, self._chunk = self._chunk, None
        if chunk is None:
            raise StopAsyncIteration
        return chunk


@attrs.frozen
class _Call:
    """One logical request, repeated as is by every attempt."""

    method: str
    path: str
    json_body: Any = None
    params: Mapping[str, Any] | None = None
    model: str | None = None
    timeout: float | None = None
    stream: bool = False  # keep the body unread on success, for the caller to stream


class HTTPClient:
    """One provider's connection to its API, with retries and error mapping.

    ``headers`` may carry credentials; list them in ``secrets`` too, so they are masked
    wherever text from the server or the transport is repeated. ``timeout`` bounds a
    whole response — headers, body and every event of a stream — from the start of its
    attempt; ``idle_timeout`` (None: no bound of its own) bounds the wait for each piece
    of a stream. Either raises [`LLMTimeoutError`][amplifier_anyio.errors.LLMTimeoutError].
    ``sleep`` and ``wall_time`` exist for tests (virtual time, fixed dates).
    """

    def __init__(
        self,
        *,
        provider: str,
        base_url: str,
        headers: Mapping[str, str],
        secrets: Iterable[str] = (),
        timeout: float = 600.0,
        idle_timeout: float | None = None,
        params: Mapping[str, str] | None = None,
        retry: RetryPolicy | None = None,
        hooks: HookEmitter | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        rng: random.Random | None = None,
        sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
        wall_time: Callable[[], float] = time.time,
    ) -> None:
        self.provider = provider
        self.timeout = timeout
        self.idle_timeout = idle_timeout
        self.retry = retry or RetryPolicy()
        self.hooks = hooks
        self._secrets = tuple(s for s in secrets if s)
        self._rng = rng or random.Random()
        self._sleep = sleep
        self._wall_time = wall_time
        self._client = httpx.AsyncClient(
            base_url=base_url.rstrip("/") + "/",
            headers=dict(headers),
            params=dict(params or {}),
            transport=transport,
            timeout=timeout,
        )

    def __repr__(self) -> str:
        return f"HTTPClient(provider={self.provider!r}, base_url={str(self._client.base_url)!r})"

    @property
    def is_closed(self) -> bool:
        """True once `aclose` ran."""
        return self._client.is_closed

    async def aclose(self) -> None:
        """Close the connection pool (bounded, shielded: safe in a cancelled cleanup)."""
        with anyio.move_on_after(_CLOSE_TIMEOUT, shield=True):
            await self._client.aclose()

    async def request_json(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        params: Mapping[str, Any] | None = None,
        model: str | None = None,
        timeout: float | None = None,
    ) -> Any:
        """Send a request (with retries) and return its decoded JSON body."""
        call = _Call(method, path, json_body=json_body, params=params, model=model, timeout=timeout)
        response, _ = await self._send(call)
        try:
            return json.loads(response.content)
        except ValueError as exc:
            msg = (
                f"{self.provider} answered HTTP {response.status_code} with a body that is not JSON"
            )
            raise MalformedResponseError(
                msg, provider=self.provider, model=model, status_code=response.status_code
            ) from exc

    @asynccontextmanager
    async def stream_sse(
        self,
        path: str,
        *,
        json_body: Any,
        model: str | None = None,
        timeout: float | None = None,
    ) -> AsyncIterator[AsyncIterator[SSEEvent]]:
        """POST and yield the response's server-sent events.

        Retries cover getting the response headers only: once events flow, a failure is a
        [`StreamError`][amplifier_anyio.errors.StreamError] (or a timeout) for the caller. Leaving
        the block, however it is left, closes the response.
        """
        call = _Call("POST", path, json_body=json_body, model=model, timeout=timeout, stream=True)
        response, until = await self._send(call)
        events = self._events(response, model, until)
        try:
            yield events
        finally:
            await _finish(events)
            await _close(response)

    async def _events(
        self, response: httpx.Response, model: str | None, until: float
    ) -> AsyncGenerator[SSEEvent, None]:
        """The response's events; each wait for a chunk of the body is bounded by the
        response's deadline ``until`` and by the idle timeout (the scope never spans a
        ``yield``). One wait per chunk, not per line: a chunk of many small events costs
        one cancel scope."""
        decoder = SSEDecoder()
        splitter = LineSplitter()
        chunks = response.aiter_text()
        failure: LLMError | None = None
        while failure is None:
            limit = until
            if self.idle_timeout is not None:
                limit = min(limit, anyio.current_time() + self.idle_timeout)
            try:
                with anyio.fail_after(max(0.0, limit - anyio.current_time())):
                    chunk = await anext(chunks)
            except StopAsyncIteration:
                break
            except TimeoutError:
                failure = self._stream_timeout(model, idle=limit < until)
                break
            except httpx.TimeoutException as exc:
                error = _transport_error(
                    exc, provider=self.provider, model=model, secrets=self._secrets
                )
                failure = self._chained(error, exc)
                break
            except httpx.HTTPError as exc:
                detail = redact(str(exc) or type(exc).__name__, self._secrets)
                msg = f"the {self.provider} stream broke off: {detail}"
                error = StreamError(msg, provider=self.provider, model=model, retryable=True)
                failure = self._chained(error, exc)
                break
            for line in splitter.feed(chunk):
                event = decoder.feed(line)
                if event is not None:
                    yield event
        if failure is not None:
            raise failure
        for line in splitter.flush():
            event = decoder.feed(line)
            if event is not None:
                yield event
        event = decoder.flush()
        if event is not None:
            yield event

    def _stream_timeout(self, model: str | None, *, idle: bool) -> LLMTimeoutError:
        if idle:
            text = f"{self.provider} sent nothing for {self.idle_timeout} s (idle_timeout)"
        else:
            text = f"{self.provider} did not finish its response within {self.timeout} s"
        return LLMTimeoutError(text, provider=self.provider, model=model, retryable=True)

    def _chained(self, error: LLMError, cause: Exception) -> LLMError:
        """``error`` with ``cause`` as its ``__cause__`` — unless the cause's text repeats
        a secret (or may: an invalid header). Then the error stands alone, and the caller
        raises it outside its ``except`` block, so no traceback, log or walk of the chain
        can reach the secret."""
        if not (isinstance(cause, httpx.LocalProtocolError) or leaks(str(cause), self._secrets)):
            error.__cause__ = cause
        return error

    async def _send(self, call: _Call) -> tuple[httpx.Response, float]:
        """The successful response and the deadline of the attempt that got it."""
        started = anyio.current_time()
        attempt = 0
        while True:
            attempt += 1
            try:
                return await self._attempt(call)
            except LLMError as exc:
                delay = self._next_delay(exc, attempt, started)
                if delay is None:
                    raise
                await self._announce_retry(attempt, delay, exc)
                await self._sleep(delay)

    async def _attempt(self, call: _Call) -> tuple[httpx.Response, float]:
        deadline = call.timeout if call.timeout is not None else self.timeout
        until = anyio.current_time() + deadline
        request = self._client.build_request(
            call.method,
            call.path.lstrip("/"),
            json=call.json_body,
            params=call.params,
            timeout=deadline,
        )
        if request.content:
            request.stream = _Body(request.content)
        failure: LLMError | None = None
        try:
            with anyio.fail_at(until):
                response = await self._client.send(request, stream=True)
                try:
                    if not (call.stream and response.is_success):
                        await response.aread()
                except BaseException:
                    await _close(response)
                    raise
        except (httpx.RequestError, TimeoutError) as exc:
            error = _transport_error(
                exc, provider=self.provider, model=call.model, secrets=self._secrets
            )
            failure = self._chained(error, exc)
        if failure is not None:
            raise failure
        if response.is_success:
            return response, until
        raise error_from_status(
            response,
            provider=self.provider,
            model=call.model,
            now=self._wall_time(),
            secrets=self._secrets,
        )

    def _next_delay(self, exc: LLMError, attempt: int, started: float) -> float | None:
        policy = self.retry
        if not exc.retryable or attempt > policy.max_retries:
            return None
        if exc.retry_after is not None and exc.retry_after > policy.max_delay:
            return None  # the server wants a longer pause than we are willing to take
        delay = policy.delay(attempt, exc.retry_after, self._rng)
        if anyio.current_time() - started + delay > policy.max_elapsed:
            return None
        return delay

    async def _announce_retry(self, attempt: int, delay: float, exc: LLMError) -> None:
        logger.info(
            "%s: attempt %d failed (%s), retrying in %.2fs",
            self.provider,
            attempt,
            type(exc).__name__,
            delay,
        )
        if self.hooks is None:
            return
        data = {
            "provider": self.provider,
            "model": exc.model,
            "attempt": attempt,
            "max_retries": self.retry.max_retries,
            "delay": delay,
            "status_code": exc.status_code,
            "retry_after": exc.retry_after,
            "error": {"type": type(exc).__name__, "msg": redact(str(exc), self._secrets)},
        }
        try:
            await self.hooks.emit(PROVIDER_RETRY, data)
        except Exception:  # an observer failing must not turn a retry into a failure
            logger.warning("a provider:retry hook failed", exc_info=True)
