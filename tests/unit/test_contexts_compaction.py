"""compact(): the ideas of upstream's tool-pair and progressive compaction tests, as our own."""

from __future__ import annotations

import copy
from typing import Any

from amplifier_anyio.contexts import compact, compaction_notice, is_compaction_notice


def size(message: Any) -> int:
    """A predictable estimator: 1 token per character of content; a notice costs 1."""
    if is_compaction_notice(message):
        return 1
    content = message.get("content")
    return max(1, len(content) if isinstance(content, str) else 10)


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def assistant(text: str, *call_ids: str) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if call_ids:
        message["tool_calls"] = [{"id": i, "name": "read", "arguments": {}} for i in call_ids]
    return message


def tool(call_id: str, text: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def without_notice(view: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [m for m in view if not is_compaction_notice(m)]


NOTICE = size(compaction_notice(100))  # 1


def test_tool_call_in_the_keep_window_brings_its_older_result_along() -> None:
    # upstream scenario A/B: the window boundary falls between a call and its result
    messages = [
        {"role": "system", "content": "s"},
        user("first"),
        user("x" * 500),
        assistant("", "c1"),
        tool("c1", "r" * 40),
        user("latest"),
    ]
    budget = 1 + 5 + 10 + 40 + 6 + NOTICE
    view = without_notice(compact(messages, budget, size))
    assert view == [messages[0], messages[1], messages[3], messages[4], messages[5]]


def test_a_result_that_does_not_fit_takes_its_call_with_it() -> None:
    messages = [user("first"), assistant("", "c1"), tool("c1", "r" * 300), user("latest")]
    view = without_notice(compact(messages, 5 + 6 + NOTICE + 50, size))
    assert view == [messages[0], messages[3]]


def test_six_tool_calls_keep_all_six_results_adjacent() -> None:
    ids = [f"c{i}" for i in range(6)]
    messages = [
        user("first"),
        user("y" * 1000),
        assistant("", *ids),
        *[tool(i, "out") for i in ids],
        user("go on"),
    ]
    view = compact(messages, 5 + 10 + 6 * 3 + 5 + NOTICE, size)
    call_at = next(i for i, m in enumerate(view) if m.get("tool_calls"))
    assert [m.get("tool_call_id") for m in view[call_at + 1 : call_at + 7]] == ids
    assert messages[1] not in view


def test_an_assistant_with_some_results_missing_is_dropped_with_the_ones_present() -> None:
    messages = [
        user("first"),
        assistant("", "a", "b"),
        tool("a", "r" * 100),  # "b" never answered
        user("z" * 30),
    ]
    view = without_notice(compact(messages, 5 + 30 + NOTICE, size))
    assert view == [messages[0], messages[3]]


def test_tool_results_found_by_id_even_when_not_adjacent() -> None:
    messages = [
        user("first"),
        assistant("", "a"),
        user("interleaved"),
        tool("a", "late result"),
        user("q" * 10),
    ]
    view = without_notice(compact(messages, 5 + 11 + 10 + NOTICE, size))
    assert all(m.get("tool_call_id") != "a" for m in view)
    assert all(not m.get("tool_calls") for m in view)


def test_content_block_tool_calls_and_results_are_paired_too() -> None:
    messages = [
        user("first"),
        {"role": "assistant", "content": [{"type": "tool_call", "id": "b1", "name": "f"}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_call_id": "b1", "output": 1}]},
        user("w" * 20),
    ]
    view = without_notice(compact(messages, 5 + 10 + 20 + NOTICE, size))
    # the block result alone (10 tokens) would fit, but not without its call
    assert view == [messages[0], messages[3]]


def test_system_messages_survive_extreme_pressure_and_stay_first() -> None:
    messages = [
        {"role": "system", "content": "S" * 5000},
        user("first"),
        *[assistant("a" * 100) for _ in range(20)],
        user("last"),
    ]
    view = compact(messages, 10, size)
    assert view[0] is messages[0]
    assert messages[1] in view
    assert all(m["role"] != "assistant" for m in view)


def test_progressive_pressure_keeps_a_shrinking_newest_suffix() -> None:
    messages = [user("first"), *[user(f"m{i:03d}") for i in range(50)]]
    kept_counts = []
    for budget in (200, 120, 60, 30):
        view = without_notice(compact(messages, budget + NOTICE, size))
        assert view[0] is messages[0]
        assert view[1:] == messages[len(messages) - (len(view) - 1) :]
        kept_counts.append(len(view))
    assert kept_counts == sorted(kept_counts, reverse=True)
    assert len(set(kept_counts)) == 4


def test_history_is_not_modified_and_one_notice_counts_the_dropped() -> None:
    messages = [user("first"), *[user("n" * 50) for _ in range(10)], user("tail")]
    before = copy.deepcopy(messages)
    view = compact(messages, 5 + 4 + NOTICE, size)
    assert messages == before
    notices = [m for m in view if is_compaction_notice(m)]
    assert len(notices) == 1
    assert notices[0]["metadata"]["dropped"] == 10
    assert view.index(notices[0]) == 1  # right where the first dropped message was


def test_no_notice_when_it_would_not_fit() -> None:
    messages = [user("first"), user("n" * 50), user("tail")]
    view = compact(messages, 5, size)  # the protected message fills the budget
    assert view == [messages[0]]


def test_everything_fits_gives_an_equal_list_of_the_same_objects() -> None:
    messages = [user("first"), assistant("", "c"), tool("c", "ok")]
    view = compact(messages, 1000, size)
    assert view == messages
    assert view is not messages
    assert all(a is b for a, b in zip(view, messages, strict=True))


def test_empty_history_stays_empty() -> None:
    assert compact([], 0, size) == []
