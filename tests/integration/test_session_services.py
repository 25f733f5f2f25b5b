"""Module services and ``on_session_ready``: tasks that live as long as the session.

The modules here are a tiny ``services_probe`` package written to a temporary directory
and loaded through the real loader (plan entry ``source``): its ``mount`` calls the
function the test puts in its config, and its module-level ``on_session_ready`` calls the
functions a test registered under the capability ``probe.ready``.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import TaskStatus

from amplifier_anyio import AmplifierSession, ModuleLoadError, SessionError
from amplifier_anyio.kernel import ServiceState
from amplifier_anyio.testing import EventRecorder

pytestmark = pytest.mark.anyio

PROBE_PACKAGE = "amplifier_module_services_probe"
PROBE_SOURCE = '''
"""A module whose mount() is the function given in its config (tests only)."""

import inspect


async def mount(coordinator, config):
    result = config["mount"](coordinator, config)
    if inspect.isawaitable(result):
        result = await result
    return result


async def on_session_ready(coordinator):
    for fn in coordinator.get_capability("probe.ready") or ():
        result = fn(coordinator)
        if inspect.isawaitable(result):
            await result
'''

MountFn = Callable[[Any, dict[str, Any]], Any]


@pytest.fixture(scope="module")
def probe_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    package = tmp_path_factory.mktemp("services-probe") / PROBE_PACKAGE
    package.mkdir()
    (package / "__init__.py").write_text(PROBE_SOURCE, encoding="utf-8")
    yield package
    sys.modules.pop(PROBE_PACKAGE, None)


@pytest.fixture
def plan(probe_dir: Path) -> Callable[..., dict[str, Any]]:
    """``plan(mount_fn, ...)``: a plan whose hooks are probe modules doing each ``mount_fn``."""

    def make(*mounts: MountFn, optional: bool = False) -> dict[str, Any]:
        hooks = [
            {
                "module": f"probe-{i}",
                "source": str(probe_dir),
                "config": {"mount": fn},
                "optional": optional,
            }
            for i, fn in enumerate(mounts)
        ]
        return {
            "session": {"orchestrator": "loop-basic", "context": "context-simple"},
            "providers": [{"module": "provider-scripted", "config": {"demo": True}}],
            "tools": [{"module": "tool-demo"}],
            "hooks": hooks,
        }

    return make


def service(name: str, log: list[str], *, value: Any = None) -> MountFn:
    """A mount that starts one service logging its start and its stop, and a cleanup."""

    async def run(*, task_status: TaskStatus[Any]) -> None:
        log.append(f"{name} started")
        task_status.started(value)
        try:
            await anyio.sleep_forever()
        finally:
            log.append(f"{name} stopped")

    async def mount(coordinator: Any, config: dict[str, Any]) -> Callable[[], None]:
        got = await coordinator.start_service(run, name=name)
        log.append(f"{name} gave {got!r}")
        return lambda: log.append(f"{name} cleanup")

    return mount


async def test_start_service_returns_the_started_value_and_services_stop_in_reverse(
    plan: Callable[..., dict[str, Any]],
) -> None:
    log: list[str] = []
    async with AmplifierSession(
        plan(service("a", log, value=1), service("b", log, value="x"))
    ) as s:
        assert log == ["a started", "a gave 1", "b started", "b gave 'x'"]
        states = [(st.name, st.state) for st in s.coordinator.statistics().services]
        assert states == [("a", ServiceState.RUNNING), ("b", ServiceState.RUNNING)]
        result = await s.run("hello")
        assert result.status == "success"
        log.clear()
    # Exit-stack order: each module's cleanup runs before its own service stops.
    assert log == ["b cleanup", "b stopped", "a cleanup", "a stopped"]
    states = [(st.name, st.state) for st in s.coordinator.statistics().services]
    assert states == [("a", ServiceState.STOPPED), ("b", ServiceState.STOPPED)]


async def test_a_service_needs_async_with(plan: Callable[..., dict[str, Any]]) -> None:
    session = AmplifierSession(plan(service("writer", [])))
    with pytest.raises(SessionError) as info:
        await session.run("hello")
    message = str(info.value)
    assert "\n" not in message
    assert "'writer'" in message
    assert "async with" in message


async def test_run_without_async_with_still_works_without_services(
    plan: Callable[..., dict[str, Any]],
) -> None:
    session = AmplifierSession(plan())
    try:
        assert (await session.run("hello")).status == "success"
    finally:
        await session.cleanup()


async def test_no_service_starts_once_the_session_closed(
    plan: Callable[..., dict[str, Any]],
) -> None:
    async def run(*, task_status: TaskStatus[Any]) -> None:
        task_status.started()

    async with AmplifierSession(plan()) as session:
        pass
    with pytest.raises(SessionError, match="closing"):
        await session.coordinator.start_service(run, name="late")


async def test_a_service_failing_before_started_fails_the_start(
    plan: Callable[..., dict[str, Any]],
) -> None:
    log: list[str] = []

    async def broken(*, task_status: TaskStatus[Any]) -> None:
        raise OSError("cannot open the log file")

    async def mount(coordinator: Any, config: dict[str, Any]) -> None:
        await coordinator.start_service(broken, name="broken")

    session = AmplifierSession(plan(service("first", log), mount))
    with pytest.raises(ModuleLoadError, match="OSError: cannot open the log file") as caught:
        async with session:
            pytest.fail("the session must not start")
    assert isinstance(caught.value.__cause__, OSError)  # what the service raised
    # What the failed start had mounted was undone: the first service stopped.
    assert log[-2:] == ["first cleanup", "first stopped"]
    assert session.state.value == "unopened"


async def test_a_service_failing_later_is_logged_and_cancels_nothing(
    plan: Callable[..., dict[str, Any]], caplog: pytest.LogCaptureFixture
) -> None:
    log: list[str] = []
    fail_now = anyio.Event()

    async def flaky(*, task_status: TaskStatus[Any]) -> None:
        task_status.started()
        await fail_now.wait()
        raise RuntimeError("the disk went away")

    async def mount(coordinator: Any, config: dict[str, Any]) -> None:
        await coordinator.start_service(flaky, name="flaky")

    caplog.set_level(logging.ERROR)
    async with AmplifierSession(plan(service("steady", log), mount)) as session:
        fail_now.set()
        await anyio.wait_all_tasks_blocked()
        # The host's block was not cancelled: a turn still runs to its end.
        assert (await session.run("hello")).status == "success"
        by_name = {st.name: st for st in session.coordinator.statistics().services}
        assert by_name["flaky"].state is ServiceState.FAILED
        assert by_name["flaky"].error == "RuntimeError: the disk went away"
        assert by_name["steady"].state is ServiceState.RUNNING
    assert log[-1] == "steady stopped"
    assert any("'flaky' failed" in r.getMessage() for r in caplog.records)


async def test_a_host_error_leaves_the_block_unwrapped(
    plan: Callable[..., dict[str, Any]],
) -> None:
    log: list[str] = []
    with pytest.raises(KeyError):  # not an ExceptionGroup
        async with AmplifierSession(plan(service("a", log))):
            raise KeyError("host")
    assert log[-1] == "a stopped"


async def test_a_host_cancel_stops_the_services_and_propagates(
    plan: Callable[..., dict[str, Any]],
) -> None:
    log: list[str] = []
    with anyio.CancelScope() as scope:
        async with AmplifierSession(plan(service("a", log))):
            scope.cancel()
            await anyio.sleep_forever()
    assert scope.cancelled_caught
    assert log[-2:] == ["a cleanup", "a stopped"]


async def test_a_service_that_will_not_stop_is_reported(
    plan: Callable[..., dict[str, Any]], caplog: pytest.LogCaptureFixture
) -> None:
    async def stubborn(*, task_status: TaskStatus[Any]) -> None:
        task_status.started()
        try:
            await anyio.sleep_forever()
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.sleep(0.5)

    async def mount(coordinator: Any, config: dict[str, Any]) -> None:
        await coordinator.start_service(stubborn, name="stubborn")

    caplog.set_level(logging.ERROR)
    session = AmplifierSession(plan(mount))
    session.coordinator.service_stop_timeout = 0.01
    async with session:
        pass
    records = [r for r in caplog.records if "'stubborn' did not stop" in r.getMessage()]
    assert records
    assert records[0].levelno == logging.ERROR


async def test_on_session_ready_runs_once_after_every_module_is_mounted(
    plan: Callable[..., dict[str, Any]],
) -> None:
    seen: list[list[str]] = []

    def register(coordinator: Any, config: dict[str, Any]) -> None:
        def ready(coordinator: Any) -> None:
            seen.append(sorted(coordinator.get("tools")))

        coordinator.register_capability("probe.ready", [ready])

    async with AmplifierSession(plan(register)) as session:
        await session.run("hello")
        await session.run("again")
    # Called once, and the tools (mounted before the hooks) were there.
    assert len(seen) == 1
    assert seen[0]


async def test_on_session_ready_failing_is_emitted_and_the_session_goes_on(
    plan: Callable[..., dict[str, Any]],
) -> None:
    def register(coordinator: Any, config: dict[str, Any]) -> None:
        def ready(coordinator: Any) -> None:
            raise ValueError("not today")

        coordinator.register_capability("probe.ready", [ready])
        recorder = EventRecorder()
        recorder.attach(coordinator.hooks)
        coordinator.register_capability("probe.recorder", recorder)

    async with AmplifierSession(plan(register)) as session:
        assert (await session.run("hello")).status == "success"
        recorder = session.coordinator.get_capability("probe.recorder")
        failed = [data for _, data in recorder.get_events("module:on_session_ready_failed")]
    assert len(failed) == 1
    assert failed[0]["module_id"] == "probe-0"
    assert failed[0]["error"] == "ValueError: not today"


async def test_a_service_may_start_from_on_session_ready(
    plan: Callable[..., dict[str, Any]],
) -> None:
    log: list[str] = []

    def register(coordinator: Any, config: dict[str, Any]) -> None:
        async def ready(coordinator: Any) -> None:
            await service("late", log)(coordinator, {})

        coordinator.register_capability("probe.ready", [ready])

    async with AmplifierSession(plan(register)):
        assert log[:2] == ["late started", "late gave None"]
    assert log[-1] == "late stopped"
