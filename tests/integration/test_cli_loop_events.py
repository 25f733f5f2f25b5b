"""An upstream-style plan with ``orchestrator: loop-events`` and both example schedulers,
run by the installed ``amplifier-anyio run --plan`` in a subprocess, on both backends."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor

import pytest

from _cli import console_script

PLAN = """\
session:
  orchestrator: loop-events
  context: context-simple
orchestrator:
  config:
    max_iterations: 5
    default_provider: scripted
    extended_thinking: false
    scheduler_timeout: 0.5
providers:
  - module: provider-scripted
    config: {demo: true}
tools:
  - module: tool-demo
hooks:
  - module: hooks-scheduler-cost
    config: {budget: 3, costs: {reverse_words: 5}}
  - module: hooks-scheduler-router
    config:
      routes:
        word_count: {arguments: {text: "routed words"}}
"""

COMMANDS = {
    "asyncio": ["run", "--backend", "asyncio", "--plan", "plan.yaml", "count these four words"],
    "trio": ["run", "--backend", "trio", "--events", "--plan", "plan.yaml", "count these words"],
}


@pytest.fixture(scope="module")
def runs(
    tmp_path_factory: pytest.TempPathFactory,
) -> Mapping[str, subprocess.CompletedProcess[str]]:
    cwd = tmp_path_factory.mktemp("loop-events")
    (cwd / "plan.yaml").write_text(PLAN)
    script = console_script()

    def run(args: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [script, *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
        )

    with ThreadPoolExecutor(max_workers=len(COMMANDS)) as pool:
        return dict(zip(COMMANDS, pool.map(run, COMMANDS.values()), strict=True))


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_the_schedulers_of_the_plan_route_and_veto(
    runs: Mapping[str, subprocess.CompletedProcess[str]], backend: str
) -> None:
    done = runs[backend]

    assert done.returncode == 0, done.stderr
    answer = " ".join(done.stdout.split())
    # The router replaced word_count's text: two words, whatever the prompt said.
    assert "Your prompt has 2 words and 12 characters." in answer
    # The cost budget vetoed reverse_words (5) after word_count (1): its result is the veto.
    assert (
        "it reads: 'Error: cost budget exceeded: reverse_words costs 5, "
        "1 of 3 already spent this turn'" in answer
    )
    assert "Traceback" not in done.stderr


def test_the_event_stream_shows_the_scheduler_stage(
    runs: Mapping[str, subprocess.CompletedProcess[str]],
) -> None:
    events = " ".join(runs["trio"].stderr.split())

    assert events.count("tool:selecting {") == 2
    assert '"tool": "word_count", "source": "scheduler", "original_tool": null' in events
    assert '"orchestrator": "loop-events"' in events
    # The vetoed call selects nothing and never reaches tool:pre.
    assert events.count("tool:selected {") == 1
    assert events.count("tool:pre {") == 1
