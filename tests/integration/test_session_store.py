"""The session store (DESIGN §3, §15): a read never writes, one writer per session file.

A real session runs a turn whose tool blocks on an event while ``amplifier-anyio sessions
show`` (a real process) and the pending-approvals query look at the transcript: the
transcript and its journal stay byte for byte as they were, and the turn then ends with
exactly one result per call. A second writer — another process, or another context object
of this one — is refused with :class:`SessionError` naming the holder's pid, while a
read-only open works; the lock goes with its holder, also when it is killed.
"""

from __future__ import annotations

import os
import signal
import sys
import textwrap
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream

from _cli import console_script
from amplifier_anyio import AmplifierSession, SessionError
from amplifier_anyio.contexts import PersistentContextManager, pending_approvals
from amplifier_anyio.contexts._messages import calls, result_ids
from amplifier_anyio.contexts.persistent import default_path, journal_path_for
from amplifier_anyio.models import ChatRequest, ChatResponse, TextBlock, ToolCall
from amplifier_anyio.providers.scripted import ScriptedProvider

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(sys.platform == "win32", reason="the writer lock is fcntl's"),
]

TIMEOUT = 60  # seconds for a child process: generous on a loaded 2-core machine


class Blocker:
    """A tool that runs until the test lets it finish."""

    name = "blocker"
    description = "waits for the test"

    def __init__(self) -> None:
        self.input_schema = {"type": "object"}
        self.running = anyio.Event()
        self.release = anyio.Event()

    async def execute(self, tool_input: dict[str, Any]) -> str:
        self.running.set()
        await self.release.wait()
        return "released"


def model(request: ChatRequest) -> ChatResponse:
    if request.messages[-1].role == "user":
        return ChatResponse(tool_calls=[ToolCall(id="b1", name="blocker", arguments={})])
    return ChatResponse(content=[TextBlock(text="done")])


def one_result_per_call(messages: list[dict[str, Any]]) -> None:
    for index, message in enumerate(messages):
        ids = [call_id for call_id, _ in calls(message)]
        following = messages[index + 1 : index + 1 + len(ids)]
        assert [result_ids(m) for m in following] == [[i] for i in ids], messages
    answered = [i for m in messages for i in result_ids(m)]
    assert len(answered) == len(set(answered)), f"a call answered twice: {answered}"


async def test_sessions_show_on_a_session_mid_tool_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AMPLIFIER_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    session_id = "live-session-0001"
    transcript = default_path(session_id)
    journal = journal_path_for(transcript)
    plan = {"session": {"orchestrator": "loop-basic", "context": "context-persistent"}}
    tool = Blocker()
    session = AmplifierSession(plan, session_id=session_id)
    async with session:
        await session.coordinator.mount("providers", ScriptedProvider(model), name="scripted")
        await session.coordinator.mount("tools", tool, name="blocker")
        async with anyio.create_task_group() as group:
            group.start_soon(session.run, "go")
            with anyio.fail_after(TIMEOUT):
                await tool.running.wait()
            before = await anyio.Path(transcript).read_bytes()
            journal_before = await anyio.Path(journal).read_bytes()
            assert b'"started"' in journal_before  # the call runs, journaled

            with anyio.fail_after(TIMEOUT):
                shown = await anyio.run_process(
                    [console_script(), "sessions", "show", session_id], check=False
                )
                assert await pending_approvals(transcript) == []  # the API behind it

            assert shown.returncode == 0, shown.stderr.decode()
            assert b"-> blocker" in shown.stdout
            assert await anyio.Path(transcript).read_bytes() == before
            assert await anyio.Path(journal).read_bytes() == journal_before
            tool.release.set()
        assert session.last_result is not None
        assert session.last_result.text == "done"
    async with PersistentContextManager(transcript, read_only=True) as stored:
        messages = await stored.get_messages()
    assert stored.interrupted_calls_closed == 0
    one_result_per_call(messages)
    assert [m["content"] for m in messages if m["role"] == "tool"] == ["released"]


OPENER = textwrap.dedent(
    """
    import os, sys
    import anyio
    from amplifier_anyio import SessionError
    from amplifier_anyio.contexts import PersistentContextManager

    async def main(path, mode):
        manager = PersistentContextManager(path, read_only=mode == "read")
        try:
            await manager.load()
        except SessionError as exc:
            print("refused:", exc, flush=True)
            return
        print("opened", os.getpid(), len(await manager.get_messages()), flush=True)
        if mode == "hold":
            await anyio.to_thread.run_sync(sys.stdin.read)  # until the test kills it
        await manager.aclose()

    anyio.run(main, sys.argv[1], sys.argv[2])
    """
)


async def open_elsewhere(path: Path, mode: str) -> str:
    with anyio.fail_after(TIMEOUT):
        done = await anyio.run_process([sys.executable, "-c", OPENER, str(path), mode])
    return done.stdout.decode().strip()


async def test_a_second_writer_is_refused_naming_the_holder_and_a_reader_works(
    tmp_path: Path,
) -> None:
    path = tmp_path / "context-messages.jsonl"
    writer = PersistentContextManager(path)
    await writer.add_message({"role": "user", "content": "hello"})
    assert writer.holds_lock

    elsewhere = await open_elsewhere(path, "write")
    assert elsewhere.startswith("refused:"), elsewhere
    assert f"pid {os.getpid()}" in elsewhere
    assert (await open_elsewhere(path, "read")).split()[::2] == ["opened", "1"]
    with pytest.raises(SessionError, match=rf"pid {os.getpid()} — this process"):
        await PersistentContextManager(path).load()  # another object of this process
    reader = PersistentContextManager(path, read_only=True)
    assert await reader.get_messages() == [{"role": "user", "content": "hello"}]
    with pytest.raises(SessionError, match="read-only"):
        await reader.add_message({"role": "user", "content": "no"})

    await writer.aclose()
    assert (await open_elsewhere(path, "write")).split()[::2] == ["opened", "1"]
    with pytest.raises(SessionError, match="closed"):
        await writer.add_message({"role": "user", "content": "after close"})


async def test_the_lock_goes_with_a_killed_holder(tmp_path: Path) -> None:
    path = tmp_path / "context-messages.jsonl"
    async with PersistentContextManager(path) as first:
        await first.add_message({"role": "user", "content": "hello"})
    command = [sys.executable, "-c", OPENER, str(path), "hold"]
    async with await anyio.open_process(command) as holder:
        assert holder.stdout is not None
        with anyio.fail_after(TIMEOUT):
            line = (
                await BufferedByteReceiveStream(holder.stdout).receive_until(b"\n", 200)
            ).decode()
        assert line.split()[:2] == ["opened", str(holder.pid)]
        with pytest.raises(SessionError, match=rf"by another context \(pid {holder.pid}\)"):
            await PersistentContextManager(path).load()
        assert len(await PersistentContextManager(path, read_only=True).get_messages()) == 1
        holder.send_signal(signal.SIGKILL)
        with anyio.fail_after(TIMEOUT):
            await holder.wait()
    async with PersistentContextManager(path) as again:  # the OS let the lock go
        assert again.holds_lock
