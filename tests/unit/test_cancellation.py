"""CancellationToken: forward-only states, children, tool tracking, callbacks, bound scopes."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from amplifier_anyio.kernel import CancellationState, CancellationToken

pytestmark = pytest.mark.anyio


def snapshot(token: CancellationToken) -> tuple[str, bool, bool, bool]:
    return (token.state, token.is_cancelled, token.is_graceful, token.is_immediate)


# -- states ----------------------------------------------------------------------------------


def test_new_token_is_not_cancelled() -> None:
    token = CancellationToken()

    assert snapshot(token) == ("none", False, False, False)
    assert token.state is CancellationState.NONE


def test_none_graceful_immediate_and_never_back() -> None:
    token = CancellationToken()

    assert token.request_graceful() is True
    assert snapshot(token) == ("graceful", True, True, False)
    assert token.request_graceful() is False

    assert token.request_immediate() is True
    assert snapshot(token) == ("immediate", True, False, True)
    assert token.request_immediate() is False
    assert token.request_graceful() is False
    assert snapshot(token) == ("immediate", True, False, True)


def test_immediate_straight_from_none() -> None:
    token = CancellationToken()

    assert token.request_immediate() is True
    assert token.request_graceful() is False
    assert token.state == "immediate"


def test_request_cancellation_is_graceful() -> None:
    token = CancellationToken()

    assert token.request_cancellation() is True
    assert token.is_graceful


def test_states_compare_equal_to_upstream_strings() -> None:
    assert [str(s) for s in CancellationState] == ["none", "graceful", "immediate"]
    assert CancellationState.GRACEFUL == "graceful"


# -- children --------------------------------------------------------------------------------


def test_children_registered_before_a_request_follow_it() -> None:
    parent, child, grandchild = CancellationToken(), CancellationToken(), CancellationToken()
    parent.register_child(child)
    child.register_child(grandchild)

    parent.request_graceful()
    assert (child.state, grandchild.state) == ("graceful", "graceful")

    parent.request_immediate()
    assert (child.state, grandchild.state) == ("immediate", "immediate")


@pytest.mark.parametrize("level", ["graceful", "immediate"])
def test_child_registered_after_a_request_takes_the_state_at_once(level: str) -> None:
    parent, child = CancellationToken(), CancellationToken()
    if level == "graceful":
        parent.request_graceful()
    else:
        parent.request_immediate()

    parent.register_child(child)

    assert child.state == level


def test_child_registered_while_graceful_still_gets_a_later_immediate() -> None:
    parent, child = CancellationToken(), CancellationToken()
    parent.request_graceful()
    parent.register_child(child)

    parent.request_immediate()

    assert child.is_immediate


def test_child_cancellation_does_not_reach_the_parent() -> None:
    parent, child = CancellationToken(), CancellationToken()
    parent.register_child(child)

    child.request_immediate()

    assert not parent.is_cancelled


def test_unregistered_child_is_left_alone() -> None:
    parent, child, other = CancellationToken(), CancellationToken(), CancellationToken()
    parent.register_child(child)
    parent.register_child(other)

    parent.unregister_child(child)
    parent.unregister_child(child)  # twice is harmless
    parent.request_immediate()

    assert not child.is_cancelled
    assert other.is_immediate


# -- reset -----------------------------------------------------------------------------------


async def test_a_token_is_never_reset_and_runs_each_callback_once() -> None:
    token = CancellationToken()
    fired: list[str] = []
    token.on_cancel(lambda: fired.append("first"))
    token.request_immediate()
    assert not hasattr(token, "reset")  # a new turn gets a new token instead

    await token.trigger_callbacks()
    token.on_cancel(lambda: fired.append("late"))
    await token.trigger_callbacks()
    await token.trigger_callbacks()

    assert fired == ["first", "late"]
    assert token.is_immediate  # like a trio Event: cancelled stays cancelled


async def test_request_runs_the_callbacks_before_it_cancels_the_scopes() -> None:
    token = CancellationToken()
    seen: list[str] = []

    async def slow_callback() -> None:
        await anyio.lowlevel.checkpoint()  # would raise if the scope were cancelled first
        seen.append("async callback")

    token.on_cancel(lambda: seen.append("sync callback"))
    token.on_cancel(slow_callback)
    with anyio.CancelScope() as scope, token.bind_scope(scope):
        await token.request(immediate=True)
        seen.append("not reached")  # the request's own checkpoint delivers the cancel

    assert seen == ["sync callback", "async callback"]
    assert scope.cancelled_caught
    assert await token.request(immediate=True) is False


# -- running tools ---------------------------------------------------------------------------


def test_running_tools_are_tracked() -> None:
    token = CancellationToken()
    token.register_tool_start("call-1", "bash")
    token.register_tool_start("call-2", "read_file")
    token.register_tool_start("call-3", "bash")

    token.register_tool_complete("call-2")
    token.register_tool_complete("never-started")

    assert token.running_tools == {"call-1", "call-3"}
    assert sorted(token.running_tool_names) == ["bash", "bash"]


def test_running_tools_is_a_copy() -> None:
    token = CancellationToken()
    token.register_tool_start("call-1", "bash")

    token.running_tools.clear()
    token.running_tool_names.clear()

    assert token.running_tools == {"call-1"}
    assert token.running_tool_names == ["bash"]


# -- callbacks -------------------------------------------------------------------------------


async def test_callbacks_sync_and_async_run_in_order() -> None:
    token = CancellationToken()
    fired: list[str] = []

    async def async_callback() -> None:
        await anyio.lowlevel.checkpoint()
        fired.append("async")

    token.on_cancel(lambda: fired.append("sync"))
    token.on_cancel(async_callback)
    token.on_cancel(lambda: fired.append("sync again"))

    await token.trigger_callbacks()

    assert fired == ["sync", "async", "sync again"]


async def test_failing_callback_does_not_stop_the_others(
    caplog: pytest.LogCaptureFixture,
) -> None:
    token = CancellationToken()
    fired: list[str] = []

    def broken() -> None:
        raise RuntimeError("callback bug")

    async def broken_async() -> None:
        await anyio.lowlevel.checkpoint()
        raise ValueError("async callback bug")

    token.on_cancel(broken)
    token.on_cancel(broken_async)
    token.on_cancel(lambda: fired.append("still runs"))

    await token.trigger_callbacks()

    assert fired == ["still runs"]
    assert "callback bug" in caplog.text


async def test_requests_alone_do_not_run_callbacks() -> None:
    token = CancellationToken()
    fired: list[str] = []
    token.on_cancel(lambda: fired.append("callback"))

    token.request_graceful()
    token.request_immediate()

    assert fired == []


async def test_cancel_scope_around_trigger_callbacks_propagates() -> None:
    token = CancellationToken()
    fired: list[str] = []
    started = anyio.Event()

    async def hangs() -> None:
        started.set()
        await anyio.sleep_forever()

    token.on_cancel(hangs)
    token.on_cancel(lambda: fired.append("after"))
    scope = anyio.CancelScope()

    async def trigger() -> None:
        with scope:
            await token.trigger_callbacks()
            fired.append("returned")

    async with anyio.create_task_group() as tg:
        tg.start_soon(trigger)
        await started.wait()
        scope.cancel()

    assert scope.cancelled_caught
    assert fired == []


# -- statistics ------------------------------------------------------------------------------


async def test_statistics_snapshot() -> None:
    token = CancellationToken()
    token.register_child(CancellationToken())
    token.on_cancel(lambda: None)
    token.on_cancel(lambda: None)
    token.register_tool_start("call-1", "bash")
    token.request_graceful()

    with anyio.CancelScope() as scope, token.bind_scope(scope):
        await anyio.lowlevel.checkpoint()
        inside = token.statistics()
    after = token.statistics()

    assert inside.state == "graceful"
    assert (inside.running_tools, inside.children, inside.callbacks) == (1, 1, 2)
    assert inside.bound_scopes == 1
    assert after.bound_scopes == 0


# -- bound scopes, on virtual time -----------------------------------------------------------


class TestBoundScopes:
    """``bind_scope`` turns ``request_immediate()`` into a real cancellation."""

    @pytest.fixture
    def anyio_backend(
        self, virtual_backend: tuple[str, dict[str, object]]
    ) -> tuple[str, dict[str, object]]:
        return virtual_backend

    @pytest.fixture
    def unit(self, anyio_backend: tuple[str, dict[str, object]]) -> float:
        """One scenario second: virtual on trio, a twentieth of a real one on asyncio."""
        return 1.0 if "clock" in anyio_backend[1] else 0.05

    @pytest.fixture
    def virtual(self, anyio_backend: tuple[str, dict[str, object]]) -> bool:
        return "clock" in anyio_backend[1]

    async def test_request_immediate_interrupts_a_bound_scope(
        self, unit: float, virtual: bool
    ) -> None:
        token = CancellationToken()
        outcome: dict[str, Any] = {}

        async def turn() -> None:
            start = anyio.current_time()
            with anyio.CancelScope() as scope, token.bind_scope(scope):
                await anyio.sleep(100 * unit)
                outcome["slept to the end"] = True
            outcome["cancelled"] = scope.cancelled_caught
            outcome["elapsed"] = anyio.current_time() - start

        async with anyio.create_task_group() as tg:
            tg.start_soon(turn)
            await anyio.sleep(1 * unit)
            assert token.request_immediate() is True

        assert "slept to the end" not in outcome
        assert outcome["cancelled"] is True
        # A ratio, not a deadline: interrupted near 1 of 100 scenario seconds.
        assert outcome["elapsed"] < 50 * unit
        if virtual:
            assert outcome["elapsed"] == pytest.approx(1.0, abs=1e-9)

    async def test_graceful_does_not_interrupt_a_bound_scope(self, unit: float) -> None:
        token = CancellationToken()
        finished: list[bool] = []

        async def turn() -> None:
            with anyio.CancelScope() as scope, token.bind_scope(scope):
                await anyio.sleep(2 * unit)
                finished.append(True)

        async with anyio.create_task_group() as tg:
            tg.start_soon(turn)
            await anyio.sleep(1 * unit)
            token.request_graceful()

        assert finished == [True]

    async def test_binding_when_already_immediate_cancels_at_once(
        self, unit: float, virtual: bool
    ) -> None:
        token = CancellationToken()
        token.request_immediate()
        reached: list[bool] = []

        start = anyio.current_time()
        with anyio.CancelScope() as scope, token.bind_scope(scope):
            await anyio.sleep(10 * unit)
            reached.append(True)
        elapsed = anyio.current_time() - start

        assert scope.cancelled_caught
        assert reached == []
        if virtual:
            assert elapsed == 0

    async def test_every_bound_scope_is_cancelled(self, unit: float) -> None:
        token = CancellationToken()
        cancelled: list[str] = []

        async def turn(label: str) -> None:
            with anyio.CancelScope() as scope, token.bind_scope(scope):
                await anyio.sleep(100 * unit)
            if scope.cancelled_caught:
                cancelled.append(label)

        async with anyio.create_task_group() as tg:
            for label in ("a", "b", "c"):
                tg.start_soon(turn, label)
            await anyio.sleep(1 * unit)
            token.request_immediate()

        assert sorted(cancelled) == ["a", "b", "c"]

    async def test_parent_request_cancels_a_scope_bound_to_a_child(self, unit: float) -> None:
        parent, child = CancellationToken(), CancellationToken()
        parent.register_child(child)
        reached: list[bool] = []

        async def sub_session_turn() -> None:
            with anyio.CancelScope() as scope, child.bind_scope(scope):
                await anyio.sleep(100 * unit)
                reached.append(True)

        async with anyio.create_task_group() as tg:
            tg.start_soon(sub_session_turn)
            await anyio.sleep(1 * unit)
            parent.request_immediate()

        assert reached == []

    async def test_scope_unbinds_on_exit(self, unit: float) -> None:
        token = CancellationToken()

        with anyio.CancelScope() as finished_turn, token.bind_scope(finished_turn):
            await anyio.sleep(1 * unit)
        assert token.statistics().bound_scopes == 0

        token.request_immediate()

        assert not finished_turn.cancel_called

    async def test_scope_unbinds_when_the_block_raises(self) -> None:
        token = CancellationToken()

        scope = anyio.CancelScope()

        async def failing_turn() -> None:
            with scope, token.bind_scope(scope):
                await anyio.lowlevel.checkpoint()
                raise RuntimeError("turn failed")

        with pytest.raises(RuntimeError, match="turn failed"):
            await failing_turn()

        assert token.statistics().bound_scopes == 0
        token.request_immediate()
        assert not scope.cancel_called


# -- reasons -------------------------------------------------------------------------------


class Target:
    """A `Cancellable` that is not a cancel scope: records the reasons it was given."""

    def __init__(self) -> None:
        self.reasons: list[str | None] = []

    def cancel(self, reason: str | None = None) -> None:
        self.reasons.append(reason)


def test_an_immediate_request_gives_its_reason_to_bound_targets_and_children() -> None:
    token, child, target = CancellationToken(), CancellationToken(), Target()
    token.register_child(child)
    child_target = Target()
    with token.bind_scope(target), child.bind_scope(child_target):
        assert token.reason is None
        token.request_graceful()
        assert token.reason is None  # graceful cancels nothing
        token.request_immediate("budget spent: max_tokens")
        token.request_immediate("a second request changes nothing")

    assert token.reason == "budget spent: max_tokens"
    assert target.reasons == ["budget spent: max_tokens"]
    assert (
        child.reason == child_target.reasons[0] == "parent turn cancelled: budget spent: max_tokens"
    )
    late = CancellationToken()
    token.register_child(late)
    assert late.reason == "parent turn cancelled: budget spent: max_tokens"


def test_a_target_bound_to_an_immediate_token_hears_its_reason() -> None:
    token, target = CancellationToken(), Target()
    token.request_immediate()  # no reason given: the token says so
    with token.bind_scope(target) as bound:
        assert bound is target
    assert target.reasons == ["cancellation token: immediate request"]


async def test_the_reason_reaches_the_cancelled_code(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("DEBUG", logger="amplifier_anyio.kernel._cancellation")
    token = CancellationToken()
    seen: list[str] = []

    async def call() -> None:
        with anyio.CancelScope() as scope, token.bind_scope(scope):
            try:
                await anyio.sleep_forever()
            except anyio.get_cancelled_exc_class() as exc:
                seen.append(str(exc))
                raise

    async with anyio.create_task_group() as tg:
        tg.start_soon(call)
        await anyio.wait_all_tasks_blocked()
        await token.request(immediate=True, reason="host: the user closed the tab")

    [message] = seen
    assert "host: the user closed the tab" in message
    assert caplog.messages == ["turn cancelled immediately: host: the user closed the tab"]
