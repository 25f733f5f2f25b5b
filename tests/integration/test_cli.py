"""The installed ``amplifier-anyio`` console script, run in a subprocess as a user runs it.

Each command line is one subprocess. They are independent, so the module starts them all
at once (a thread each) and every test reads the outcome of its own command: the whole
module costs about as much as its slowest command.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from _cli import console_script
from amplifier_anyio import __version__

MISSING_ID_PLAN = """\
session: {orchestrator: loop-basic, context: context-simple}
providers:
  - config: {demo: true}
"""

UNKNOWN_ORCHESTRATOR_PLAN = """\
[session]
orchestrator = "loop-nowhere"
context = "context-simple"
"""

UNKNOWN_PROVIDER_PLAN = """\
session: {orchestrator: loop-basic, context: context-simple}
providers:
  - module: provider-nowhere
"""

GOOD_PLAN = """\
[session]
orchestrator = "loop-basic"
context = "context-simple"

[[providers]]
module = "provider-scripted"
config = { demo = true }

[[tools]]
module = "tool-demo"
"""

UNKNOWN_TOOL_PLAN = """\
session: {orchestrator: loop-basic, context: context-simple}
tools:
  - module: tool-nowhere
"""

MISSPELT_TOOL_PLAN = """\
session: {orchestrator: loop-basic, context: context-simple}
orchestrator: {config: {max_iterations: 3}}
providers: [{module: provider-scripted, config: {demo: true}}]
tools: [{module: tool-dmeo, optional: true}]
"""

BOOM_ORCHESTRATOR_PLAN = """\
session:
  orchestrator: {module: loop-boom, source: modules}
  context: context-simple
providers: [{module: provider-scripted, config: {demo: true}}]
"""

FILES: dict[str, str | bytes] = {
    "missing.yaml": MISSING_ID_PLAN,
    "unknown-orchestrator.toml": UNKNOWN_ORCHESTRATOR_PLAN,
    "unknown-provider.yaml": UNKNOWN_PROVIDER_PLAN,
    "good.toml": GOOD_PLAN,
    "unknown-tool.yaml": UNKNOWN_TOOL_PLAN,
    "good/amplifier_module_tool_hello/__init__.py": "async def mount(coordinator, config):\n"
    "    return None\n",
    "bad/amplifier_module_tool_broken/__init__.py": "VERSION = 1\n",
    "misspelt-tool.yaml": MISSPELT_TOOL_PLAN,
    "misspelt-required-tool.yaml": MISSPELT_TOOL_PLAN.replace(", optional: true", ""),
    "deep.yaml": "[" * 20_000 + "]" * 20_000,
    "latin-1.toml": b"[session]\norchestrator = '\xe9'\n",
    "boom.yaml": BOOM_ORCHESTRATOR_PLAN,
    "modules/amplifier_module_loop_boom/__init__.py": "async def mount(coordinator, config):\n"
    "    raise RuntimeError('boom at mount')\n",
}

COMMANDS = {
    "run-asyncio": ["run", "--backend", "asyncio", "count these four words"],
    "run-trio": ["run", "--backend", "trio", "count these four words"],
    "events": ["run", "--events", "two words"],
    "version": ["--version"],
    "missing-id": ["run", "--plan", "missing.yaml", "hi"],
    "unknown-orchestrator": ["run", "--plan", "unknown-orchestrator.toml", "hi"],
    "unknown-provider": ["run", "--plan", "unknown-provider.yaml", "hi"],
    "validate-good": ["validate", "good.toml"],
    "validate-unknown": ["validate", "unknown-tool.yaml"],
    "validate-module": ["validate", "good"],
    "validate-broken-module": ["validate", "bad"],
    "misspelt-tool": ["run", "--plan", "misspelt-tool.yaml", "count my words"],
    "misspelt-required-tool": ["run", "--plan", "misspelt-required-tool.yaml", "hi"],
    "deep": ["run", "--plan", "deep.yaml", "hi"],
    "validate-deep": ["validate", "deep.yaml"],
    "latin-1": ["run", "--backend", "trio", "--plan", "latin-1.toml", "hi"],
    "boom-asyncio": ["run", "--plan", "boom.yaml", "hi"],
    "boom-trio": ["run", "--backend", "trio", "--plan", "boom.yaml", "hi"],
    "help": ["--help"],
    "help-run": ["run", "--help"],
    "help-sessions-rm": ["sessions", "rm", "--help"],
}


@pytest.fixture(scope="module")
def runs(
    tmp_path_factory: pytest.TempPathFactory,
) -> Mapping[str, subprocess.CompletedProcess[str]]:
    """Every command of COMMANDS, run from a directory holding FILES."""
    cwd = tmp_path_factory.mktemp("cli")
    for name, content in FILES.items():
        (cwd / name).parent.mkdir(parents=True, exist_ok=True)
        data = content if isinstance(content, bytes) else content.encode()
        (cwd / name).write_bytes(data)
    script = console_script()
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}

    def run(args: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [script, *args],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    with ThreadPoolExecutor(max_workers=len(COMMANDS)) as pool:
        return dict(zip(COMMANDS, pool.map(run, COMMANDS.values()), strict=True))


def one_line_error(stderr: str) -> str:
    assert "Traceback" not in stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    return lines[0]


def unwrapped(text: str) -> str:
    """Output with line wrapping undone (rich wraps long lines at 80 columns in a pipe)."""
    return " ".join(text.split())


EVENT_START = re.compile(r"^\d\d:\d\d:\d\d\.\d{3} (\S+) ", re.MULTILINE)
GROUP_ID = re.compile(r'"parallel_group_id":\s*"([0-9a-f-]{36})"')


def events_of(stderr: str) -> list[tuple[str, str]]:
    """``(name, payload text)`` per event of ``--events`` (a payload may wrap)."""
    starts = list(EVENT_START.finditer(stderr))
    ends = [m.start() for m in starts[1:]] + [len(stderr)]
    return [(m.group(1), stderr[m.end() : end]) for m, end in zip(starts, ends, strict=True)]


# -- run -------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_the_default_plan_answers_offline(
    runs: Mapping[str, subprocess.CompletedProcess[str]], backend: str
) -> None:
    done = runs[f"run-{backend}"]

    assert done.returncode == 0, done.stderr
    assert "Your prompt has 4 words and 22 characters." in done.stdout
    assert "'words four these count'" in done.stdout
    assert "Traceback" not in done.stderr


def test_events_written_to_a_file_are_one_line_each(
    runs: Mapping[str, subprocess.CompletedProcess[str]],
) -> None:
    # stderr is a pipe here, as in `run --events … 2>log`: 80 columns, yet no event wraps
    done = runs["events"]

    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert [line for line in lines if not EVENT_START.match(line)] == []
    assert len(lines) == len(events_of(done.stderr)) > 10
    assert max(len(line) for line in lines) > 80  # long enough to have wrapped before


def test_events_show_two_tool_calls_in_one_parallel_group(
    runs: Mapping[str, subprocess.CompletedProcess[str]],
) -> None:
    done = runs["events"]

    assert done.returncode == 0, done.stderr
    events = events_of(done.stderr)
    names = [name for name, _ in events]
    assert names[0] == "session:start"
    assert names[-3:] == ["orchestrator:complete", "execution:end", "session:end"]
    pre = [payload for name, payload in events if name == "tool:pre"]
    assert len(pre) == 2
    groups = {match.group(1) for match in map(GROUP_ID.search, pre) if match}
    assert len(groups) == 1
    assert "Your prompt has 2 words" in done.stdout  # the answer stays on stdout


def test_version(runs: Mapping[str, subprocess.CompletedProcess[str]]) -> None:
    done = runs["version"]

    assert done.returncode == 0
    assert done.stdout.strip() == f"amplifier-anyio {__version__}"


def test_a_plan_entry_without_a_module_id_exits_2_naming_the_field(
    runs: Mapping[str, subprocess.CompletedProcess[str]],
) -> None:
    done = runs["missing-id"]

    assert done.returncode == 2
    assert one_line_error(done.stderr) == "error: providers[0].module: required"
    assert done.stdout == ""


def test_an_unknown_orchestrator_exits_2_naming_it(
    runs: Mapping[str, subprocess.CompletedProcess[str]],
) -> None:
    done = runs["unknown-orchestrator"]

    assert done.returncode == 2
    assert one_line_error(done.stderr).startswith("error: module 'loop-nowhere' not found (tried:")


def test_an_unknown_provider_fails_the_run_naming_it(
    runs: Mapping[str, subprocess.CompletedProcess[str]],
) -> None:
    done = runs["unknown-provider"]

    assert done.returncode != 0
    assert "provider-nowhere" in done.stderr
    assert "Traceback" not in done.stderr
    assert done.stdout == ""


def test_a_misspelt_tool_module_fails_the_start_in_one_line(
    runs: Mapping[str, subprocess.CompletedProcess[str]],
) -> None:
    done = runs["misspelt-required-tool"]

    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    [line] = done.stderr.strip().splitlines()
    assert "tool-dmeo" in line
    assert unwrapped(line).startswith("error: ")


def test_a_misspelt_optional_tool_module_is_one_warning_and_the_demo_still_answers(
    runs: Mapping[str, subprocess.CompletedProcess[str]],
) -> None:
    done = runs["misspelt-tool"]

    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr  # the session's log line is not printed as well
    assert unwrapped(lines[0]).startswith("warning: tool 'tool-dmeo' not loaded: module")
    assert "word_count" in unwrapped(done.stdout)  # the demo says what it missed


@pytest.mark.parametrize(
    ("command", "message"),
    [
        ("deep", "error: deep.yaml: not valid YAML: nested too deeply"),
        ("validate-deep", "error: deep.yaml: not valid YAML: nested too deeply"),
        ("latin-1", "error: latin-1.toml: not UTF-8 text: byte 0xe9 at offset 26"),
        ("boom-asyncio", "error: orchestrator 'loop-boom': RuntimeError: boom at mount"),
        ("boom-trio", "error: orchestrator 'loop-boom': RuntimeError: boom at mount"),
    ],
)
def test_a_bad_plan_or_a_failing_start_is_one_line_and_exit_2(
    runs: Mapping[str, subprocess.CompletedProcess[str]], command: str, message: str
) -> None:
    done = runs[command]

    assert done.returncode == 2, done.stderr
    assert one_line_error(done.stderr) == message
    assert done.stdout == ""


# -- validate --------------------------------------------------------------------------------


def test_validate_a_good_plan(runs: Mapping[str, subprocess.CompletedProcess[str]]) -> None:
    done = runs["validate-good"]

    assert done.returncode == 0, done.stderr
    assert unwrapped(done.stdout).startswith(
        "ok: good.toml: orchestrator loop-basic, context context-simple, "
        "1 providers, 1 tools, 0 hooks "
    )
    # Then what each entry will mount, and where it came from.
    assert (
        "orchestrator 'loop-basic': entry point 'loop-basic' = "
        "amplifier_anyio.orchestrators.loop_basic:mount"
    ) in unwrapped(done.stdout)


def test_validate_a_plan_with_an_unknown_module(
    runs: Mapping[str, subprocess.CompletedProcess[str]],
) -> None:
    done = runs["validate-unknown"]

    assert done.returncode == 2
    assert one_line_error(done.stderr).startswith("error: tool 'tool-nowhere': module")
    assert done.stdout == ""


def test_validate_a_module_directory(runs: Mapping[str, subprocess.CompletedProcess[str]]) -> None:
    done = runs["validate-module"]

    assert done.returncode == 0, done.stderr
    assert unwrapped(done.stdout) == "ok: good: module 'tool-hello' has a mount() function"


def test_validate_a_module_directory_without_mount(
    runs: Mapping[str, subprocess.CompletedProcess[str]],
) -> None:
    done = runs["validate-broken-module"]

    assert done.returncode == 2
    assert one_line_error(done.stderr) == (
        "error: module 'tool-broken' could not be loaded: it has no mount() function"
    )


# -- Ctrl-C ----------------------------------------------------------------------------------

STALLING_HOOK = """\
import sys

import anyio


async def mount(coordinator, config):
    print("mounting", flush=True)  # the test's cue: the session is starting
    await anyio.sleep(3600)
"""


def interrupt_plan(directory: Path, moment: str) -> Path:
    """A demo plan with hour-long tools, or one whose last module takes an hour to mount."""
    plan = [
        "session: {orchestrator: loop-basic, context: context-simple}",
        "providers: [{module: provider-scripted, config: {demo: true}}]",
        "tools: [{module: tool-demo, config: {delay: 3600}}]",
    ]
    if moment == "start-up":
        package = directory / "amplifier_module_hooks_stall"
        package.mkdir()
        (package / "__init__.py").write_text(STALLING_HOOK, encoding="utf-8")
        plan.append(f"hooks: [{{module: hooks-stall, source: '{directory}'}}]")
    path = directory / "plan.yaml"
    path.write_text("\n".join(plan) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("moment", ["start-up", "turn"])
@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_ctrl_c_prints_one_line_and_exits_130(tmp_path: Path, backend: str, moment: str) -> None:
    plan = interrupt_plan(tmp_path, moment)
    # Wide enough that no event line wraps: every line of stderr is an event or the CLI's.
    env = {**os.environ, "COLUMNS": "1000"}
    args = [console_script(), "run", "--backend", backend, "--plan", str(plan)]
    args += ["--events", "count my words"] if moment == "turn" else ["count my words"]
    process = subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    try:
        assert process.stdout is not None
        assert process.stderr is not None
        if moment == "start-up":
            assert process.stdout.readline() == "mounting\n"
        else:
            # Wait for the event that says the hour-long tools are running.
            for line in process.stderr:
                if " tool:pre " in line:
                    break
            else:
                pytest.fail("the turn never ran its tools")
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()

    assert "Traceback" not in stderr
    assert [line for line in stderr.splitlines() if not EVENT_START.match(line)] == ["interrupted"]
    assert process.returncode == 130, stderr
    assert stdout == ""


# -- --help ----------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["help", "help-run", "help-sessions-rm"])
def test_help_shows_flags_without_a_value(
    runs: Mapping[str, subprocess.CompletedProcess[str]], command: str
) -> None:
    done = runs[command]

    assert done.returncode == 0, done.stderr
    assert "<bool>" not in done.stdout
    flags = [line for line in done.stdout.splitlines() if "--help" in line]
    assert flags
    assert all("<" not in line for line in flags), flags


def test_the_usage_line_names_the_argument_plainly(
    runs: Mapping[str, subprocess.CompletedProcess[str]],
) -> None:
    usage = {
        name: next(line for line in runs[name].stdout.splitlines() if "Usage:" in line).strip()
        for name in ("help-run", "help-sessions-rm")
    }

    assert usage == {
        "help-run": "Usage: amplifier-anyio run [OPTIONS] [PROMPT]",  # optional with --resume
        "help-sessions-rm": "Usage: amplifier-anyio sessions rm [OPTIONS] ID",
    }
    json_flag = next(line for line in runs["help-run"].stdout.splitlines() if "--json" in line)
    assert json_flag.split("--json")[1].split()[0] == "Print"  # no placeholder before the help
