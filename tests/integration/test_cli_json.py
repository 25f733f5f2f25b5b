"""``run --json`` serialises every value a turn's result can carry: dollars (`Decimal`),
budget stops, errors, pending approvals with any input, every status."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import pytest
from typer.testing import CliRunner

from amplifier_anyio.cli import app
from amplifier_anyio.cli._common import turn_json
from amplifier_anyio.kernel._turns import PendingApproval, TurnResult, TurnStatus
from amplifier_anyio.models import Usage

PRICED = Usage(input_tokens=100, output_tokens=100, total_tokens=200, cost_usd=Decimal("0.0018"))

SHAPES = {
    "success": TurnResult(text="hi", status=TurnStatus.SUCCESS, turn_count=1, usage=PRICED),
    "unpriced": TurnResult(text="hi", status=TurnStatus.SUCCESS, usage=Usage(input_tokens=3)),
    "budget": TurnResult(
        text="",
        status=TurnStatus.INCOMPLETE,
        usage=PRICED,
        finish_reason="budget",
        problems=("budget: max_cost_usd: 0.001 reached (0.0018 spent)",),
    ),
    "no-progress": TurnResult(
        text="",
        status=TurnStatus.INCOMPLETE,
        finish_reason="no_progress",
        problems=("no_progress: read_file answered the same error 6 times in a row",),
    ),
    "error": TurnResult(text="", status=TurnStatus.ERROR, error=ValueError("bad\nthing")),
    "cancelled": TurnResult(text="", status=TurnStatus.CANCELLED, usage=PRICED),
    "awaiting": TurnResult(
        text="",
        status=TurnStatus.AWAITING_APPROVAL,
        pending_approvals=(
            PendingApproval(
                call_id="c1",
                tool="pay",
                input={
                    "amount": Decimal("2.50"),
                    "tags": ("a", "b"),
                    "set": {3},
                    "raw": b"x",
                    "usage": PRICED,
                    "nan": float("nan"),
                    "path": Path("/tmp"),
                },
                prompt="Pay?",
            ),
        ),
    ),
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_every_result_shape_is_plain_json(shape: str) -> None:
    text = json.dumps(turn_json(SHAPES[shape], "sid"), allow_nan=False)

    again = json.loads(text)
    assert again["status"] == str(SHAPES[shape].status)
    if SHAPES[shape].usage.cost_usd is not None:
        assert again["usage"]["cost_usd"] == "0.0018"  # exact: the Decimal's text
    if shape == "awaiting":
        [pending] = again["pending_approvals"]
        assert pending["input"]["amount"] == "2.50"
        assert pending["input"]["tags"] == ["a", "b"]
        assert pending["input"]["usage"]["cost_usd"] == "0.0018"


PLAN = """\
session: {{orchestrator: loop-basic, context: context-simple{budget}}}
providers:
  - module: provider-scripted
    config:
      pricing: {{input_per_mtok: 3, output_per_mtok: 15}}
      responses:
        - content: [{{type: tool_call, id: c1, name: demo_word_count, arguments: {{text: a b}}}}]
          tool_calls: [{{id: c1, name: demo_word_count, arguments: {{text: a b}}}}]
          usage: {{input_tokens: 100, output_tokens: 100, total_tokens: 200}}
          finish_reason: tool_use
        - content: [{{type: text, text: done}}]
          usage: {{input_tokens: 100, output_tokens: 100, total_tokens: 200}}
tools: [{{module: tool-demo, config: {{delay: 0}}}}]
"""


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@pytest.mark.parametrize(
    ("budget", "status", "cost"),
    [("", "success", "0.0036"), (", budget: {max_cost_usd: 0.001}", "incomplete", "0.0018")],
    ids=["priced", "dollar-budget-stop"],
)
def test_run_json_with_prices_and_a_dollar_budget(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    backend: str,
    budget: str,
    status: str,
    cost: str,
) -> None:
    (tmp_path / "plan.yaml").write_text(PLAN.format(budget=budget), encoding="utf-8")
    monkeypatch.chdir(tmp_path)

    args = ["run", "--backend", backend, "--plan", "plan.yaml", "--json", "count"]
    done = CliRunner().invoke(app, args)

    assert done.exit_code == 0, done.output
    result = json.loads(done.stdout)
    assert result["status"] == status
    assert result["usage"]["cost_usd"] == cost
    if status == "incomplete":
        assert result["finish_reason"] == "budget"
        assert result["problems"] == ["budget: max_cost_usd: 0.001 reached (0.0018 spent)"]
