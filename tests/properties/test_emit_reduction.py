"""Property: ``emit`` reduces any mix of handler answers by the documented precedence.

deny > ask_user > inject_context > modify > continue; handlers run in ascending priority
(ties in registration order) and none runs after a deny. The expected outcome is computed
by a small reference model written straight from the rules, independent of the registry.
"""

from __future__ import annotations

from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amplifier_anyio.kernel import HookRegistry
from amplifier_anyio.models import HookResult

pytestmark = pytest.mark.anyio


@attrs.frozen
class Spec:
    """One handler of a generated scenario: when it runs and what it answers."""

    priority: int
    answer: HookResult | None


# Injections are drawn more often: merging needs several of them in one scenario.
ACTIONS = (
    *("none", "continue", "deny", "modify", "ask_user"),
    *("inject_context", "inject_context", "inject_context"),
)
ROLES = ("system", "user", "assistant")


def answer(draw: st.DrawFn, index: int) -> HookResult | None:
    """Every kind of answer, including the no-op variants (no data, empty injection)."""
    tag = f"h{index}"
    action = draw(st.sampled_from(ACTIONS))
    if action == "none":
        return None
    if action == "continue":
        return HookResult(data={"c": tag} if draw(st.booleans()) else None)
    if action == "deny":
        return HookResult(action="deny", reason=f"deny {tag}")
    if action == "modify":
        return HookResult(action="modify", data={"m": tag} if draw(st.booleans()) else None)
    if action == "ask_user":
        return HookResult(action="ask_user", approval_prompt=f"ask {tag}")
    return HookResult(
        action="inject_context",
        context_injection=draw(st.sampled_from([f"note {tag}", f"note {tag}", ""])),
        context_injection_role=draw(st.sampled_from(ROLES)),
        ephemeral=draw(st.booleans()),
        append_to_last_tool_result=draw(st.booleans()),
        # Kept by a single injection, dropped by a merge.
        user_message=draw(st.sampled_from([None, f"shown by {tag}"])),
    )


@st.composite
def scenarios(draw: st.DrawFn) -> list[Spec]:
    """Up to ten handlers with small (often equal, sometimes negative) priorities."""
    size = draw(st.integers(min_value=0, max_value=10))
    return [
        Spec(priority=draw(st.integers(min_value=-2, max_value=2)), answer=answer(draw, i))
        for i in range(size)
    ]


@attrs.frozen
class Expected:
    """What the rules say: which handlers run, and the decisive parts of the result."""

    ran: list[int]
    deny: HookResult | None
    ask: HookResult | None
    injections: list[HookResult]
    modified: dict[str, Any] | None


def reference(specs: list[Spec]) -> Expected:
    """The precedence rules, applied by hand."""
    order = sorted(range(len(specs)), key=lambda i: (specs[i].priority, i))
    ran: list[int] = []
    ask: HookResult | None = None
    injections: list[HookResult] = []
    modified: dict[str, Any] | None = None
    for index in order:
        ran.append(index)
        answer = specs[index].answer
        if answer is None:
            continue
        if answer.action == "deny":
            return Expected(ran, answer, ask, injections, modified)
        if answer.action == "modify" and answer.data is not None:
            modified = answer.data
        elif answer.action == "inject_context" and answer.context_injection:
            injections.append(answer)
        elif answer.action == "ask_user" and ask is None:
            ask = answer
    return Expected(ran, None, ask, injections, modified)


def check_injection(result: HookResult, expected: Expected) -> None:
    injections = expected.injections
    assert result.action == "inject_context"
    assert result.context_injection == "\n\n".join(r.context_injection or "" for r in injections)
    assert result.context_injection_role == injections[0].context_injection_role
    assert result.ephemeral == any(r.ephemeral for r in injections)
    assert result.append_to_last_tool_result == any(
        r.append_to_last_tool_result for r in injections
    )
    if expected.modified is not None:
        assert result.data == expected.modified
    if len(injections) == 1:
        assert attrs.evolve(result, data=None) == attrs.evolve(injections[0], data=None)


# Merges need several injections and no deny or ask_user in one scenario, which is rare
# per example: run three times the profile's examples (cheap: no I/O, no sleeping).
@settings(max_examples=settings().max_examples * 3)
@given(scenarios())
async def test_emit_follows_the_precedence(specs: list[Spec]) -> None:
    hooks = HookRegistry()
    ran: list[int] = []

    def handler_for(index: int, answer: HookResult | None) -> Any:
        async def handler(event: str, data: dict[str, Any]) -> HookResult | None:
            ran.append(index)
            return answer

        return handler

    for index, spec in enumerate(specs):
        hooks.register("e", handler_for(index, spec.answer), priority=spec.priority)

    result = await hooks.emit("e", {"original": True})
    expected = reference(specs)

    assert ran == expected.ran
    if expected.deny is not None:
        assert result == expected.deny
    elif expected.ask is not None:
        # The first ask_user wins and still carries any modified data (DESIGN §5): the
        # caller applies it after approval, so a sandboxing modify is never lost.
        assert attrs.evolve(result, data=None) == attrs.evolve(expected.ask, data=None)
        if expected.modified is not None:
            assert result.data == expected.modified
        else:
            assert result.data == expected.ask.data
    elif expected.injections:
        check_injection(result, expected)
    elif expected.modified is not None:
        assert result.action == "modify"
        assert result.data == expected.modified
    else:
        assert result.action == "continue"
        assert result.data is not None
        assert result.data["original"] is True
