"""Properties of the kept request view over random histories, growth and budgets.

For any history (tool calls answered or not, late, twice, by ``role: tool`` messages or
by ``tool_result`` blocks; system messages anywhere), any order of appends and requests
and any budgets: the models ``request_view`` hands out are exactly the dict path's
(``get_messages_for_request``, ``answer_orphaned_calls``, conversion) — what the turn
engine sent before it had the view —, every tool call in a request is answered right
after it, protected messages and tool pairs are kept whole, and without compaction the
view is the whole history.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amplifier_anyio.contexts import SimpleContextManager, is_compaction_notice
from amplifier_anyio.contexts.compaction import _units
from amplifier_anyio.runtime import answer_orphaned_calls, build_request
from tiers import examples

pytestmark = pytest.mark.anyio

_IDS = st.sampled_from([f"c{n}" for n in range(6)])
_TEXT = st.integers(min_value=0, max_value=400).map(lambda n: "w" * n)


def _message(kind: str, ids: list[str], text: str) -> dict[str, Any]:
    if kind == "calls":
        listed = [{"id": call_id, "name": "t", "arguments": {}} for call_id in ids]
        return {"role": "assistant", "content": text, "tool_calls": listed}
    if kind == "tool":
        return {"role": "tool", "tool_call_id": ids[0], "name": "t", "content": text}
    if kind == "blocks":  # an Anthropic-style answer inside a user message
        blocks = [{"type": "tool_result", "tool_call_id": i, "output": text} for i in ids]
        return {"role": "user", "content": blocks}
    return {"role": kind, "content": text}


_MESSAGES = st.builds(
    _message,
    st.sampled_from(["system", "user", "assistant", "calls", "calls", "tool", "tool", "blocks"]),
    st.lists(_IDS, min_size=1, max_size=3, unique=True),
    _TEXT,
)
_STEPS = st.lists(
    st.tuples(
        st.lists(_MESSAGES, max_size=6),
        st.sampled_from([None, 300, 800, 2_000, 10**6]),  # the request's token budget
    ),
    min_size=1,
    max_size=12,
)


def _label(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Make each message's content unique, so a view's messages name their history index."""
    counter = itertools.count()
    labelled = []
    for message in history:
        number = next(counter)
        if isinstance(message["content"], str):
            labelled.append({**message, "content": f"#{number} {message['content']}"})
        else:
            labelled.append({**message, "name": f"#{number}"})
    return labelled


def _answered_right_after(messages: list[Any]) -> bool:
    for index, message in enumerate(messages):
        if message.role != "assistant" or not message.tool_calls:
            continue
        answered = set()
        for following in messages[index + 1 :]:
            if following.role != "tool":
                break
            answered.add(following.tool_call_id)
        if any(call.id not in answered for call in message.tool_calls):
            return False
    return True


@given(
    steps=_STEPS,
    max_tokens=st.integers(min_value=200, max_value=3_000),
    threshold=st.sampled_from([0.5, 0.92, 1.0]),
    target=st.sampled_from([0.3, 0.5, 0.9]),
)
@settings(max_examples=examples(60), deadline=None)
async def test_the_view_is_the_dict_path_and_every_call_is_answered(
    steps: list[tuple[list[dict[str, Any]], int | None]],
    max_tokens: int,
    threshold: float,
    target: float,
) -> None:
    context = SimpleContextManager(
        max_tokens=max_tokens, compaction_threshold=threshold, target_usage=target
    )
    history: list[dict[str, Any]] = []
    labelled = _label([m for added, _ in steps for m in added])
    for drawn, budget in steps:
        added = labelled[len(history) : len(history) + len(drawn)]
        if added:
            await context.add_messages(added)
        history.extend(added)
        view = await context.request_view(token_budget=budget)
        dicts = await context.get_messages_for_request(token_budget=budget)
        repaired_dicts, repaired = answer_orphaned_calls(dicts)
        assert view.messages == build_request(repaired_dicts, None).messages
        assert list(view.repaired) == repaired
        assert _answered_right_after(view.messages)
        # the dicts are a subsequence of the history (plus at most one notice) that
        # keeps protected messages and whole units
        kept = [m for m in dicts if not is_compaction_notice(m)]
        assert len(dicts) - len(kept) <= 1
        positions = [history.index(m) for m in kept]
        assert positions == sorted(positions)
        units = _units(history)
        members = set(positions)
        for index in positions:
            assert all(i in members for i, u in enumerate(units) if u == units[index])
        first_user = next((i for i, m in enumerate(history) if m["role"] == "user"), None)
        for index, message in enumerate(history):
            if message["role"] == "system" or index == first_user:
                assert index in members
        if context.token_estimate <= threshold * context.resolve_budget(budget):
            assert dicts == history
    assert await context.get_messages() == history
