"""HookRegistry: registration, ordering, the reduction of handler answers, and cancellation."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import pytest

from amplifier_anyio.events import GATE_EVENTS
from amplifier_anyio.kernel import HookAnswer, HookRegistry, trace_scope
from amplifier_anyio.kernel._foreign import module_scope
from amplifier_anyio.models import HookResult

pytestmark = pytest.mark.anyio

Calls = list[str]


def recording(calls: Calls, label: str, result: HookResult | None = None) -> Any:
    """An async handler that appends ``label`` to ``calls`` and answers ``result``."""

    async def handler(event: str, data: dict[str, Any]) -> HookResult | None:
        calls.append(label)
        return result

    return handler


def capturing(seen: list[dict[str, Any]], result: HookResult | None = None) -> Any:
    """An async handler that keeps a copy of the data it was given."""

    async def handler(event: str, data: dict[str, Any]) -> HookResult | None:
        seen.append(dict(data))
        return result

    return handler


# -- registration and order ------------------------------------------------------------------


async def test_handlers_run_in_ascending_priority() -> None:
    hooks = HookRegistry()
    calls: Calls = []
    hooks.register("e", recording(calls, "p10"), priority=10)
    hooks.register("e", recording(calls, "p-5"), priority=-5)
    hooks.register("e", recording(calls, "p0"))
    hooks.register("e", recording(calls, "p3"), priority=3)

    await hooks.emit("e", {})

    assert calls == ["p-5", "p0", "p3", "p10"]


async def test_equal_priorities_keep_registration_order() -> None:
    hooks = HookRegistry()
    calls: Calls = []
    for label in ("a", "b", "c", "d"):
        hooks.register("e", recording(calls, label), priority=1)
    hooks.register("e", recording(calls, "first"), priority=0)

    await hooks.emit("e", {})

    assert calls == ["first", "a", "b", "c", "d"]


async def test_handlers_only_see_their_own_event() -> None:
    hooks = HookRegistry()
    calls: Calls = []
    hooks.register("tool:pre", recording(calls, "pre"))
    hooks.register("tool:post", recording(calls, "post"))

    await hooks.emit("tool:post", {})

    assert calls == ["post"]


async def test_unregister_callable_removes_exactly_its_handler() -> None:
    hooks = HookRegistry()
    calls: Calls = []
    # Same name and same function object twice: only the registration matters.
    handler = recording(calls, "h")
    remove_first = hooks.register("e", handler, name="dup")
    hooks.register("e", handler, name="dup")
    hooks.register("e", recording(calls, "other"), name="other")

    remove_first()
    await hooks.emit("e", {})

    assert calls == ["h", "other"]
    assert hooks.list_handlers("e") == {"e": ["dup", "other"]}


async def test_unregister_callable_twice_is_a_no_op() -> None:
    hooks = HookRegistry()
    calls: Calls = []
    remove = hooks.register("e", recording(calls, "gone"))
    hooks.register("e", recording(calls, "kept"))

    remove()
    remove()
    await hooks.emit("e", {})

    assert calls == ["kept"]


async def test_unregister_by_name_removes_that_name_everywhere() -> None:
    hooks = HookRegistry()
    calls: Calls = []
    hooks.register("a", recording(calls, "a-x"), name="x")
    hooks.register("b", recording(calls, "b-x"), name="x")
    hooks.register("b", recording(calls, "b-y"), name="y")

    hooks.unregister("x")
    hooks.unregister("no-such-handler")
    await hooks.emit("a", {})
    await hooks.emit("b", {})

    assert calls == ["b-y"]
    assert hooks.list_handlers() == {"b": ["y"]}


async def test_on_is_an_alias_of_register() -> None:
    hooks = HookRegistry()
    calls: Calls = []
    remove = hooks.on("e", recording(calls, "late"), priority=5, name="late")
    hooks.on("e", recording(calls, "early"), priority=-1, name="early")

    await hooks.emit("e", {})
    remove()
    await hooks.emit("e", {})

    assert calls == ["early", "late", "early"]


def test_list_handlers_names_in_run_order() -> None:
    hooks = HookRegistry()

    async def handler(event: str, data: dict[str, Any]) -> None:
        return None

    hooks.register("tool:pre", handler, priority=5, name="late")
    hooks.register("tool:pre", handler, priority=-5, name="early")
    hooks.register("tool:post", handler)

    assert hooks.list_handlers("tool:pre") == {"tool:pre": ["early", "late"]}
    assert hooks.list_handlers("unknown:event") == {"unknown:event": []}
    everything = hooks.list_handlers()
    assert set(everything) == {"tool:pre", "tool:post"}
    assert everything["tool:pre"] == ["early", "late"]
    # An unnamed handler gets a generated name that still says which event it is for.
    (auto_name,) = everything["tool:post"]
    assert auto_name
    assert "tool:post" in auto_name


def test_generated_names_are_distinct() -> None:
    hooks = HookRegistry()

    async def handler(event: str, data: dict[str, Any]) -> None:
        return None

    hooks.register("e", handler)
    hooks.register("e", handler)

    names = hooks.list_handlers("e")["e"]
    assert len(set(names)) == 2


async def test_statistics_count_handlers_and_emits() -> None:
    hooks = HookRegistry()
    calls: Calls = []
    hooks.register("a", recording(calls, "a"))
    hooks.register("a", recording(calls, "a2"))
    hooks.register("b", recording(calls, "b"))

    await hooks.emit("a", {})
    await hooks.emit("nobody-listens", {})

    stats = hooks.statistics()
    assert stats.handlers == {"a": 2, "b": 1}
    assert stats.emits == 2
    assert hooks.has_handlers("a")
    assert not hooks.has_handlers("nobody-listens")


# -- reduction of answers ------------------------------------------------------------------


async def test_deny_short_circuits_and_is_returned() -> None:
    hooks = HookRegistry()
    calls: Calls = []
    deny = HookResult(action="deny", reason="blocked by policy")
    hooks.register("e", recording(calls, "first"), priority=0)
    hooks.register("e", recording(calls, "denier", deny), priority=1)
    hooks.register("e", recording(calls, "never"), priority=2)

    result = await hooks.emit("e", {"x": 1})

    assert calls == ["first", "denier"]
    assert result.action == "deny"
    assert result.reason == "blocked by policy"


async def test_deny_after_modify_still_denies() -> None:
    hooks = HookRegistry()
    hooks.register("e", recording([], "m", HookResult(action="modify", data={"x": 2})))
    hooks.register("e", recording([], "d", HookResult(action="deny", reason="no")), priority=1)

    result = await hooks.emit("e", {"x": 1})

    assert result.action == "deny"
    assert result.reason == "no"


async def test_modify_chains_and_emit_reports_modify() -> None:
    hooks = HookRegistry()
    seen: list[dict[str, Any]] = []

    async def add_one(event: str, data: dict[str, Any]) -> HookResult:
        return HookResult(action="modify", data={**data, "n": data["n"] + 1})

    async def double(event: str, data: dict[str, Any]) -> HookResult:
        return HookResult(action="modify", data={**data, "n": data["n"] * 2})

    hooks.register("e", add_one, priority=0)
    hooks.register("e", double, priority=1)
    hooks.register("e", capturing(seen), priority=2)

    result = await hooks.emit("e", {"n": 3})

    # (3 + 1) * 2: the second modifier saw the first one's data, the observer saw both.
    assert seen[0]["n"] == 8
    # Deliberate deviation from upstream: the caller learns the data was modified.
    assert result.action == "modify"
    assert result.data is not None
    assert result.data["n"] == 8


async def test_modify_replaces_the_whole_data() -> None:
    hooks = HookRegistry()
    seen: list[dict[str, Any]] = []
    hooks.register("e", recording([], "m", HookResult(action="modify", data={"only": True})))
    hooks.register("e", capturing(seen), priority=1)

    result = await hooks.emit("e", {"a": 1, "b": 2})

    assert seen == [{"only": True}]
    assert result.data == {"only": True}


async def test_modify_without_data_is_a_no_op() -> None:
    hooks = HookRegistry()
    seen: list[dict[str, Any]] = []
    hooks.register("e", recording([], "m", HookResult(action="modify", data=None)))
    hooks.register("e", capturing(seen), priority=1)

    result = await hooks.emit("e", {"a": 1})

    assert seen[0]["a"] == 1
    assert result.action == "continue"
    assert result.data is not None
    assert result.data["a"] == 1


async def test_continue_with_data_does_not_chain() -> None:
    hooks = HookRegistry()
    seen: list[dict[str, Any]] = []
    hooks.register("e", recording([], "c", HookResult(action="continue", data={"a": "changed"})))
    hooks.register("e", capturing(seen), priority=1)

    result = await hooks.emit("e", {"a": "original"})

    assert seen[0]["a"] == "original"
    assert result.action == "continue"
    assert result.data is not None
    assert result.data["a"] == "original"


async def test_injections_are_merged() -> None:
    hooks = HookRegistry()
    first = HookResult(
        action="inject_context", context_injection="first note", context_injection_role="user"
    )
    second = HookResult(
        action="inject_context",
        context_injection="second note",
        context_injection_role="assistant",
        ephemeral=True,
    )
    third = HookResult(
        action="inject_context", context_injection="third note", append_to_last_tool_result=True
    )
    for index, answer in enumerate((first, second, third)):
        hooks.register("e", recording([], str(index), answer), priority=index)

    result = await hooks.emit("e", {})

    assert result.action == "inject_context"
    assert result.context_injection == "first note\n\nsecond note\n\nthird note"
    assert result.context_injection_role == "user"
    assert result.ephemeral is True
    assert result.append_to_last_tool_result is True


async def test_merged_injection_flags_stay_off_when_no_handler_sets_them() -> None:
    hooks = HookRegistry()
    for index in range(2):
        answer = HookResult(action="inject_context", context_injection=f"note {index}")
        hooks.register("e", recording([], str(index), answer), priority=index)

    result = await hooks.emit("e", {})

    assert result.context_injection == "note 0\n\nnote 1"
    assert result.context_injection_role == "system"
    assert result.ephemeral is False
    assert result.append_to_last_tool_result is False


async def test_single_injection_is_returned_as_is() -> None:
    hooks = HookRegistry()
    only = HookResult(
        action="inject_context",
        context_injection="remember the budget",
        context_injection_role="user",
        user_message="budget reminder added",
        user_message_level="warning",
        suppress_output=True,
    )
    hooks.register("e", recording([], "inj", only))

    result = await hooks.emit("e", {})

    assert result == only


async def test_empty_injection_is_ignored() -> None:
    hooks = HookRegistry()
    hooks.register("e", recording([], "empty", HookResult(action="inject_context")))
    hooks.register(
        "e",
        recording([], "blank", HookResult(action="inject_context", context_injection="")),
        priority=1,
    )
    real = HookResult(action="inject_context", context_injection="real")
    hooks.register("e", recording([], "real", real), priority=2)

    result = await hooks.emit("e", {})

    assert result == real


async def test_only_empty_injections_give_continue() -> None:
    hooks = HookRegistry()
    hooks.register("e", recording([], "empty", HookResult(action="inject_context")))

    result = await hooks.emit("e", {"k": "v"})

    assert result.action == "continue"
    assert result.data is not None
    assert result.data["k"] == "v"


async def test_ask_user_wins_over_injections_and_later_handlers_still_run() -> None:
    hooks = HookRegistry()
    calls: Calls = []
    ask = HookResult(action="ask_user", approval_prompt="Run rm -rf?")
    inject = HookResult(action="inject_context", context_injection="note")
    hooks.register("e", recording(calls, "inject", inject), priority=0)
    hooks.register("e", recording(calls, "ask", ask), priority=1)
    hooks.register("e", recording(calls, "inject-later", inject), priority=2)

    result = await hooks.emit("e", {})

    assert calls == ["inject", "ask", "inject-later"]
    assert result == ask


async def test_first_ask_user_wins() -> None:
    hooks = HookRegistry()
    first = HookResult(action="ask_user", approval_prompt="first?")
    second = HookResult(action="ask_user", approval_prompt="second?")
    hooks.register("e", recording([], "2", second), priority=2)
    hooks.register("e", recording([], "1", first), priority=1)

    result = await hooks.emit("e", {})

    assert result.approval_prompt == "first?"


async def test_deny_beats_an_earlier_ask_user() -> None:
    hooks = HookRegistry()
    hooks.register("e", recording([], "ask", HookResult(action="ask_user")), priority=0)
    hooks.register("e", recording([], "deny", HookResult(action="deny", reason="r")), priority=1)

    result = await hooks.emit("e", {})

    assert result.action == "deny"


async def test_injection_after_modify_carries_the_modified_data() -> None:
    hooks = HookRegistry()
    hooks.register("e", recording([], "m", HookResult(action="modify", data={"v": 2})))
    hooks.register(
        "e",
        recording([], "i", HookResult(action="inject_context", context_injection="note")),
        priority=1,
    )

    result = await hooks.emit("e", {"v": 1})

    assert result.action == "inject_context"
    assert result.context_injection == "note"
    assert result.data == {"v": 2}


# -- data given to handlers ----------------------------------------------------------------


async def test_no_handler_returns_the_data_unchanged() -> None:
    hooks = HookRegistry()
    hooks.set_default_fields(session_id="s-1")
    data = {"prompt": "hi"}

    result = await hooks.emit("prompt:submit", data)

    assert result.action == "continue"
    # No defaults and no timestamp when nobody listens.
    assert result.data == {"prompt": "hi"}
    # The caller's dict is not handed back to be mutated by whoever reads the result.
    assert result.data is not data


async def test_handlers_get_defaults_data_and_timestamp() -> None:
    hooks = HookRegistry()
    seen: list[dict[str, Any]] = []
    hooks.register("e", capturing(seen))
    hooks.set_default_fields(session_id="s-1", parent_id=None)
    data = {"tool_name": "bash"}

    await hooks.emit("e", data)

    (got,) = seen
    assert set(got) == {"session_id", "parent_id", "tool_name", "timestamp"}
    assert got["session_id"] == "s-1"
    assert got["parent_id"] is None
    assert got["tool_name"] == "bash"
    # The caller's dict is not stamped in place.
    assert data == {"tool_name": "bash"}


async def test_timestamp_is_utc_iso_8601_and_current() -> None:
    hooks = HookRegistry()
    seen: list[dict[str, Any]] = []
    hooks.register("e", capturing(seen))

    before = datetime.now(UTC)
    await hooks.emit("e", {})
    after = datetime.now(UTC)

    stamped = datetime.fromisoformat(seen[0]["timestamp"])
    assert stamped.utcoffset() == timedelta(0)
    assert before <= stamped <= after


async def test_caller_cannot_override_the_timestamp() -> None:
    hooks = HookRegistry()
    seen: list[dict[str, Any]] = []
    hooks.register("e", capturing(seen))
    hooks.set_default_fields(timestamp="from-defaults")

    result = await hooks.emit("e", {"timestamp": "1999-01-01T00:00:00+00:00"})

    stamped = seen[0]["timestamp"]
    assert stamped not in ("1999-01-01T00:00:00+00:00", "from-defaults")
    assert datetime.fromisoformat(stamped).year >= 2024
    assert result.data is not None
    assert result.data["timestamp"] == stamped


async def test_set_default_fields_replaces_previous_defaults() -> None:
    hooks = HookRegistry()
    seen: list[dict[str, Any]] = []
    hooks.register("e", capturing(seen))

    hooks.set_default_fields(session_id="old", parent_id="p")
    hooks.set_default_fields(session_id="new")
    await hooks.emit("e", {})

    assert seen[0]["session_id"] == "new"
    assert "parent_id" not in seen[0]


async def test_explicit_data_wins_over_defaults() -> None:
    hooks = HookRegistry()
    seen: list[dict[str, Any]] = []
    hooks.register("e", capturing(seen))
    hooks.set_default_fields(session_id="default", parent_id="p")

    await hooks.emit("e", {"session_id": "explicit"})

    assert seen[0]["session_id"] == "explicit"
    assert seen[0]["parent_id"] == "p"


async def test_trace_id_is_added_inside_a_trace_scope_only() -> None:
    hooks = HookRegistry()
    seen: list[dict[str, Any]] = []
    hooks.register("e", capturing(seen))

    with trace_scope("trace-42"):
        await hooks.emit("e", {})
    await hooks.emit("e", {})

    assert seen[0]["trace_id"] == "trace-42"
    assert "trace_id" not in seen[1]


async def test_explicit_trace_id_wins_over_the_scope() -> None:
    hooks = HookRegistry()
    seen: list[dict[str, Any]] = []
    hooks.register("e", capturing(seen))

    with trace_scope("trace-42"):
        await hooks.emit("e", {"trace_id": "given"})

    assert seen[0]["trace_id"] == "given"


# -- misbehaving handlers ------------------------------------------------------------------


async def test_raising_handler_is_skipped_and_the_rest_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    hooks = HookRegistry()
    calls: Calls = []

    async def broken(event: str, data: dict[str, Any]) -> HookResult:
        calls.append("broken")
        raise RuntimeError("handler bug")

    hooks.register("e", broken, name="broken-hook")
    hooks.register("e", recording(calls, "after", HookResult(action="modify", data={"ok": 1})), 1)

    result = await hooks.emit("e", {})

    assert calls == ["broken", "after"]
    assert result.action == "modify"
    assert result.data == {"ok": 1}
    assert "broken-hook" in caplog.text


async def test_a_dict_answer_is_read_as_a_hook_result() -> None:
    # As amplifier-core does: a dict with an action is a verdict, and a deny stops the emit.
    hooks = HookRegistry()
    seen: list[dict[str, Any]] = []

    async def as_dict(event: str, data: dict[str, Any]) -> Any:
        return {"action": "deny", "reason": "no"}

    hooks.register("e", as_dict, name="as-dict")
    hooks.register("e", capturing(seen), priority=1)

    result = await hooks.emit("e", {"a": 1})

    assert seen == []
    assert (result.action, result.reason) == ("deny", "no")


async def test_an_answer_that_is_no_verdict_fails_closed_on_a_gate(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Never a silent continue: a hook guarding a tool must not let it run by returning junk.
    hooks = HookRegistry()
    seen: list[dict[str, Any]] = []

    async def wrong_type(event: str, data: dict[str, Any]) -> Any:
        return "allow"

    hooks.register("tool:pre", wrong_type, name="wrong-type")
    hooks.register("tool:pre", capturing(seen), priority=1)

    result = await hooks.emit("tool:pre", {"a": 1})

    assert seen == []
    assert result.action == "deny"
    assert "wrong-type" in (result.reason or "")
    assert "wrong-type" in caplog.text


@pytest.mark.parametrize("event", sorted(GATE_EVENTS))
async def test_a_raising_handler_denies_a_gate_naming_hook_and_module(
    event: str, caplog: pytest.LogCaptureFixture
) -> None:
    hooks = HookRegistry()
    seen: list[dict[str, Any]] = []

    async def guard(event: str, data: dict[str, Any]) -> Any:
        raise RuntimeError("the guard crashed")

    with module_scope("hooks-guard"):
        hooks.register(event, guard, name="guard")
    hooks.register(event, capturing(seen), priority=1)

    result = await hooks.emit(event, {"a": 1})

    assert result.action == "deny"
    assert "hook 'guard' of module 'hooks-guard'" in (result.reason or "")
    assert "the guard crashed" in (result.reason or "")
    assert seen == []  # a deny stops the chain
    assert "denied (fail closed)" in caplog.text


@pytest.mark.parametrize("answer", ["raise", "junk"])
async def test_a_failing_handler_is_skipped_on_an_observe_only_event(answer: str) -> None:
    hooks = HookRegistry()
    seen: list[dict[str, Any]] = []

    async def broken(event: str, data: dict[str, Any]) -> Any:
        if answer == "raise":
            raise RuntimeError("observer crashed")
        return "junk"

    hooks.register("tool:post", broken, name="broken")
    hooks.register("tool:post", capturing(seen), priority=1)

    result = await hooks.emit("tool:post", {"a": 1})

    assert result.action == "continue"
    assert len(seen) == 1


async def test_a_blocking_handler_runs_off_the_loop() -> None:
    # A handler registered blocking=True must not freeze the loop: a ticker keeps ticking.
    hooks = HookRegistry()
    release = threading.Event()
    ticks: list[int] = []

    def blocking(event: str, data: dict[str, Any]) -> HookResult:
        assert release.wait(10)
        return HookResult(action="modify", data={**data, "seen": True})

    hooks.register("tool:post", blocking, name="blocking", blocking=True)

    async def ticker() -> None:
        for n in range(5):
            ticks.append(n)
            await anyio.sleep(0.01)
        release.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(ticker)
        result = await hooks.emit("tool:post", {"a": 1})
    assert ticks == [0, 1, 2, 3, 4]
    assert result.action == "modify"
    assert result.data is not None
    assert result.data["seen"] is True


async def test_a_plain_handler_runs_on_the_loop_thread_a_blocking_one_off_it() -> None:
    hooks = HookRegistry()
    threads: list[int] = []
    hooks.register("e", lambda e, d: threads.append(threading.get_ident()))
    hooks.register("e", lambda e, d: threads.append(threading.get_ident()), blocking=True)
    await hooks.emit("e", {})
    assert threads[0] == threading.get_ident()
    assert threads[1] != threading.get_ident()


async def test_none_answer_is_continue() -> None:
    hooks = HookRegistry()
    calls: Calls = []
    hooks.register("e", recording(calls, "none", None))
    hooks.register("e", recording(calls, "after"), priority=1)

    result = await hooks.emit("e", {"a": 1})

    assert calls == ["none", "after"]
    assert result.action == "continue"


async def test_sync_handlers_work() -> None:
    hooks = HookRegistry()
    calls: Calls = []

    def sync_modify(event: str, data: dict[str, Any]) -> HookResult:
        calls.append("sync")
        return HookResult(action="modify", data={**data, "sync": True})

    def sync_none(event: str, data: dict[str, Any]) -> None:
        calls.append(f"sync-none saw sync={data['sync']}")

    hooks.register("e", sync_modify)
    hooks.register("e", sync_none, priority=1)

    result = await hooks.emit("e", {})

    assert calls == ["sync", "sync-none saw sync=True"]
    assert result.action == "modify"


async def test_sync_handler_returning_a_coroutine_is_awaited() -> None:
    hooks = HookRegistry()

    async def answer() -> HookResult:
        await anyio.lowlevel.checkpoint()
        return HookResult(action="deny", reason="from a coroutine")

    def factory(event: str, data: dict[str, Any]) -> Any:
        return answer()

    hooks.register("e", factory)

    result = await hooks.emit("e", {})

    assert result.reason == "from a coroutine"


async def test_callable_object_handler_works() -> None:
    hooks = HookRegistry()

    class Handler:
        async def __call__(self, event: str, data: dict[str, Any]) -> HookResult:
            await anyio.lowlevel.checkpoint()
            return HookResult(action="deny", reason=f"object saw {event}")

    hooks.register("e", Handler())

    result = await hooks.emit("e", {})

    assert result.reason == "object saw e"


# -- cancellation ----------------------------------------------------------------------------


async def test_cancel_scope_around_emit_stops_the_running_handler() -> None:
    hooks = HookRegistry()
    calls: Calls = []
    started = anyio.Event()

    async def slow(event: str, data: dict[str, Any]) -> HookResult:
        calls.append("slow started")
        started.set()
        await anyio.sleep_forever()
        calls.append("slow finished")
        return HookResult()

    hooks.register("e", slow)
    hooks.register("e", recording(calls, "later"), priority=1)
    propagated: list[bool] = []
    scope = anyio.CancelScope()

    async def emitter() -> None:
        with scope:
            try:
                await hooks.emit("e", {})
            except anyio.get_cancelled_exc_class():
                propagated.append(True)
                raise
            calls.append("emit returned")

    async with anyio.create_task_group() as tg:
        tg.start_soon(emitter)
        await started.wait()
        scope.cancel()

    assert scope.cancelled_caught
    assert propagated == [True]
    assert calls == ["slow started"]


async def test_deadline_around_emit_is_not_taken_for_a_handler_failure() -> None:
    hooks = HookRegistry()
    calls: Calls = []

    async def hangs(event: str, data: dict[str, Any]) -> HookResult:
        await anyio.sleep_forever()
        return HookResult()

    hooks.register("e", hangs)
    hooks.register("e", recording(calls, "later"), priority=1)

    with anyio.move_on_after(0.05) as scope:
        await hooks.emit("e", {})
        calls.append("emit returned")

    # Had the registry treated the cancellation as an ordinary error, "later" would have run
    # and emit would have returned inside the expired scope.
    assert scope.cancelled_caught
    assert calls == []


# -- emit_and_collect ------------------------------------------------------------------------


async def test_emit_and_collect_gathers_data_from_every_handler() -> None:
    hooks = HookRegistry()
    calls: Calls = []
    hooks.register("e", recording(calls, "a", HookResult(data={"from": "a"})))
    hooks.register(
        "e", recording(calls, "deny", HookResult(action="deny", data={"from": "deny"})), 1
    )
    hooks.register("e", recording(calls, "none", None), 2)
    hooks.register("e", recording(calls, "no-data", HookResult(action="modify")), 3)
    hooks.register("e", recording(calls, "b", HookResult(action="modify", data={"from": "b"})), 4)

    collected = await hooks.emit_and_collect("e", {"q": 1})

    # A deny does not stop the others: every answer is collected, in order.
    assert calls == ["a", "deny", "none", "no-data", "b"]
    assert collected == [{"from": "a"}, {"from": "deny"}, {"from": "b"}]
    assert all(isinstance(item, dict) for item in collected)


async def test_emit_and_collect_skips_raising_handlers() -> None:
    hooks = HookRegistry()

    async def broken(event: str, data: dict[str, Any]) -> HookResult:
        raise ValueError("boom")

    hooks.register("e", broken)
    hooks.register("e", recording([], "ok", HookResult(data={"ok": True})), 1)

    assert await hooks.emit_and_collect("e", {}) == [{"ok": True}]


async def test_emit_and_collect_stamps_nothing() -> None:
    hooks = HookRegistry()
    seen: list[dict[str, Any]] = []
    hooks.register("e", capturing(seen))
    hooks.set_default_fields(session_id="s-1")

    with trace_scope("trace-1"):
        await hooks.emit_and_collect("e", {"tool_name": "bash"})

    assert seen == [{"tool_name": "bash"}]


async def test_emit_and_collect_answers_gives_whole_answers_with_registration_order() -> None:
    hooks = HookRegistry()
    deny = HookResult(action="deny", reason="no")
    vote = HookResult(action="modify", data={"tool": "grep"}, priority=3)
    hooks.register("e", recording([], "late", deny), 5, name="late")  # registered first
    hooks.register("e", recording([], "none", None), 1, name="none")
    hooks.register("e", recording([], "early", vote), 0, name="early")

    answers = await hooks.emit_and_collect("e", {}, answers=True)

    # In the order they ran; None answers are left out; registration order is kept.
    assert [(a.handler, a.result) for a in answers] == [("early", vote), ("late", deny)]
    assert answers[1].registered < answers[0].registered
    assert all(isinstance(a, HookAnswer) for a in answers)


async def test_emit_and_collect_without_handlers_is_empty() -> None:
    hooks = HookRegistry()

    assert await hooks.emit_and_collect("e", {"a": 1}) == []


# -- snapshot semantics ----------------------------------------------------------------------


async def test_handler_registered_during_emit_runs_from_the_next_emit() -> None:
    hooks = HookRegistry()
    calls: Calls = []

    async def registrar(event: str, data: dict[str, Any]) -> None:
        calls.append("registrar")
        if len(calls) == 1:
            hooks.register(event, recording(calls, "newcomer"), priority=100)

    hooks.register("e", registrar)

    await hooks.emit("e", {})
    assert calls == ["registrar"]

    await hooks.emit("e", {})
    assert calls == ["registrar", "registrar", "newcomer"]


async def test_handler_unregistered_during_emit_still_runs_in_that_emit() -> None:
    hooks = HookRegistry()
    calls: Calls = []

    async def remover(event: str, data: dict[str, Any]) -> None:
        calls.append("remover")
        remove_victim()

    hooks.register("e", remover)
    remove_victim = hooks.register("e", recording(calls, "victim"), priority=1)

    await hooks.emit("e", {})
    await hooks.emit("e", {})

    assert calls == ["remover", "victim", "remover"]
