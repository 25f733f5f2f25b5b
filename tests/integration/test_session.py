"""AmplifierSession end to end: plans, load order, failures, turns, cancellation, events.

Sessions here load real modules through the real loader: the built-in entry points
(``loop-basic``, ``context-simple``, ``provider-scripted``, ``tool-demo``) and a tiny
``probe`` package written to a temporary directory and named by each plan entry's
``source``. The probe's ``mount`` calls the function the test puts in its config, so each
test decides what its module does while the session still finds, imports and mounts it
the way it would any other module.
"""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from amplifier_anyio import (
    AmplifierSession,
    ConfigError,
    ModuleLoadError,
    ModuleNotFoundError,
    SessionError,
    SessionState,
    TurnResult,
    TurnStatus,
)
from amplifier_anyio.contexts.simple import mount as mount_simple_context
from amplifier_anyio.models import ToolResult
from amplifier_anyio.orchestrators.loop_basic import mount as mount_loop_basic
from amplifier_anyio.providers.scripted import ScriptedProvider
from amplifier_anyio.testing import EventRecorder, ScriptedOrchestrator

pytestmark = pytest.mark.anyio

PROBE_PACKAGE = "amplifier_module_session_probe"
PROBE_SOURCE = '''
"""A module whose mount() is the function given in its config (tests only)."""

import inspect


async def mount(coordinator, config):
    result = config["mount"](coordinator, config)
    if inspect.isawaitable(result):
        result = await result
    return result
'''

MountFn = Callable[[Any, dict[str, Any]], Any]


@pytest.fixture(scope="module")
def probe_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    package = tmp_path_factory.mktemp("probe") / PROBE_PACKAGE
    package.mkdir()
    (package / "__init__.py").write_text(PROBE_SOURCE, encoding="utf-8")
    yield package
    sys.modules.pop(PROBE_PACKAGE, None)


@pytest.fixture
def probe(probe_dir: Path) -> Callable[..., dict[str, Any]]:
    """``probe(mount_fn, module=..., **entry)``: a plan entry for a module doing ``mount_fn``."""

    def entry(mount_fn: MountFn, module: str = "probe", **extra: Any) -> dict[str, Any]:
        return {
            "module": module,
            "source": str(probe_dir),
            "config": {"mount": mount_fn},
            **extra,
        }

    return entry


# -- helpers ---------------------------------------------------------------------------------


def text_reply(text: str, *, input_tokens: int = 0, output_tokens: int = 0) -> dict[str, Any]:
    usage = {
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "total_tokens": input_tokens + output_tokens,
    }
    return {"content": [{"type": "text", "text": text}], "usage": usage}


def tool_reply(*names: str) -> dict[str, Any]:
    calls = [{"id": f"call-{i}", "name": name, "arguments": {}} for i, name in enumerate(names)]
    return {"content": [{"type": "text", "text": "using tools"}], "tool_calls": calls}


def scripted(*replies: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"module": "provider-scripted", "config": {"responses": list(replies)}, **extra}


def make_plan(
    *,
    orchestrator: Any = "loop-basic",
    context: Any = "context-simple",
    providers: list[Any] | None = None,
    tools: list[Any] | None = None,
    hooks: list[Any] | None = None,
    orchestrator_config: dict[str, Any] | None = None,
    session: dict[str, Any] | None = None,
) -> dict[str, Any]:
    plan: dict[str, Any] = {
        "session": {"orchestrator": orchestrator, "context": context, **(session or {})},
        "providers": providers if providers is not None else [scripted(text_reply("hello"))],
    }
    if orchestrator_config is not None:
        plan["orchestrator"] = {"config": orchestrator_config}
    if tools is not None:
        plan["tools"] = tools
    if hooks is not None:
        plan["hooks"] = hooks
    return plan


class GateTool:
    """A tool that signals when it starts and, unless ``gate`` is None, waits for it."""

    def __init__(self, name: str, gate: anyio.Event | None = None, *, forever: bool = False):
        self.name = name
        self.description = f"test tool {name}"
        self.input_schema: dict[str, Any] = {"type": "object", "properties": {}}
        self.gate = gate
        self.forever = forever
        self.started = anyio.Event()
        self.finished = False

    async def execute(self, input: dict[str, Any]) -> ToolResult:
        self.started.set()
        if self.forever:
            await anyio.sleep_forever()
        if self.gate is not None:
            await self.gate.wait()
        else:
            await anyio.lowlevel.checkpoint()
        self.finished = True
        return ToolResult(output=f"{self.name} done")


def tools_entry(probe: Callable[..., dict[str, Any]], *tools: GateTool) -> dict[str, Any]:
    async def mount(coordinator: Any, config: dict[str, Any]) -> None:
        for tool in tools:
            await coordinator.mount("tools", tool, name=tool.name)

    return probe(mount, module="probe-tools")


async def context_messages(session: AmplifierSession) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = await session.coordinator.get("context").get_messages()
    return messages


def assert_tool_pairs(messages: list[dict[str, Any]]) -> None:
    """Invariant 2: each tool call has one tool message right after its assistant message."""
    answered: list[str] = []
    for i, message in enumerate(messages):
        if message["role"] == "assistant" and message.get("tool_calls"):
            ids = [call["id"] for call in message["tool_calls"]]
            following = messages[i + 1 : i + 1 + len(ids)]
            assert [(m["role"], m.get("tool_call_id")) for m in following] == [
                ("tool", call_id) for call_id in ids
            ]
        if message["role"] == "tool":
            answered.append(message["tool_call_id"])
    assert len(answered) == len(set(answered))


def tool_content(messages: list[dict[str, Any]], call_id: str) -> str:
    (content,) = [m["content"] for m in messages if m.get("tool_call_id") == call_id]
    return str(content)


def assert_closed_once(names: list[str]) -> None:
    """Invariant 1: one orchestrator:complete and one execution:end, and they come last."""
    assert names.count("orchestrator:complete") == 1
    assert names.count("execution:end") == 1
    assert names[-2:] == ["orchestrator:complete", "execution:end"]


def recorded(session: AmplifierSession) -> EventRecorder:
    recorder = EventRecorder()
    recorder.attach(session.coordinator.hooks)
    return recorder


async def cancel_when(session: AmplifierSession, ready: anyio.Event, immediate: bool) -> None:
    await ready.wait()
    await anyio.wait_all_tasks_blocked()  # the turn has settled: nothing is mid-step
    session.cancel(immediate=immediate)


# -- plans -----------------------------------------------------------------------------------


async def test_a_bad_dict_plan_fails_at_construction() -> None:
    plan = make_plan(providers=[{"config": {"demo": True}}])

    with pytest.raises(ConfigError, match=r"^providers\[0\]\.module: required$"):
        AmplifierSession(plan)


async def test_a_bad_plan_file_fails_when_entered(tmp_path: Path) -> None:
    path = tmp_path / "plan.yaml"
    path.write_text("session:\n  context: context-simple\n", encoding="utf-8")
    session = AmplifierSession(path)  # the file is read in a worker thread, on entry

    with pytest.raises(ConfigError, match=r"^session\.orchestrator: required$"):
        async with session:
            pytest.fail("the body must not run")
    assert not session.initialized


async def test_a_toml_plan_file_runs_a_turn(tmp_path: Path) -> None:
    path = tmp_path / "plan.toml"
    path.write_text(
        '[session]\norchestrator = "loop-basic"\ncontext = "context-simple"\n\n'
        '[[providers]]\nmodule = "provider-scripted"\n'
        "[[providers.config.responses]]\n"
        'content = [{type = "text", text = "from toml"}]\n',
        encoding="utf-8",
    )

    async with AmplifierSession(str(path)) as session:
        assert await session.execute("hi") == "from toml"
        assert session.config["providers"][0]["module"] == "provider-scripted"


# -- loading ---------------------------------------------------------------------------------


async def test_modules_load_in_order_orchestrator_context_providers_tools_hooks(
    probe: Callable[..., dict[str, Any]],
) -> None:
    order: list[str] = []

    def recording(kind: str, real_mount: MountFn | None = None) -> MountFn:
        async def mount(coordinator: Any, config: dict[str, Any]) -> None:
            order.append(kind)
            if real_mount is not None:
                await real_mount(coordinator, {})

        return mount

    async def provider(coordinator: Any, config: dict[str, Any]) -> None:
        order.append("provider")
        await coordinator.mount("providers", ScriptedProvider([]), name="p")

    plan = {  # sections listed in the reverse of the load order
        "hooks": [probe(recording("hook"))],
        "tools": [probe(recording("tool"))],
        "providers": [probe(provider)],
        "session": {
            "context": probe(recording("context", mount_simple_context)),
            "orchestrator": probe(recording("orchestrator", mount_loop_basic)),
        },
    }

    async with AmplifierSession(plan):
        assert order == ["orchestrator", "context", "provider", "tool", "hook"]


@pytest.mark.parametrize("failing", ["orchestrator", "context"])
async def test_an_orchestrator_or_context_failure_raises_and_cleans_up(
    probe: Callable[..., dict[str, Any]], probe_dir: Path, failing: str
) -> None:
    cleaned: list[str] = []

    def mounting(kind: str, real_mount: MountFn) -> MountFn:
        async def mount(coordinator: Any, config: dict[str, Any]) -> Callable[[], None]:
            coordinator.register_cleanup(lambda: cleaned.append(f"{kind} (registered)"))
            if kind == failing:
                raise RuntimeError(f"{kind} cannot start")
            await real_mount(coordinator, {})
            return lambda: cleaned.append(kind)

        return mount

    plan = make_plan(
        orchestrator=probe(mounting("orchestrator", mount_loop_basic)),
        context=probe(mounting("context", mount_simple_context)),
    )
    session = AmplifierSession(plan)
    events = recorded(session)

    with pytest.raises(ModuleLoadError, match=f"^{failing} 'probe': RuntimeError: ") as caught:
        async with session:
            pytest.fail("the body must not run")
    assert isinstance(caught.value.__cause__, RuntimeError)  # what the module raised
    assert caught.value.kind == failing

    expected = {
        "orchestrator": ["orchestrator (registered)"],
        "context": ["context (registered)", "orchestrator", "orchestrator (registered)"],
    }
    assert cleaned == expected[failing]  # everything mounted was cleaned up, in reverse
    assert not session.initialized
    assert str(probe_dir.parent) not in sys.path  # the loader undid its sys.path change
    assert "session:end" not in events.names()


async def test_an_unknown_orchestrator_id_raises_not_found() -> None:
    with pytest.raises(ModuleNotFoundError, match="loop-nowhere"):
        async with AmplifierSession(make_plan(orchestrator="loop-nowhere")):
            pytest.fail("the body must not run")


async def test_an_orchestrator_module_that_mounts_nothing_is_a_config_error(
    probe: Callable[..., dict[str, Any]],
) -> None:
    plan = make_plan(orchestrator=probe(lambda coordinator, config: None, module="lazy"))

    with pytest.raises(ConfigError, match=r"^session\.orchestrator: module 'lazy' mounted"):
        async with AmplifierSession(plan):
            pytest.fail("the body must not run")


@pytest.mark.parametrize(
    ("section", "kind"), [("providers", "provider"), ("tools", "tool"), ("hooks", "hook")]
)
async def test_a_failing_optional_module_is_reported_and_the_session_runs(
    probe: Callable[..., dict[str, Any]], section: str, kind: str
) -> None:
    def broken(coordinator: Any, config: dict[str, Any]) -> None:
        raise RuntimeError("no credentials")

    plan = make_plan()
    plan.setdefault(section, []).insert(0, probe(broken, module="broken", optional=True))
    session = AmplifierSession(plan)
    events = recorded(session)

    async with session:
        result = await session.run("still there?")

    (failure,) = [data for name, data in events.events if name == "module:load_failed"]
    assert failure["module_type"] == kind
    assert failure["module_id"] == "broken"
    assert failure["reason_code"] == "mount_error"
    assert "no credentials" in failure["error"]
    assert (result.status, result.text) == (TurnStatus.SUCCESS, "hello")


@pytest.mark.parametrize(
    ("section", "kind"), [("providers", "provider"), ("tools", "tool"), ("hooks", "hook")]
)
async def test_a_failing_module_fails_the_session_start(
    probe: Callable[..., dict[str, Any]], section: str, kind: str
) -> None:
    def broken(coordinator: Any, config: dict[str, Any]) -> None:
        raise RuntimeError("no credentials")

    plan = make_plan()
    plan.setdefault(section, []).insert(0, probe(broken, module="broken"))
    session = AmplifierSession(plan)
    events = recorded(session)

    # Not optional: the session does not start half-equipped.
    with pytest.raises(ModuleLoadError, match="'broken': RuntimeError: no credentials") as caught:
        async with session:
            pytest.fail("the body must not run")
    assert str(caught.value.__cause__) == "no credentials"

    (failure,) = [data for name, data in events.events if name == "module:load_failed"]
    assert (failure["module_type"], failure["module_id"], failure["optional"]) == (
        kind,
        "broken",
        False,
    )
    assert session.state is SessionState.UNOPENED  # nothing stays mounted; it may be retried


async def test_an_unknown_provider_id_is_reported_as_not_found() -> None:
    plan = make_plan(
        providers=[{"module": "provider-nowhere", "optional": True}, scripted(text_reply("ok"))]
    )
    session = AmplifierSession(plan)
    events = recorded(session)

    async with session:
        assert await session.execute("hi") == "ok"

    (failure,) = [data for name, data in events.events if name == "module:load_failed"]
    assert failure["reason_code"] == "not_found"
    assert failure["module_type"] == "provider"
    assert failure["module_id"] == "provider-nowhere"
    assert "provider-nowhere" in failure["error"]


async def test_provider_instance_ids_name_the_mounted_providers() -> None:
    plan = make_plan(
        providers=[
            scripted(text_reply("from fast"), instance_id="fast"),
            scripted(text_reply("from slow"), instance_id="slow"),
        ],
        orchestrator_config={"default_provider": "slow"},
    )

    async with AmplifierSession(plan) as session:
        assert sorted(session.coordinator.get("providers")) == ["fast", "slow"]
        assert await session.execute("which one?") == "from slow"


# -- turns -----------------------------------------------------------------------------------


async def test_run_returns_a_turn_result_with_usage_and_counts(
    probe: Callable[..., dict[str, Any]],
) -> None:
    echo = GateTool("echo")
    plan = make_plan(
        providers=[
            scripted(
                {**tool_reply("echo"), "usage": text_reply("")["usage"]},
                text_reply("all done", input_tokens=30, output_tokens=5),
            )
        ],
        tools=[tools_entry(probe, echo)],
    )

    async with AmplifierSession(plan) as session:
        result = await session.run("use the tool")
        messages = await context_messages(session)

    assert isinstance(result, TurnResult)
    assert (result.text, result.status, result.turn_count) == ("all done", TurnStatus.SUCCESS, 2)
    assert (result.usage.input_tokens, result.usage.output_tokens) == (30, 5)
    assert result.error is None
    assert result.trace_id
    assert tool_content(messages, "call-0") == "echo done"
    assert (session.status.turns, session.status.total_input_tokens) == (1, 30)
    assert session.status.status == "completed"


class ProviderDownError(Exception):
    """A provider's own failure, which execute() must re-raise unchanged."""


async def test_execute_returns_text_and_reraises_the_providers_exception(
    probe: Callable[..., dict[str, Any]],
) -> None:
    failure = ProviderDownError("the model is down")

    async def provider(coordinator: Any, config: dict[str, Any]) -> None:
        await coordinator.mount("providers", ScriptedProvider([failure]), name="flaky")

    async with AmplifierSession(make_plan(providers=[probe(provider)])) as session:
        with pytest.raises(ProviderDownError) as caught:
            await session.execute("hi")

    assert caught.value is failure
    assert session.status.status == "failed"
    assert session.status.last_error == {
        "type": "ProviderDownError",
        "message": "the model is down",
    }


async def test_run_reports_the_providers_exception_as_status_error(
    probe: Callable[..., dict[str, Any]],
) -> None:
    failure = ProviderDownError("the model is down")

    async def provider(coordinator: Any, config: dict[str, Any]) -> None:
        await coordinator.mount("providers", ScriptedProvider([failure]), name="flaky")

    async with AmplifierSession(make_plan(providers=[probe(provider)])) as session:
        result = await session.run("hi")

    assert result.status is TurnStatus.ERROR
    assert result.error is failure


async def test_run_without_async_with_initializes_itself() -> None:
    session = AmplifierSession(make_plan())
    try:
        assert await session.execute("hi") == "hello"
        assert session.initialized
    finally:
        await session.cleanup()
    assert not session.initialized


async def test_a_second_concurrent_run_is_a_session_error(
    probe: Callable[..., dict[str, Any]],
) -> None:
    gate = anyio.Event()
    slow = GateTool("slow", gate)
    plan = make_plan(
        providers=[scripted(tool_reply("slow"), text_reply("first done"))],
        tools=[tools_entry(probe, slow)],
    )
    results: list[TurnResult] = []

    async def first(session: AmplifierSession) -> None:
        results.append(await session.run("first"))

    async with AmplifierSession(plan) as session:
        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(first, session)
                await slow.started.wait()
                with pytest.raises(SessionError, match="already running"):
                    await session.run("second")
                gate.set()

    assert [(r.status, r.text) for r in results] == [(TurnStatus.SUCCESS, "first done")]


# -- cancellation ----------------------------------------------------------------------------


async def test_immediate_cancel_from_another_task_keeps_the_five_invariants(
    probe: Callable[..., dict[str, Any]],
) -> None:
    fast, slow = GateTool("fast"), GateTool("slow", forever=True)
    plan = make_plan(
        providers=[scripted(tool_reply("fast", "slow"), text_reply("never asked"))],
        tools=[tools_entry(probe, fast, slow)],
    )
    fast_done = anyio.Event()

    async with AmplifierSession(plan) as session:

        def on_post(event: str, data: dict[str, Any]) -> None:
            if data["tool_name"] == "fast":
                fast_done.set()

        # Sets a loop object: on the loop (a plain handler otherwise runs in a thread).
        session.coordinator.hooks.register("tool:post", on_post)
        events = recorded(session)
        tasks_before = len(anyio.get_running_tasks())
        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(cancel_when, session, fast_done, True)
                result = await session.run("go")
        messages = await context_messages(session)
        turn_events = events.names()

        assert len(anyio.get_running_tasks()) == tasks_before  # invariant 4

        assert result.status is TurnStatus.CANCELLED
        assert result.error is None
        assert_tool_pairs(messages)  # invariant 2
        assert tool_content(messages, "call-0") == "fast done"  # invariant 3: kept
        assert json.loads(tool_content(messages, "call-1")) == {
            "error": "Tool execution was cancelled",
            "cancelled": True,
            "tool": "slow",
        }
        assert_closed_once(turn_events)  # invariant 1
        assert {"cancel:requested", "cancel:completed"} <= set(turn_events)
        assert session.status.status == "cancelled"

        # The next turn starts with a fresh token.
        assert (await session.run("again")).status is TurnStatus.SUCCESS


async def test_graceful_cancel_lets_the_tool_batch_finish(
    probe: Callable[..., dict[str, Any]],
) -> None:
    gate = anyio.Event()
    first, second = GateTool("first", gate), GateTool("second", gate)
    plan = make_plan(
        providers=[scripted(tool_reply("first", "second"), text_reply("never asked"))],
        tools=[tools_entry(probe, first, second)],
    )
    both_started = anyio.Event()

    async def release_after_cancel(session: AmplifierSession) -> None:
        await first.started.wait()
        await second.started.wait()
        both_started.set()
        session.cancel()  # graceful: a request, nothing is interrupted
        await anyio.wait_all_tasks_blocked()
        gate.set()

    async with AmplifierSession(plan) as session:
        events = recorded(session)
        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(release_after_cancel, session)
                result = await session.run("go")
        messages = await context_messages(session)
        provider = session.coordinator.get("providers")["scripted"]
        turn_events = events.names()

    assert result.status is TurnStatus.CANCELLED
    assert first.finished
    assert second.finished
    assert tool_content(messages, "call-0") == "first done"
    assert tool_content(messages, "call-1") == "second done"
    assert len(provider.requests) == 1  # stopped before asking the model again
    assert_tool_pairs(messages)
    assert_closed_once(turn_events)


async def test_context_order_does_not_depend_on_tool_timing(
    probe: Callable[..., dict[str, Any]],
) -> None:
    async def run_with(finish_first: str) -> list[dict[str, Any]]:
        gates = {"a": anyio.Event(), "b": anyio.Event()}
        tools = [GateTool(name, gates[name]) for name in ("a", "b")]
        plan = make_plan(
            providers=[scripted(tool_reply("a", "b"), text_reply("done"))],
            tools=[tools_entry(probe, *tools)],
        )
        by_name = dict(zip(("a", "b"), tools, strict=True))
        later = "b" if finish_first == "a" else "a"

        async def release() -> None:
            await tools[0].started.wait()
            await tools[1].started.wait()
            gates[finish_first].set()
            await anyio.wait_all_tasks_blocked()
            assert by_name[finish_first].finished
            assert not by_name[later].finished
            gates[later].set()

        async with AmplifierSession(plan) as session:
            with anyio.fail_after(10):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(release)
                    await session.run("go")
            return await context_messages(session)

    assert await run_with("a") == await run_with("b")  # invariant 5


async def test_a_host_cancel_scope_propagates_out_of_run_after_cleanup(
    probe: Callable[..., dict[str, Any]],
) -> None:
    slow = GateTool("slow", forever=True)
    cleaned: list[str] = []

    async def with_cleanup(coordinator: Any, config: dict[str, Any]) -> Callable[[], Any]:
        async def cleanup() -> None:
            await anyio.lowlevel.checkpoint()  # a real await, under the host's cancellation
            cleaned.append("probe")

        return cleanup

    plan = make_plan(
        providers=[scripted(tool_reply("slow"), text_reply("never asked"))],
        tools=[tools_entry(probe, slow)],
        hooks=[probe(with_cleanup, module="probe-cleanup")],
    )
    session = AmplifierSession(plan)
    events = recorded(session)
    returned = False

    with anyio.fail_after(10):
        with anyio.CancelScope() as host:
            async with session:
                slow_started = slow.started
                async with anyio.create_task_group() as tg:

                    async def cancel_host() -> None:
                        await slow_started.wait()
                        host.cancel()

                    tg.start_soon(cancel_host)
                    await session.run("go")
                    returned = True

    assert host.cancelled_caught
    assert not returned  # the host's cancel was not turned into a return value
    names = events.names()
    assert names.count("session:end") == 1
    assert names.count("orchestrator:complete") == 1
    assert names.count("execution:end") == 1
    assert names.index("execution:end") < names.index("session:end")
    (end,) = events.get_events("execution:end")
    assert end[1]["status"] == "cancelled"
    assert cleaned == ["probe"]
    assert session.status.status == "cancelled"
    assert not session.initialized


async def test_turn_timeout_ends_the_turn_cancelled(probe: Callable[..., dict[str, Any]]) -> None:
    slow = GateTool("slow", forever=True)
    plan = make_plan(
        providers=[scripted(tool_reply("slow"), text_reply("never asked"))],
        tools=[tools_entry(probe, slow)],
        orchestrator_config={"turn_timeout": 0.05},
    )

    async with AmplifierSession(plan) as session:
        with anyio.fail_after(10):
            result = await session.run("go")
        messages = await context_messages(session)

    assert result.status is TurnStatus.CANCELLED
    assert json.loads(tool_content(messages, "call-0"))["cancelled"] is True
    assert_tool_pairs(messages)


# -- an orchestrator with only execute() -----------------------------------------------------


def scripted_orchestrator(
    probe: Callable[..., dict[str, Any]], orchestrator: ScriptedOrchestrator
) -> dict[str, Any]:
    async def mount(coordinator: Any, config: dict[str, Any]) -> None:
        await coordinator.mount("orchestrator", orchestrator)

    return probe(mount, module="probe-orchestrator")


async def test_an_execute_only_orchestrator_runs_turns(
    probe: Callable[..., dict[str, Any]],
) -> None:
    orchestrator = ScriptedOrchestrator(["first answer"])
    plan = make_plan(orchestrator=scripted_orchestrator(probe, orchestrator))

    async with AmplifierSession(plan) as session:
        first = await session.run("one")
        second = await session.execute("two")
        messages = await context_messages(session)

    assert (first.text, first.status) == ("first answer", TurnStatus.SUCCESS)
    assert second == "DONE"
    assert orchestrator.calls == ["one", "two"]
    assert [m["content"] for m in messages] == ["one", "first answer", "two", "DONE"]


async def test_an_execute_only_orchestrator_is_cancelled_immediately(
    probe: Callable[..., dict[str, Any]],
) -> None:
    plan = make_plan(orchestrator=scripted_orchestrator(probe, ScriptedOrchestrator(["a", "b"])))
    stuck = anyio.Event()

    async def hang(event: str, data: dict[str, Any]) -> None:
        stuck.set()
        await anyio.sleep_forever()

    async with AmplifierSession(plan) as session:
        unregister = session.coordinator.hooks.register("execution:start", hang)
        events = recorded(session)
        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(cancel_when, session, stuck, True)
                result = await session.run("stuck")
        unregister()
        after = await session.run("free")

    assert (result.status, result.text) == (TurnStatus.CANCELLED, "")
    names = events.names()
    assert names.index("cancel:requested") < names.index("cancel:completed")
    assert (after.status, after.text) == (TurnStatus.SUCCESS, "b")


# -- lifecycle events ------------------------------------------------------------------------


async def test_session_start_once_over_three_turns_and_end_once() -> None:
    plan = make_plan(
        providers=[scripted(text_reply("1"), text_reply("2"), text_reply("3"))],
        session={"metadata": {"app": "tests"}},
    )
    session = AmplifierSession(plan)
    events = recorded(session)

    async with session:
        for prompt in ("a", "b", "c"):
            await session.run(prompt)

    names = events.names()
    assert names.count("session:start") == 1
    assert names.count("execution:end") == 3
    assert names.count("session:end") == 1
    assert "session:resume" not in names
    assert names[-1] == "session:end"
    (start,) = events.get_events("session:start")
    assert start[1]["metadata"] == {"app": "tests"}
    (end,) = events.get_events("session:end")
    assert end[1]["status"] == "completed"


async def test_a_resumed_session_announces_resume_instead_of_start() -> None:
    session = AmplifierSession(
        make_plan(providers=[scripted(text_reply("1"), text_reply("2"))]), is_resumed=True
    )
    events = recorded(session)

    async with session:
        await session.run("a")
        await session.run("b")

    names = events.names()
    assert names.count("session:resume") == 1
    assert "session:start" not in names


async def test_every_event_carries_session_and_parent_ids_and_fork_is_announced(
    probe: Callable[..., dict[str, Any]],
) -> None:
    plan = make_plan(
        providers=[scripted(tool_reply("echo"), text_reply("done"))],
        tools=[tools_entry(probe, GateTool("echo"))],
    )
    session = AmplifierSession(plan, session_id="child-1", parent_id="parent-1")
    events = recorded(session)

    async with session:
        await session.run("hi")

    assert len(events.events) > 10
    assert {(d["session_id"], d["parent_id"]) for _, d in events.events} == {
        ("child-1", "parent-1")
    }
    (fork,) = events.get_events("session:fork")
    assert (fork[1]["parent"], fork[1]["session_id"]) == ("parent-1", "child-1")
    assert events.names().index("session:fork") < events.names().index("session:start")


async def test_a_session_without_parent_has_a_fresh_uuid_and_no_fork() -> None:
    sessions = [AmplifierSession(make_plan()) for _ in range(2)]
    events = recorded(sessions[0])

    async with sessions[0] as session:
        await session.run("hi")

    assert sessions[0].session_id != sessions[1].session_id
    assert str(uuid.UUID(sessions[0].session_id)) == sessions[0].session_id
    assert "session:fork" not in events.names()
    assert {d["parent_id"] for _, d in events.events} == {None}
    assert {d["session_id"] for _, d in events.events} == {sessions[0].session_id}
    assert session.coordinator.session is session


# -- failed starts and odd mounts --------------------------------------------------------------


async def test_a_module_mounting_two_providers_under_one_id_keeps_both(
    probe: Callable[..., dict[str, Any]],
) -> None:
    async def mount(coordinator: Any, config: dict[str, Any]) -> None:
        for name in ("fast", "slow"):
            await coordinator.mount(
                "providers", ScriptedProvider([text_reply(f"from {name}")]), name=name
            )

    plan = make_plan(providers=[probe(mount, module="probe-pair", instance_id="pair")])
    async with AmplifierSession(plan) as session:
        assert sorted(session.coordinator.get("providers")) == ["pair-fast", "pair-slow"]


async def test_a_failing_cleanup_does_not_replace_the_start_error(
    probe: Callable[..., dict[str, Any]],
) -> None:
    async def orchestrator(coordinator: Any, config: dict[str, Any]) -> Any:
        await mount_loop_basic(coordinator, {})

        def fatal_cleanup() -> None:
            raise SystemExit(3)

        return fatal_cleanup

    async def broken_context(coordinator: Any, config: dict[str, Any]) -> None:
        raise ConfigError("context-probe.path: is a directory")

    plan = make_plan(
        orchestrator=probe(orchestrator, module="probe-orchestrator"),
        context=probe(broken_context, module="probe-context"),
    )
    with pytest.raises(ConfigError, match=r"^context 'probe-context': .*is a directory") as caught:
        async with AmplifierSession(plan):
            pass
    assert isinstance(caught.value.__cause__, ConfigError)
