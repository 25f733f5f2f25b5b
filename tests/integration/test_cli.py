"""The installed ``amplifier-anyio`` console script, run in a subprocess as a user runs it.

Each command line is one subprocess. They are independent, so the module starts them all
at once (a thread each) and every test reads the outcome of its own command: the whole
module costs about as much as its slowest command.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

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

FILES = {
    "missing.yaml": MISSING_ID_PLAN,
    "unknown-orchestrator.toml": UNKNOWN_ORCHESTRATOR_PLAN,
    "unknown-provider.yaml": UNKNOWN_PROVIDER_PLAN,
    "good.toml": GOOD_PLAN,
    "unknown-tool.yaml": UNKNOWN_TOOL_PLAN,
    "good/amplifier_module_tool_hello/__init__.py": "async def mount(coordinator, config):\n"
    "    return None\n",
    "bad/amplifier_module_tool_broken/__init__.py": "VERSION = 1\n",
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
}


def _script() -> str:
    beside = Path(sys.executable).parent / "amplifier-anyio"
    found = str(beside) if beside.exists() else shutil.which("amplifier-anyio")
    if found is None:
        pytest.fail("the amplifier-anyio console script is not installed")
    return found


@pytest.fixture(scope="module")
def runs(
    tmp_path_factory: pytest.TempPathFactory,
) -> Mapping[str, subprocess.CompletedProcess[str]]:
    """Every command of COMMANDS, run from a directory holding FILES."""
    cwd = tmp_path_factory.mktemp("cli")
    for name, text in FILES.items():
        (cwd / name).parent.mkdir(parents=True, exist_ok=True)
        (cwd / name).write_text(text, encoding="utf-8")
    script = _script()
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


# -- validate --------------------------------------------------------------------------------


def test_validate_a_good_plan(runs: Mapping[str, subprocess.CompletedProcess[str]]) -> None:
    done = runs["validate-good"]

    assert done.returncode == 0, done.stderr
    assert unwrapped(done.stdout) == (
        "ok: good.toml: orchestrator loop-basic, context context-simple, "
        "1 providers, 1 tools, 0 hooks"
    )


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
