"""The plan's ``agents:`` section (DESIGN §14): upstream's overlay merge, validation that
names a bad agent, the capabilities an opened session registers, ``run --agent`` and
``sessions show``'s tree."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from amplifier_anyio import AmplifierSession, ConfigError, validate_plan
from amplifier_anyio.cli import app
from amplifier_anyio.cli.sessions import project_sessions_dir
from amplifier_anyio.session._agents import merge_overlay

pytestmark = pytest.mark.anyio

PARENT: dict[str, Any] = {
    "session": {"orchestrator": "loop-basic", "context": "context-simple"},
    "providers": [{"module": "provider-scripted", "config": {"latency": 0, "name": "scripted"}}],
    "tools": [{"module": "tool-demo", "config": {"delay": 0.5}}, {"module": "tool-task"}],
    "agents": {
        "quick": {
            "description": "Fast tools.",
            "instruction": "Be quick.",
            "tools": [{"module": "tool-demo", "config": {"delay": 0}}, "tool-bash"],
            "session": {"max_agent_depth": 1},
            "agents": ["slow"],
        },
        "slow": {"description": "Slow.", "agents": "none"},
    },
}


def test_the_overlay_merges_entries_by_module_and_appends_the_rest() -> None:
    child = merge_overlay(PARENT, PARENT["agents"]["quick"])
    assert child["tools"] == [
        {"module": "tool-demo", "config": {"delay": 0}},
        {"module": "tool-task"},
        {"module": "tool-bash"},
    ]
    assert child["session"] == {
        "orchestrator": "loop-basic",
        "context": "context-simple",
        "max_agent_depth": 1,
    }
    assert list(child["agents"]) == ["slow"]  # the agent's filter
    assert "description" not in child
    assert "instruction" not in child
    assert merge_overlay(PARENT, PARENT["agents"]["slow"])["agents"] == {}
    assert PARENT["tools"][0]["config"] == {"delay": 0.5}  # the parent is not changed


async def test_an_opened_session_offers_the_agent_capabilities() -> None:
    async with AmplifierSession(PARENT) as session:
        coordinator = session.coordinator
        listed = coordinator.get_capability("agents.list")()
        one = coordinator.get_capability("agents.get")("quick")
        assert coordinator.get_capability("agents.get")("nobody") is None
        assert callable(coordinator.get_capability("session.spawn"))
        assert callable(coordinator.get_capability("session.resume"))
        assert coordinator.session is session
        assert coordinator.session_id == session.session_id
        assert set(coordinator.config["agents"]) == {"quick", "slow"}
        description = coordinator.get("tools")["task"].description
    assert listed == [
        {"name": "quick", "description": "Fast tools."},
        {"name": "slow", "description": "Slow."},
    ]
    assert one["instruction"] == "Be quick."
    assert "- quick: Fast tools." in description
    assert "- slow: Slow." in description
    assert session.lane == "root"
    assert session.depth == 0


async def test_a_session_without_agents_registers_nothing() -> None:
    plan = {k: v for k, v in PARENT.items() if k != "agents"}
    async with AmplifierSession(plan) as session:
        assert session.coordinator.get_capability("session.spawn") is None


BAD_AGENTS: dict[str, Any] = {
    **PARENT,
    "agents": {
        "ok": {"description": "Fine."},
        "listy": ["not", "a", "table"],
        "wordy": {"description": ["a", "list"]},
        "broken": {"description": "Bad tools.", "tools": [{"config": {}}]},
        "missing": {"description": "Unknown module.", "tools": [{"module": "tool-nowhere"}]},
        "greedy": {"description": "Bad budget.", "session": {"budget": {"max_tokens": -5}}},
    },
}


async def test_validate_names_each_bad_agent() -> None:
    report = await validate_plan(BAD_AGENTS)
    errors = "\n".join(report.errors)
    assert "agents.listy: expected a table, got a list" in errors
    assert "agents.wordy.description: expected a string, got a list" in errors
    assert "agents.broken: tools[2].module: required" in errors
    assert "agents.missing: tool 'tool-nowhere'" in errors
    assert "agents.greedy: session.budget.max_tokens: expected an integer > 0, got -5" in errors
    assert "agents.ok" not in errors
    assert not report.ok


async def test_a_session_with_a_bad_agent_does_not_start() -> None:
    with pytest.raises(ConfigError, match=r"agents\.listy: expected a table"):
        async with AmplifierSession(BAD_AGENTS):
            pass  # pragma: no cover


async def test_bad_limits_are_config_errors_naming_the_key() -> None:
    plan = {**PARENT, "session": {**PARENT["session"], "max_agent_depth": -1}}
    with pytest.raises(ConfigError, match=r"session\.max_agent_depth: expected an integer >= 0"):
        async with AmplifierSession(plan):
            pass  # pragma: no cover
    report = await validate_plan(plan)
    assert any("session.max_agent_depth" in e for e in report.errors)


async def test_agent_files_are_reported_not_dropped_silently() -> None:
    report = await validate_plan({**PARENT, "agents": "all"})
    assert any("names agent files, which are not supported" in w for w in report.warnings)
    strict = await validate_plan({**PARENT, "agents": "all"}, strict=True)
    assert any("names agent files" in e for e in strict.errors)


def test_validate_prints_the_bad_agent(tmp_path: Path) -> None:
    path = tmp_path / "plan.json.yaml"
    path.write_text(json.dumps(BAD_AGENTS))
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 2, result.output
    assert "agents.wordy.description: expected a string" in result.stderr


AGENT_PLAN = textwrap.dedent(
    """
    session: {orchestrator: loop-basic, context: context-simple}
    providers:
      - module: provider-scripted
        config:
          responses: [{content: [{type: text, text: "root answer"}]}]
    agents:
      poet:
        description: Writes verse.
        instruction: You only answer in verse.
        providers:
          - module: provider-scripted
            config:
              responses: [{content: [{type: text, text: "roses are red"}]}]
    """
)


def test_run_agent_runs_the_agent_as_the_root(tmp_path: Path) -> None:
    path = tmp_path / "plan.yaml"
    path.write_text(AGENT_PLAN)
    result = CliRunner().invoke(app, ["run", "--plan", str(path), "--agent", "poet", "hi"])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "roses are red"
    plain = CliRunner().invoke(app, ["run", "--plan", str(path), "hi"])
    assert plain.stdout.strip() == "root answer"
    missing = CliRunner().invoke(app, ["run", "--plan", str(path), "--agent", "nobody", "hi"])
    assert missing.exit_code == 2
    assert "--agent nobody: the plan has no such agent (its agents: poet)" in missing.stderr


def test_sessions_show_draws_the_tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AMPLIFIER_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    sessions = tmp_path / "home" / "projects"
    root = "aaaa1111"
    child = f"{root}-{'1' * 16}_researcher"
    grandchild = f"{child}-{'2' * 16}_writer"
    directory = project_sessions_dir()
    assert str(directory).startswith(str(sessions))
    for session_id, parent, agent, prompt in (
        (root, None, None, "the question"),
        (child, root, "researcher", "find it"),
        (grandchild, child, "writer", "write it"),
    ):
        folder = directory / session_id
        folder.mkdir(parents=True)
        line = json.dumps({"role": "user", "content": prompt})
        (folder / "context-messages.jsonl").write_text(line + "\n")
        if parent is not None:
            metadata = {"session_id": session_id, "parent_id": parent, "agent_name": agent}
            (folder / "metadata.json").write_text(json.dumps(metadata))
    result = CliRunner().invoke(app, ["sessions", "show", root])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    tree = lines[lines.index("sub-agents:") + 1 :]
    assert tree == [
        f"  └─ researcher  {child}  1 msgs  find it",
        f"     └─ writer  {grandchild}  1 msgs  write it",
    ]
    shown = CliRunner().invoke(app, ["sessions", "show", child])
    assert f"sub-agent session of {root}" in shown.stdout


CHAT_PLAN = textwrap.dedent(
    """
    session: {orchestrator: loop-basic, context: context-simple}
    providers:
      - module: provider-scripted
        config:
          responses:
            - tool_calls: [{id: t0, name: task, arguments: {agent: researcher, instruction: dig}}]
            - content: [{type: text, text: "root answer"}]
    tools: [{module: tool-task}]
    agents:
      researcher:
        description: Finds facts.
        providers:
          - module: provider-scripted
            config:
              responses:
                - content: [{type: text, text: "facts"}]
                  usage: {input_tokens: 1200, output_tokens: 34, total_tokens: 1234}
    """
)


def test_chat_shows_sub_agents_compactly_and_sessions_show_draws_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AMPLIFIER_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "plan.yaml"
    path.write_text(CHAT_PLAN)
    result = CliRunner().invoke(app, ["chat", "--plan", str(path)], input="go\n/exit\n")
    assert result.exit_code == 0, result.output
    assert "  ↳ researcher started" in result.stderr
    assert "  ↳ researcher done: success, 1 calls, 1 234 tokens" in result.stderr
    assert "root answer" in result.stdout
    listed = CliRunner().invoke(app, ["sessions", "list", "--json"])
    sessions = [json.loads(line) for line in listed.stdout.splitlines()]
    (root,) = sessions  # one row per root session, its children nested
    (child,) = root["sub_sessions"]
    assert child["title"] == "dig"
    assert child["session_id"].startswith(f"{root['session_id']}-")
    shown = CliRunner().invoke(app, ["sessions", "show", root["session_id"]])
    assert f"  └─ researcher  {child['session_id']}  2 msgs  dig" in shown.stdout


def priced_plan(max_cost: float) -> dict[str, Any]:
    """Every token costs one dollar; the root spends 2, its child 3."""
    pricing = {"input_per_mtok": 1_000_000, "output_per_mtok": 0}
    task_call = {"id": "t0", "name": "task", "arguments": {"agent": "clerk", "instruction": "x"}}
    return {
        "session": {
            "orchestrator": "loop-basic",
            "context": "context-simple",
            "budget": {"max_cost_usd": max_cost},
        },
        "providers": [
            {
                "module": "provider-scripted",
                "config": {
                    "pricing": pricing,
                    "responses": [
                        {"tool_calls": [task_call], "usage": {"input_tokens": 2}},
                        {"content": [{"type": "text", "text": "paid"}]},
                    ],
                },
            }
        ],
        "tools": [{"module": "tool-task"}],
        "agents": {
            "clerk": {
                "description": "Costs money.",
                "providers": [
                    {
                        "module": "provider-scripted",
                        "config": {
                            "responses": [
                                {
                                    "content": [{"type": "text", "text": "done"}],
                                    "usage": {"input_tokens": 3},
                                }
                            ]
                        },
                    }
                ],
            }
        },
    }


async def test_dollars_from_pricing_flow_up_and_a_cost_budget_ends_the_turn() -> None:
    completed: list[dict[str, Any]] = []

    async def record(event: str, data: dict[str, Any]) -> None:
        completed.append(data)

    async with AmplifierSession(priced_plan(100.0), strict=True) as session:
        session.coordinator.hooks.register("task:agent_completed", record)
        result = await session.run("spend")
        spent = session.coordinator.turn.budget.cost_usd
    assert result.text == "paid"
    assert spent == pytest.approx(5.0)  # the root's 2 and the child's 3 (pricing inherited)
    assert completed[0]["cost_usd"] == pytest.approx(3.0)

    async with AmplifierSession(priced_plan(4.0)) as session:
        result = await session.run("spend")
    assert result.status.value == "incomplete"
    assert result.finish_reason == "budget"
    assert any("max_cost_usd: 4 reached (5 spent)" in p for p in result.problems)


def twins_plan(tape: Path, mode: str, scripted: bool) -> dict[str, Any]:
    """One reply starts the agent ``twin`` twice (different instructions), then answers."""

    def script(*responses: dict[str, Any]) -> list[dict[str, Any]]:
        return list(responses) if scripted else []  # replaying: a provider asked would fail

    calls = [
        {"id": f"t{i}", "name": "task", "arguments": {"agent": "twin", "instruction": text}}
        for i, text in enumerate(("left", "right"))
    ]
    return {
        "session": {
            "orchestrator": "loop-basic",
            "context": "context-simple",
            "cassette": {"path": str(tape), "mode": mode},
        },
        "providers": [
            {
                "module": "provider-scripted",
                "config": {
                    "responses": script(
                        {"tool_calls": calls}, {"content": [{"type": "text", "text": "both"}]}
                    )
                },
            }
        ],
        "tools": [{"module": "tool-task"}],
        "agents": {
            "twin": {
                "description": "Says its side.",
                "providers": [
                    {
                        "module": "provider-scripted",
                        "config": {
                            "responses": script({"content": [{"type": "text", "text": "ok"}]})
                        },
                    }
                ],
            }
        },
    }


async def test_one_agent_started_twice_in_a_batch_records_two_lanes_and_replays(
    tmp_path: Path,
) -> None:
    tape = tmp_path / "tape.jsonl"
    async with AmplifierSession(twins_plan(tape, "record", scripted=True)) as session:
        recorded = await session.run("go")
    records = [json.loads(line) for line in tape.read_text().splitlines()]
    lanes = sorted({record["lane"] for record in records if "lane" in record})  # a header too
    assert lanes == ["root", "root/twin@t0", "root/twin@t1"]
    async with AmplifierSession(twins_plan(tape, "replay", scripted=False)) as session:
        replayed = await session.run("go")
    assert recorded.text == replayed.text == "both"
    assert replayed.status.value == "success"
