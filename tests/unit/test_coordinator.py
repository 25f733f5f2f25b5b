"""ModuleCoordinator: mount points, capabilities, contributions, cleanup, cancel requests and
the handling of hook results (injections, approvals, user messages)."""

from __future__ import annotations

import types
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import anyio
import pytest

from amplifier_anyio.errors import (
    AmplifierError,
    ApprovalTimeoutError,
    InjectionTooLargeError,
    MountError,
)
from amplifier_anyio.events import CANCEL_REQUESTED
from amplifier_anyio.kernel import MOUNT_POINTS, HookRegistry, ModuleCoordinator
from amplifier_anyio.models import HookResult
from amplifier_anyio.testing import (
    MockContextManager,
    RecordingDisplaySystem,
    ScriptedApprovalSystem,
)

pytestmark = pytest.mark.anyio


def make_coordinator(session_config: dict[str, Any] | None = None, **kwargs: Any) -> Any:
    """A coordinator for a fake session whose ``session`` config section is given."""
    session = types.SimpleNamespace(
        session_id="sess-1", parent_id="parent-1", config={"session": session_config or {}}
    )
    return ModuleCoordinator(session, **kwargs)


class Named:
    """A module with a ``name``, as providers and tools have."""

    def __init__(self, name: str) -> None:
        self.name = name


class Fatal(BaseException):
    """Stands in for KeyboardInterrupt / SystemExit without disturbing the event loop."""


# -- mount points ----------------------------------------------------------------------------


def test_mount_points_start_empty_with_the_registry_at_hooks() -> None:
    coordinator = make_coordinator()

    assert tuple(coordinator.mount_points) == MOUNT_POINTS
    assert coordinator.mount_points == {
        "orchestrator": None,
        "providers": {},
        "tools": {},
        "context": None,
        "hooks": coordinator.hooks,
        "module-source-resolver": None,
    }
    assert isinstance(coordinator.get("hooks"), HookRegistry)


async def test_mount_to_an_unknown_point_is_refused() -> None:
    coordinator = make_coordinator()

    with pytest.raises(MountError, match="Unknown mount point: agents"):
        await coordinator.mount("agents", object())
    with pytest.raises(MountError, match="Unknown mount point: agents"):
        await coordinator.unmount("agents")
    with pytest.raises(MountError, match="Unknown mount point: agents"):
        coordinator.get("agents")


def test_mount_errors_are_value_errors_and_amplifier_errors() -> None:
    assert issubclass(MountError, ValueError)
    assert issubclass(MountError, AmplifierError)


async def test_hooks_cannot_be_mounted() -> None:
    coordinator = make_coordinator()

    with pytest.raises(
        MountError, match="Hooks should be registered directly with the HookRegistry"
    ):
        await coordinator.mount("hooks", HookRegistry())

    assert coordinator.get("hooks") is coordinator.hooks


@pytest.mark.parametrize("point", ["providers", "tools"])
async def test_multi_slot_mount_needs_a_name(point: str) -> None:
    coordinator = make_coordinator()

    with pytest.raises(MountError, match=f"Name required for {point}"):
        await coordinator.mount(point, object())

    assert coordinator.get(point) == {}


async def test_multi_slot_mount_uses_the_module_name_or_the_given_one() -> None:
    coordinator = make_coordinator()
    bash, grep = Named("bash"), Named("grep")

    await coordinator.mount("tools", bash)
    await coordinator.mount("tools", grep, name="search")

    assert coordinator.get("tools") == {"bash": bash, "search": grep}
    assert coordinator.get("tools", "search") is grep
    assert coordinator.get("tools", "missing") is None


@pytest.mark.parametrize("point", ["orchestrator", "context", "module-source-resolver"])
async def test_single_slot_mount_replaces(point: str) -> None:
    coordinator = make_coordinator()
    first, second = object(), object()

    await coordinator.mount(point, first)
    await coordinator.mount(point, second)

    assert coordinator.get(point) is second


async def test_multi_slot_get_returns_the_live_dict() -> None:
    coordinator = make_coordinator()
    tools = coordinator.get("tools")

    await coordinator.mount("tools", Named("late"))
    tools["poked"] = Named("poked")

    assert "late" in tools
    assert coordinator.get("tools", "poked") is tools["poked"]
    assert coordinator.get("tools") is coordinator.mount_points["tools"]


async def test_unmount_rules() -> None:
    coordinator = make_coordinator()
    await coordinator.mount("context", object())
    await coordinator.mount("providers", Named("scripted"))

    await coordinator.unmount("context")
    await coordinator.unmount("providers", "scripted")
    await coordinator.unmount("providers", "never-mounted")

    assert coordinator.get("context") is None
    assert coordinator.get("providers") == {}
    with pytest.raises(MountError, match="Name required to unmount from providers"):
        await coordinator.unmount("providers")


def test_identity_and_config_come_from_the_session() -> None:
    coordinator = make_coordinator({"injection_size_limit": 100})

    assert coordinator.session_id == "sess-1"
    assert coordinator.parent_id == "parent-1"
    assert coordinator.injection_size_limit == 100
    assert coordinator.injection_budget_per_turn is None


def test_coordinator_works_without_a_session() -> None:
    coordinator = ModuleCoordinator()

    assert coordinator.session_id is None
    assert coordinator.config == {}
    assert coordinator.injection_size_limit is None


# -- capabilities ----------------------------------------------------------------------------


def test_capabilities_register_replace_and_miss() -> None:
    coordinator = make_coordinator()

    coordinator.register_capability("session.spawn", "v1")
    coordinator.register_capability("session.spawn", "v2")

    assert coordinator.get_capability("session.spawn") == "v2"
    assert coordinator.get_capability("session.resume") is None


# -- contribution channels -------------------------------------------------------------------


async def test_contributions_keep_order_and_accept_every_callback_kind() -> None:
    coordinator = make_coordinator()

    async def async_contributor() -> str:
        await anyio.lowlevel.checkpoint()
        return "async"

    async def later() -> str:
        await anyio.lowlevel.checkpoint()
        return "sync returning a coroutine"

    coordinator.register_contributor("ch", "sync", lambda: "sync")
    coordinator.register_contributor("ch", "async", async_contributor)
    coordinator.register_contributor("ch", "coro", later)

    def coroutine_factory() -> Any:
        return later()

    coordinator.register_contributor("ch", "coro-factory", coroutine_factory)
    coordinator.register_contributor("other", "x", lambda: "other channel")

    contributions = await coordinator.collect_contributions("ch")

    assert contributions == [
        "sync",
        "async",
        "sync returning a coroutine",
        "sync returning a coroutine",
    ]


async def test_contributions_drop_none_and_isolate_failures(
    caplog: pytest.LogCaptureFixture,
) -> None:
    coordinator = make_coordinator()

    def broken() -> str:
        raise RuntimeError("contributor bug")

    async def broken_async() -> str:
        await anyio.lowlevel.checkpoint()
        raise KeyError("async contributor bug")

    coordinator.register_contributor("ch", "a", lambda: {"tool": "a"})
    coordinator.register_contributor("ch", "none", lambda: None)
    coordinator.register_contributor("ch", "broken", broken)
    coordinator.register_contributor("ch", "broken-async", broken_async)
    coordinator.register_contributor("ch", "falsy", list)
    coordinator.register_contributor("ch", "b", lambda: {"tool": "b"})

    contributions = await coordinator.collect_contributions("ch")

    # Only None is dropped: an empty (falsy) contribution is still a contribution.
    assert contributions == [{"tool": "a"}, [], {"tool": "b"}]
    assert "broken" in caplog.text


async def test_unknown_channel_has_no_contributions() -> None:
    assert await make_coordinator().collect_contributions("nobody") == []


async def test_cancel_scope_around_collect_contributions_propagates() -> None:
    coordinator = make_coordinator()
    started = anyio.Event()
    reached: list[str] = []

    async def hangs() -> str:
        started.set()
        await anyio.sleep_forever()
        return "never"

    coordinator.register_contributor("ch", "first", lambda: "first")
    coordinator.register_contributor("ch", "hangs", hangs)
    coordinator.register_contributor("ch", "after", lambda: reached.append("after"))
    scope = anyio.CancelScope()
    partial: list[Any] = []

    async def collect() -> None:
        with scope:
            partial.extend(await coordinator.collect_contributions("ch"))

    async with anyio.create_task_group() as tg:
        tg.start_soon(collect)
        await started.wait()
        scope.cancel()

    # Upstream returned ["first"] here and swallowed the cancel; we propagate it.
    assert scope.cancelled_caught
    assert partial == []
    assert reached == []


# -- cleanup ---------------------------------------------------------------------------------


async def test_cleanup_runs_in_reverse_order_sync_and_async() -> None:
    coordinator = make_coordinator()
    ran: list[str] = []

    async def async_cleanup() -> None:
        await anyio.lowlevel.checkpoint()
        ran.append("async")

    coordinator.register_cleanup(lambda: ran.append("first registered"))
    coordinator.register_cleanup(async_cleanup)

    def returns_a_coroutine() -> Any:
        return async_cleanup()

    coordinator.register_cleanup(returns_a_coroutine)
    coordinator.register_cleanup(lambda: ran.append("last registered"))

    await coordinator.cleanup()

    assert ran == ["last registered", "async", "async", "first registered"]


async def test_cleanup_runs_once() -> None:
    coordinator = make_coordinator()
    ran: list[str] = []
    coordinator.register_cleanup(lambda: ran.append("x"))

    await coordinator.cleanup()
    await coordinator.cleanup()

    assert ran == ["x"]


async def test_cleanup_failure_does_not_stop_the_rest(caplog: pytest.LogCaptureFixture) -> None:
    coordinator = make_coordinator()
    ran: list[str] = []

    def broken() -> None:
        raise RuntimeError("cleanup bug")

    async def broken_async() -> None:
        await anyio.lowlevel.checkpoint()
        raise OSError("socket already closed")

    coordinator.register_cleanup(lambda: ran.append("a"))
    coordinator.register_cleanup(broken)
    coordinator.register_cleanup(broken_async)
    coordinator.register_cleanup(lambda: ran.append("b"))

    await coordinator.cleanup()

    assert ran == ["b", "a"]
    assert "cleanup bug" in caplog.text


async def test_cleanup_ignores_none_and_non_callables() -> None:
    coordinator = make_coordinator()
    ran: list[str] = []
    coordinator.register_cleanup(None)
    coordinator.register_cleanup(Named("a mount() that returned its module"))
    coordinator.register_cleanup("not callable")
    coordinator.register_cleanup(lambda: ran.append("real"))

    await coordinator.cleanup()

    assert ran == ["real"]


async def test_fatal_base_exception_is_reraised_after_the_others_ran() -> None:
    coordinator = make_coordinator()
    ran: list[str] = []

    def first_fatal() -> None:
        ran.append("first fatal")
        raise Fatal("first")

    def second_fatal() -> None:
        ran.append("second fatal")
        raise Fatal("second")

    coordinator.register_cleanup(lambda: ran.append("registered first"))
    coordinator.register_cleanup(second_fatal)
    coordinator.register_cleanup(first_fatal)
    coordinator.register_cleanup(lambda: ran.append("registered last"))

    with pytest.raises(Fatal, match="first"):
        await coordinator.cleanup()

    assert ran == ["registered last", "first fatal", "second fatal", "registered first"]


# -- request_cancel --------------------------------------------------------------------------


async def test_request_cancel_emits_then_sets_the_token_then_runs_callbacks() -> None:
    coordinator = make_coordinator()
    token = coordinator.cancellation
    trail: list[tuple[str, str]] = []
    payloads: list[dict[str, Any]] = []

    async def on_requested(event: str, data: dict[str, Any]) -> None:
        payloads.append(data)
        trail.append(("event", token.state))

    async def callback() -> None:
        await anyio.lowlevel.checkpoint()
        trail.append(("callback", token.state))

    coordinator.hooks.register(CANCEL_REQUESTED, on_requested)
    token.on_cancel(callback)
    token.register_tool_start("call-2", "grep")
    token.register_tool_start("call-1", "bash")

    await coordinator.request_cancel()

    assert trail == [("event", "none"), ("callback", "graceful")]
    (payload,) = payloads
    assert payload["level"] == "graceful"
    assert payload["running_tools"] == ["call-1", "call-2"]
    assert sorted(payload["running_tool_names"]) == ["bash", "grep"]
    # The event goes through the registry like any other: session fields and a timestamp.
    assert "timestamp" in payload


async def test_request_cancel_only_acts_when_the_state_changes() -> None:
    coordinator = make_coordinator()
    levels: list[str] = []
    callbacks: list[str] = []

    async def on_requested(event: str, data: dict[str, Any]) -> None:
        levels.append(data["level"])

    coordinator.hooks.register(CANCEL_REQUESTED, on_requested)
    coordinator.cancellation.on_cancel(lambda: callbacks.append("cb"))

    await coordinator.request_cancel()
    await coordinator.request_cancel()
    await coordinator.request_cancel(immediate=True)
    await coordinator.request_cancel(immediate=True)
    await coordinator.request_cancel()

    assert levels == ["graceful", "immediate"]
    assert callbacks == ["cb"]  # each callback runs once per token
    assert coordinator.cancellation.is_immediate


async def test_request_cancel_immediate_cancels_a_bound_turn() -> None:
    coordinator = make_coordinator()
    reached: list[str] = []
    bound = anyio.Event()

    async def turn() -> None:
        with anyio.CancelScope() as scope, coordinator.cancellation.bind_scope(scope):
            bound.set()
            await anyio.sleep_forever()
            reached.append("never")
        reached.append(f"turn ended, cancelled={scope.cancelled_caught}")

    # fail_after only turns a regression into a failure instead of a hang.
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(turn)
            await bound.wait()
            await coordinator.request_cancel(immediate=True)

    assert reached == ["turn ended, cancelled=True"]


async def test_request_cancel_nowait_sets_the_token_and_flush_emits_later() -> None:
    coordinator = make_coordinator()
    events: list[dict[str, Any]] = []
    callbacks: list[str] = []

    async def on_requested(event: str, data: dict[str, Any]) -> None:
        events.append(data)

    coordinator.hooks.register(CANCEL_REQUESTED, on_requested)
    coordinator.cancellation.on_cancel(lambda: callbacks.append("cb"))
    coordinator.cancellation.register_tool_start("call-1", "bash")

    assert coordinator.request_cancel_nowait() is True
    assert coordinator.cancellation.is_graceful
    assert events == []
    assert callbacks == []
    # Already graceful: nothing new to report.
    assert coordinator.request_cancel_nowait() is False

    await coordinator.flush_cancel_request()
    await coordinator.flush_cancel_request()

    assert [e["level"] for e in events] == ["graceful"]
    assert events[0]["running_tools"] == ["call-1"]
    assert callbacks == ["cb"]


async def test_request_cancel_nowait_immediate_cancels_a_bound_turn_at_once() -> None:
    coordinator = make_coordinator()
    reached: list[str] = []

    with (
        anyio.fail_after(10),
        anyio.CancelScope() as scope,
        coordinator.cancellation.bind_scope(scope),
    ):
        assert coordinator.request_cancel_nowait(immediate=True) is True
        await anyio.sleep_forever()
        reached.append("never")

    assert scope.cancelled_caught
    assert reached == []


async def test_nowait_graceful_then_immediate_flushes_the_stronger_request() -> None:
    coordinator = make_coordinator()
    levels: list[str] = []

    async def on_requested(event: str, data: dict[str, Any]) -> None:
        levels.append(data["level"])

    coordinator.hooks.register(CANCEL_REQUESTED, on_requested)

    assert coordinator.request_cancel_nowait() is True
    assert coordinator.request_cancel_nowait(immediate=True) is True
    await coordinator.flush_cancel_request()

    assert levels == ["immediate"]
    assert coordinator.cancellation.is_immediate


async def test_flush_without_a_pending_request_does_nothing() -> None:
    coordinator = make_coordinator()
    events: list[str] = []

    async def on_requested(event: str, data: dict[str, Any]) -> None:
        events.append(event)

    coordinator.hooks.register(CANCEL_REQUESTED, on_requested)

    await coordinator.flush_cancel_request()

    assert events == []


async def test_begin_turn_gives_a_fresh_token_and_drops_a_pending_request() -> None:
    coordinator = make_coordinator()
    events: list[str] = []

    async def on_requested(event: str, data: dict[str, Any]) -> None:
        events.append(data["level"])

    coordinator.hooks.register(CANCEL_REQUESTED, on_requested)
    coordinator.request_cancel_nowait(immediate=True)
    old = coordinator.cancellation

    new = coordinator.begin_turn()
    await coordinator.flush_cancel_request()

    assert events == []
    assert new is coordinator.cancellation is coordinator.claim_turn().token
    assert old.is_immediate  # the old turn's token is never reset
    assert not coordinator.cancellation.is_cancelled
    assert coordinator.claim_turn().token is not new  # claimed once; then a fresh one
    # A new turn can be cancelled again, and it is reported again.
    await coordinator.request_cancel()
    assert events == ["graceful"]


async def test_begin_turn_zeroes_the_injection_budget(caplog: pytest.LogCaptureFixture) -> None:
    # 40 characters is ~10 tokens; the budget of 15 is exceeded by the second injection.
    coordinator = make_coordinator({"injection_budget_per_turn": 15})
    note = HookResult(action="inject_context", context_injection="x" * 40, ephemeral=True)

    await coordinator.process_hook_result(note, "tool:post", "h")
    assert "over budget" not in caplog.text
    coordinator.begin_turn()
    await coordinator.process_hook_result(note, "tool:post", "h")
    assert "over budget" not in caplog.text
    await coordinator.process_hook_result(note, "tool:post", "h")
    assert "over budget" in caplog.text


# -- process_hook_result: injections ---------------------------------------------------------


async def test_injection_is_persisted_with_its_provenance() -> None:
    coordinator = make_coordinator()
    context = MockContextManager()
    await coordinator.mount("context", context)
    result = HookResult(
        action="inject_context",
        context_injection="lint found 3 errors",
        context_injection_role="user",
    )

    before = datetime.now(UTC)
    returned = await coordinator.process_hook_result(result, "tool:post", "linter")
    after = datetime.now(UTC)

    assert returned == result
    (message,) = context.messages
    assert message["role"] == "user"
    assert message["content"] == "lint found 3 errors"
    metadata = message["metadata"]
    assert {k: metadata[k] for k in ("source", "hook_name", "event")} == {
        "source": "hook",
        "hook_name": "linter",
        "event": "tool:post",
    }
    stamped = datetime.fromisoformat(metadata["timestamp"])
    assert stamped.utcoffset() == timedelta(0)
    assert before <= stamped <= after


async def test_ephemeral_injection_is_not_persisted() -> None:
    coordinator = make_coordinator()
    context = MockContextManager()
    await coordinator.mount("context", context)
    result = HookResult(action="inject_context", context_injection="just once", ephemeral=True)

    returned = await coordinator.process_hook_result(result, "prompt:submit", "reminder")

    # The orchestrator still gets it back to add to the next request only.
    assert returned == result
    assert context.messages == []


async def test_injection_without_a_context_does_not_crash() -> None:
    coordinator = make_coordinator()
    result = HookResult(action="inject_context", context_injection="nowhere to go")

    assert await coordinator.process_hook_result(result, "tool:post", "h") == result


async def test_injection_over_the_size_limit_is_refused() -> None:
    coordinator = make_coordinator({"injection_size_limit": 10})
    context = MockContextManager()
    await coordinator.mount("context", context)

    at_limit = HookResult(action="inject_context", context_injection="x" * 10)
    over = HookResult(action="inject_context", context_injection="y" * 11)
    await coordinator.process_hook_result(at_limit, "tool:post", "h")
    with pytest.raises(InjectionTooLargeError, match="11"):
        await coordinator.process_hook_result(over, "tool:post", "big-hook")

    assert [m["content"] for m in context.messages] == ["x" * 10]
    assert issubclass(InjectionTooLargeError, ValueError)


async def test_injection_over_the_budget_only_warns(caplog: pytest.LogCaptureFixture) -> None:
    coordinator = make_coordinator({"injection_budget_per_turn": 5})
    context = MockContextManager()
    await coordinator.mount("context", context)
    result = HookResult(action="inject_context", context_injection="z" * 400)

    returned = await coordinator.process_hook_result(result, "tool:post", "chatty")

    assert returned == result
    assert len(context.messages) == 1
    assert any(r.levelname == "WARNING" and "budget" in r.getMessage() for r in caplog.records)


async def test_continue_result_is_returned_unchanged() -> None:
    coordinator = make_coordinator()
    context = MockContextManager()
    await coordinator.mount("context", context)
    result = HookResult(action="continue", data={"x": 1})

    assert await coordinator.process_hook_result(result, "tool:pre", "h") == result
    assert context.messages == []


# -- process_hook_result: approvals ----------------------------------------------------------


async def test_ask_user_without_an_approval_system_denies() -> None:
    coordinator = make_coordinator()

    result = await coordinator.process_hook_result(
        HookResult(action="ask_user", approval_prompt="Delete the repo?"), "tool:pre", "guard"
    )

    assert result.action == "deny"
    assert result.reason
    assert "approval" in result.reason.lower()


@pytest.mark.parametrize("answer", ["Allow", "allow once", "Allow always", "ALLOW", " allow "])
async def test_ask_user_allowed(answer: str) -> None:
    approvals = ScriptedApprovalSystem([answer])
    coordinator = make_coordinator(approval_system=approvals)

    result = await coordinator.process_hook_result(
        HookResult(action="ask_user", approval_prompt="Run the tests?"), "tool:pre", "guard"
    )

    assert result.action == "continue"


@pytest.mark.parametrize("answer", ["Deny", "deny", "Maybe", "", "Allow later", "yes"])
async def test_ask_user_fails_closed_on_any_other_answer(answer: str) -> None:
    approvals = ScriptedApprovalSystem([answer])
    coordinator = make_coordinator(approval_system=approvals)

    result = await coordinator.process_hook_result(
        HookResult(action="ask_user", approval_prompt="Push to main?"), "tool:pre", "guard"
    )

    assert result.action == "deny"
    assert result.reason is not None
    assert "Push to main?" in result.reason


async def test_approval_system_gets_the_prompt_options_timeout_and_default() -> None:
    approvals = ScriptedApprovalSystem(["Allow"])
    coordinator = make_coordinator(approval_system=approvals)

    await coordinator.process_hook_result(
        HookResult(action="ask_user", approval_timeout=30.0, approval_default="allow"),
        "tool:pre",
        "guard",
    )
    await coordinator.process_hook_result(
        HookResult(
            action="ask_user",
            approval_prompt="Which?",
            approval_options=["Allow once", "Allow always", "Deny"],
        ),
        "tool:pre",
        "guard",
    )

    assert approvals.requests == [
        {
            "prompt": "Allow this operation?",
            "options": ["Allow", "Deny"],
            "timeout": 30.0,
            "default": "allow",
        },
        {
            "prompt": "Which?",
            "options": ["Allow once", "Allow always", "Deny"],
            "timeout": 300.0,
            "default": "deny",
        },
    ]


class TimingOutApprovals:
    """An approval system that gives up with ApprovalTimeoutError."""

    async def request_approval(
        self, prompt: str, options: list[str], timeout: float, default: Literal["allow", "deny"]
    ) -> str:
        await anyio.lowlevel.checkpoint()
        raise ApprovalTimeoutError(f"no answer to {prompt!r}")


@pytest.mark.parametrize(("default", "action"), [("deny", "deny"), ("allow", "continue")])
async def test_approval_timeout_applies_the_default(default: str, action: str) -> None:
    coordinator = make_coordinator(approval_system=TimingOutApprovals())

    result = await coordinator.process_hook_result(
        HookResult(action="ask_user", approval_prompt="Deploy?", approval_default=default),  # type: ignore[arg-type]
        "tool:pre",
        "guard",
    )

    assert result.action == action


async def test_ask_user_skips_the_user_message() -> None:
    display = RecordingDisplaySystem()
    coordinator = make_coordinator(
        approval_system=ScriptedApprovalSystem(["Allow"]), display_system=display
    )

    await coordinator.process_hook_result(
        HookResult(action="ask_user", user_message="asking you now"), "tool:pre", "guard"
    )

    assert display.messages == []


# -- process_hook_result: user messages ------------------------------------------------------


async def test_user_message_is_shown_with_level_and_source() -> None:
    display = RecordingDisplaySystem()
    coordinator = make_coordinator(display_system=display)

    await coordinator.process_hook_result(
        HookResult(user_message="3 files changed", user_message_level="warning"),
        "tool:post",
        "diff-hook",
    )
    await coordinator.process_hook_result(
        HookResult(
            action="inject_context",
            context_injection="note",
            ephemeral=True,
            user_message="context added",
            user_message_source="linter",
            user_message_level="error",
        ),
        "tool:post",
        "diff-hook",
    )

    assert display.messages == [
        ("3 files changed", "warning", "hook:diff-hook"),
        ("context added", "error", "hook:linter"),
    ]


async def test_user_message_without_a_display_system_does_not_crash() -> None:
    coordinator = make_coordinator()

    result = await coordinator.process_hook_result(
        HookResult(user_message="nobody is watching"), "tool:post", "h"
    )

    assert result.user_message == "nobody is watching"


# -- on virtual time -------------------------------------------------------------------------


class HangingApprovals:
    """An approval system whose human never answers."""

    def __init__(self) -> None:
        self.asked = 0

    async def request_approval(
        self, prompt: str, options: list[str], timeout: float, default: Literal["allow", "deny"]
    ) -> str:
        self.asked += 1
        await anyio.sleep_forever()
        return "Allow"


class TestTimeouts:
    """Hanging cleanups and approvals are abandoned at their deadline; shields hold."""

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

    async def test_hanging_cleanup_is_abandoned_after_cleanup_timeout(
        self, unit: float, virtual: bool, caplog: pytest.LogCaptureFixture
    ) -> None:
        coordinator = make_coordinator()
        coordinator.cleanup_timeout = 2 * unit
        ran: list[str] = []

        async def hangs() -> None:
            ran.append("hang started")
            await anyio.sleep_forever()

        coordinator.register_cleanup(lambda: ran.append("earlier cleanup"))
        coordinator.register_cleanup(hangs)

        start = anyio.current_time()
        await coordinator.cleanup()
        elapsed = anyio.current_time() - start

        assert ran == ["hang started", "earlier cleanup"]
        assert "gave up" in caplog.text
        if virtual:
            assert elapsed == pytest.approx(2.0, abs=1e-9)

    async def test_cleanup_timeout_applies_to_each_cleanup(
        self, unit: float, virtual: bool
    ) -> None:
        coordinator = make_coordinator()
        coordinator.cleanup_timeout = 2 * unit
        ran: list[int] = []

        def slow(index: int) -> Any:
            async def cleanup() -> None:
                await anyio.sleep(1.5 * unit)
                ran.append(index)

            return cleanup

        for index in range(3):
            coordinator.register_cleanup(slow(index))

        start = anyio.current_time()
        await coordinator.cleanup()
        elapsed = anyio.current_time() - start

        assert ran == [2, 1, 0]
        if virtual:
            assert elapsed == pytest.approx(4.5, abs=1e-9)

    async def test_cleanup_completes_in_a_cancelled_scope_then_delivers_the_cancel(
        self, unit: float
    ) -> None:
        coordinator = make_coordinator()
        ran: list[str] = []

        async def needs_time(label: str) -> None:
            await anyio.sleep(1 * unit)
            ran.append(label)

        coordinator.register_cleanup(lambda: needs_time("first registered"))
        coordinator.register_cleanup(lambda: needs_time("last registered"))
        after_cleanup: list[str] = []

        with anyio.CancelScope() as scope:
            scope.cancel()
            await coordinator.cleanup()
            after_cleanup.append("cleanup swallowed the cancel")

        assert ran == ["last registered", "first registered"]
        assert scope.cancelled_caught
        assert after_cleanup == []

    async def test_host_cancel_during_cleanup_waits_for_it(self, unit: float) -> None:
        coordinator = make_coordinator()
        ran: list[str] = []
        started = anyio.Event()

        async def slow_close() -> None:
            started.set()
            await anyio.sleep(3 * unit)
            ran.append("closed")

        coordinator.register_cleanup(lambda: ran.append("other"))
        coordinator.register_cleanup(slow_close)
        scope = anyio.CancelScope()

        async def host() -> None:
            with scope:
                await coordinator.cleanup()
                ran.append("host went on")

        async with anyio.create_task_group() as tg:
            tg.start_soon(host)
            await started.wait()
            scope.cancel()

        assert ran == ["closed", "other"]
        assert scope.cancelled_caught

    @pytest.mark.parametrize(("default", "action"), [("deny", "deny"), ("allow", "continue")])
    async def test_hanging_approval_falls_back_to_the_default(
        self, unit: float, virtual: bool, default: str, action: str
    ) -> None:
        approvals = HangingApprovals()
        coordinator = make_coordinator(approval_system=approvals)

        start = anyio.current_time()
        result = await coordinator.process_hook_result(
            HookResult(
                action="ask_user",
                approval_prompt="Deploy?",
                approval_timeout=5 * unit,
                approval_default=default,  # type: ignore[arg-type]
            ),
            "tool:pre",
            "guard",
        )
        elapsed = anyio.current_time() - start

        assert approvals.asked == 1
        assert result.action == action
        if virtual:
            assert elapsed == pytest.approx(5.0, abs=1e-9)

    async def test_host_cancel_during_approval_propagates(self, unit: float) -> None:
        coordinator = make_coordinator(approval_system=HangingApprovals())
        answers: list[HookResult] = []

        with anyio.move_on_after(1 * unit) as scope:
            answers.append(
                await coordinator.process_hook_result(
                    HookResult(action="ask_user", approval_timeout=100 * unit),
                    "tool:pre",
                    "guard",
                )
            )

        # Not mistaken for the approval's own timeout (which would have returned a deny).
        assert scope.cancelled_caught
        assert answers == []
