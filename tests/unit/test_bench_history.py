"""The history and start-up suites: the shape of what they report and the work they do.

Times are never asserted (they depend on the machine); what each case sent and ran is.
"""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from benchmarks import extension
from benchmarks.history import history_suite, request_cost, startup_suite
from rich.console import Console

from amplifier_anyio.bench import BenchConfig, conversation, render_tables
from amplifier_anyio.bench.suites import count_steps
from amplifier_anyio.contexts import SimpleContextManager
from amplifier_anyio.errors import ConfigError

pytestmark = pytest.mark.anyio

CHECKOUT = extension()
"""The checkout's suites, tables and targets (``python -m benchmarks``)."""


@pytest.fixture(scope="module")
def history() -> dict[str, Any]:
    steps: list[str] = []
    suite = history_suite((20, 200), iterations=6, repeats=2, step=steps.append)
    suite["steps"] = steps
    return suite


@pytest.mark.slow
def test_every_size_is_measured_for_both_contexts_with_compaction_off_and_on(
    history: dict[str, Any],
) -> None:
    assert [(c["context"], c["messages"], c["compaction"]) for c in history["cases"]] == [
        (kind, size, compaction)
        for kind in ("simple", "persistent")
        for compaction in (False, True)
        for size in (20, 200)
    ]
    # Without compaction, every message of the history is in the request, with the tool
    # round added before each timed request.
    assert all(
        c["sent"] == c["messages"] + 2 * c["repeats"]
        for c in history["cases"]
        if not c["compaction"]
    )
    assert set(history["slope"]) == {
        "simple off",
        "simple on",
        "persistent off",
        "persistent on",
    }


@pytest.mark.slow
def test_the_agent_run_does_every_round(history: dict[str, Any]) -> None:
    assert [(r["context"], r["iterations"], r["compaction"]) for r in history["runs"]] == [
        ("simple", 6, False),
        ("simple", 6, True),
        ("persistent", 6, False),
        ("persistent", 6, True),
    ]
    assert all(r["total_s"] > 0 for r in history["runs"])
    assert len(history["steps"]) == count_steps(
        BenchConfig(suites=("history",), history_sizes=(20, 200)), backends=0, extension=CHECKOUT
    )


@pytest.mark.slow
def test_loading_the_largest_persistent_history_is_measured(history: dict[str, Any]) -> None:
    assert history["load"]["messages"] == 200
    assert history["load"]["loaded"] == 200


async def test_a_request_sends_the_whole_history_and_the_repaired_calls() -> None:
    context = SimpleContextManager()
    messages = conversation(12)
    # An assistant call left without its answer is answered by the repair, as in a turn.
    messages.append({"role": "assistant", "content": "", "tool_calls": [{"id": "x", "name": "t"}]})
    await context.set_messages(messages)
    assert await request_cost(context) == len(messages) + 1


@pytest.mark.slow
def test_history_tables_are_rendered(history: dict[str, Any]) -> None:
    report: dict[str, Any] = {
        "fanout": [],
        "emit": [],
        "batch": [],
        "compaction": None,
        "history": history,
        "targets": [],
        "skipped_backends": {},
    }
    buffer = StringIO()
    render_tables(report, Console(file=buffer, width=80), markdown=True, extension=CHECKOUT)
    text = buffer.getvalue()
    assert "One provider request" in text
    assert "| persistent" in text
    assert "Loading" in text


@pytest.mark.slow
def test_startup_runs_each_command_in_a_fresh_interpreter() -> None:
    suite = startup_suite(1)
    commands = [c["command"] for c in suite["cases"]]
    assert commands[0] == "python -c pass"
    assert "import amplifier_anyio" in commands
    assert any(c.startswith("cli run") for c in commands)
    assert all(c["median_ms"] > 0 for c in suite["cases"])


@pytest.mark.parametrize("changes", [{"history_sizes": (0,)}, {"history_iterations": 0}])
def test_bad_history_parameters_are_refused(changes: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        BenchConfig(**changes)
