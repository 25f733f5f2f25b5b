"""The budget keeps its promises (docs/agents.md, "The budget tree"): once spent, no call
starts anywhere in the tree; calls in flight finish and are counted, and the problem line
says what was really spent; dollars reach ``TurnResult.usage.cost_usd``; a dollar budget
that could not count is a ConfigError; prices in the wrong place say where they go."""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

import anyio
import pytest
from _agents_kit import HANG_GUARD, Children, answer, calls, parent_reply, plan, task

from amplifier_anyio import AmplifierSession, ChatRequest, ChatResponse, TurnStatus
from amplifier_anyio.errors import ConfigError
from amplifier_anyio.providers.scripted import ScriptedProvider
from amplifier_anyio.session._validation import validate_plan

pytestmark = pytest.mark.anyio

CHILDREN = 10


async def test_calls_in_flight_are_counted_and_the_problem_line_says_what_was_spent() -> None:
    """Ten children answer at once, 300 tokens each, under a 1 000-token budget: whatever
    the backend lets finish is counted, the line names that sum, and no child starts a
    second call or a tool call."""
    arrived = 0
    go = anyio.Event()
    probes: list[str] = []

    async def reply(request: ChatRequest) -> ChatResponse:
        nonlocal arrived
        if len(request.messages) > 2:  # a second call: must never start
            return answer("again", tokens=300)
        arrived += 1
        if arrived == CHILDREN:
            go.set()
        with anyio.fail_after(HANG_GUARD):
            await go.wait()
        return calls(("probe", {}), tokens=300)

    providers: list[ScriptedProvider] = []

    def child_provider(child: AmplifierSession) -> ScriptedProvider:
        providers.append(ScriptedProvider(reply))
        return providers[-1]

    def probe(child: AmplifierSession) -> Any:
        async def body() -> str:
            probes.append(child.session_id)
            return "probed"

        return body

    children = Children({"researcher": child_provider}, probe)
    first = calls(*[task("researcher", f"part {i}") for i in range(CHILDREN)])
    parent = ScriptedProvider(parent_reply(first))
    budget = {"budget": {"max_tokens": 1000}}
    async with AmplifierSession(plan(session=budget)) as session:
        session.child_setup.append(children)
        await session.coordinator.mount("providers", parent, name="scripted")
        result = await session.run("split the work")
        meter = session.coordinator.turn.budget

    assert result.status is TurnStatus.INCOMPLETE
    assert result.finish_reason == "budget"
    [line] = [p for p in result.problems if p.startswith("budget:")]
    spent = int(re.fullmatch(r"budget: max_tokens: 1000 reached \((\d+) spent\)", line)[1])
    assert spent == meter.tokens == result.usage.total_tokens
    assert spent >= 1000
    assert spent <= 1000 - 1 + 300 * CHILDREN  # the bound of docs/agents.md
    assert probes == []  # no tool call started once the budget was spent
    assert all(len(p.requests) == 1 for p in providers)  # nor a second provider call


def priced_entry_plan(**session: Any) -> dict[str, Any]:
    return {
        "session": {"orchestrator": "loop-basic", "context": "context-simple", **session},
        "providers": [
            {
                "module": "provider-scripted",
                "config": {"pricing": {"input_per_mtok": 3, "output_per_mtok": 15}},
            }
        ],
    }


async def test_usage_cost_usd_is_filled_from_the_plan_entrys_prices() -> None:
    """A provider that does not price its calls (an upstream one): the plan entry's
    ``config.pricing`` prices them for the budget and for ``TurnResult.usage``."""
    unpriced = ScriptedProvider([answer("hi", tokens=1000)])
    async with AmplifierSession(priced_entry_plan()) as session:
        await session.coordinator.mount("providers", unpriced, name="scripted")
        result = await session.run("hello")

    assert result.usage.cost_usd == Decimal("0.003")  # 1 000 input tokens at $3 per million
    assert session.coordinator.turn.budget.cost_usd == pytest.approx(0.003)


async def test_a_dollar_budget_without_prices_is_a_config_error_naming_the_key() -> None:
    bare = {
        "session": {
            "orchestrator": "loop-basic",
            "context": "context-simple",
            "budget": {"max_cost_usd": 1.0},
        },
        "providers": [{"module": "provider-scripted", "config": {"demo": True}}],
    }
    with pytest.raises(ConfigError, match=r"session\.budget\.max_cost_usd: provider"):
        async with AmplifierSession(bare):
            pass
    report = await validate_plan(bare)
    assert any(
        "session.budget.max_cost_usd: provider 'provider-scripted' has no prices" in e
        and "providers[0].config.pricing" in e
        for e in report.errors
    )

    by_model = priced_entry_plan(budget={"max_cost_usd": 1.0})
    by_model["providers"][0]["config"] = {
        "model": "big",
        "pricing": {"small": {"input_per_mtok": 1, "output_per_mtok": 2}},
    }
    report = await validate_plan(by_model)
    assert any("has no price for model 'big'" in e for e in report.errors)

    async with AmplifierSession(priced_entry_plan(budget={"max_cost_usd": 1.0})):
        pass  # priced: fine


async def test_pricing_beside_the_module_is_an_error_that_says_where_it_goes() -> None:
    misplaced = {
        "session": {"orchestrator": "loop-basic", "context": "context-simple"},
        "providers": [
            {
                "module": "provider-scripted",
                "pricing": {"input_per_mtok": 3, "output_per_mtok": 15},
                "config": {"demo": True},
            }
        ],
    }
    where = r"providers\[0\]\.pricing: prices go in the provider's config"
    with pytest.raises(ConfigError, match=where + r" \(providers\[0\]\.config\.pricing\)"):
        async with AmplifierSession(misplaced):
            pass
    report = await validate_plan(misplaced)
    assert any("providers[0].config.pricing" in e for e in report.errors)
