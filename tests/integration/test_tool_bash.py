"""tool-bash with real subprocesses: no process of a command outlives the call, however it ends.

Each command records its pids in a file (``echo $$`` is the shell, which leads the
process group; ``$!`` the background children), because a cancelled call returns no
output. After the call — or the turn, or the CLI — has ended, no live process may be in
that group and none of the recorded pids may be alive (zombies count as dead: they run
nothing). Waits are real but short; no test asserts a duration.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import anyio
import pytest

from _cli import console_script
from amplifier_anyio import AmplifierSession, TurnStatus
from amplifier_anyio.errors import ConfigError
from amplifier_anyio.tools.bash import CONFIG_SCHEMA, BashConfig, make_tool

pytestmark = pytest.mark.anyio

GRANDCHILDREN = "echo $$ > {f}; sleep 1000 & echo $! >> {f}; sleep 1000 & echo $! >> {f}; wait"
"""The shell, two sleeping children, and a wait that never ends by itself."""


def _state(pid: int) -> bytes | None:
    try:
        data = Path(f"/proc/{pid}/stat").read_bytes()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return data.rsplit(b")", 1)[1].split()[0]


def alive(pid: int) -> bool:
    return _state(pid) not in (None, b"Z", b"X")


def group_members(pgid: int) -> list[int]:
    """Live processes whose process group is ``pgid``."""
    members = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            fields = Path(f"/proc/{name}/stat").read_bytes().rsplit(b")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        if int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            members.append(int(name))
    return members


def read_pids(path: Path) -> list[int]:
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    return [int(line) for line in text.split() if line.isdigit()]


async def wait_for_pids(path: Path, count: int = 3) -> list[int]:
    with anyio.fail_after(60):
        while True:
            pids = read_pids(path)
            if len(pids) >= count:
                return pids
            await anyio.sleep(0.02)


def assert_all_dead(pids: list[int]) -> None:
    assert pids, "the command never recorded its pids"
    assert group_members(pids[0]) == []
    assert [pid for pid in pids if alive(pid)] == []


def bash_plan(work: Path, command: str, **orchestrator: Any) -> dict[str, Any]:
    call = {"id": "b1", "name": "bash", "arguments": {"command": command}}
    return {
        "session": {"orchestrator": "loop-basic", "context": "context-simple"},
        "orchestrator": {"config": orchestrator},
        "providers": [
            {
                "module": "provider-scripted",
                "config": {
                    "responses": [
                        {"content": [], "tool_calls": [call]},
                        {"content": [{"type": "text", "text": "done"}]},
                    ]
                },
            }
        ],
        "tools": [{"module": "tool-bash", "config": {"working_dir": str(work), "kill_grace": 0.5}}],
    }


async def tool_message(session: AmplifierSession) -> str:
    messages = await session.coordinator.get("context").get_messages()
    return str(next(m for m in messages if m["role"] == "tool")["content"])


# -- the four ways a turn can end while the command runs ----------------------------------


async def test_the_orchestrators_tool_timeout_stops_the_whole_group(tmp_path: Path) -> None:
    pid_file = tmp_path / "pids"
    plan = bash_plan(tmp_path, GRANDCHILDREN.format(f=pid_file), tool_timeout=1.0)
    async with AmplifierSession(plan) as session:
        result = await session.run("run it")
        content = await tool_message(session)
    assert result.status == TurnStatus.SUCCESS
    assert "timed out" in content
    assert_all_dead(read_pids(pid_file))


async def test_an_immediate_cancel_stops_the_whole_group(tmp_path: Path) -> None:
    pid_file = tmp_path / "pids"
    plan = bash_plan(tmp_path, GRANDCHILDREN.format(f=pid_file))
    results = []
    async with AmplifierSession(plan) as session, anyio.create_task_group() as tg:

        async def run() -> None:
            results.append(await session.run("run it"))

        tg.start_soon(run)
        pids = await wait_for_pids(pid_file)
        assert all(alive(pid) for pid in pids)
        assert session.cancel(immediate=True)
    assert results[0].status == TurnStatus.CANCELLED
    assert_all_dead(pids)


async def test_the_hosts_cancel_scope_stops_the_whole_group(tmp_path: Path) -> None:
    pid_file = tmp_path / "pids"
    plan = bash_plan(tmp_path, GRANDCHILDREN.format(f=pid_file))
    async with AmplifierSession(plan) as session:
        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as tg:
                tg.start_soon(session.run, "run it")
                pids = await wait_for_pids(pid_file)
                assert all(alive(pid) for pid in pids)
                scope.cancel()
        assert scope.cancelled_caught
        assert_all_dead(pids)


async def test_a_graceful_cancel_waits_for_the_command_which_its_timeout_ends(
    tmp_path: Path,
) -> None:
    pid_file = tmp_path / "pids"
    command = GRANDCHILDREN.format(f=pid_file)
    plan = bash_plan(tmp_path, command)
    plan["tools"][0]["config"]["timeout"] = 1.0
    results = []
    async with AmplifierSession(plan) as session, anyio.create_task_group() as tg:

        async def run() -> None:
            results.append(await session.run("run it"))

        tg.start_soon(run)
        pids = await wait_for_pids(pid_file)
        session.cancel()
    assert results[0].status == TurnStatus.CANCELLED
    assert_all_dead(pids)


CLI_PLAN = """\
session: {{orchestrator: loop-basic, context: context-simple}}
providers:
  - module: provider-scripted
    config:
      responses:
        - content: []
          tool_calls: [{{id: b1, name: bash, arguments: {{command: {command}}}}}]
        - content: [{{type: text, text: done}}]
tools:
  - module: tool-bash
    config: {{working_dir: {work}, kill_grace: 0.5}}
"""


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_ctrl_c_to_the_cli_stops_the_whole_group(tmp_path: Path, backend: str) -> None:
    pid_file = tmp_path / "pids"
    command = json.dumps(GRANDCHILDREN.format(f=pid_file))
    plan = tmp_path / "plan.yaml"
    plan.write_text(CLI_PLAN.format(command=command, work=json.dumps(str(tmp_path))))
    args = [console_script(), "run", "--backend", backend, "--plan", str(plan), "go"]
    process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        pids = anyio.run(wait_for_pids, pid_file)
        assert all(alive(pid) for pid in pids)
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 130, stderr
    assert_all_dead(pids)


# -- the tool on its own ------------------------------------------------------------------


async def test_the_commands_own_timeout_stops_the_whole_group(tmp_path: Path) -> None:
    pid_file = tmp_path / "pids"
    tool = make_tool(None, {"working_dir": str(tmp_path), "kill_grace": 0.5})
    result = await tool.execute({"command": GRANDCHILDREN.format(f=pid_file), "timeout": 0.5})
    assert not result.success
    assert result.error == {"message": "Command timed out after 0.5 seconds"}
    assert result.output["timed_out"] is True
    assert_all_dead(read_pids(pid_file))


async def test_children_that_ignore_sigterm_are_killed(tmp_path: Path) -> None:
    pid_file = tmp_path / "pids"
    command = "trap '' TERM; " + GRANDCHILDREN.format(f=pid_file)
    tool = make_tool(None, {"working_dir": str(tmp_path), "kill_grace": 0.3})
    result = await tool.execute({"command": command, "timeout": 0.5})
    assert result.output["timed_out"] is True
    assert result.output["returncode"] == -signal.SIGKILL
    assert_all_dead(read_pids(pid_file))


async def test_a_background_job_ends_with_its_command(tmp_path: Path) -> None:
    tool = make_tool(None, {"working_dir": str(tmp_path)})
    result = await tool.execute({"command": "sleep 1000 & echo $$ $!"})
    assert result.success
    assert_all_dead([int(p) for p in result.output["stdout"].split()])


async def test_a_child_that_leaves_the_group_cannot_hold_the_call(tmp_path: Path) -> None:
    """What cannot be contained: ``setsid`` puts a child out of the group's reach. The call
    still returns (the pipe it holds is abandoned after drain_timeout)."""
    pid_file = tmp_path / "pids"
    tool = make_tool(None, {"working_dir": str(tmp_path), "drain_timeout": 0.3})
    try:
        # The escapee says when it has left the group; the shell waits for that.
        ready = tmp_path / "ready"
        command = (
            f"setsid sh -c 'echo left > {ready}; exec sleep 1000' & echo $! > {pid_file}; "
            f"while [ ! -s {ready} ]; do sleep 0.01; done"
        )
        result = await tool.execute({"command": command})
        assert result.success
        assert result.output["output_incomplete"] is True
        (escaped,) = read_pids(pid_file)
        assert alive(escaped)
    finally:
        for pid in read_pids(pid_file):
            os.kill(pid, signal.SIGKILL)


async def test_50_mb_of_output_is_capped_keeping_head_and_tail(tmp_path: Path) -> None:
    tool = make_tool(None, {"working_dir": str(tmp_path), "max_output_bytes": 10_000})
    command = "echo START; head -c 50000000 /dev/zero | tr '\\0' a; echo; echo END"
    result = await tool.execute({"command": command, "timeout": 120})
    assert result.success
    out = result.output["stdout"]
    assert out.startswith("START\naaaa")
    assert out.endswith("aaaa\nEND\n")
    assert "bytes of output omitted] ..." in out
    assert len(out) < 10_200
    assert result.output["truncated"] is True
    assert result.output["stdout_total_bytes"] == 50_000_000 + len("START\n\nEND\n")


async def test_a_failing_commands_stdout_stderr_and_code_reach_the_model(tmp_path: Path) -> None:
    command = "echo partial work; echo 'it broke' >&2; exit 7"
    async with AmplifierSession(bash_plan(tmp_path, command)) as session:
        await session.run("run it")
        content = await tool_message(session)
    assert json.loads(content) == {
        "stdout": "partial work\n",
        "stderr": "it broke\n",
        "returncode": 7,
    }
    result = await make_tool(None, {"working_dir": str(tmp_path)}).execute({"command": command})
    assert not result.success
    assert result.error == {"message": "Command exited with code 7", "returncode": 7}


async def test_working_dir_and_the_environment_allow_list(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SECRET_TOKEN", "s3cr3t")
    command = 'pwd; echo "${SECRET_TOKEN:-unset}"'
    default = await make_tool(None, {"working_dir": str(tmp_path)}).execute({"command": command})
    assert default.output["stdout"] == f"{tmp_path}\nunset\n"
    allowed = make_tool(None, {"working_dir": str(tmp_path), "env": ["PATH", "SECRET_*"]})
    shown = await allowed.execute({"command": command})
    assert shown.output["stdout"].endswith("s3cr3t\n")


async def test_a_denied_command_never_starts(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    tool = make_tool(None, {"working_dir": str(tmp_path)})
    result = await tool.execute({"command": f"touch {marker}; rm -rf /"})
    assert not result.success
    assert result.output.startswith("Command denied for safety: recursive rm")
    assert result.error["type"] == "CommandDenied"  # type: ignore[index]
    assert not marker.exists()


@pytest.mark.parametrize(
    ("tool_input", "message"),
    [
        ({}, "command is required and must be a non-empty string"),
        ({"command": "  "}, "command is required and must be a non-empty string"),
        ({"command": "ls", "timeout": -1}, "timeout must be a positive number of seconds, got -1"),
        (
            {"command": "ls", "timeout": True},
            "timeout must be a positive number of seconds, got True",
        ),
        (
            {"command": "ls", "run_in_background": True},
            "run_in_background is not supported: commands never outlive the call",
        ),
    ],
)
async def test_bad_input_is_an_error_result(
    tmp_path: Path, tool_input: dict[str, Any], message: str
) -> None:
    result = await make_tool(None, {"working_dir": str(tmp_path)}).execute(tool_input)
    assert result.output == message


async def test_a_missing_working_dir_is_an_error_result(tmp_path: Path) -> None:
    tool = make_tool(None, {"working_dir": str(tmp_path / "gone")})
    result = await tool.execute({"command": "ls"})
    assert not result.success
    assert "gone" in result.output


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("timeout", 0),
        ("timeout", "soon"),
        ("kill_grace", -1),
        ("max_output_bytes", 10),
        ("drain_timeout", float("inf")),
        ("safety_profile", "yolo"),
    ],
)
def test_bad_config_is_a_config_error_naming_the_key(key: str, value: object) -> None:
    with pytest.raises(ConfigError, match=key):
        BashConfig.from_dict({key: value})


def test_the_schema_lists_the_keys() -> None:
    assert CONFIG_SCHEMA.check({"timeout": 5, "env": ["PATH"], "safety_profile": "strict"}) == []
    assert [p.key for p in CONFIG_SCHEMA.check({"timeout": "5", "workdir": "."})] == [
        "timeout",
        "workdir",
    ]


def processes_with(token: str) -> list[int]:
    """Live processes whose command line holds ``token``."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            cmdline = Path("/proc", name, "cmdline").read_bytes()
        except OSError:
            continue
        if token.encode() in cmdline and alive(int(name)):
            found.append(int(name))
    return found


async def test_a_cancel_while_the_process_starts_still_stops_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cancel that arrives while ``open_process`` waits (on asyncio: after the fork, while
    the pipes are connected — found under load) must not lose the process with its handle.
    Here ``open_process`` raises the cancel once the command has started its children, as
    asyncio does; the call must still stop the whole group."""
    pid_file = tmp_path / "pids"
    real_open = anyio.open_process
    tool = make_tool(None, {"working_dir": str(tmp_path), "kill_grace": 0.5})

    async with anyio.create_task_group() as tg:

        async def open_then_cancelled(*args: Any, **kwargs: Any) -> Any:
            process = await real_open(*args, **kwargs)
            await wait_for_pids(pid_file)
            tg.cancel_scope.cancel()
            await anyio.lowlevel.checkpoint()  # the cancel surfaces from open_process
            return process

        monkeypatch.setattr(anyio, "open_process", open_then_cancelled)
        tg.start_soon(tool.execute, {"command": GRANDCHILDREN.format(f=pid_file)})
    assert_all_dead(read_pids(pid_file))
