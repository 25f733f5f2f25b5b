"""Start-up of the command line: what ``amplifier-anyio run`` of the demo loads.

A regression guard that needs no clock: each test starts a fresh interpreter, runs the
real entry point (``amplifier_anyio.cli:main``) and reports which modules it imported.
The demo (provider-scripted, tool-demo, loop-basic) needs neither httpx (the HTTP
providers) nor the other commands' modules (chat, bench, sessions, mcp): each of them costs
tens of milliseconds of every start (``docs/benchmarks.md``, "Start-up"). pydantic is
Typer's: Typer 0.29 coerces every parameter value through it, and the CLI uses Typer's
public API only (``docs/cli.md``); ``--help`` still needs none of it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

DEMO_PLAN = """\
session: {orchestrator: loop-basic, context: context-simple}
orchestrator: {config: {max_iterations: 8}}
providers: [{module: provider-scripted, config: {demo: true}}]
tools: [{module: tool-demo, config: {delay: 0}}]
"""

# Runs the console script's entry point, then writes the loaded modules to argv[1].
WRAPPER = """\
import json, sys
report, sys.argv = sys.argv[1], ["amplifier-anyio", *sys.argv[2:]]
from amplifier_anyio.cli import main
try:
    main()
finally:
    with open(report, "w") as file:
        json.dump(sorted(sys.modules), file)
"""

_PYTHONPATH = {"PYTHONPATH": os.environ["PYTHONPATH"]} if "PYTHONPATH" in os.environ else {}

NOT_FOR_THE_DEMO = (
    "httpx",
    "amplifier_anyio.cli.chat",
    "amplifier_anyio.cli.bench",
    "amplifier_anyio.cli.sessions",
    "amplifier_anyio.cli.mcp",
    "amplifier_anyio.cli.validate",
    "amplifier_anyio.bench",
    "amplifier_anyio.providers.openai",
    "amplifier_anyio.providers.anthropic",
    "amplifier_anyio.orchestrators.loop_lifecycle",
)


def _run(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    report = tmp_path / "modules.json"
    process = subprocess.run(
        [sys.executable, "-c", WRAPPER, str(report), *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={**_PYTHONPATH, "PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "NO_COLOR": "1"},
        check=False,
    )
    return process, set(json.loads(report.read_text(encoding="utf-8")))


def test_run_of_the_demo_loads_no_httpx_or_other_commands(tmp_path: Path) -> None:
    plan = tmp_path / "demo.yaml"
    plan.write_text(DEMO_PLAN, encoding="utf-8")
    process, modules = _run(tmp_path, "run", "--plan", str(plan), "count my words")
    assert process.returncode == 0, process.stderr
    assert "Your prompt has 3 words" in process.stdout
    assert "amplifier_anyio.cli.run" in modules  # the report is the real run's
    loaded = [name for name in NOT_FOR_THE_DEMO if name in modules]
    assert loaded == []


def test_help_lists_every_command_in_order_with_its_help(tmp_path: Path) -> None:
    process, modules = _run(tmp_path, "--help")
    assert process.returncode == 0, process.stderr
    # a command's row starts at the panel's edge; its wrapped help is indented
    lines = process.stdout.splitlines()
    firsts = [line[2:].split()[0] for line in lines if line.startswith("│ ") and line[2:3].strip()]
    names = [word for word in firsts if word in _COMMANDS]
    assert names == list(_COMMANDS)
    for help_text in _COMMANDS.values():
        assert help_text in process.stdout
    assert "pydantic" not in modules


def test_a_misspelt_command_is_still_a_suggestion_and_exit_2(tmp_path: Path) -> None:
    process, modules = _run(tmp_path, "sesions")
    assert process.returncode == 2
    assert process.stderr == (
        "error: no such command 'sesions'. Did you mean 'sessions'? "
        "— try 'amplifier-anyio --help'\n"
    )
    assert "amplifier_anyio.cli.sessions" not in modules


def test_a_bad_value_still_gets_typers_message(tmp_path: Path) -> None:
    # --repeats is an int: its coercion stays Typer's own, its message in the one error line
    process, _ = _run(tmp_path, "bench", "--repeats", "many")
    assert process.returncode == 2
    assert process.stderr.startswith("error: invalid value for '--repeats': ")
    assert len(process.stderr.splitlines()) == 1


_COMMANDS = {
    "run": "Run one turn and print the answer.",
    "chat": "Talk with the agent",
    "validate": "Check a plan",
    "bench": "Benchmark parallel tool fan-out",
    "sessions": "List, show and remove the saved chat sessions",
    "mcp": "Serve a session over MCP.",
}
