"""The benchmark's peer rows: each installed peer runs the same fan-out turn, and its check
counts the turn's tool results, so a broken adapter cannot look fast.

The peers (pydantic-ai, openai-agents, LangGraph) run on asyncio only, so their turns run
under ``anyio.run(..., backend="asyncio")``; on trio a run lists them as skipped. A peer
whose package is missing is skipped with the reason (they come with the ``test-full``
extra). A peer's turn is the full tier (marked slow).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from benchmarks import extension
from benchmarks.peers import (
    LOOP_BASIC_PATH_ENV,
    PEERS,
    Peer,
    UpstreamLoopBasicTurn,
    peer_problem,
    skipped_peers,
)
from rich.console import Console

from amplifier_anyio.bench import BenchConfig, render_tables, run_benchmarks
from tiers import needs

N = 10

# The library peers; the upstream rows need a checkout and are tested against a stand-in
# (test_upstream_loop_basic_turn_from_a_checkout).
LIBRARIES = [peer for peer in PEERS if not peer.name.startswith("upstream-loop-basic")]

CHECKOUT = extension()
"""The checkout's suites, tables and targets (``python -m benchmarks``)."""


async def _run(turn: Any) -> None:
    job = turn.prepare()
    await job()


def _installed(peer: Peer) -> None:
    problem = peer_problem(peer)
    if problem is not None:
        pytest.skip(f"{peer.name}: {problem}")


@pytest.mark.slow
@pytest.mark.parametrize("peer", LIBRARIES, ids=lambda peer: peer.name)
def test_peer_turn_runs_every_tool_call(peer: Peer) -> None:
    _installed(peer)
    turn = peer.turn(N, 0.0)
    anyio.run(_run, turn, backend="asyncio")
    turn.check()  # N tool results and the final answer


@pytest.mark.slow
@pytest.mark.parametrize("peer", LIBRARIES, ids=lambda peer: peer.name)
def test_peer_check_refuses_a_turn_with_missing_results(peer: Peer) -> None:
    _installed(peer)
    turn = peer.turn(N, 0.0)
    anyio.run(_run, turn, backend="asyncio")
    turn.n = N + 1  # the turn did N calls: the check must see one missing
    with pytest.raises(RuntimeError, match=f"{N}/{N + 1} tool results"):
        turn.check()


@pytest.mark.slow
@pytest.mark.parametrize("peer", LIBRARIES, ids=lambda peer: peer.name)
def test_peer_check_refuses_a_turn_that_did_not_run(peer: Peer) -> None:
    _installed(peer)
    turn = peer.turn(N, 0.0)
    turn.prepare()
    with pytest.raises(RuntimeError, match="has not run"):
        turn.check()


# An upstream-style loop-basic (amplifier-core's models and coordinator interface, the
# orchestrator's `execute` signature), standing in for a checkout of upstream's module:
# the tests never depend on a fetched repository.
STAND_IN = """\
import anyio
from amplifier_core.message_models import ChatRequest, Message


class BasicOrchestrator:
    def __init__(self, config):
        self.config = config

    async def execute(self, prompt, context, providers, tools, hooks, coordinator=None):
        provider = next(iter(providers.values()))
        await context.add_message({"role": "user", "content": prompt})
        while True:
            messages = await context.get_messages_for_request(provider=provider)
            request = ChatRequest(messages=[Message(**m) for m in messages[:1]])
            response = await provider.complete(request)
            calls = provider.parse_tool_calls(response)
            if not calls:
                return "".join(block.text for block in response.content)
            await context.add_message({"role": "assistant", "content": "", "tool_calls": [
                {"id": c.id, "tool": c.name, "arguments": c.arguments} for c in calls
            ]})
            results = {}

            async def run(call):
                coordinator.cancellation.register_tool_start(call.id, call.name)
                pre = await hooks.emit("tool:pre", {"tool_name": call.name})
                await coordinator.process_hook_result(pre, "tool:pre", call.name)
                result = await tools[call.name].execute(call.arguments)
                post = await hooks.emit("tool:post", {"tool_name": call.name})
                await coordinator.process_hook_result(post, "tool:post", call.name)
                results[call.id] = result.get_serialized_output()
                coordinator.cancellation.register_tool_complete(call.id)

            async with anyio.create_task_group() as tg:
                for call in calls:
                    tg.start_soon(run, call)
            for call in calls:
                await context.add_message(
                    {"role": "tool", "tool_call_id": call.id, "content": results[call.id]}
                )
"""

UPSTREAM = [peer for peer in PEERS if peer.name.startswith("upstream-loop-basic")]


@pytest.fixture
def checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    package = tmp_path / "amplifier_module_loop_basic"
    package.mkdir()
    (package / "__init__.py").write_text(STAND_IN, encoding="utf-8")
    monkeypatch.setenv(LOOP_BASIC_PATH_ENV, str(tmp_path))
    sys.modules.pop("amplifier_module_loop_basic", None)
    yield tmp_path
    sys.modules.pop("amplifier_module_loop_basic", None)


@needs("amplifier_core")
@pytest.mark.parametrize("peer", UPSTREAM, ids=lambda peer: peer.name)
def test_upstream_rows_need_a_checkout_named_by_the_environment(
    peer: Peer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(LOOP_BASIC_PATH_ENV, raising=False)
    assert f"{LOOP_BASIC_PATH_ENV} is not set" in (peer_problem(peer) or "")
    monkeypatch.setenv(LOOP_BASIC_PATH_ENV, str(tmp_path))  # an empty directory
    assert "holds no amplifier_module_loop_basic/__init__.py" in (peer_problem(peer) or "")


@needs("amplifier_core")
@pytest.mark.parametrize("bare", [False, True], ids=["amplifier-core", "bare"])
def test_upstream_loop_basic_turn_from_a_checkout(checkout: Path, bare: bool) -> None:
    assert all(peer_problem(peer) is None for peer in UPSTREAM)
    turn = UpstreamLoopBasicTurn(N, 0.0, bare=bare)
    anyio.run(_run, turn, backend="asyncio")
    turn.check()
    assert sys.modules["amplifier_module_loop_basic"].__file__ == str(
        checkout / "amplifier_module_loop_basic" / "__init__.py"
    )
    anyio.run(_run, turn, backend="asyncio")
    turn.n = N + 1
    with pytest.raises(RuntimeError, match=f"{N}/{N + 1} tool results"):
        turn.check()


def test_missing_package_is_a_stated_skip() -> None:
    ghost = Peer("ghost", ("amplifier_anyio_no_such_peer",), PEERS[0].turn)
    assert peer_problem(ghost) == (
        "amplifier_anyio_no_such_peer is not installed (pip install 'amplifier-anyio[peers]')"
    )


@pytest.mark.slow
def test_peer_rows_sit_in_the_fanout_cases_of_a_run() -> None:
    installed = [peer.name for peer in PEERS if peer_problem(peer) is None]
    if not installed:
        pytest.skip("no peer installed (pip install 'amplifier-anyio[peers]')")
    config = BenchConfig(
        sizes=(N,),
        delays=(0.0,),
        hook_counts=(0, 1),
        backends=("asyncio", "trio"),
        suites=("peers",),
        repeats=1,
        memory=False,
    )
    report = run_benchmarks(config, extension=CHECKOUT)
    by_key = {(c["backend"], c["hooks"]): c for c in report["fanout"]}
    assert sorted(by_key) == [("asyncio", 0), ("asyncio", 1), ("trio", 0), ("trio", 1)]
    peers = by_key["asyncio", 0]["peers"]
    assert list(peers) == installed
    for row in peers.values():
        assert row["median_s"] > 0
        assert row["ratio"] > 0
    # peers have no hooks: no rows at K > 0; asyncio only: none on trio, listed as skipped
    assert "peers" not in by_key["asyncio", 1]
    assert "peers" not in by_key["trio", 0]
    assert report["skipped_peers"] == skipped_peers(on_trio=True)
    assert all("asyncio only" in report["skipped_peers"][name] for name in installed)
    console = Console(width=200, record=True, force_terminal=False)
    render_tables(report, console, markdown=True, extension=CHECKOUT)
    text = console.export_text()
    assert "Fan-out against peers" in text
    for name in installed:
        assert f" {name} | " in text
        assert f"skipped peer {name}: runs on asyncio only" in text
