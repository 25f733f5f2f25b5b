"""hooks-logging end to end: real sessions, real files (or a slow sink), both backends.

The log file is read back and parsed after the session ends; the secret checks grep the
raw bytes of the file, not the parsed records.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import anyio
import pytest

from amplifier_anyio import AmplifierSession, ConfigError, SessionError
from amplifier_anyio.hooks.logging import CONFIG_SCHEMA, REDACTED, LoggingConfig, on_session_ready
from amplifier_anyio.models import ToolResult
from amplifier_anyio.testing import EventRecorder

pytestmark = pytest.mark.anyio

PLAN_KEY = "plan-secret-value-123"  # not key-shaped: only the plan says it is a secret
TOOL_KEY = "sk-proj-abcdefghijklmnop1234"


def text_reply(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}]}


def tool_reply(*calls: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    tool_calls = [
        {"id": f"call-{i}", "name": name, "arguments": args} for i, (name, args) in enumerate(calls)
    ]
    return {"content": [{"type": "text", "text": "using tools"}], "tool_calls": tool_calls}


def make_plan(
    log_path: Path | None,
    *replies: dict[str, Any],
    provider: dict[str, Any] | None = None,
    **logging_config: Any,
) -> dict[str, Any]:
    plan: dict[str, Any] = {
        "session": {"orchestrator": "loop-basic", "context": "context-simple"},
        "providers": [
            {
                "module": "provider-scripted",
                "config": {"responses": list(replies), **(provider or {})},
            }
        ],
        "tools": [{"module": "tool-demo"}],
    }
    if log_path is not None:
        config = {"session_log_template": str(log_path), **logging_config}
        plan["hooks"] = [{"module": "hooks-logging", "config": config}]
    return plan


def file_sizes(directory: Path) -> dict[str, int]:
    return {f.name: f.stat().st_size for f in directory.iterdir()}


def read_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


async def test_a_turn_with_parallel_tools_logs_one_line_per_event_in_emit_order(
    tmp_path: Path,
) -> None:
    log_path = tmp_path / "{session_id}" / "events.jsonl"
    plan = make_plan(
        log_path,
        tool_reply(("word_count", {"text": "a b c"}), ("reverse_words", {"text": "a b c"})),
        text_reply("done"),
    )
    recorder = EventRecorder()
    async with AmplifierSession(plan) as session:
        # Registered after the logger (priority 100): sees the events in the same order.
        recorder.attach(session.coordinator.hooks, priority=101)
        result = await session.run("count and reverse")
        assert result.status == "success"
    path = tmp_path / session.session_id / "events.jsonl"
    lines = read_lines(path)
    assert [line["event"] for line in lines] == recorder.names()
    assert lines[-1]["event"] == "session:end"
    names = [line["event"] for line in lines]
    assert names.count("tool:pre") == 2
    assert names.count("tool:post") == 2
    for line in lines:
        assert {"ts", "event", "session_id", "trace_id", "data", "lvl", "schema"} <= set(line)
        assert line["session_id"] == session.session_id
        assert "timestamp" not in line["data"]
    start = names.index("execution:start")
    turn_lines = lines[start : names.index("execution:end") + 1]
    assert {line["trace_id"] for line in turn_lines} == {result.trace_id}
    posts = [line for line in lines if line["event"] == "tool:post"]
    assert {p["data"]["tool_name"] for p in posts} == {"word_count", "reverse_words"}


async def test_neither_the_plan_key_nor_a_key_in_a_tool_input_reaches_the_file(
    tmp_path: Path,
) -> None:
    log_path = tmp_path / "events.jsonl"
    plan = make_plan(
        log_path,
        tool_reply(("word_count", {"text": f"my key is {TOOL_KEY} ok"})),
        text_reply(f"your keys: {PLAN_KEY} and {TOOL_KEY}; Authorization: Bearer abc.def-123"),
        provider={"api_key": PLAN_KEY},
    )
    async with AmplifierSession(plan) as session:
        result = await session.run("count the words")
        assert PLAN_KEY in result.text  # the answer itself is the host's business
    raw = log_path.read_bytes()
    assert PLAN_KEY.encode() not in raw
    assert TOOL_KEY.encode() not in raw
    assert b"sk-proj" not in raw
    assert b"abc.def-123" not in raw
    assert REDACTED.encode() in raw
    lines = read_lines(log_path)
    pre = next(line for line in lines if line["event"] == "tool:pre")
    assert pre["data"]["tool_input"] == {"text": f"my key is {REDACTED} ok"}


async def test_the_last_events_are_on_disk_after_a_host_cancel(tmp_path: Path) -> None:
    log_path = tmp_path / "events.jsonl"
    started = anyio.Event()

    class Hang:
        name = "hang"
        description = "never ends"
        input_schema: dict[str, Any] = {"type": "object", "properties": {}}  # noqa: RUF012

        async def execute(self, input: dict[str, Any]) -> ToolResult:
            started.set()
            await anyio.sleep_forever()
            raise AssertionError

    plan = make_plan(log_path, tool_reply(("hang", {})), text_reply("never"))
    with anyio.CancelScope() as scope:
        async with AmplifierSession(plan) as session:
            await session.coordinator.mount("tools", Hang())
            async with anyio.create_task_group() as tg:
                tg.start_soon(session.run, "hang")
                await started.wait()
                scope.cancel()
    assert scope.cancelled_caught
    names = [line["event"] for line in read_lines(log_path)]
    assert "tool:pre" in names
    assert names[-1] == "session:end"
    assert names.count("execution:end") == 1


async def test_rotation_by_size_keeps_every_line_whole(tmp_path: Path) -> None:
    log_path = tmp_path / "events.jsonl"
    plan = make_plan(
        log_path, text_reply("hi"), max_bytes=4000, backup_count=2, include=["artifact:*"]
    )
    async with AmplifierSession(plan) as session:
        for i in range(200):
            await session.coordinator.hooks.emit("artifact:write", {"index": i, "pad": "x" * 40})
    assert file_sizes(tmp_path) == {
        "events.jsonl": pytest.approx(2000, abs=2000),
        "events.jsonl.1": pytest.approx(2000, abs=2000),
        "events.jsonl.2": pytest.approx(2000, abs=2000),
    }
    chunks = [read_lines(tmp_path / name) for name in ("events.jsonl.2", "events.jsonl.1")]
    newest = read_lines(log_path)
    indexes = [line["data"]["index"] for chunk in [*chunks, newest] for line in chunk]
    assert indexes == list(range(200 - len(indexes), 200))  # the newest lines, in order
    assert indexes[-1] == 199


async def test_include_exclude_and_upstream_exclude_events(tmp_path: Path) -> None:
    only_tools = tmp_path / "tools.jsonl"
    no_provider = tmp_path / "no-provider.jsonl"
    plan = make_plan(
        only_tools,
        tool_reply(("word_count", {"text": "a"})),
        text_reply("ok"),
        include=["tool:*"],
    )
    plan["hooks"].append(
        {
            "module": "hooks-logging",
            "config": {
                "session_log_template": str(no_provider),
                "exclude_events": ["provider:*"],
            },
        }
    )
    async with AmplifierSession(plan) as session:
        await session.run("count")
    assert {line["event"] for line in read_lines(only_tools)} == {"tool:pre", "tool:post"}
    names = {line["event"] for line in read_lines(no_provider)}
    assert "tool:pre" in names
    assert "execution:end" in names
    assert not {n for n in names if n.startswith("provider:")}


async def test_events_other_modules_declare_are_logged(tmp_path: Path) -> None:
    log_path = tmp_path / "events.jsonl"
    plan = make_plan(log_path, text_reply("hi"))
    async with AmplifierSession(plan) as session:
        # A late subscription through on_session_ready's discovery.
        session.coordinator.register_contributor(
            "observability.events", "probe", lambda: ["probe:happened"]
        )
        await on_session_ready(session.coordinator)
        await session.coordinator.hooks.emit("probe:happened", {"n": 1, "password": "hunter22"})
    lines = [line for line in read_lines(log_path) if line["event"] == "probe:happened"]
    assert len(lines) == 1
    assert lines[0]["data"]["n"] == 1
    assert lines[0]["data"]["password"] == REDACTED


async def test_an_unwritable_log_is_reported_and_the_turn_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    plan = make_plan(blocker / "events.jsonl", text_reply("still here"))
    caplog.set_level(logging.ERROR)
    async with AmplifierSession(plan) as session:
        result = await session.run("hello")
    assert result.text == "still here"
    assert any("hooks-logging: writing" in r.getMessage() for r in caplog.records)


async def test_without_async_with_the_session_says_why(tmp_path: Path) -> None:
    session = AmplifierSession(make_plan(tmp_path / "e.jsonl", text_reply("hi")))
    with pytest.raises(SessionError, match="async with") as info:
        await session.run("hello")
    assert "hooks-logging" in str(info.value)


@pytest.mark.parametrize(
    ("config", "key"),
    [
        ({"max_block": 0}, "max_block"),
        ({"buffer_size": 0}, "buffer_size"),
        ({"max_bytes": -1}, "max_bytes"),
        ({"backup_count": 1.5}, "backup_count"),
        ({"redact_patterns": ["("]}, "redact_patterns[0]"),
        ({"exclude": [], "exclude_events": []}, "exclude_events"),
    ],
)
def test_bad_config_is_one_line_naming_the_key(config: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError) as info:
        LoggingConfig.from_dict(config)
    assert f"{key}:" in str(info.value)
    assert "\n" not in str(info.value)


def test_config_schema_accepts_upstream_keys() -> None:
    upstream = {
        "priority": 100,
        "session_log_template": "/tmp/x/{session_id}.jsonl",
        "auto_discover": True,
        "additional_events": ["a:b"],
        "strip_raw": True,
        "exclude_events": ["llm:stream_*delta"],
    }
    assert CONFIG_SCHEMA.check(upstream) == []
    assert [p.key for p in CONFIG_SCHEMA.check({"max_block": "soon"})] == ["max_block"]


class SecretTool:
    """Returns a record whose secret sits under a camelCase key (as many APIs answer)."""

    name = "fetch_account"
    description = "fetch the account"
    input_schema: dict[str, Any] = {"type": "object", "properties": {}}  # noqa: RUF012

    async def execute(self, input: dict[str, Any]) -> ToolResult:
        await anyio.lowlevel.checkpoint()
        return ToolResult(output={"user": "ada", "accessToken": OPAQUE, "clientSecret": OPAQUE2})


OPAQUE = "opaque-access-value-7f3a9c"  # no known format: only its key says it is secret
OPAQUE2 = "opaque-client-value-0b1d4e"


async def test_a_tool_results_secret_does_not_come_back_inside_a_later_request(
    tmp_path: Path,
) -> None:
    """Before: the result was redacted on ``tool:post`` (by key), then logged in clear
    as the tool message's JSON text inside the next ``llm:request`` — with the default
    configuration. And ``accessToken`` was not taken for a secret key at all."""
    log_path = tmp_path / "events.jsonl"
    plan = make_plan(log_path, tool_reply(("fetch_account", {})), text_reply("done"))
    async with AmplifierSession(plan) as session:
        await session.coordinator.mount("tools", SecretTool(), name="fetch_account")
        result = await session.run("fetch my account")
        assert result.status == "success"
    raw = log_path.read_bytes()
    assert OPAQUE.encode() not in raw
    assert OPAQUE2.encode() not in raw
    lines = read_lines(log_path)
    names = [line["event"] for line in lines]
    assert "llm:request" in names[names.index("tool:post") :]  # the request was logged
    post = next(line for line in lines if line["event"] == "tool:post")
    assert REDACTED in json.dumps(post["data"])
    assert b"ada" in raw  # what is not secret stays readable


async def test_a_key_streamed_piece_by_piece_is_not_spelt_by_the_delta_lines(
    tmp_path: Path,
) -> None:
    """Before: each ``content_block:delta`` line held its piece; joined, they spelt it."""
    log_path = tmp_path / "events.jsonl"
    text = f"your key is {TOOL_KEY}, keep it safe"
    pieces = [text[i : i + 5] for i in range(0, len(text), 5)]
    async with AmplifierSession(make_plan(log_path, text_reply("done"))) as session:
        hooks = session.coordinator.hooks
        await hooks.emit("content_block:start", {"index": 0, "block_type": "text"})
        for piece in pieces:
            await hooks.emit(
                "content_block:delta", {"index": 0, "block_type": "text", "delta": piece}
            )
        await hooks.emit("content_block:end", {"index": 0, "block": {"type": "text", "text": text}})
    lines = read_lines(log_path)
    deltas = [line for line in lines if line["event"] == "content_block:delta"]
    assert len(deltas) == len(pieces)  # one line per piece, as before
    assert [d["data"]["delta_chars"] for d in deltas] == [len(p) for p in pieces]
    raw = log_path.read_text(encoding="utf-8")
    secret_part = TOOL_KEY.removeprefix("sk-")
    assert not [
        secret_part[i : i + 8] for i in range(len(secret_part) - 7) if secret_part[i : i + 8] in raw
    ]
    end = next(line for line in lines if line["event"] == "content_block:end")
    assert end["data"]["block"]["text"] == f"your key is {REDACTED}, keep it safe"
