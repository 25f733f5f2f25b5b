"""SimpleContextManager: history, budget, compaction trigger, events, concurrency, mount."""

from __future__ import annotations

import json
import re
from typing import Any

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

from amplifier_anyio.contexts import SimpleContextManager, is_compaction_notice
from amplifier_anyio.contexts._messages import estimate_tokens, to_model
from amplifier_anyio.contexts.simple import mount
from amplifier_anyio.errors import ConfigError, ValidationError
from amplifier_anyio.events import CONTEXT_POST_COMPACT, CONTEXT_PRE_COMPACT
from amplifier_anyio.models import Message, ProviderInfo, structure
from amplifier_anyio.testing import EventRecorder, MockCoordinator

pytestmark = pytest.mark.anyio


def size(message: Any) -> int:
    if is_compaction_notice(message):
        return 1
    return max(1, len(str(message.get("content", ""))))


class FakeProvider:
    def __init__(self, defaults: dict[str, Any] | Exception) -> None:
        self.defaults = defaults

    def get_info(self) -> ProviderInfo:
        if isinstance(self.defaults, Exception):
            raise self.defaults
        return ProviderInfo(id="fake", display_name="Fake", defaults=self.defaults)


async def filled(manager: SimpleContextManager, count: int, length: int = 10) -> None:
    await manager.add_message({"role": "system", "content": "sys"})
    await manager.add_message({"role": "user", "content": "first"})
    for i in range(count):
        await manager.add_message({"role": "user", "content": f"{i:0{length}d}"})


async def test_history_round_trip_and_copies_protect_it() -> None:
    manager = SimpleContextManager()
    original = {"role": "user", "content": "hi", "metadata": {"k": [1]}}
    await manager.add_message(original)
    original["metadata"]["k"].append(2)  # the caller keeps editing its dict
    got = await manager.get_messages()
    got[0]["content"] = "changed"
    got.append({"role": "user", "content": "extra"})
    assert await manager.get_messages() == [
        {"role": "user", "content": "hi", "metadata": {"k": [1]}}
    ]


async def test_a_message_of_strings_is_copied_too() -> None:
    manager = SimpleContextManager()
    original = {"role": "tool", "tool_call_id": "c1", "name": "t", "content": "ok"}
    await manager.add_messages([original])
    original["content"] = "changed by the caller"
    view = await manager.request_view()

    assert await manager.get_messages() == [
        {"role": "tool", "tool_call_id": "c1", "name": "t", "content": "ok"}
    ]
    assert view.messages[0].content == "ok"


_JSON_LEAF = st.one_of(st.text(), st.integers(), st.none(), st.booleans())


@given(
    st.dictionaries(
        st.one_of(st.text(), st.integers()),
        st.one_of(_JSON_LEAF, st.lists(_JSON_LEAF), st.dictionaries(st.text(), _JSON_LEAF)),
    )
)
def test_the_default_estimate_is_a_quarter_of_the_compact_json(message: dict[Any, Any]) -> None:
    text = json.dumps(message, ensure_ascii=False, separators=(",", ":"), default=str)

    assert estimate_tokens(message) == max(1, (len(text) + 3) // 4)


@given(
    st.sampled_from(["system", "user", "assistant", "tool", "developer", "nobody"]),
    st.dictionaries(st.sampled_from(["content", "name", "tool_call_id", "extra"]), st.text()),
)
def test_a_message_of_strings_converts_as_the_converter_converts_it(
    role: str, fields: dict[str, str]
) -> None:
    message = {"role": role, **fields}
    try:
        expected: Message | str = structure(message, Message)
    except ValidationError as exc:
        expected = str(exc)
    try:
        got: Message | str = to_model(message)
    except ValidationError as exc:
        got = str(exc)

    assert got == expected


async def test_set_messages_and_clear() -> None:
    manager = SimpleContextManager(estimator=size)
    await manager.set_messages(
        [{"role": "user", "content": "abc"}, {"role": "assistant", "content": "de"}]
    )
    assert [m["content"] for m in await manager.get_messages()] == ["abc", "de"]
    assert manager.token_estimate == 5
    await manager.clear()
    assert await manager.get_messages() == []
    assert manager.token_estimate == 0
    assert await manager.get_messages_for_request() == []


async def test_a_message_without_a_role_is_rejected() -> None:
    manager = SimpleContextManager()
    with pytest.raises(ValidationError, match="role"):
        await manager.add_message({"content": "x"})
    assert await manager.get_messages() == []


def test_bad_settings_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="compaction_threshold"):
        SimpleContextManager(compaction_threshold=1.5)
    with pytest.raises(ConfigError, match="max_tokens"):
        SimpleContextManager(max_tokens=0)


async def test_below_the_threshold_everything_is_sent() -> None:
    manager = SimpleContextManager(max_tokens=100, compaction_threshold=0.9, estimator=size)
    await filled(manager, 8)  # 3 + 5 + 80 = 88 <= 90
    assert len(await manager.get_messages_for_request()) == 10


async def test_above_the_threshold_the_view_is_cut_to_the_target() -> None:
    hooks = EventRecorder()
    manager = SimpleContextManager(
        max_tokens=100, compaction_threshold=0.9, target_usage=0.5, estimator=size, hooks=hooks
    )
    await filled(manager, 9)  # 98 tokens > 90
    view = await manager.get_messages_for_request()
    assert sum(size(m) for m in view) <= 50
    assert view[0]["content"] == "sys"
    assert view[1]["content"] == "first"
    assert [m["content"] for m in view[3:]] == [f"{i:010d}" for i in range(5, 9)]
    assert hooks.names() == [CONTEXT_PRE_COMPACT, CONTEXT_POST_COMPACT]
    pre, post = (data for _, data in hooks.events)
    assert pre == {"messages": 11, "tokens": 98, "budget": 100, "target": 50}
    assert post["messages_before"] == 11
    assert post["messages_after"] == len(view)
    assert post["messages_dropped"] == 5
    assert post["tokens_before"] == 98
    assert post["tokens_after"] == sum(size(m) for m in view)
    assert len(await manager.get_messages()) == 11


async def test_no_events_when_nothing_is_compacted() -> None:
    hooks = EventRecorder()
    manager = SimpleContextManager(max_tokens=10_000, estimator=size, hooks=hooks)
    await filled(manager, 3)
    await manager.get_messages_for_request()
    assert hooks.events == []


async def test_when_protected_messages_exceed_the_target_the_whole_budget_is_used() -> None:
    manager = SimpleContextManager(
        max_tokens=100, compaction_threshold=0.5, target_usage=0.2, estimator=size
    )
    await manager.add_message({"role": "system", "content": "s" * 30})
    await manager.add_message({"role": "user", "content": "first"})
    for i in range(6):
        await manager.add_message({"role": "user", "content": f"{i:09d}"})
    view = await manager.get_messages_for_request()
    # 35 protected > target 20: newest messages still fill the budget of 100
    assert [m["content"] for m in view if m["role"] == "user"][-1] == "000000005"
    assert sum(size(m) for m in view) <= 100


async def test_budget_comes_from_argument_then_provider_then_max_tokens() -> None:
    manager = SimpleContextManager(max_tokens=1234, safety_margin=100)
    provider = FakeProvider({"context_window": 10_000, "max_output_tokens": 2_000})
    assert manager.resolve_budget(500, provider) == 500
    assert manager.resolve_budget(None, provider) == 7_900
    assert manager.resolve_budget() == 1234
    assert manager.resolve_budget(None, FakeProvider({})) == 1234
    assert manager.resolve_budget(None, FakeProvider(RuntimeError("boom"))) == 1234
    tiny = FakeProvider({"context_window": 1000, "max_output_tokens": 1000})
    assert manager.resolve_budget(None, tiny) == 1234


async def test_provider_budget_drives_compaction() -> None:
    manager = SimpleContextManager(max_tokens=1_000_000, compaction_threshold=0.9, estimator=size)
    await filled(manager, 20)
    provider = FakeProvider({"context_window": 1200, "max_output_tokens": 1000})
    manager.safety_margin = 100  # budget 100
    view = await manager.get_messages_for_request(provider=provider)
    assert sum(size(m) for m in view) <= 50
    assert any(is_compaction_notice(m) for m in view)


async def test_estimates_are_made_once_per_message() -> None:
    calls = 0

    def counting(message: Any) -> int:
        nonlocal calls
        calls += 1
        return size(message)

    manager = SimpleContextManager(max_tokens=60, estimator=counting)
    await filled(manager, 10)
    after_adding = calls
    for _ in range(5):
        await manager.get_messages_for_request()
    assert after_adding == 12
    assert calls - after_adding <= 5 * 2  # only the notice is estimated per request


async def test_concurrent_adds_from_many_tasks_all_land() -> None:
    manager = SimpleContextManager(estimator=size)

    async def writer(task: int) -> None:
        for i in range(20):
            await manager.add_message({"role": "user", "content": f"{task}:{i}"})

    async with anyio.create_task_group() as tg:
        for task in range(25):
            tg.start_soon(writer, task)
    messages = await manager.get_messages()
    assert len(messages) == 500
    assert manager.token_estimate == sum(size(m) for m in messages)
    for task in range(25):  # each task's messages stay in its own order
        own = [m["content"] for m in messages if m["content"].startswith(f"{task}:")]
        assert own == [f"{task}:{i}" for i in range(20)]


async def test_a_failing_hook_does_not_cost_the_request() -> None:
    class Broken:
        async def emit(self, event: str, data: dict[str, Any]) -> None:
            raise RuntimeError("hook down")

    manager = SimpleContextManager(max_tokens=30, estimator=size, hooks=Broken())
    await filled(manager, 5)
    view = await manager.get_messages_for_request()
    assert view[0]["content"] == "sys"


async def test_mount_builds_from_config_and_uses_the_coordinators_hooks() -> None:
    coordinator = MockCoordinator()
    recorder = EventRecorder()
    recorder.attach(coordinator.hooks, events=[CONTEXT_PRE_COMPACT, CONTEXT_POST_COMPACT])
    cleanup = await mount(coordinator, {"max_tokens": 50, "compact_threshold": 0.5})
    assert cleanup is None
    manager = coordinator.get("context")
    assert isinstance(manager, SimpleContextManager)
    assert (manager.max_tokens, manager.compaction_threshold) == (50, 0.5)
    await filled(manager, 5)
    await manager.get_messages_for_request()
    assert recorder.names() == [CONTEXT_PRE_COMPACT, CONTEXT_POST_COMPACT]


async def test_mount_rejects_bad_config() -> None:
    with pytest.raises(ConfigError, match="target_usage"):
        await mount(MockCoordinator(), {"target_usage": 0})


FRACTION = "a number with 0 < value <= 1"
BAD_NUMBERS = [
    ("max_tokens", "lots", "a positive integer"),
    ("max_tokens", True, "a positive integer"),
    ("max_tokens", -5, "a positive integer"),
    ("max_tokens", 1.5, "a positive integer"),
    ("compaction_threshold", float("nan"), FRACTION),
    ("compaction_threshold", "0.5", FRACTION),
    ("compaction_threshold", True, FRACTION),
    ("compact_threshold", float("inf"), FRACTION),
    ("target_usage", -0.1, FRACTION),
    ("target_usage", [0.5], FRACTION),
    ("safety_margin", -1, "an integer >= 0"),
    ("safety_margin", 2.5, "an integer >= 0"),
    ("safety_margin", False, "an integer >= 0"),
]


@pytest.mark.parametrize(("key", "value", "expected"), BAD_NUMBERS)
async def test_mount_rejects_bad_numbers_naming_the_key(
    key: str, value: Any, expected: str
) -> None:
    coordinator = MockCoordinator()
    with pytest.raises(ConfigError) as info:
        await mount(coordinator, {key: value})
    assert str(info.value) == f"context-simple.{key}: expected {expected}, got {value!r}"
    assert coordinator.mount_history == []


@pytest.mark.parametrize(("key", "value", "expected"), BAD_NUMBERS)
def test_the_constructor_rejects_bad_numbers_too(key: str, value: Any, expected: str) -> None:
    key = "compaction_threshold" if key == "compact_threshold" else key
    with pytest.raises(ConfigError, match=rf"^{key}: expected {re.escape(expected)}, got "):
        SimpleContextManager(**{key: value})


async def test_null_config_values_mean_the_default() -> None:
    coordinator = MockCoordinator()
    await mount(coordinator, {"max_tokens": None, "compaction_threshold": None})
    manager = coordinator.get("context")
    assert (manager.max_tokens, manager.compaction_threshold) == (200_000, 0.92)
