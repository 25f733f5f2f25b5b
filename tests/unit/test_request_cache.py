"""context-simple keeps the Message of each stored message for the requests built from it.

What a user sees: the request always matches the history, a caller's change to the dicts
it was given changes nothing, and an unchanged message is not converted again on the next
request (``request_view`` hands out the same models).
"""

from __future__ import annotations

from typing import Any

import pytest

from amplifier_anyio.bench import conversation
from amplifier_anyio.contexts import SimpleContextManager
from amplifier_anyio.models import Message
from amplifier_anyio.runtime import answer_orphaned_calls, build_request

pytestmark = pytest.mark.anyio


async def _request(context: SimpleContextManager, **kwargs: Any) -> list[Message]:
    return (await context.request_view(**kwargs)).messages


async def _dict_path(context: SimpleContextManager, **kwargs: Any) -> list[Message]:
    messages, _ = answer_orphaned_calls(await context.get_messages_for_request(**kwargs))
    return build_request(messages, None).messages


async def test_an_unchanged_message_is_converted_once() -> None:
    context = SimpleContextManager()
    await context.set_messages(conversation(9))
    first = await _request(context)
    await context.add_message({"role": "user", "content": "one more"})
    second = await _request(context)
    assert len(second) == len(first) + 1
    assert all(a is b for a, b in zip(first, second, strict=False))
    assert second[-1].content == "one more"


async def test_a_copy_changed_by_the_caller_changes_nothing() -> None:
    context = SimpleContextManager()
    await context.set_messages(conversation(5))
    await _request(context)  # fills the cache
    messages = await context.get_messages_for_request()
    messages[1]["content"] = "changed by the caller"
    request = build_request(messages, None)
    assert request.messages[1].content == "changed by the caller"
    # ... and the history, and the next request, are untouched
    again = await _request(context)
    assert again[1].content == conversation(5)[1]["content"]
    assert (await _dict_path(context))[1].content == conversation(5)[1]["content"]


async def test_a_request_list_is_the_callers_own() -> None:
    context = SimpleContextManager()
    await context.set_messages(conversation(5))
    first = await _request(context)
    first.append(Message(role="user", content="injected"))
    assert len(await _request(context)) == 5


async def test_set_messages_and_clear_forget_the_cache() -> None:
    context = SimpleContextManager()
    await context.set_messages([{"role": "user", "content": "before"}])
    assert (await _request(context))[0].content == "before"
    await context.set_messages([{"role": "user", "content": "after"}])
    assert (await _request(context))[0].content == "after"
    await context.clear()
    assert await _request(context) == []


async def test_a_compacted_view_matches_a_fresh_conversion() -> None:
    context = SimpleContextManager(max_tokens=400)
    await context.set_messages(conversation(60))
    for _ in range(2):  # the second request comes from the cache
        cached = await _request(context)
        assert cached == await _dict_path(context)
        assert len(cached) < 60


async def test_two_contexts_interleaved_each_get_their_own_messages() -> None:
    one, two = SimpleContextManager(), SimpleContextManager()
    await one.set_messages([{"role": "user", "content": "one"}])
    await two.set_messages([{"role": "user", "content": "two"}])
    view_one = await _request(one)
    view_two = await _request(two)
    assert view_one[0].content == "one"
    assert view_two[0].content == "two"
