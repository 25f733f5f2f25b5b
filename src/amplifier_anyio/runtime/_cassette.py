"""Record a session's provider calls once, replay them in CI: cassettes by lane (DESIGN §16).

A plan with ``session: {cassette: {path, mode, tools}}`` (or ``amplifier-anyio run
--record FILE`` / ``--replay FILE``) wraps the providers a session mounted — and, with
``tools: true``, its tools — once every module is mounted:

- **record**: each provider call is appended to ``path`` as one JSON line: its lane, its
  ordinal in the lane, its kind (``complete`` or ``stream``), the provider's mount name,
  the normalised request (`normalise_request`) and the full response — for an
  ``open_stream()`` call the ordered stream events, the final ``response`` event included. A
  call that failed keeps its error, one that was cancelled says so;
- **replay**: each call is answered from the file by lane and ordinal; the provider is
  never asked. A request that differs from the recorded one raises
  `CassetteMismatchError` naming the lane, the ordinal and
  the first differing JSON path (``messages[1].content``), as does a call past the end of
  its lane; the turn ends with status ``error``. After a mismatch every later call of the
  cassette fails with the same error (the run is no longer the recorded one);
- **auto**: replay when the file exists, else record; **new_episodes**: replay the
  recorded calls, record (and append) the calls past the end of a lane.

**Lanes.** Calls are matched per lane, never by arrival order across the file, so
concurrent work replays the same whatever the scheduling. A session's lane is its
``lane`` attribute: ``root`` for a top-level session; whoever creates a sub-agent's
session sets ``child.lane = child_lane(parent.lane, agent)`` (``root/researcher``) before
the child opens. A cassette path opened twice in one event loop is one shared object
(one writer), so a parent and its children write their lanes into one file. Calls of one
lane must not overlap (a session makes one provider call at a time).

**Tools** (``tools: true``): a tool call's result is recorded under its lane, the number of
provider calls the lane made before it (``call: "<provider calls>:<index in its batch>"``)
and an occurrence count — never under its call id alone, which an orchestrator may make
per run (loop-lifecycle does) and a scripted model may reuse every turn; the id is kept in
the line for the reader. On replay the tool is not run: its recorded result (or error) is
returned; a different tool or input at that place is a mismatch.
A tool placed on a non-local executor is left unwrapped (a warning says so).

**One recorder per file.** A cassette opened to record (``record``, ``new_episodes``, or
``auto`` with no file yet) holds an exclusive ``flock`` on ``<file>.lock`` (its pid
written in it) until it closes, and takes it before the file is touched: a second recorder
— another process, or another event loop of this one — gets `CassetteError` naming the
holder's pid, and the file is never truncated under a recording. In one event loop the
sessions sharing a cassette each hold their lane while their session is open: a second
session on a lane in use gets `CassetteError` naming the session that holds it.

**Validated whole.** A cassette opened to replay (or to add new episodes) is read and
checked before any call is answered: an empty file, a line that is not a recorded call (not
JSON, a missing field, a response or a tool result that does not fit its model), one call
recorded twice (same lane and ordinal, or same tool call) and a lane with a call missing
are each a `CassetteError` naming the file and the line — the session does not start, so
a run is never half-replayed.
"""

from __future__ import annotations

import builtins
import contextlib
import inspect
import json
import logging
import os
import re
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import IO, Any

import anyio
import anyio.lowlevel
import attrs

from .. import errors as _errors
from ..errors import CassetteError, CassetteMismatchError, ConfigError, LLMError
from ..kernel import _pidlock
from ..kernel._foreign import chat_response_of, tool_result_of
from ..kernel._mount_plan import CASSETTE_MODES, CassetteSpec
from ..kernel._tracing import current_tool_call
from ..models import ChatRequest, ChatResponse, ContentBlock, ToolResult, structure, unstructure
from ._streaming import stream_opener

__all__ = (
    "ROOT_LANE",
    "CASSETTE_MODES",
    "CassetteSpec",
    "Cassette",
    "CassetteStatistics",
    "CassetteMismatchError",
    "CassetteError",
    "lock_path_for",
    "install_cassette",
    "open_cassette",
    "lane_of",
    "child_lane",
    "normalise_request",
    "first_difference",
)

logger = logging.getLogger(__name__)

ROOT_LANE = "root"
"""The lane of a top-level session."""

FORMAT = "amplifier-anyio-cassette"
"""The first line of every cassette: ``{"cassette": FORMAT, "version": 1}``."""
_VERSION = 1
_WRITE_TIMEOUT = 10.0  # seconds one shielded append may take
_CLOSE_TIMEOUT = 5.0

_VOLATILE_KEYS = frozenset(
    {"timestamp", "created_at", "trace_id", "parallel_group_id", "span_id", "request_id"}
)
"""Keys dropped from a request wherever they are: times and per-run random ids."""
_VERBATIM_KEYS = frozenset({"arguments", "input", "parameters"})
"""Below these keys a request is the model's or the tool's data: None values are kept."""
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


# -- lanes ----------------------------------------------------------------------------------


def lane_of(coordinator: Any) -> str:
    """The lane of the session that owns ``coordinator`` (its ``lane``; ``root`` without)."""
    lane = getattr(getattr(coordinator, "session", None), "lane", None)
    return lane if isinstance(lane, str) and lane else ROOT_LANE


def child_lane(parent: str, agent: str, call_id: str | None = None) -> str:
    """The lane of a sub-agent: ``<parent>/<agent>``, or ``<parent>/<agent>@<call_id>``
    when one parent turn may start the same agent more than once (the spawning tool call's
    id is in the recorded response, so it is the same on replay)."""
    lane = f"{parent}/{agent}"
    return f"{lane}@{call_id}" if call_id else lane


# -- normalising and comparing ------------------------------------------------------------


def normalise_request(request: ChatRequest | Mapping[str, Any]) -> dict[str, Any]:
    """The request as it is recorded and compared: unstructured with the project's
    converter, through JSON (tuples are lists), without the keys of
    ``timestamp``-like fields and per-run ids (``trace_id``, ``parallel_group_id``…),
    canonical UUIDs in strings replaced by ``<uuid>``, None fields left out (but kept in
    tool arguments and schemas), and tool call ids numbered by first appearance
    (``call-0``, ``call-1``…: an orchestrator may make its own per-turn ids, as
    loop-lifecycle does; which result answers which call is kept)."""
    data = request if isinstance(request, Mapping) else unstructure(request)
    normalised: dict[str, Any] = _normalise(_json_round_trip(data), keep_none=False)
    _number_call_ids(normalised.get("messages"))
    return normalised


def _number_call_ids(messages: Any) -> None:
    """Replace every tool call id of ``messages`` (in place) by its first-appearance number."""
    numbers: dict[str, str] = {}

    def number(value: Any) -> Any:
        if not isinstance(value, str):
            return value
        return numbers.setdefault(value, f"call-{len(numbers)}")

    for message in messages if isinstance(messages, list) else ():
        if not isinstance(message, dict):
            continue
        for call in message.get("tool_calls") or ():
            if isinstance(call, dict) and "id" in call:
                call["id"] = number(call["id"])
        if "tool_call_id" in message:
            message["tool_call_id"] = number(message["tool_call_id"])
        content = message.get("content")
        for block in content if isinstance(content, list) else ():
            if not isinstance(block, dict):
                continue
            if block.get("type") == "tool_call" and "id" in block:
                block["id"] = number(block["id"])
            elif block.get("type") == "tool_result" and "tool_call_id" in block:
                block["tool_call_id"] = number(block["tool_call_id"])


def _normalise(value: Any, *, keep_none: bool) -> Any:
    if isinstance(value, dict):
        return {
            key: _normalise(item, keep_none=keep_none or key in _VERBATIM_KEYS)
            for key, item in value.items()
            if key not in _VOLATILE_KEYS and (keep_none or item is not None)
        }
    if isinstance(value, list):
        return [_normalise(item, keep_none=keep_none) for item in value]
    if isinstance(value, str) and "-" in value:
        return _UUID.sub("<uuid>", value)
    return value


def first_difference(recorded: Any, actual: Any, path: str = "") -> str | None:
    """The first JSON path where two JSON values differ (``messages[1].content``), or
    None when they are equal. Keys are visited in the recorded value's order, then the
    actual value's new keys; a list that is longer or shorter differs at its first extra
    index; ``1`` and ``true`` differ (types are compared, as JSON sees them)."""
    if isinstance(recorded, dict) and isinstance(actual, dict):
        for key in [*recorded, *(k for k in actual if k not in recorded)]:
            where = f"{path}.{key}" if path else str(key)
            if key not in recorded or key not in actual:
                return where
            found = first_difference(recorded[key], actual[key], where)
            if found is not None:
                return found
        return None
    if isinstance(recorded, list) and isinstance(actual, list):
        for index, (old, new) in enumerate(zip(recorded, actual, strict=False)):
            found = first_difference(old, new, f"{path}[{index}]")
            if found is not None:
                return found
        if len(recorded) != len(actual):
            return f"{path}[{min(len(recorded), len(actual))}]"
        return None
    if type(recorded) is not type(actual) or recorded != actual:
        return path or "<root>"
    return None


def _json_round_trip(value: Any) -> Any:
    return json.loads(json.dumps(value, ensure_ascii=False, default=str))


def _value_at(data: Any, path: str) -> Any:
    """The value at a path `first_difference` returned (None where there is none)."""
    for key, index in re.findall(r"([^.\[\]]+)|\[(\d+)\]", path):
        try:
            data = data[int(index)] if index else data[key]
        except (KeyError, IndexError, TypeError):
            return None
    return data


def _short(value: Any, limit: int = 60) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


# -- encoding what a provider or a tool answered --------------------------------------------


def _encode_response(response: Any, origin: str) -> dict[str, Any]:
    encoded: dict[str, Any] = _json_round_trip(
        unstructure(chat_response_of(response, origin=origin))
    )
    return encoded


def _encode_event(event: Mapping[str, Any], origin: str) -> dict[str, Any]:
    encoded: dict[str, Any] = {}
    for key, value in event.items():
        if key == "response" and event.get("type") == "response":
            encoded[key] = _encode_response(value, origin)
        elif attrs.has(type(value)):
            encoded[key] = unstructure(value)
        else:
            encoded[key] = value
    result: dict[str, Any] = _json_round_trip(encoded)
    return result


def _decode_event(data: Mapping[str, Any]) -> dict[str, Any]:
    event = dict(data)
    if event.get("type") == "response":
        event["response"] = structure(event["response"], ChatResponse)
    block = event.get("block")
    if isinstance(block, dict) and "type" in block:
        try:
            event["block"] = structure([block], list[ContentBlock])[0]
        except Exception:  # noqa: BLE001 - not one of ours: the provider sent a dict
            event["block"] = block
    return event


def _encode_error(exc: BaseException) -> dict[str, Any]:
    data: dict[str, Any] = {"type": type(exc).__name__, "message": str(exc)}
    if isinstance(exc, LLMError):
        data.update(
            provider=exc.provider,
            model=exc.model,
            status_code=exc.status_code,
            retryable=exc.retryable,
            retry_after=exc.retry_after,
        )
    encoded: dict[str, Any] = _json_round_trip(data)
    return encoded


_REPLAYED_CLASSES: dict[str, type[Exception]] = {}


def _decode_error(data: Mapping[str, Any]) -> Exception:
    """The recorded error raised again: our LLMError classes with their fields, a builtin
    exception by name, else an exception class of the recorded name (what the tool batch
    and ``provider:error`` report is the class name and the message)."""
    name = str(data.get("type") or "Exception")
    message = str(data.get("message") or "")
    ours = getattr(_errors, name, None)
    if isinstance(ours, type) and issubclass(ours, LLMError):
        try:
            return ours(
                message,
                provider=data.get("provider"),
                model=data.get("model"),
                status_code=data.get("status_code"),
                retryable=bool(data.get("retryable")),
                retry_after=data.get("retry_after"),
            )
        except TypeError:
            pass
    builtin = getattr(builtins, name, None)
    if isinstance(builtin, type) and issubclass(builtin, Exception):
        try:
            return builtin(message)
        except TypeError:
            pass
    cls = _REPLAYED_CLASSES.get(name)
    if cls is None:
        cls = _REPLAYED_CLASSES[name] = type(name, (Exception,), {"__module__": __name__})
    return cls(message)


# -- the recorder lock (every function here runs in a worker thread) ------------------------


def lock_path_for(path: Path) -> Path:
    """The recorder lock beside a cassette: ``<file>.lock`` (removed when the recorder
    closes)."""
    return path.with_name(f"{path.name}.lock")


def _acquire_recorder(path: Path) -> int:
    """Take the recorder lock of ``path`` (as the session store's writer lock: an exclusive
    ``flock``, the holder's pid written in the file); the descriptor that holds it.

    Raises `CassetteError` naming the holder's pid when another recorder has it. The
    holder removes the file as it lets go; a lock taken on a file so removed is let go and
    taken again on the new one, so two recorders never both hold it.
    """
    lock = lock_path_for(path)
    where = f"session.cassette.path: {path}"
    if not _pidlock.HAS_LOCKS:  # pragma: no cover - not POSIX
        raise CassetteError(
            f"{where}: no fcntl file locks here, which recording needs", path=str(path)
        )
    try:
        held = _pidlock.take(lock)
    except _pidlock.LockFileError as exc:
        msg = f"{where}: cannot {exc.step} its lock {lock.name}: {exc.strerror}"
        raise CassetteError(msg, path=str(path)) from exc
    if isinstance(held, str):
        msg = (
            f"{where}: another recorder holds it ({held}); one recorder per cassette "
            "file — wait for it to finish, or record to another file"
        )
        raise CassetteError(msg, path=str(path))
    return held


def _check_not_recording(path: Path) -> None:
    """Raise `CassetteError` naming the recorder that holds ``path``, if one does: a file
    being recorded is not replayed half-written."""
    if not _pidlock.HAS_LOCKS:  # pragma: no cover - not POSIX
        return
    holder = _pidlock.held_by(lock_path_for(path))
    if holder is not None:
        msg = (
            f"session.cassette.path: {path}: another recorder holds it ({holder}); "
            "replay it once the recording is done"
        )
        raise CassetteError(msg, path=str(path))


def _release_recorder(path: Path, fd: int) -> None:
    """Remove the lock file while holding it, then let the lock go."""
    with contextlib.suppress(OSError):
        os.unlink(lock_path_for(path))
    with contextlib.suppress(OSError):
        os.close(fd)


# -- validating a recorded line ---------------------------------------------------------------

_CALL_KINDS = ("complete", "stream")


def _problem(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _check_entry(entry: dict[str, Any]) -> str | None:
    """What is wrong with one recorded call, or None: every field replay reads is there and
    every response, event and result fits its model."""
    lane = entry.get("lane")
    if not isinstance(lane, str) or not lane:
        return "missing or bad lane"
    kind = entry.get("kind")
    if kind == "tool":
        for field, types in (("call", str), ("occurrence", int), ("tool", str)):
            value = entry.get(field)
            if not isinstance(value, types) or isinstance(value, bool):
                return f"missing or bad {field}"
        if entry["occurrence"] < 0:
            return "missing or bad occurrence"
        outcome = [k for k in ("result", "error", "cancelled") if k in entry]
        if not outcome:
            return "a tool call with no result, error or cancel"
        if "result" in entry:
            try:
                structure(entry["result"], ToolResult)
            except Exception as exc:  # noqa: BLE001 - named in the CassetteError
                return f"result: {_problem(exc)}"
        return _check_error(entry)
    if kind not in _CALL_KINDS:
        return f"unknown kind {_short(kind)} (expected complete, stream or tool)"
    ordinal = entry.get("ordinal")
    if not isinstance(ordinal, int) or isinstance(ordinal, bool) or ordinal < 0:
        return "missing or bad ordinal"
    if not isinstance(entry.get("provider"), str):
        return "missing or bad provider"
    if not isinstance(entry.get("request"), dict):
        return "missing or bad request"
    if kind == "complete":
        if not any(k in entry for k in ("response", "error", "cancelled")):
            return "a call with no response, error or cancel"
        if "response" in entry:
            try:
                structure(entry["response"], ChatResponse)
            except Exception as exc:  # noqa: BLE001 - named in the CassetteError
                return f"response: {_problem(exc)}"
    else:
        events = entry.get("events")
        if not isinstance(events, list):
            return "missing or bad events"
        for index, event in enumerate(events):
            if not isinstance(event, dict):
                return f"events[{index}]: not a JSON object"
            try:
                _decode_event(event)
            except Exception as exc:  # noqa: BLE001 - named in the CassetteError
                return f"events[{index}].response: {_problem(exc)}"
    return _check_error(entry)


def _check_error(entry: dict[str, Any]) -> str | None:
    if "error" in entry and not isinstance(entry["error"], dict):
        return "error: not a JSON object"
    return None


# -- the cassette ---------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class CassetteStatistics:
    """A snapshot of an open cassette."""

    path: str
    mode: str
    """The mode in effect: ``record``, ``replay`` or ``new_episodes`` (``auto`` resolved)."""
    recorded: int
    """Calls written by this process (provider calls and tool results)."""
    replayed: int
    """Calls answered from the file."""
    lanes: dict[str, int]
    """Provider calls made so far per lane."""


@attrs.frozen
class _Call:
    lane: str
    ordinal: int
    entry: dict[str, Any]
    replay: dict[str, Any] | None
    """The recorded line answering this call; None: the call is made and recorded."""


class Cassette:
    """One cassette file, open for recording or replaying (see the module docstring).

    Built by `open_cassette` / `install_cassette`, which share one object per
    file and event loop. Lines are appended by one writer, under a lock, off the loop.
    """

    def __init__(self, path: Path, mode: str) -> None:
        self.path = path
        self.mode = mode
        self.failure: CassetteMismatchError | None = None
        """The first mismatch of a replay: every later call raises it again."""
        self._calls: dict[tuple[str, int], dict[str, Any]] = {}
        self._tool_results: dict[tuple[str, str, int], dict[str, Any]] = {}
        self._recorded_per_lane: dict[str, int] = {}
        self._next: dict[str, int] = {}
        self._next_tool: dict[tuple[str, str], int] = {}
        self._lock = anyio.Lock()
        self._file: IO[str] | None = None
        self._recorder: int | None = None  # the descriptor holding the recorder lock
        self._holders: dict[str, tuple[int, str, int]] = {}  # lane: (id, who, count)
        self._users = 0
        self._written = 0
        self._replayed = 0

    def __repr__(self) -> str:
        return f"Cassette(path={str(self.path)!r}, mode={self.mode!r})"

    def statistics(self) -> CassetteStatistics:
        """What the cassette did so far."""
        return CassetteStatistics(
            path=str(self.path),
            mode=self.mode,
            recorded=self._written,
            replayed=self._replayed,
            lanes=dict(self._next),
        )

    # -- opening and closing (blocking parts in a worker thread) ----------------------------

    def _open_blocking(self) -> None:
        if self.mode != "replay":
            self._recorder = _acquire_recorder(self.path)  # before the file is touched
        else:
            _check_not_recording(self.path)
        try:
            if self.mode != "record":
                self._load()
            if self.mode == "replay":
                return
            self.path.parent.mkdir(parents=True, exist_ok=True)
            size = self.path.stat().st_size if self.path.exists() else 0
            fresh = self.mode == "record" or size == 0
            self._file = self.path.open("w" if fresh else "a", encoding="utf-8")
            if fresh:
                header = {"cassette": FORMAT, "version": _VERSION}
                self._file.write(json.dumps(header) + "\n")
            elif not self.path.read_bytes().endswith(b"\n"):
                self._file.write("\n")  # a last line without its newline: keep lines whole
            self._file.flush()
        except BaseException:
            self._close_blocking()
            raise

    def _load(self) -> None:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            if self.mode == "new_episodes":
                return
            msg = (
                f"session.cassette.path: {self.path}: no such cassette "
                "(record it first: mode record or auto, or --record)"
            )
            raise ConfigError(msg) from None
        except (OSError, UnicodeDecodeError) as exc:
            msg = f"session.cassette.path: {self.path}: cannot read: {exc}"
            raise CassetteError(msg, path=str(self.path)) from exc
        lines = [(n, line) for n, line in enumerate(text.splitlines(), start=1) if line.strip()]
        if not lines:
            if self.mode == "new_episodes":
                return  # nothing recorded yet: the file is begun afresh
            msg = (
                f"session.cassette.path: {self.path}: the file is empty, not a cassette "
                "(record it first: mode record or auto, or --record)"
            )
            raise CassetteError(msg, path=str(self.path))
        first = True
        calls: dict[tuple[str, int], int] = {}  # where each call is recorded: its line
        tools: dict[tuple[str, str, int], int] = {}
        for number, line in lines:
            self._load_line(number, line, header=first, calls=calls, tools=tools)
            first = False
        self._check_lanes(calls)

    def _load_line(
        self,
        number: int,
        line: str,
        *,
        header: bool,
        calls: dict[tuple[str, int], int],
        tools: dict[tuple[str, str, int], int],
    ) -> None:
        where = f"session.cassette.path: {self.path}:{number}"

        def error(problem: str) -> CassetteError:
            return CassetteError(f"{where}: {problem}", path=str(self.path), line=number)

        try:
            entry = json.loads(line)
        except ValueError as exc:
            raise error(f"not a JSON line ({exc})") from None
        if not isinstance(entry, dict):
            raise error("not a JSON object")
        if header or "cassette" in entry:
            if not header or entry.get("cassette") != FORMAT or entry.get("version") != _VERSION:
                raise error(f"not a version {_VERSION} amplifier-anyio cassette")
            return
        problem = _check_entry(entry)
        if problem is not None:
            raise error(f"not a recorded call: {problem}")
        lane = entry["lane"]
        if entry["kind"] == "tool":
            key = (lane, entry["call"], entry["occurrence"])
            if key in tools:
                raise error(
                    f"lane {lane!r}, tool call {key[1]} (#{key[2]}) is recorded twice "
                    f"(first at line {tools[key]})"
                )
            tools[key] = number
            self._tool_results[key] = entry
            return
        ordinal = entry["ordinal"]
        if (lane, ordinal) in calls:
            raise error(
                f"lane {lane!r}, call {ordinal} is recorded twice "
                f"(first at line {calls[lane, ordinal]})"
            )
        calls[lane, ordinal] = number
        self._calls[(lane, ordinal)] = entry
        self._recorded_per_lane[lane] = self._recorded_per_lane.get(lane, 0) + 1

    def _check_lanes(self, calls: dict[tuple[str, int], int]) -> None:
        """Every lane's calls are numbered from 0 without a gap."""
        for lane, count in self._recorded_per_lane.items():
            missing = next((n for n in range(count) if (lane, n) not in calls), None)
            if missing is None:
                continue
            later = min(o for (name, o) in calls if name == lane and o > missing)
            number = calls[lane, later]
            msg = (
                f"session.cassette.path: {self.path}:{number}: lane {lane!r}, call {later} "
                f"is recorded but call {missing} is not"
            )
            raise CassetteError(msg, path=str(self.path), line=number)

    def _close_blocking(self) -> None:
        file, self._file = self._file, None
        recorder, self._recorder = self._recorder, None
        try:
            if file is not None:
                file.close()
        finally:
            if recorder is not None:
                _release_recorder(self.path, recorder)

    def _hold(self, lane: str, coordinator: Any) -> None:
        """Hold ``lane`` for ``coordinator``'s session (again, for the same session)."""
        held = self._holders.get(lane)
        if held is not None and held[0] != id(coordinator):
            verb = "replayed" if self.mode == "replay" else "recorded"
            msg = (
                f"session.cassette.path: {self.path}: lane {lane!r} is already being {verb} "
                f"by {held[1]} (pid {os.getpid()} — this process); one session per lane — "
                "give this one its own lane (session.lane) or its own cassette file"
            )
            raise CassetteError(msg, path=str(self.path))
        if held is None:
            session = getattr(coordinator, "session", None)
            who = getattr(session, "session_id", None) or getattr(coordinator, "session_id", "")
            held = (id(coordinator), f"session {who!r}" if who else "another session", 0)
        self._holders[lane] = (held[0], held[1], held[2] + 1)

    def _let_go(self, lane: str) -> None:
        held = self._holders.pop(lane, None)
        if held is not None and held[2] > 1:
            self._holders[lane] = (held[0], held[1], held[2] - 1)

    async def _open(self) -> None:
        await anyio.to_thread.run_sync(self._open_blocking)

    async def aclose(self) -> None:
        """Close the file (shielded, bounded); a closed cassette records nothing more."""
        with anyio.CancelScope(shield=True), anyio.move_on_after(_CLOSE_TIMEOUT):
            async with self._lock:
                await anyio.to_thread.run_sync(self._close_blocking)

    # -- writing ----------------------------------------------------------------------------

    async def _append(self, entry: dict[str, Any]) -> None:
        """Append one line: one writer (the lock), off the loop, shielded and bounded, so a
        call cancelled mid-way is still recorded as cancelled."""
        line = json.dumps(entry, ensure_ascii=False, default=str) + "\n"
        with anyio.CancelScope(shield=True), anyio.move_on_after(_WRITE_TIMEOUT) as bound:
            async with self._lock:
                file = self._file
                if file is None:
                    logger.error("cassette %s is closed: call not recorded", self.path)
                    return
                await anyio.to_thread.run_sync(_write_line, file, line)
                self._written += 1
        if bound.cancelled_caught:
            logger.error(
                "cassette %s: writing a call gave up after %s s", self.path, _WRITE_TIMEOUT
            )

    # -- matching ---------------------------------------------------------------------------

    def _check_failed(self) -> None:
        failure = self.failure
        if failure is not None:
            raise CassetteMismatchError(
                str(failure),
                lane=failure.lane,
                ordinal=failure.ordinal,
                path=failure.path,
                recorded=failure.recorded,
                actual=failure.actual,
            )

    def _fail(self, error: CassetteMismatchError) -> CassetteMismatchError:
        if self.failure is None:
            self.failure = error
        return error

    def _begin(self, lane: str, kind: str, provider: str, request: Any) -> _Call:
        """Take the lane's next ordinal (no await here: calls of a lane are numbered in
        the order they start) and find its recording, or raise the mismatch."""
        self._check_failed()
        ordinal = self._next.get(lane, 0)
        self._next[lane] = ordinal + 1
        entry = {
            "lane": lane,
            "ordinal": ordinal,
            "kind": kind,
            "provider": provider,
            "request": normalise_request(request),
        }
        recorded = self._calls.get((lane, ordinal))
        if self.mode == "record" or (self.mode == "new_episodes" and recorded is None):
            return _Call(lane, ordinal, entry, None)
        where = f"lane {lane!r}, call {ordinal}"
        if recorded is None:
            count = self._recorded_per_lane.get(lane, 0)
            msg = f"{where}: no recorded call (the recording has {count} in this lane)"
            raise self._fail(CassetteMismatchError(msg, lane=lane, ordinal=ordinal))
        for field in ("kind", "provider"):
            if recorded.get(field) != entry[field]:
                msg = (
                    f"{where}: the request differs from the recording at {field} "
                    f"(recorded {_short(recorded.get(field))}, got {_short(entry[field])})"
                )
                raise self._fail(
                    CassetteMismatchError(
                        msg,
                        lane=lane,
                        ordinal=ordinal,
                        path=field,
                        recorded=recorded.get(field),
                        actual=entry[field],
                    )
                )
        self._compare(where, lane, ordinal, recorded.get("request"), entry["request"])
        self._replayed += 1
        return _Call(lane, ordinal, entry, recorded)

    def _compare(self, where: str, lane: str, ordinal: int | str, old: Any, new: Any) -> None:
        path = first_difference(old, new)
        if path is None:
            return
        before, after = _value_at(old, path), _value_at(new, path)
        msg = (
            f"{where}: the request differs from the recording at {path} "
            f"(recorded {_short(before)}, got {_short(after)})"
        )
        raise self._fail(
            CassetteMismatchError(
                msg, lane=lane, ordinal=ordinal, path=path, recorded=before, actual=after
            )
        )

    def _begin_tool(self, lane: str, name: str, tool_input: Any) -> tuple[dict[str, Any], Any]:
        """The entry of a tool call, and its recorded line (None: run and record it).

        A call is keyed by its lane, the number of provider calls the lane made before it
        (which response asked for it), its index in its batch, and how many calls had
        that key before (several batches between two provider calls: loop-lifecycle's
        waves, which run one after another). None of it depends on scheduling, nor on
        call ids an orchestrator may make per run.
        """
        self._check_failed()
        call = current_tool_call()
        after = self._next.get(lane, 0)
        index = call.index if call is not None else -1
        key = f"{after}:{index}" if call is not None else f"{after}:{name}"
        occurrence = self._next_tool.get((lane, key), 0)
        self._next_tool[(lane, key)] = occurrence + 1
        entry = {
            "lane": lane,
            "kind": "tool",
            "call": key,
            "occurrence": occurrence,
            "tool": name,
            "tool_call_id": call.tool_call_id if call is not None else None,
            "input": _json_round_trip(tool_input),
        }
        recorded = self._tool_results.get((lane, key, occurrence))
        if self.mode == "record" or (self.mode == "new_episodes" and recorded is None):
            return entry, None
        where = f"lane {lane!r}, tool call {key} (#{occurrence}, {name})"
        if recorded is None:
            msg = f"{where}: no recorded call"
            raise self._fail(CassetteMismatchError(msg, lane=lane, ordinal=key))
        self._compare(
            where,
            lane,
            key,
            {"tool": recorded.get("tool"), "input": recorded.get("input")},
            {"tool": name, "input": entry["input"]},
        )
        self._replayed += 1
        return entry, recorded


def _write_line(file: IO[str], line: str) -> None:
    file.write(line)
    file.flush()


# -- wrappers -------------------------------------------------------------------------------


class _Behind:
    """A mounted module behind a cassette: everything but what it records is the module's."""

    def __init__(self, inner: Any, cassette: Cassette, lane: str, name: str) -> None:
        self._inner = inner
        self._cassette = cassette
        self._lane = lane
        self._name = name

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def __repr__(self) -> str:
        return f"<{self._inner!r} behind {self._cassette!r}>"

    @property
    def name(self) -> str:
        """The wrapped module's name."""
        return str(getattr(self._inner, "name", self._name))


class _CassetteProvider(_Behind):
    """A mounted provider behind a cassette; its calls are recorded or replayed."""

    def __init__(self, inner: Any, cassette: Cassette, lane: str, name: str) -> None:
        super().__init__(inner, cassette, lane, name)
        opener = stream_opener(inner)
        if opener is not None:  # only a provider that streams offers open_stream()
            self._opener = opener
            self.open_stream = self._stream

    async def complete(self, request: ChatRequest, **kwargs: Any) -> ChatResponse:
        """Answer from the recording, or call the provider and record the call."""
        await anyio.lowlevel.checkpoint()
        call = self._cassette._begin(self._lane, "complete", self._name, request)
        if call.replay is not None:
            return await _replayed_response(call.replay)
        entry = call.entry
        try:
            response = await self._inner.complete(request, **kwargs)
        except anyio.get_cancelled_exc_class():
            await self._cassette._append({**entry, "cancelled": True})
            raise
        except Exception as exc:
            await self._cassette._append({**entry, "error": _encode_error(exc)})
            raise
        entry["response"] = _encode_response(response, f"provider {self._name!r}")
        await self._cassette._append(entry)
        # What the replay will give, so a recording run and its replay see the same values.
        return structure(entry["response"], ChatResponse)

    @asynccontextmanager
    async def _stream(
        self, request: ChatRequest, **kwargs: Any
    ) -> AsyncIterator[AsyncIterator[dict[str, Any]]]:
        await anyio.lowlevel.checkpoint()
        call = self._cassette._begin(self._lane, "stream", self._name, request)
        if call.replay is not None:
            replayed = _replayed_events(call.replay)
            try:
                yield replayed
            finally:
                await replayed.aclose()
            return
        events: list[dict[str, Any]] = []
        outcome: dict[str, Any] = {}
        consuming = False
        try:
            async with self._opener(request, **kwargs) as source:
                recording = _recording(source, events, outcome, f"provider {self._name!r}")
                consuming = True
                try:
                    yield recording
                finally:
                    await recording.aclose()
                consuming = False
        except anyio.get_cancelled_exc_class():
            outcome.setdefault("cancelled", True)
            raise
        except Exception as exc:
            if "error" not in outcome:
                # Raised in the consumer's block: its own failure, not the stream's.
                if consuming:
                    outcome["interrupted"] = True
                else:
                    outcome["error"] = _encode_error(exc)
            raise
        finally:
            await self._cassette._append({**call.entry, "events": events, **outcome})


async def _replayed_response(recorded: Mapping[str, Any]) -> ChatResponse:
    if recorded.get("cancelled"):
        await anyio.sleep_forever()  # the recording was cancelled here: so is the replay
    if "error" in recorded:
        raise _decode_error(recorded["error"])
    return structure(recorded["response"], ChatResponse)


async def _replayed_events(recorded: Mapping[str, Any]) -> AsyncGenerator[dict[str, Any], None]:
    for data in recorded.get("events") or ():
        await anyio.lowlevel.checkpoint()
        yield _decode_event(data)
    if recorded.get("cancelled"):
        await anyio.sleep_forever()
    if "error" in recorded:
        raise _decode_error(recorded["error"])


async def _recording(
    source: AsyncIterator[dict[str, Any]],
    events: list[dict[str, Any]],
    outcome: dict[str, Any],
    origin: str,
) -> AsyncGenerator[dict[str, Any], None]:
    iterator = aiter(source)
    while True:
        try:
            event = await anext(iterator)
        except StopAsyncIteration:
            return
        except Exception as exc:
            outcome["error"] = _encode_error(exc)
            raise
        encoded = _encode_event(event, origin)
        events.append(encoded)
        yield _decode_event(encoded)


class _CassetteTool(_Behind):
    """A mounted tool behind a cassette (``tools: true``)."""

    async def execute(self, input: dict[str, Any]) -> ToolResult:
        """The recorded result (the tool is not run), or the tool's, recorded."""
        await anyio.lowlevel.checkpoint()
        entry, recorded = self._cassette._begin_tool(self._lane, self._name, input)
        if recorded is not None:
            if recorded.get("cancelled"):
                await anyio.sleep_forever()
            if "error" in recorded:
                raise _decode_error(recorded["error"])
            return structure(recorded["result"], ToolResult)
        try:
            execute = self._inner.execute
            if inspect.iscoroutinefunction(execute):
                result = await execute(input)
            else:  # a synchronous tool runs in a worker thread, as the tool batch runs it
                result = await anyio.to_thread.run_sync(execute, input)
                if inspect.isawaitable(result):
                    result = await result
        except anyio.get_cancelled_exc_class():
            await self._cassette._append({**entry, "cancelled": True})
            raise
        except _errors.ApprovalDeferred:
            raise  # held for an approval: not a result
        except Exception as exc:
            await self._cassette._append({**entry, "error": _encode_error(exc)})
            raise
        converted = tool_result_of(result, origin=f"tool {self._name!r}")
        entry["result"] = _json_round_trip(unstructure(converted))
        await self._cassette._append(entry)
        return structure(entry["result"], ToolResult)


# -- opening, sharing, installing -------------------------------------------------------------


@attrs.define(eq=False)
class _Registry:
    lock: anyio.Lock = attrs.Factory(anyio.Lock)
    open: dict[str, Cassette] = attrs.Factory(dict)


_REGISTRY: anyio.lowlevel.RunVar[_Registry] = anyio.lowlevel.RunVar("amplifier_anyio_cassettes")


def _registry() -> _Registry:
    try:
        return _REGISTRY.get()
    except LookupError:
        registry = _Registry()
        _REGISTRY.set(registry)
        return registry


def _spec_of(spec: CassetteSpec | Mapping[str, Any] | str | os.PathLike[str]) -> CassetteSpec:
    if isinstance(spec, CassetteSpec):
        return spec
    return CassetteSpec.from_value(spec, "cassette")


async def _acquire(spec: CassetteSpec) -> Cassette:
    """The open cassette of ``spec.path`` in this event loop, or a newly opened one."""
    registry = _registry()
    async with registry.lock:
        path = _absolute(spec.path)
        cassette = registry.open.get(str(path))
        if cassette is not None:
            if spec.mode not in ("auto", cassette.mode):
                msg = (
                    f"session.cassette.mode: {path} is already open for {cassette.mode}, "
                    f"not {spec.mode}"
                )
                raise ConfigError(msg)
        else:
            mode = spec.mode
            if mode == "auto":
                exists = await anyio.to_thread.run_sync(path.exists)
                mode = "replay" if exists else "record"
            cassette = Cassette(path, mode)
            await cassette._open()
            registry.open[str(path)] = cassette
        cassette._users += 1
        return cassette


async def _release(cassette: Cassette) -> None:
    registry = _registry()
    with anyio.CancelScope(shield=True):
        async with registry.lock:
            cassette._users -= 1
            if cassette._users > 0:
                return
            if registry.open.get(str(cassette.path)) is cassette:
                del registry.open[str(cassette.path)]
        await cassette.aclose()


def _absolute(path: str) -> Path:
    return Path(path).expanduser().absolute()


@asynccontextmanager
async def open_cassette(
    path: str | os.PathLike[str], mode: str = "auto"
) -> AsyncIterator[Cassette]:
    """Open the cassette at ``path`` (shared with every session that opens the same file
    in this event loop while the block runs); closed when the last user leaves.

    The CLI's ``chat`` holds one this way for all its sessions. Raises ConfigError for a
    bad mode, a replay without a file or a file that is not a cassette.
    """
    cassette = await _acquire(CassetteSpec.from_value({"path": path, "mode": mode}, "cassette"))
    try:
        yield cassette
    finally:
        await _release(cassette)


async def install_cassette(
    coordinator: Any,
    spec: CassetteSpec | Mapping[str, Any] | str | os.PathLike[str],
    *,
    lane: str | None = None,
) -> Cassette:
    """Put the cassette of ``spec`` in front of every provider mounted on ``coordinator``
    (and its tools, with ``tools: true``); undone, and the cassette released, at the
    coordinator's cleanup. ``lane``: default `lane_of` the coordinator.

    A session calls this itself for ``session.cassette``; call it for providers a test
    mounts by hand after the session opened. The cassette is also offered as the
    coordinator capability ``cassette``.
    """
    spec = _spec_of(spec)
    lane = lane or lane_of(coordinator)
    cassette = await _acquire(spec)
    try:
        cassette._hold(lane, coordinator)
    except CassetteError:
        await _release(cassette)
        raise
    providers: dict[str, Any] = coordinator.get("providers")
    tools: dict[str, Any] = coordinator.get("tools")
    originals: list[tuple[dict[str, Any], str, Any]] = []
    for name, provider in list(providers.items()):
        if not isinstance(provider, _CassetteProvider):
            providers[name] = _CassetteProvider(provider, cassette, lane, name)
            originals.append((providers, name, provider))
    if spec.tools:
        executors = getattr(coordinator, "tool_executors", None) or {}
        for name, tool in list(tools.items()):
            if name in executors:
                logger.warning("tool %r runs on an executor: its results are not recorded", name)
            elif not isinstance(tool, _CassetteTool):
                tools[name] = _CassetteTool(tool, cassette, lane, name)
                originals.append((tools, name, tool))
    coordinator.register_capability("cassette", cassette)

    async def uninstall() -> None:
        for mounted, name, original in originals:
            if isinstance(mounted.get(name), _CassetteProvider | _CassetteTool):
                mounted[name] = original
        cassette._let_go(lane)
        await _release(cassette)

    coordinator.register_cleanup(uninstall)
    return cassette
