"""PersistentContextManager: the file format, atomic rewrites, loading, repair, resume."""

from __future__ import annotations

import errno
import json
import os
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest

from amplifier_anyio.contexts import (
    ContextFileError,
    PersistentContextManager,
    _jsonl,
    close_interrupted_tool_calls,
    interrupted_result,
    is_compaction_notice,
)
from amplifier_anyio.contexts.persistent import CONTEXT_MESSAGES_FILENAME, mount
from amplifier_anyio.errors import ConfigError
from amplifier_anyio.testing import MockCoordinator

pytestmark = pytest.mark.anyio


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text("utf-8").splitlines()]


def names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def write_raw(path: Path, text: str | bytes) -> None:
    path.write_bytes(text.encode() if isinstance(text, str) else text)


USER = {"role": "user", "content": "héllo"}
CALLS = {
    "role": "assistant",
    "content": "",
    "tool_calls": [
        {"id": "c1", "name": "read", "arguments": {}},
        {"id": "c2", "name": "grep", "arguments": {}},
        {"id": "c3", "name": "ls", "arguments": {}},
    ],
}


async def test_each_message_is_one_json_line_and_a_new_manager_resumes_it(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "ctx.jsonl"
    manager = PersistentContextManager(path)
    await manager.add_message({"role": "system", "content": "sys"})
    await manager.add_message(USER)
    assert lines(path) == [{"role": "system", "content": "sys"}, USER]
    assert "héllo" in path.read_text("utf-8")  # not \u-escaped
    await manager.aclose()  # one writer per file: the next one opens after it

    resumed = PersistentContextManager(path)
    assert await resumed.get_messages() == [{"role": "system", "content": "sys"}, USER]
    assert resumed.loaded_from_file
    await resumed.add_message({"role": "assistant", "content": "hi"})
    assert len(lines(path)) == 3


async def test_set_messages_is_ignored_after_loading_from_the_own_file(tmp_path: Path) -> None:
    path = tmp_path / "ctx.jsonl"
    first = PersistentContextManager(path)
    await first.add_message({"role": "system", "content": "sys"})
    await first.add_message(USER)
    await first.aclose()

    resumed = PersistentContextManager(path)
    await resumed.load()
    await resumed.set_messages([USER])  # a host's filtered transcript, without the system
    assert [m["role"] for m in await resumed.get_messages()] == ["system", "user"]
    assert len(lines(path)) == 2


async def test_set_messages_on_a_fresh_file_replaces_atomically(tmp_path: Path) -> None:
    path = tmp_path / "ctx.jsonl"
    manager = PersistentContextManager(path)
    await manager.set_messages([USER, {"role": "assistant", "content": "a"}])
    await manager.set_messages([{"role": "user", "content": "again"}])  # still not loaded-from-file
    assert lines(path) == [{"role": "user", "content": "again"}]
    assert names(tmp_path) == ["ctx.jsonl", "ctx.jsonl.lock"]  # no temp file left
    assert not manager.loaded_from_file


async def test_an_empty_existing_file_is_not_a_resume(tmp_path: Path) -> None:
    path = tmp_path / "ctx.jsonl"
    write_raw(path, "")
    manager = PersistentContextManager(path)
    await manager.set_messages([USER])
    assert lines(path) == [USER]


async def test_clear_empties_file_and_history_and_ends_the_resume_rule(tmp_path: Path) -> None:
    path = tmp_path / "ctx.jsonl"
    await PersistentContextManager(path).add_message(USER)
    manager = PersistentContextManager(path)
    await manager.clear()
    assert path.read_bytes() == b""
    assert await manager.get_messages() == []
    await manager.set_messages([{"role": "user", "content": "new"}])
    assert lines(path) == [{"role": "user", "content": "new"}]


async def test_a_torn_last_line_is_dropped_and_the_file_repaired(tmp_path: Path) -> None:
    path = tmp_path / "ctx.jsonl"
    write_raw(path, json.dumps(USER) + "\n" + '{"role": "assistant", "cont')
    manager = PersistentContextManager(path)
    assert await manager.get_messages() == [USER]
    await manager.add_message({"role": "assistant", "content": "whole"})
    assert lines(path) == [USER, {"role": "assistant", "content": "whole"}]


async def test_a_last_line_that_only_lost_its_newline_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "ctx.jsonl"
    write_raw(path, json.dumps(USER) + "\n" + json.dumps({"role": "assistant", "content": "x"}))
    manager = PersistentContextManager(path)
    await manager.add_message({"role": "user", "content": "next"})
    assert [m["content"] for m in lines(path)] == ["héllo", "x", "next"]


async def test_a_torn_multibyte_character_on_the_last_line_is_dropped(tmp_path: Path) -> None:
    path = tmp_path / "ctx.jsonl"
    whole = (json.dumps({"role": "user", "content": "é"}, ensure_ascii=False)).encode()
    write_raw(path, json.dumps(USER).encode() + b"\n" + whole[: whole.index(b"\xc3") + 1])
    assert await PersistentContextManager(path).get_messages() == [USER]


async def test_a_bad_line_in_the_middle_is_an_error_naming_the_line(tmp_path: Path) -> None:
    path = tmp_path / "ctx.jsonl"
    write_raw(path, json.dumps(USER) + "\n" + "not json\n" + json.dumps(USER) + "\n")
    manager = PersistentContextManager(path)
    with pytest.raises(ContextFileError, match=r"ctx\.jsonl:2: not a JSON message") as info:
        await manager.load()
    assert info.value.line == 2
    assert isinstance(info.value, ValueError)
    write_raw(path, json.dumps(USER) + "\n[1, 2]\n" + json.dumps(USER) + "\n")
    with pytest.raises(ContextFileError, match=":2:"):
        await PersistentContextManager(path).get_messages()


async def test_open_tool_calls_are_closed_after_the_existing_results(tmp_path: Path) -> None:
    path = tmp_path / "ctx.jsonl"
    first = PersistentContextManager(path)
    await first.add_message(USER)
    await first.add_message(CALLS)
    await first.add_message({"role": "tool", "tool_call_id": "c1", "content": "done"})
    await first.aclose()  # the process dies here: c2 and c3 never get results

    resumed = PersistentContextManager(path)
    messages = await resumed.get_messages()
    assert resumed.interrupted_calls_closed == 2
    assert [m.get("tool_call_id") for m in messages[2:]] == ["c1", "c2", "c3"]
    assert messages[3] == interrupted_result("c2", "grep")
    assert json.loads(messages[3]["content"]) == {
        "error": "Tool execution was interrupted",
        "interrupted": True,
        "tool": "grep",
    }
    assert lines(path) == messages  # the repair is on disk, so it happens once
    await resumed.aclose()
    again = PersistentContextManager(path)
    await again.load()
    assert again.interrupted_calls_closed == 0


def test_closing_leaves_complete_histories_alone_and_inserts_mid_history() -> None:
    complete = [USER, {**CALLS, "tool_calls": CALLS["tool_calls"][:1]}]
    complete.append({"role": "tool", "tool_call_id": "c1", "content": "ok"})
    assert close_interrupted_tool_calls(complete) == (complete, 0)
    history = [USER, CALLS, {"role": "user", "content": "are you there?"}]
    repaired, count = close_interrupted_tool_calls(history)
    assert count == 3
    assert [m["role"] for m in repaired] == ["user", "assistant", "tool", "tool", "tool", "user"]
    assert len(history) == 3  # not changed


def test_content_block_calls_are_closed_too() -> None:
    history = [{"role": "assistant", "content": [{"type": "tool_call", "id": "b", "name": "f"}]}]
    repaired, count = close_interrupted_tool_calls(history)
    assert count == 1
    assert repaired[1]["tool_call_id"] == "b"


async def test_the_view_compacts_like_context_simple(tmp_path: Path) -> None:
    manager = PersistentContextManager(tmp_path / "ctx.jsonl", max_tokens=1000)
    await manager.add_message({"role": "user", "content": "first"})
    for i in range(80):
        await manager.add_message({"role": "user", "content": f"message {i} " + "x" * 40})
    view = await manager.get_messages_for_request()
    assert view[0]["content"] == "first"
    assert any(is_compaction_notice(m) for m in view)
    assert view[-1]["content"].startswith("message 79 ")
    assert len(await manager.get_messages()) == 81


async def test_mount_loads_and_mounts(tmp_path: Path) -> None:
    path = tmp_path / "ctx.jsonl"
    await PersistentContextManager(path).add_message(USER)
    coordinator = MockCoordinator()
    cleanup = await mount(coordinator, {"transcript_path": str(path), "max_tokens": 999})
    manager = coordinator.get("context")
    assert isinstance(manager, PersistentContextManager)
    assert manager.loaded_from_file
    assert manager.max_tokens == 999
    assert manager.holds_lock
    assert cleanup is not None
    await cleanup()  # the session's cleanup lets the writer lock go
    assert not manager.holds_lock


async def test_mount_defaults_to_the_session_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("AMPLIFIER_HOME", raising=False)
    coordinator = MockCoordinator(session_id="s-123")
    await mount(coordinator, {})
    manager = coordinator.get("context")
    assert manager.path.name == CONTEXT_MESSAGES_FILENAME
    assert manager.path.parent.name == "s-123"
    assert manager.path.is_relative_to(tmp_path / ".amplifier" / "projects")


async def test_mount_without_path_or_session_is_a_config_error() -> None:
    class Bare:
        hooks = None

        async def mount(self, point: str, module: Any) -> None:
            raise AssertionError("must not mount")

    with pytest.raises(ConfigError, match="path"):
        await mount(Bare(), {})


# --- a failing disk ---------------------------------------------------------------------

FULL = "FULL-DISK"  # content marking the writes the fake disk cuts short


class FailingDisk:
    """A fake ``os.write`` / ``os.ftruncate``: writes holding ``FULL`` are torn.

    Such a write stores half of its bytes and returns that count (a short write); the next
    write on the same descriptor fails with ENOSPC, as a full disk does. Every other write
    goes through. With ``truncate_fails``, ``os.ftruncate`` fails with EIO.
    """

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.real_write = os.write
        self.real_ftruncate = os.ftruncate
        self.short: set[int] = set()
        self.truncate_fails = False
        monkeypatch.setattr(os, "write", self.write)
        monkeypatch.setattr(os, "ftruncate", self.ftruncate)

    def write(self, fd: int, data: Any) -> int:
        if fd in self.short:
            self.short.discard(fd)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        if FULL.encode() in bytes(data):
            self.short.add(fd)
            return self.real_write(fd, bytes(data)[: len(data) // 2])
        return self.real_write(fd, data)

    def ftruncate(self, fd: int, length: int) -> None:
        if self.truncate_fails:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        self.real_ftruncate(fd, length)


def full(text: str = "") -> dict[str, Any]:
    return {"role": "assistant", "content": f"{FULL} {text}" + "y" * 200}


async def test_a_failed_append_leaves_file_and_history_as_they_were(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "ctx.jsonl"
    manager = PersistentContextManager(path)
    await manager.add_message(USER)
    before, estimate = path.read_bytes(), manager.token_estimate
    disk = FailingDisk(monkeypatch)

    with pytest.raises(ContextFileError, match="No space left on device") as info:
        await manager.add_message(full())
    assert info.value.path == path
    assert str(path) in str(info.value)
    assert isinstance(info.value.__cause__, OSError)
    assert info.value.__cause__.errno == errno.ENOSPC
    assert path.read_bytes() == before
    assert await manager.get_messages() == [USER]
    assert manager.token_estimate == estimate

    with pytest.raises(ContextFileError):  # a batch fails whole too
        await manager.add_messages([{"role": "user", "content": "ok"}, full("b")])
    assert path.read_bytes() == before
    assert await manager.get_messages() == [USER]
    assert manager.token_estimate == estimate
    assert not disk.short

    await manager.add_message({"role": "user", "content": "after"})
    await manager.add_messages([{"role": "user", "content": "x"}, {"role": "user", "content": "y"}])
    expected = [USER] + [{"role": "user", "content": c} for c in ("after", "x", "y")]
    assert await manager.get_messages() == expected
    await manager.aclose()
    assert await PersistentContextManager(path).get_messages() == expected
    assert lines(path) == expected


@pytest.mark.parametrize("when", ["before it lands", "after it landed"])
async def test_an_append_given_up_on_is_withdrawn_from_memory_and_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, when: str
) -> None:
    """A caller that stops waiting for ``add_message`` leaves the message in neither the
    history nor the file: the stuck write's thread cuts its line off when it lands, or —
    when it had landed just before the give-up — the next append does. Before, the line
    stayed in the file for good."""
    path = tmp_path / "ctx.jsonl"
    manager = PersistentContextManager(path)
    await manager.add_message(USER)
    real = _jsonl.append_line
    landed, free = threading.Event(), threading.Event()

    def append_line(*args: Any) -> None:
        if when == "after it landed":
            real(*args)
            landed.set()
            free.wait(10)
        else:
            landed.set()
            free.wait(10)
            real(*args)

    monkeypatch.setattr(_jsonl, "append_line", append_line)
    with anyio.move_on_after(10) as bound:
        async with anyio.create_task_group() as group:
            group.start_soon(manager.add_message, {"role": "user", "content": "withdrawn"})
            await anyio.to_thread.run_sync(landed.wait, 10)
            group.cancel_scope.cancel()  # the caller stops waiting
    assert not bound.cancelled_caught
    monkeypatch.setattr(_jsonl, "append_line", real)
    free.set()
    assert await manager.get_messages() == [USER]
    await manager.add_message({"role": "user", "content": "next"})
    expected = [USER, {"role": "user", "content": "next"}]
    assert await manager.get_messages() == expected
    assert lines(path) == expected


async def test_a_torn_write_that_cannot_be_undone_is_never_continued(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "ctx.jsonl"
    manager = PersistentContextManager(path)
    await manager.add_message(USER)
    before = path.read_bytes()
    disk = FailingDisk(monkeypatch)
    disk.truncate_fails = True

    with pytest.raises(ContextFileError, match="No space left on device"):
        await manager.add_messages([{"role": "user", "content": "whole"}, full("batch")])
    torn = path.read_bytes()
    assert torn.startswith(before)
    assert not torn.endswith(b"\n")  # the torn record is the last line
    # while the torn bytes cannot be cut off, nothing is appended after them
    with pytest.raises(ContextFileError, match="could not be undone"):
        await manager.add_message({"role": "user", "content": "refused"})
    assert path.read_bytes() == torn
    assert await manager.get_messages() == [USER]

    disk.truncate_fails = False
    await manager.add_message({"role": "user", "content": "next"})
    expected = [USER, {"role": "user", "content": "next"}]
    assert await manager.get_messages() == expected
    assert lines(path) == expected  # the whole part of the failed batch is gone too
    await manager.aclose()
    assert await PersistentContextManager(path).get_messages() == expected


async def test_a_process_that_dies_with_an_undone_torn_write_reloads_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "ctx.jsonl"
    manager = PersistentContextManager(path)
    await manager.add_message(USER)
    disk = FailingDisk(monkeypatch)
    disk.truncate_fails = True
    with pytest.raises(ContextFileError):
        await manager.add_message(full())
    monkeypatch.undo()
    await manager.aclose()  # the process dies (its lock goes with it)
    # the torn record is the last line: a new manager drops it, like a crash's
    resumed = PersistentContextManager(path)
    assert await resumed.get_messages() == [USER]
    assert lines(path) == [USER]


async def test_an_append_after_bytes_it_did_not_write_starts_a_new_line(tmp_path: Path) -> None:
    path = tmp_path / "ctx.jsonl"
    manager = PersistentContextManager(path)
    await manager.add_message(USER)
    with path.open("ab") as other:  # a foreign writer (unsupported) leaves no newline
        other.write(json.dumps({"role": "user", "content": "foreign"}).encode())
    await manager.add_message({"role": "user", "content": "mine"})
    assert [m["content"] for m in lines(path)] == ["héllo", "foreign", "mine"]


async def test_a_failed_rewrite_leaves_file_and_history_as_they_were(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "ctx.jsonl"
    manager = PersistentContextManager(path)
    await manager.set_messages([USER])
    before = path.read_bytes()
    FailingDisk(monkeypatch)
    with pytest.raises(ContextFileError, match="No space left on device") as info:
        await manager.set_messages([USER, full()])
    assert info.value.path == path
    assert path.read_bytes() == before
    assert names(tmp_path) == ["ctx.jsonl", "ctx.jsonl.lock"]  # the temporary file is removed
    assert await manager.get_messages() == [USER]


async def test_an_unreadable_file_is_a_context_file_error(tmp_path: Path) -> None:
    with pytest.raises(ContextFileError, match="cannot read") as info:
        await PersistentContextManager(tmp_path).load()
    assert info.value.path == tmp_path
    assert info.value.line is None


async def test_mount_rejects_a_directory_path_with_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^context-persistent\.path: .* is a directory$"):
        await mount(MockCoordinator(), {"path": str(tmp_path)})
    with pytest.raises(ConfigError, match=r"^context-persistent\.transcript_path: .*directory"):
        await mount(MockCoordinator(), {"transcript_path": str(tmp_path)})


async def test_mount_rejects_a_path_whose_directory_cannot_be_created(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(ConfigError, match=r"^context-persistent\.path: cannot create") as info:
        await mount(MockCoordinator(), {"path": str(blocker / "sub" / "ctx.jsonl")})
    assert "\n" not in str(info.value)
    assert str(blocker) in str(info.value)
    with pytest.raises(ConfigError, match=r"^context-persistent\.path: .* is not a directory$"):
        await mount(MockCoordinator(), {"path": str(blocker / "ctx.jsonl")})


@pytest.mark.parametrize(
    ("config", "key"),
    [
        ({"max_tokens": "lots"}, "max_tokens"),
        ({"compaction_threshold": float("nan")}, "compaction_threshold"),
        ({"safety_margin": True}, "safety_margin"),
    ],
)
async def test_mount_rejects_bad_numbers_naming_the_key(
    tmp_path: Path, config: dict[str, Any], key: str
) -> None:
    coordinator = MockCoordinator()
    with pytest.raises(ConfigError, match=rf"^context-persistent\.{key}: expected "):
        await mount(coordinator, {"path": str(tmp_path / "ctx.jsonl"), **config})
    assert coordinator.mount_history == []
    assert not (tmp_path / "ctx.jsonl").exists()
