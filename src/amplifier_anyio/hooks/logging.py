"""hooks-logging: every event as one JSON line, secrets redacted, written off the loop.

Each event becomes one line with upstream's field names:

```text
{"ts": "...", "lvl": "INFO", "schema": {"name": "amplifier.log", "ver": "1.0.0"},
 "event": "tool:pre", "session_id": "...", "trace_id": "...", "data": {...}}
```

``ts`` is the kernel's timestamp of the emit; ``trace_id`` (ours) is the turn's; the keys
upstream promotes (``status``, ``duration_ms``, ``module``, ``component``, ``error``,
``request_id``, ``span_id``, ``parent_span_id``, ``redaction``) sit beside them when an
event has them; everything else is under ``data``. ``lvl`` is ``ERROR`` when the status is
``error``, an ``error`` is set, or the event's name says error (unless the event asked for
``DEBUG``).

How a line reaches the disk: the handler (registered at ``priority``, 100 by default, so
it sees what earlier hooks made of the data) turns the event into a redacted, JSON-ready
record on the spot — a snapshot — and puts it in a bounded memory object stream
(``buffer_size``). A module service, started in the session's task group, takes records
from the stream in batches and writes them from a worker thread (encoding included),
rotating the file by size. Back-pressure is bounded: when the buffer is full an emit waits
at most ``max_block`` seconds for room, then drops the record and the log goes into
overflow (records are dropped without waiting until the writer has emptied half the
buffer), so a slow or dead disk costs a turn at most one ``max_block`` per stall, never
one per event. Drops are counted, and the count is written as a ``hooks-logging:dropped``
line once the writer catches up. ``session:end`` is the exception: emitted at cleanup,
after the last turn, it waits up to ``flush_timeout`` for room. Then the writer drains
what is left in the stream and closes the file under a bounded shield (``flush_timeout``),
so the last events are on disk.

Redaction, recursive over every mapping and list of the record: the value under a key
that names a secret (``api_key``, ``authorization``, ``token``, ``password``, ``secret``,
``credentials``, ``cookie``, …, whatever the key's case or separators: ``accessToken``,
``client-secret``, ``USER_PASSWORD``; numbers are kept, so ``token_count`` stays
readable) is replaced by ``[REDACTED]``; so is every substring that looks like a key
(``sk-…``, ``Bearer …``, AWS access key ids and secret assignments, GitHub, Slack and
Google keys, PEM private keys) — in keys as in values — every value the mount plan holds
under a secret-looking key, and (with ``redact_env``) the value of every environment
variable whose name says it is a secret. Text is read for what it carries: a string that
is JSON (a tool result inside a request) is parsed and redacted as data, ``key: value``
/ ``key=value`` / ``"key": "value"`` pairs in free text lose a secret key's value, and a
value once redacted for its key is redacted wherever it turns up later. Streamed pieces
(events named ``…delta``: ``content_block:delta``, ``thinking:delta``) are logged without
their text, as lengths: joined, the pieces of a key would spell it; the text is logged
whole, and redacted whole, in ``content_block:end``'s assembled block.

An event whose chain an earlier hook denied never reaches the logger (as upstream).
"""

from __future__ import annotations

import collections
import contextlib
import datetime as dt
import decimal
import enum
import fnmatch
import itertools
import json
import logging
import math
import os
import re
import threading
from collections.abc import Awaitable, Iterable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any, BinaryIO, Protocol

import anyio
import attrs
from anyio.abc import TaskStatus
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from ..config_schema import ConfigSchema
from ..errors import ConfigError, ValidationError
from ..events import ALL_EVENTS, SESSION_END
from ..kernel._coordinator import ModuleCoordinator
from ..kernel._hooks import utc_timestamp
from ..models import structure, unstructure
from ..models._validators import number

__all__ = (
    "LoggingConfig",
    "EventLog",
    "EventLogStatistics",
    "EventSink",
    "JsonlFileSink",
    "Redactor",
    "REDACTED",
    "DEFAULT_LOG_TEMPLATE",
    "mount",
    "on_session_ready",
    "CONFIG_SCHEMA",
)

logger = logging.getLogger(__name__)

REDACTED = "[REDACTED]"
"""What a redacted value or substring is replaced by."""

DEFAULT_LOG_TEMPLATE = "~/.amplifier/projects/{project}/sessions/{session_id}/events.jsonl"
"""Where the log goes by default (upstream's path)."""

DROPPED_EVENT = "hooks-logging:dropped"
"""The ``event`` of the line that counts records dropped under back-pressure."""

_SCHEMA = {"name": "amplifier.log", "ver": "1.0.0"}
_PROMOTED = (
    "status",
    "duration_ms",
    "module",
    "component",
    "error",
    "request_id",
    "span_id",
    "parent_span_id",
    "redaction",
)
_CAPABILITY = "hooks-logging.instances"
_BATCH = 512  # records per write
_MAX_DEPTH = 40  # nesting below which values are summarised (cycles, pathological payloads)

# Key names whose values are secrets, as whole words of the key (``openai_api_key``,
# ``X-Api-Key``, ``Authorization``, ``aws_secret_access_key``, ``refresh_token``).
_SECRET_WORDS = frozenset(
    {
        "apikey",
        "authorization",
        "auth",
        "token",
        "password",
        "passwd",
        "passphrase",
        "pwd",
        "secret",
        "credential",
        "credentials",
        "cookie",
        "privatekey",
        "accesskey",
    }
)
_SECRET_PAIRS = (("api", "key"), ("private", "key"), ("access", "key"), ("set", "cookie"))

_PATTERNS = (
    r"(?<![A-Za-z0-9])sk-[A-Za-z0-9_\-]{8,}",  # OpenAI / Anthropic style keys
    r"(?i:\bbearer\s+[A-Za-z0-9\-._~+/]+=*)",  # Authorization: Bearer …
    r"(?i:\bbasic\s+[A-Za-z0-9+/]{8,}={0,2})",  # Authorization: Basic …
    r"\b(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AROA|AIPA|ANPA|ANVA)[A-Z0-9]{16}\b",  # AWS key ids
    r"(?i:aws_?secret_?access_?key[\"'\s:=]+)[A-Za-z0-9/+=]{40}",  # AWS secret assignments
    r"\bgh[pousr]_[A-Za-z0-9]{30,}",  # GitHub tokens
    r"\bgithub_pat_[A-Za-z0-9_]{20,}",
    r"\bxox[abprs]-[A-Za-z0-9\-]{10,}",  # Slack tokens
    r"\bAIza[0-9A-Za-z\-_]{35}",  # Google API keys
    r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----",
)
_MIN_LITERAL = 8  # shorter plan or environment values are not treated as secrets


def _strings(values: Iterable[str]) -> tuple[str, ...]:
    return tuple(values)


@attrs.frozen(kw_only=True)
class LoggingConfig:
    """hooks-logging's settings (times in seconds, sizes in bytes or records).

    ``include`` / ``exclude`` are ``fnmatch`` patterns over event names (an empty
    ``include``: every event); ``exclude_events`` is upstream's spelling of ``exclude``.
    """

    session_log_template: str = DEFAULT_LOG_TEMPLATE
    priority: int = 100
    auto_discover: bool = True
    additional_events: tuple[str, ...] = attrs.field(default=(), converter=_strings)
    include: tuple[str, ...] = attrs.field(default=(), converter=_strings)
    exclude: tuple[str, ...] = attrs.field(default=("llm:stream_*delta",), converter=_strings)
    strip_raw: bool = False
    max_bytes: int | None = attrs.field(
        default=50 * 1024 * 1024,
        validator=number(minimum=1, exclusive=False, optional=True, integer=True),
    )
    backup_count: int = attrs.field(
        default=5, validator=number(minimum=0, exclusive=False, integer=True)
    )
    buffer_size: int = attrs.field(
        default=1000, validator=number(minimum=1, exclusive=False, integer=True)
    )
    max_block: float = attrs.field(default=1.0, validator=number())
    flush_timeout: float = attrs.field(default=5.0, validator=number())
    fsync: bool = False
    redact_keys: tuple[str, ...] = attrs.field(default=(), converter=_strings)
    redact_patterns: tuple[str, ...] = attrs.field(default=(), converter=_strings)
    redact_env: bool = True

    @redact_patterns.validator
    def _check_patterns(self, attribute: attrs.Attribute[Any], value: tuple[str, ...]) -> None:
        for index, pattern in enumerate(value):
            try:
                re.compile(pattern)
            except re.error as exc:
                msg = f"redact_patterns[{index}]: not a regular expression ({exc})"
                raise ConfigError(msg) from None

    @classmethod
    def from_dict(cls, config: Mapping[str, Any] | None) -> LoggingConfig:
        """Parse a plan's hooks-logging config; errors name the key."""
        config = dict(config or {})
        if "exclude_events" in config:
            if "exclude" in config:
                msg = "exclude_events: give exclude or exclude_events (the same setting), not both"
                raise ConfigError(msg)
            config["exclude"] = config.pop("exclude_events")
        known = {a.name for a in attrs.fields(cls)}
        for key in sorted(set(config) - known):
            logger.warning("hooks-logging: ignoring unknown config key %r", key)
            config.pop(key)
        try:
            return structure(config, cls)
        except ValidationError as exc:
            raise ConfigError("; ".join(exc.errors)) from exc


# -- redaction ------------------------------------------------------------------------------


_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_NOT_WORD = re.compile(r"[^a-z0-9]+")
# Parts that name a secret even inside a longer word (``userpassword``, ``clientsecret``).
_SECRET_PARTS: tuple[str, ...] = ("password", "passwd", "passphrase", "secret", "apikey")
_SECRET_PARTS += ("privatekey", "accesstoken", "authtoken", "refreshtoken", "credential")


def _key_words(key: str) -> list[str]:
    """``key`` as lower-case words, whatever its case or separators: ``accessToken``,
    ``access_token``, ``access-token``, ``Access Token`` and ``ACCESS_TOKEN`` all give
    ``["access", "token"]``."""
    return [w for w in _NOT_WORD.split(_CAMEL.sub("_", key).lower()) if w]


def _is_secret_key(key: str, extra: frozenset[str]) -> bool:
    words = _key_words(key)
    if "_".join(words) in extra:
        return True
    if any(w in _SECRET_WORDS for w in words):
        return True
    if any(pair in _SECRET_PAIRS for pair in itertools.pairwise(words)):
        return True
    joined = "".join(words)
    return any(part in joined for part in _SECRET_PARTS)


# ``key: value`` / ``key=value`` / ``"key": "value"`` (JSON text, also escaped inside
# another JSON string) in free text: the value is redacted when the key names a secret.
_ASSIGNMENT = re.compile(
    r"""(?P<key>\\*"[A-Za-z0-9_.\- ]{1,64}\\*"|'[A-Za-z0-9_.\- ]{1,64}'"""
    r"""|\b[A-Za-z][A-Za-z0-9_.\-]{0,63})"""
    r"""(?P<sep>\s*[:=]\s*)"""
    r"""(?P<value>(?P<q>\\+")(?:(?!(?P=q))[\s\S])*(?P=q)|"(?:[^"\\]|\\.)*"|'[^'\n]*'"""
    r"""|[^\s"'{\[,;&}\]][^\s"',;&}\]]*)"""
)
_LITERAL_VALUE = re.compile(r"-?\d+(?:\.\d+)?|true|false|null|none", re.IGNORECASE)
_MAX_LEARNED = 10_000  # secrets remembered from redacted values, for later text
_NOT_JSON = object()


class Redactor:
    """Turns any event payload into JSON-ready values with secrets replaced.

    ``keys`` are extra key names (whole, case-insensitive, whatever the separators) whose
    values are secrets; ``patterns`` extra regular expressions; ``literals`` exact secret
    strings (values from the plan or the environment). A value redacted for its key is
    remembered (when it is at least 8 characters long), so the same secret met later in
    free text — a tool result quoted inside a request — is redacted too.
    """

    def __init__(
        self,
        *,
        keys: Iterable[str] = (),
        patterns: Iterable[str] = (),
        literals: Iterable[str] = (),
    ) -> None:
        self._keys = frozenset("_".join(_key_words(k)) for k in keys)
        self._alternatives = [*_PATTERNS, *patterns]
        self._literals = {s for s in literals if len(s) >= _MIN_LITERAL}
        self._compiled: re.Pattern[str] | None = None
        self._key_cache: dict[str, bool] = {}
        self._key_text: dict[str, str] = {}  # a mapping key as cleaned (keys repeat)

    def _pattern(self) -> re.Pattern[str]:
        if self._compiled is None:
            found = sorted(self._literals, key=len, reverse=True)
            alternatives = [*self._alternatives, *(re.escape(s) for s in found)]
            self._compiled = re.compile("|".join(f"(?:{a})" for a in alternatives))
        return self._compiled

    def learn(self, value: Any) -> None:
        """Remember every string in ``value`` (8 characters or more) as a secret."""
        for text in _plan_secrets(value, secret=True):
            if len(text) >= _MIN_LITERAL and text not in self._literals and text != REDACTED:
                if len(self._literals) >= _MAX_LEARNED:
                    return
                self._literals.add(text)
                self._compiled = None
                self._key_text.clear()  # a key may be the secret just learned

    def text(self, value: str, depth: int = 0) -> str:
        """``value`` with every secret-looking substring replaced: key-shaped values,
        known secrets, values under secret keys in JSON text or ``key=value`` text."""
        stripped = value.strip()
        if stripped[:1] in ("{", "[") and stripped[-1:] in ("}", "]") and depth <= _MAX_DEPTH:
            try:
                parsed = json.loads(stripped)
            except ValueError:
                parsed = _NOT_JSON
            if isinstance(parsed, dict | list):
                return json.dumps(self.clean(parsed, depth + 1), ensure_ascii=False)
        value = self._pattern().sub(REDACTED, value)
        if ":" in value or "=" in value:
            value = _ASSIGNMENT.sub(self._assignment, value)
        return value

    def _assignment(self, match: re.Match[str]) -> str:
        key = match["key"].strip("\\\"'")
        value = match["value"]
        if not self.is_secret_key(key) or REDACTED in value:
            return match[0]
        quote = match["q"] or (value[0] if value[0] in "\"'" else "")
        inner = value[len(quote) : len(value) - len(quote)] if quote else value
        if not quote and len(inner) < _MIN_LITERAL and _LITERAL_VALUE.fullmatch(inner):
            return match[0]  # a count, a flag or null (``token_count=12``): not a secret
        self.learn(inner)
        return f"{match['key']}{match['sep']}{quote}{REDACTED}{quote}"

    def is_secret_key(self, key: str) -> bool:
        """Whether the value under ``key`` is a secret."""
        hit = self._key_cache.get(key)
        if hit is None:
            hit = _is_secret_key(key, self._keys)
            if len(self._key_cache) < _MAX_LEARNED:
                self._key_cache[key] = hit
        return hit

    def clean(self, value: Any, depth: int = 0) -> Any:
        """A JSON-ready copy of ``value`` (mappings, lists, attrs models, exceptions, …),
        redacted; a snapshot: later changes to ``value`` do not reach it. Keys are
        redacted like any text (a key can be a secret too)."""
        if isinstance(value, str):
            return self.text(value, depth)
        if value is None or isinstance(value, bool | int):
            return value
        if isinstance(value, float):
            return value if math.isfinite(value) else str(value)
        if depth > _MAX_DEPTH:
            return f"<{type(value).__name__} nested too deep>"
        if isinstance(value, Mapping):
            cleaned: dict[str, Any] = {}
            for k, v in value.items():
                key = str(k)
                if self.is_secret_key(key) and not _is_number(v) and v is not None:
                    self.learn(v)
                    item: Any = REDACTED
                else:
                    item = self.clean(v, depth + 1)
                name = self._key_text.get(key)
                if name is None:
                    name = self.text(key, depth + 1)
                    if len(self._key_text) < _MAX_LEARNED and key[:1] not in "{[":
                        self._key_text[key] = name
                while name in cleaned:  # two keys redacted alike stay two entries
                    name += "'"
                cleaned[name] = item
            return cleaned
        if isinstance(value, list | tuple | set | frozenset):
            return [self.clean(v, depth + 1) for v in value]
        return self._other(value, depth)

    def _other(self, value: Any, depth: int) -> Any:
        if attrs.has(type(value)):
            return self.clean(unstructure(value), depth + 1)
        if isinstance(value, BaseException):
            return {"type": type(value).__name__, "message": self.text(str(value))}
        if isinstance(value, enum.Enum):
            return self.clean(value.value, depth + 1)
        if isinstance(value, dt.datetime | dt.date | dt.time):
            return value.isoformat()
        if isinstance(value, bytes | bytearray):
            return f"<{len(value)} bytes>"
        if isinstance(value, decimal.Decimal):
            return str(value)
        dump = getattr(value, "model_dump", None)  # an upstream (pydantic) model
        if callable(dump):
            with contextlib.suppress(Exception):
                return self.clean(dump(mode="json"), depth + 1)
        return self.text(str(value))


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _plan_secrets(value: Any, secret: bool = False) -> Iterable[str]:
    """Every string the plan holds under a secret-looking key (at any depth); with
    ``secret``, every string in ``value`` (its keys too)."""
    if isinstance(value, str):
        if secret:
            yield value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            if secret and isinstance(key, str):
                yield key
            yield from _plan_secrets(item, secret or _is_secret_key(str(key), frozenset()))
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _plan_secrets(item, secret)


def _env_secrets() -> Iterable[str]:
    for name, value in os.environ.items():
        if _is_secret_key(name, frozenset()):
            yield value


# -- the sink -------------------------------------------------------------------------------


class EventSink(Protocol):
    """Where records go: ``write`` a batch of JSON-ready records, in order; ``aclose``."""

    async def write(self, records: Sequence[dict[str, Any]]) -> None: ...

    async def aclose(self) -> None: ...


class JsonlFileSink:
    """Appends records as JSON lines to ``path``; rotates at ``max_bytes``.

    Encoding and every file operation run in a worker thread. Rotation renames ``path`` to
    ``path.1`` (``path.1`` to ``path.2``, … up to ``backup_count``; the oldest is removed).
    Batches are queued in call order and each thread job writes every queued batch under a
    lock, so a write the caller stopped waiting for (a cancel) still lands, and before any
    later one: the lines stay in order.
    """

    def __init__(
        self,
        path: Path,
        *,
        max_bytes: int | None = None,
        backup_count: int = 5,
        fsync: bool = False,
    ) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.backup_count = backup_count
        self.fsync = fsync
        self._lock = threading.Lock()
        self._queued: collections.deque[list[dict[str, Any]]] = collections.deque()
        self._file: BinaryIO | None = None
        self._size = 0

    async def write(self, records: Sequence[dict[str, Any]]) -> None:
        """Append ``records`` (one line each), from a worker thread."""
        self._queued.append(list(records))
        await anyio.to_thread.run_sync(self._write_queued, abandon_on_cancel=True)

    async def aclose(self) -> None:
        """Close the file (after any write still running in its thread)."""
        await anyio.to_thread.run_sync(self._close_sync, abandon_on_cancel=True)

    def _write_queued(self) -> None:
        with self._lock:
            while self._queued:
                self._write_batch(self._queued.popleft())

    def _write_batch(self, records: list[dict[str, Any]]) -> None:
        if not records:
            return
        file = self._open()
        for record in records:
            line = (_dumps(record) + "\n").encode("utf-8")
            full = self.max_bytes is not None and self._size + len(line) > self.max_bytes
            if full and self._size:  # a line longer than max_bytes gets a file of its own
                file = self._rotate()
            file.write(line)
            self._size += len(line)
        file.flush()
        if self.fsync:
            os.fsync(file.fileno())

    def _open(self) -> BinaryIO:
        if self._file is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = self.path.open("ab")
            self._size = self._file.tell()
        return self._file

    def _rotate(self) -> BinaryIO:
        assert self._file is not None
        self._file.close()
        self._file = None
        if self.backup_count == 0:
            self.path.unlink(missing_ok=True)
        else:
            for index in range(self.backup_count - 1, 0, -1):
                older = self.path.with_name(f"{self.path.name}.{index}")
                if older.exists():
                    os.replace(older, self.path.with_name(f"{self.path.name}.{index + 1}"))
            os.replace(self.path, self.path.with_name(f"{self.path.name}.1"))
        return self._open()

    def _close_sync(self) -> None:
        self._write_queued()
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None


def _dumps(record: dict[str, Any]) -> str:
    return json.dumps(record, ensure_ascii=False, separators=(",", ":"), default=str)


# -- the log --------------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class EventLogStatistics:
    """A snapshot of an event log's counters."""

    path: Path | None
    """The log file (None for a custom sink)."""
    written: int
    """Records handed to the sink."""
    dropped: int
    """Records dropped under back-pressure (the buffer stayed full past ``max_block``)."""
    failed: int
    """Records the sink failed to write (a disk error; logged)."""
    buffered: int
    """Records waiting in the stream."""


class EventLog:
    """One session's JSONL event log: the handler, the stream and the writer service.

    ``sink`` replaces the file (tests, another store); otherwise the file is
    ``session_log_template`` expanded for the coordinator's session.
    """

    def __init__(self, config: LoggingConfig | None = None, *, sink: EventSink | None = None):
        self.config = config or LoggingConfig()
        self.path: Path | None = None
        self._sink = sink
        self._send: MemoryObjectSendStream[dict[str, Any]] | None = None  # from attach()
        self._redactor = Redactor(
            keys=self.config.redact_keys, patterns=self.config.redact_patterns
        )
        self._unregister: dict[str, Any] = {}
        self._session_id: str | None = None
        self._overflow = False
        self._closed = False
        self._drained = anyio.Event()
        self._written = 0
        self._dropped: collections.Counter[str] = collections.Counter()
        self._reported: collections.Counter[str] = collections.Counter()
        self._failed = 0

    def statistics(self) -> EventLogStatistics:
        """Records written, dropped, failed and buffered so far."""
        return EventLogStatistics(
            path=self.path,
            written=self._written,
            dropped=self._dropped.total(),
            failed=self._failed,
            buffered=self._send.statistics().current_buffer_used if self._send else 0,
        )

    # -- wiring --------------------------------------------------------------------------

    async def attach(self, coordinator: ModuleCoordinator) -> None:
        """Start the writer service and subscribe to the configured events.

        Needs a session opened with ``async with`` (the writer is a module service); the
        log detaches itself at the session's cleanup.
        """
        if getattr(coordinator, "validating", False):
            await anyio.lowlevel.checkpoint()  # validate_plan: the config parsed; no file
            return
        self._session_id = coordinator.session_id
        literals = list(_plan_secrets(coordinator.config))
        if self.config.redact_env:
            literals.extend(_env_secrets())
        self._redactor = Redactor(
            keys=self.config.redact_keys, patterns=self.config.redact_patterns, literals=literals
        )
        if self._sink is None:
            self.path = _log_path(self.config.session_log_template, coordinator)
            self._sink = JsonlFileSink(
                self.path,
                max_bytes=self.config.max_bytes,
                backup_count=self.config.backup_count,
                fsync=self.config.fsync,
            )
        send, receive = anyio.create_memory_object_stream[dict[str, Any]](
            max_buffer_size=self.config.buffer_size
        )
        try:
            await coordinator.start_service(partial(self._serve, receive), name="hooks-logging")
        except BaseException:
            send.close()
            receive.close()
            raise
        self._send = send
        coordinator.register_cleanup(self.detach)
        self.subscribe(coordinator, [*ALL_EVENTS, *self.config.additional_events])

    async def discover(self, coordinator: ModuleCoordinator) -> None:
        """Subscribe to the events other modules declare (``observability.events``)."""
        if not self.config.auto_discover:
            await anyio.lowlevel.checkpoint()
            return
        names: list[str] = list(coordinator.get_capability("observability.events") or ())
        for contribution in await coordinator.collect_contributions("observability.events"):
            names.extend([contribution] if isinstance(contribution, str) else contribution)
        self.subscribe(coordinator, names)

    def subscribe(self, coordinator: ModuleCoordinator, names: Iterable[str]) -> None:
        """Register the handler for each name the include / exclude patterns let through
        (each name once). A name in ``include`` without wildcards is always added."""
        config = self.config
        wanted = [*names, *(p for p in config.include if not _has_wildcard(p))]
        for name in dict.fromkeys(wanted):
            if name in self._unregister or not _selected(name, config.include, config.exclude):
                continue
            self._unregister[name] = coordinator.hooks.register(
                name, self, priority=config.priority, name="hooks-logging"
            )

    async def detach(self) -> None:
        """Unsubscribe, close the stream and wait (up to ``flush_timeout``) for the writer
        to drain it; the session stops the writer service right after, in any case."""
        self._closed = True
        for unregister in self._unregister.values():
            unregister()
        self._unregister.clear()
        if self._send is not None:
            self._send.close()
        with anyio.move_on_after(self.config.flush_timeout):
            await self._drained.wait()

    # -- the handler ---------------------------------------------------------------------

    def __call__(self, event: str, data: dict[str, Any]) -> Awaitable[None] | None:
        """Queue the event's record; waits (bounded) only when the buffer is full."""
        send = self._send
        if self._closed or send is None:
            return None
        record = self.record(event, data)
        if event == SESSION_END:
            # Emitted at cleanup, after the last turn: worth waiting for (bounded).
            return self._send_bounded(send, event, record, self.config.flush_timeout)
        if self._overflow:
            if send.statistics().current_buffer_used > self.config.buffer_size // 2:
                self._dropped[event] += 1
                return None
            self._overflow = False
        try:
            send.send_nowait(record)
        except anyio.WouldBlock:
            return self._send_bounded(send, event, record, self.config.max_block)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            self._dropped[event] += 1
        return None

    async def _send_bounded(
        self,
        send: MemoryObjectSendStream[dict[str, Any]],
        event: str,
        record: dict[str, Any],
        seconds: float,
    ) -> None:
        with anyio.move_on_after(seconds) as bound:
            try:
                await send.send(record)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                self._dropped[event] += 1
        if bound.cancelled_caught:
            self._dropped[event] += 1
            if not self._overflow:
                self._overflow = True
                logger.warning(
                    "hooks-logging: the writer is behind by %s records; dropping until it "
                    "catches up",
                    self.config.buffer_size,
                )

    def record(self, event: str, data: Mapping[str, Any]) -> dict[str, Any]:
        """The redacted, JSON-ready record of one event."""
        payload = dict(data)
        record: dict[str, Any] = {
            "ts": payload.pop("timestamp", None) or utc_timestamp(),
            "lvl": payload.pop("lvl", "INFO"),
            "schema": _SCHEMA,
            "event": event,
            "session_id": payload.pop("session_id", self._session_id),
            "trace_id": payload.pop("trace_id", None),
        }
        for key in _PROMOTED:
            if key in payload:
                record[key] = payload.pop(key)
        if self.config.strip_raw:
            payload.pop("raw", None)
        if record["lvl"] != "DEBUG" and (
            record.get("status") == "error" or record.get("error") or "error" in event
        ):
            record["lvl"] = "ERROR"
        if event.endswith("delta"):
            payload = _held(payload)
        record["data"] = payload
        cleaned: dict[str, Any] = self._redactor.clean(record)
        return cleaned

    # -- the writer service --------------------------------------------------------------

    async def _serve(
        self,
        receive: MemoryObjectReceiveStream[dict[str, Any]],
        *,
        task_status: TaskStatus[None],
    ) -> None:
        task_status.started()
        try:
            async for first in receive:
                await self._write(_batch(receive, first))
        finally:
            # Stopped (cancelled) or the stream was closed: what is buffered still goes out.
            with anyio.move_on_after(self.config.flush_timeout, shield=True) as bound:
                await self._flush_rest(receive)
            receive.close()
            self._drained.set()
            if bound.cancelled_caught:
                logger.error(
                    "hooks-logging: the last records did not reach %s within %ss",
                    self.path or "the sink",
                    self.config.flush_timeout,
                )

    async def _flush_rest(self, receive: MemoryObjectReceiveStream[dict[str, Any]]) -> None:
        while batch := _batch(receive):
            await self._write(batch)
        await self._write([])  # a last drop count, if any
        assert self._sink is not None
        try:
            await self._sink.aclose()
        except Exception:
            logger.exception("hooks-logging: closing %s failed", self.path or "the sink")

    async def _write(self, batch: list[dict[str, Any]]) -> None:
        if self._dropped != self._reported:
            batch.append(self._drop_record(self._dropped - self._reported))
            self._reported = collections.Counter(self._dropped)
        if not batch:
            return
        assert self._sink is not None
        self._written += len(batch)
        try:
            await self._sink.write(batch)
        except Exception:
            self._written -= len(batch)
            self._failed += len(batch)
            logger.exception(
                "hooks-logging: writing %s records to %s failed", len(batch), self.path or "sink"
            )

    def _drop_record(self, counts: collections.Counter[str]) -> dict[str, Any]:
        return {
            "ts": utc_timestamp(),
            "lvl": "WARNING",
            "schema": _SCHEMA,
            "event": DROPPED_EVENT,
            "session_id": self._session_id,
            "trace_id": None,
            "data": {
                "count": counts.total(),
                "events": dict(counts),
                "reason": "the log buffer stayed full",
            },
        }


_DELTA_META = frozenset({"provider", "block_type", "id", "name", "type", "model", "lvl"})


def _held(payload: Mapping[str, Any]) -> dict[str, Any]:
    """A streamed piece's payload without its text: each string (but the names of what
    it belongs to) becomes its length, ``<field>_chars``. The pieces of a key, joined,
    would spell it, and no piece alone looks like one; the text is logged once whole, and
    redacted as a whole, with ``content_block:end``'s assembled block."""
    held: dict[str, Any] = {}
    for key, value in payload.items():
        if isinstance(value, str) and key not in _DELTA_META:
            held[f"{key}_chars"] = len(value)
        elif isinstance(value, Mapping):
            held[key] = _held(value)
        elif isinstance(value, list | tuple):
            held[f"{key}_items"] = len(value)
        else:
            held[key] = value
    return held


def _batch(
    receive: MemoryObjectReceiveStream[dict[str, Any]], first: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """``first`` and what else is buffered, up to one batch, without waiting."""
    batch = [first] if first is not None else []
    while len(batch) < _BATCH:
        try:
            batch.append(receive.receive_nowait())
        except (anyio.WouldBlock, anyio.EndOfStream, anyio.ClosedResourceError):
            break
    return batch


def _has_wildcard(pattern: str) -> bool:
    return any(c in pattern for c in "*?[")


def _selected(name: str, include: tuple[str, ...], exclude: tuple[str, ...]) -> bool:
    if include and not any(fnmatch.fnmatchcase(name, p) for p in include):
        return False
    return not any(fnmatch.fnmatchcase(name, p) for p in exclude)


def _project_slug(directory: Path) -> str:
    slug = str(directory).replace("/", "-").replace("\\", "-").replace(":", "")
    return slug if slug.startswith("-") else f"-{slug}"


class _Fields(dict[str, str]):
    def __missing__(self, key: str) -> str:
        msg = f"session_log_template: unknown field {{{key}}} (known: project, session_id)"
        raise ConfigError(msg)


def _log_path(template: str, coordinator: ModuleCoordinator) -> Path:
    working_dir = coordinator.get_capability("session.working_dir") or Path.cwd()
    fields = _Fields(
        session_id=coordinator.session_id or "no-session",
        project=_project_slug(Path(working_dir).resolve()),
    )
    try:
        expanded = template.format_map(fields)
    except (ValueError, IndexError) as exc:
        msg = f"session_log_template: {exc}"
        raise ConfigError(msg) from None
    return Path(expanded).expanduser()


# -- the module -----------------------------------------------------------------------------


async def mount(coordinator: ModuleCoordinator, config: dict[str, Any] | None = None) -> None:
    """Mount hooks-logging: start its writer service and subscribe to every event.

    Events that other modules declare are added by
    [`on_session_ready`][amplifier_anyio.hooks.logging.on_session_ready], once every module is
    mounted.
    """
    log = EventLog(LoggingConfig.from_dict(config))
    await log.attach(coordinator)
    instances = coordinator.get_capability(_CAPABILITY) or []
    coordinator.register_capability(_CAPABILITY, [*instances, log])


async def on_session_ready(coordinator: ModuleCoordinator) -> None:
    """Subscribe each hooks-logging instance to the events other modules declare."""
    await anyio.lowlevel.checkpoint()
    for log in coordinator.get_capability(_CAPABILITY) or ():
        await log.discover(coordinator)


CONFIG_SCHEMA = ConfigSchema.from_attrs(
    "hooks-logging", LoggingConfig, aliases={"exclude_events": "exclude"}
)
"""The keys hooks-logging accepts (``exclude_events`` is upstream's name of ``exclude``)."""
