"""loop-events: the scheduler stage (veto, modify by priority, failures), its events, the
ephemeral injections, sequential and parallel calls, errors and cancels; the example
schedulers."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest
from trio.testing import MockClock

from amplifier_anyio.errors import ConfigError, RateLimitError
from amplifier_anyio.events import (
    ALL_EVENTS,
    PROMPT_SUBMIT,
    PROVIDER_ERROR,
    PROVIDER_REQUEST,
    TOOL_ERROR,
    TOOL_POST,
    TOOL_PRE,
    TOOL_SELECTED,
    TOOL_SELECTING,
)
from amplifier_anyio.hooks import CostScheduler, RouterScheduler
from amplifier_anyio.hooks.schedulers import mount_cost, mount_router
from amplifier_anyio.kernel import HookAnswer, TurnResult
from amplifier_anyio.models import ChatResponse, HookResult, TextBlock, ToolCall, ToolResult
from amplifier_anyio.orchestrators import LoopEventsConfig, LoopEventsOrchestrator
from amplifier_anyio.orchestrators.loop_events import (
    CONFIG_SCHEMA,
    SchedulingBatch,
    mount,
    reduce_answers,
)
from amplifier_anyio.providers.scripted import ScriptedProvider
from amplifier_anyio.testing import EventRecorder, MockContextManager, MockCoordinator

pytestmark = pytest.mark.anyio


def text(value: str) -> ChatResponse:
    return ChatResponse(content=[TextBlock(text=value)])


def calling(*calls: tuple[str, dict[str, Any]]) -> ChatResponse:
    return ChatResponse(
        content=[TextBlock(text="working")],
        tool_calls=[ToolCall(id=f"c{i}", name=n, arguments=a) for i, (n, a) in enumerate(calls)],
    )


class Tool:
    """Records its inputs and how many of its calls were in flight at once."""

    def __init__(self, name: str, delay: float = 0.0, log: list[str] | None = None) -> None:
        self.name = name
        self.description = f"the {name} tool"
        self.input_schema: dict[str, Any] = {"type": "object"}
        self.delay = delay
        self.inputs: list[dict[str, Any]] = []
        self.log = log if log is not None else []
        self.in_flight = 0
        self.max_in_flight = 0

    async def execute(self, tool_input: dict[str, Any]) -> ToolResult:
        self.inputs.append(tool_input)
        self.log.append(f"run {self.name}")
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await anyio.sleep(self.delay)
        finally:
            self.in_flight -= 1
        return ToolResult(output={"tool": self.name, "input": tool_input})


class Harness:
    """loop-events on a MockCoordinator with a recorder (not on tool:selecting, where it
    would be a scheduler itself) and tools ``bash``, ``grep`` and ``fast``."""

    def __init__(self, *, record_selecting: bool = False, **config: Any) -> None:
        self.coordinator = MockCoordinator()
        self.recorder = EventRecorder()
        events = [e for e in ALL_EVENTS if record_selecting or e != TOOL_SELECTING]
        self.recorder.attach(self.coordinator.hooks, events)
        self.context = MockContextManager()
        self.orchestrator = LoopEventsOrchestrator(config)
        self.log: list[str] = []
        self.tools = {name: Tool(name, log=self.log) for name in ("bash", "grep", "fast")}

    @property
    def hooks(self) -> Any:
        return self.coordinator.hooks

    def scheduler(
        self, answer: HookResult | None, *, priority: int = 0, name: str | None = None
    ) -> list[dict[str, Any]]:
        """Register a scheduler that always gives ``answer``; returns what it saw."""
        seen: list[dict[str, Any]] = []

        async def handler(event: str, data: dict[str, Any]) -> HookResult | None:
            seen.append(dict(data))
            self.log.append(f"scheduler {name}")
            await anyio.lowlevel.checkpoint()
            return answer

        self.hooks.register(TOOL_SELECTING, handler, priority, name)
        return seen

    async def run(self, *script: ChatResponse | BaseException, tools: Any = None) -> TurnResult:
        self.provider = ScriptedProvider([*script, text("done")])
        await self.coordinator.mount("context", self.context)
        return await self.orchestrator.run_turn(
            "go",
            self.context,
            {"scripted": self.provider},
            self.tools if tools is None else tools,
            self.hooks,
            coordinator=self.coordinator,
        )

    def results(self) -> list[str]:
        return [m["content"] for m in self.context.messages if m["role"] == "tool"]

    def events(self, name: str) -> list[dict[str, Any]]:
        return [data for _, data in self.recorder.get_events(name)]


def modify(tool: str | None = None, arguments: Any = None, priority: int = 0) -> HookResult:
    data: dict[str, Any] = {}
    if tool is not None:
        data["tool"] = tool
    if arguments is not None:
        data["arguments"] = arguments
    return HookResult(action="modify", data=data, priority=priority)


def output(content: str) -> dict[str, Any]:
    value: dict[str, Any] = json.loads(content)
    return value


# -- the reduction, point by point -----------------------------------------------------------


async def test_a_deny_vetoes_the_call_with_its_reason() -> None:
    h = Harness()
    h.scheduler(HookResult(action="deny", reason="too expensive"))

    result = await h.run(calling(("bash", {"cmd": "ls"})))

    assert result.status == "success"
    assert h.results() == ["Error: too expensive"]
    assert h.tools["bash"].inputs == []
    # A vetoed call selects nothing and never reaches tool:pre.
    assert h.events(TOOL_SELECTED) == []
    assert h.events(TOOL_PRE) == []


async def test_a_deny_without_reason_gives_upstreams_text() -> None:
    h = Harness()
    h.scheduler(HookResult(action="deny"))

    await h.run(calling(("bash", {})))

    assert h.results() == ["Error: Tool execution denied by scheduler"]


async def test_any_deny_vetoes_even_after_a_high_priority_modify() -> None:
    h = Harness()
    h.scheduler(modify("grep", priority=100), name="router")
    h.scheduler(HookResult(action="deny", reason="no"), priority=5, name="guard")
    h.scheduler(None, priority=10, name="silent")

    await h.run(calling(("bash", {})))

    assert h.results() == ["Error: no"]
    assert h.tools["grep"].inputs == h.tools["bash"].inputs == []
    # Every scheduler was asked: a deny does not stop the collection.
    assert h.log == ["scheduler router", "scheduler guard", "scheduler silent"]


async def test_the_modify_with_the_highest_priority_wins() -> None:
    h = Harness()
    h.scheduler(modify("grep", {"by": "low"}, priority=1), name="low")
    h.scheduler(modify("fast", {"by": "high"}, priority=7), name="high")
    h.scheduler(modify("grep", {"by": "high-too"}, priority=7), name="high-too")

    await h.run(calling(("bash", {"cmd": "ls"})))

    assert h.tools["fast"].inputs == [{"by": "high"}]
    assert h.tools["grep"].inputs == h.tools["bash"].inputs == []
    assert output(h.results()[0]) == {"tool": "fast", "input": {"by": "high"}}


async def test_a_priority_tie_goes_to_the_earliest_registered_scheduler() -> None:
    h = Harness()
    # Registered first but runs last (hook priority 10): still the tie's winner.
    h.scheduler(modify("grep", priority=3), priority=10, name="first")
    h.scheduler(modify("fast", priority=3), priority=0, name="second")

    await h.run(calling(("bash", {"cmd": "ls"})))

    assert h.log[:2] == ["scheduler second", "scheduler first"]
    assert h.tools["grep"].inputs == [{"cmd": "ls"}]  # the model's arguments ride along
    assert h.tools["fast"].inputs == []


async def test_when_all_continue_the_models_choice_runs() -> None:
    h = Harness()
    h.scheduler(None)
    h.scheduler(HookResult())
    h.scheduler(HookResult(action="inject_context", context_injection="ignored here"))

    await h.run(calling(("bash", {"cmd": "ls"})))

    assert h.tools["bash"].inputs == [{"cmd": "ls"}]
    [selected] = h.events(TOOL_SELECTED)
    assert (selected["tool"], selected["source"], selected["original_tool"]) == (
        "bash",
        "llm",
        None,
    )


async def test_without_schedulers_no_selecting_payload_is_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    built: list[str] = []
    original = SchedulingBatch.selecting_payload

    def counting(self: SchedulingBatch, index: int, call: ToolCall) -> dict[str, Any]:
        built.append(call.id)
        return original(self, index, call)

    monkeypatch.setattr(SchedulingBatch, "selecting_payload", counting)
    quiet = Harness()

    await quiet.run(calling(("bash", {}), ("grep", {})))

    assert built == []
    assert [m["tool_call_id"] for m in quiet.context.messages if m["role"] == "tool"] == [
        "c0",
        "c1",
    ]
    assert [d["source"] for d in quiet.events(TOOL_SELECTED)] == ["llm", "llm"]

    listened = Harness()
    listened.scheduler(None)

    await listened.run(calling(("bash", {}), ("grep", {})))

    assert built == ["c0", "c1"]


async def test_a_raising_scheduler_is_ignored_and_the_others_still_count() -> None:
    h = Harness()

    async def broken(event: str, data: dict[str, Any]) -> HookResult:
        raise RuntimeError("scheduler bug")

    def garbage(event: str, data: dict[str, Any]) -> Any:
        return "deny"  # not a HookResult

    h.hooks.register(TOOL_SELECTING, broken, name="broken")
    h.hooks.register(TOOL_SELECTING, garbage, name="garbage")
    h.scheduler(HookResult(action="modify", data={"tool_name": "grep"}), name="wrong-keys")
    h.scheduler(HookResult(action="modify", data=None, priority=9), name="no-data")
    h.scheduler(modify(arguments={"cmd": "pwd"}), name="good")

    result = await h.run(calling(("bash", {"cmd": "ls"})))

    assert result.status == "success"
    assert h.tools["bash"].inputs == [{"cmd": "pwd"}]
    [selected] = h.events(TOOL_SELECTED)
    # Arguments changed, the tool did not: source scheduler, no original tool.
    assert (selected["source"], selected["original_tool"]) == ("scheduler", None)


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_hanging_scheduler_is_cut_by_scheduler_timeout(backend: str) -> None:
    # trio on virtual time (the exact duration is checked), asyncio on the real clock.
    options = {"clock": MockClock(autojump_threshold=0)} if backend == "trio" else {}
    anyio.run(_hanging_scheduler_case, backend == "trio", backend=backend, backend_options=options)


async def _hanging_scheduler_case(virtual: bool) -> None:
    timeout = 30.0 if virtual else 0.05
    h = Harness(scheduler_timeout=timeout)
    stopped: list[bool] = []

    async def stuck(event: str, data: dict[str, Any]) -> HookResult:
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            stopped.append(True)
            raise
        raise AssertionError

    h.hooks.register(TOOL_SELECTING, stuck, name="stuck")
    h.scheduler(modify("grep"), name="router")
    start = anyio.current_time()

    result = await h.run(calling(("bash", {"q": 1})), calling(("bash", {"q": 2})))

    elapsed = anyio.current_time() - start
    assert result.status == "success"
    assert stopped == [True, True]  # cut once per call, then skipped
    assert h.tools["grep"].inputs == [{"q": 1}, {"q": 2}]
    if virtual:
        assert elapsed == pytest.approx(2 * timeout)


async def test_tool_selecting_and_selected_payloads() -> None:
    h = Harness(record_selecting=True)
    seen = h.scheduler(modify("grep", {"pattern": "x"}, priority=2))

    await h.run(calling(("bash", {"cmd": "ls"}), ("fast", {"n": 1})))

    [batch_id] = {d["parallel_group_id"] for d in seen}
    assert all(d.pop("timestamp").endswith("+00:00") for d in seen)
    trace_id = h.orchestrator.last_result.trace_id  # type: ignore[union-attr]
    assert seen == [
        {
            "tool_name": "bash",
            "tool_input": {"cmd": "ls"},
            "available_tools": ["bash", "grep", "fast"],
            "tool_call_id": "c0",
            "index": 0,
            "parallel_group_id": batch_id,
            "trace_id": trace_id,
        },
        {
            "tool_name": "fast",
            "tool_input": {"n": 1},
            "available_tools": ["bash", "grep", "fast"],
            "tool_call_id": "c1",
            "index": 1,
            "parallel_group_id": batch_id,
            "trace_id": trace_id,
        },
    ]
    selected = [
        {k: d[k] for k in ("tool", "source", "original_tool", "tool_call_id")}
        for d in h.events(TOOL_SELECTED)
    ]
    assert selected == [
        {"tool": "grep", "source": "scheduler", "original_tool": "bash", "tool_call_id": "c0"},
        {"tool": "grep", "source": "scheduler", "original_tool": "fast", "tool_call_id": "c1"},
    ]
    # tool:pre follows with the selected tool, under the model's call id.
    assert [(d["tool_name"], d["tool_call_id"]) for d in h.events(TOOL_PRE)] == [
        ("grep", "c0"),
        ("grep", "c1"),
    ]
    # The stored result answers the model's call, under the model's tool name.
    tool_messages = [m for m in h.context.messages if m["role"] == "tool"]
    assert [(m["tool_call_id"], m["name"]) for m in tool_messages] == [
        ("c0", "bash"),
        ("c1", "fast"),
    ]


async def test_a_modify_naming_an_unmounted_tool_is_that_calls_error() -> None:
    h = Harness()
    h.scheduler(modify("nowhere"), name="router")

    result = await h.run(calling(("bash", {}), ("grep", {})))

    assert result.status == "success"
    expected = "Error: scheduler router chose tool 'nowhere', which is not mounted"
    assert h.results() == [expected, expected]
    assert [d["error"]["type"] for d in h.events(TOOL_ERROR)] == ["SchedulerError"] * 2
    assert h.tools["bash"].inputs == h.tools["grep"].inputs == []


async def test_a_modify_with_arguments_that_are_not_an_object_is_that_calls_error() -> None:
    h = Harness()
    h.scheduler(modify("grep", ["not", "an", "object"]), name="router")

    await h.run(calling(("bash", {})))

    assert h.results() == ["Error: scheduler router gave arguments of type list, not an object"]
    assert h.tools["grep"].inputs == []


# -- sequential and parallel -----------------------------------------------------------------


async def test_calls_run_one_after_another_by_default_each_after_its_stage() -> None:
    h = Harness()
    assert h.orchestrator.config.parallel_tools is False
    h.scheduler(None, name="s")
    for tool in h.tools.values():
        tool.delay = 0.01

    await h.run(calling(("bash", {}), ("grep", {}), ("fast", {})))

    assert h.log == [
        "scheduler s",
        "run bash",
        "scheduler s",
        "run grep",
        "scheduler s",
        "run fast",
    ]
    assert all(t.max_in_flight == 1 for t in h.tools.values())


async def test_parallel_tools_runs_every_stage_first_then_one_parallel_batch() -> None:
    h = Harness(parallel_tools=True)
    h.scheduler(None, name="s")
    h.tools["bash"].delay = 0.05
    in_flight: list[int] = []

    async def observe(event: str, data: dict[str, Any]) -> None:
        in_flight.append(h.tools["bash"].in_flight)

    h.hooks.register(TOOL_POST, observe)

    await h.run(calling(("bash", {"i": 0}), ("bash", {"i": 1}), ("grep", {})))

    assert h.log[:3] == ["scheduler s"] * 3
    assert h.tools["bash"].max_in_flight == 2
    # Results in call order whatever the timing.
    assert [output(c)["input"] for c in h.results()] == [{"i": 0}, {"i": 1}, {}]


# -- ephemeral injections --------------------------------------------------------------------


@pytest.mark.parametrize("event", [PROMPT_SUBMIT, PROVIDER_REQUEST, TOOL_POST])
async def test_an_ephemeral_injection_reaches_the_next_request_only(event: str) -> None:
    h = Harness()
    fired: list[bool] = []

    async def inject(name: str, data: dict[str, Any]) -> HookResult | None:
        if fired:
            return None
        fired.append(True)
        return HookResult(
            action="inject_context",
            context_injection=f"note from {event}",
            ephemeral=True,
            context_injection_role="user",
        )

    h.hooks.register(event, inject)

    await h.run(calling(("bash", {})), calling(("grep", {})))

    carrying = [
        i
        for i, request in enumerate(h.provider.requests)
        if any(m.content == f"note from {event}" for m in request.messages)
    ]
    assert carrying == [0 if event in (PROMPT_SUBMIT, PROVIDER_REQUEST) else 1]
    assert all(m["content"] != f"note from {event}" for m in h.context.messages)


async def test_append_to_last_tool_result_changes_the_request_not_the_context() -> None:
    h = Harness()

    async def annotate(event: str, data: dict[str, Any]) -> HookResult:
        return HookResult(
            action="inject_context",
            context_injection=f"(checked {data['tool_call_id']})",
            ephemeral=True,
            append_to_last_tool_result=True,
        )

    h.hooks.register(TOOL_POST, annotate)

    await h.run(calling(("bash", {}), ("grep", {})))

    sent = h.provider.requests[1].messages
    tool_messages = [m for m in sent if m.role == "tool"]
    stored = h.results()
    assert tool_messages[0].content == stored[0]
    assert tool_messages[1].content == f"{stored[1]}\n\n(checked c0)\n\n(checked c1)"
    assert len(sent) == len(h.context.messages) - 1  # the final answer came after
    assert all("(checked" not in m["content"] for m in h.context.messages if m["role"] == "tool")
    # Cleared after use: the request after it carries none.
    assert h.provider.requests[1] is h.provider.requests[-1]


# -- errors and cancels ----------------------------------------------------------------------


async def test_a_provider_error_emits_provider_error_and_ends_the_turn_error() -> None:
    h = Harness()

    result = await h.run(RateLimitError("slow down", status_code=429, retryable=True))

    assert result.status == "error"
    assert isinstance(result.error, RateLimitError)
    assert h.events(PROVIDER_ERROR)[0]["error"]["type"] == "RateLimitError"


async def test_a_failing_tool_is_its_result_and_the_loop_goes_on() -> None:
    h = Harness()

    class Broken(Tool):
        async def execute(self, tool_input: dict[str, Any]) -> ToolResult:
            raise OSError("disk on fire")

    result = await h.run(
        calling(("broken", {}), ("bash", {})), tools={**h.tools, "broken": Broken("broken")}
    )

    assert result.status == "success"
    assert result.text == "done"
    assert h.results()[0] == "Error: disk on fire"
    assert h.events(TOOL_ERROR)[0]["tool_call_id"] == "c0"
    assert len(h.provider.requests) == 2


async def test_an_immediate_cancel_during_a_scheduler_answers_every_call() -> None:
    h = Harness()
    h.tools["bash"].delay = 0.0
    entered = anyio.Event()
    calls_seen: list[str] = []

    async def slow(event: str, data: dict[str, Any]) -> None:
        calls_seen.append(data["tool_call_id"])
        if data["tool_call_id"] == "c1":
            entered.set()
            await anyio.sleep_forever()

    h.hooks.register(TOOL_SELECTING, slow)

    async with anyio.create_task_group() as tg:

        async def cancel_when_stuck() -> None:
            await entered.wait()
            await h.coordinator.request_cancel(immediate=True)

        tg.start_soon(cancel_when_stuck)
        result = await h.run(calling(("bash", {}), ("grep", {}), ("fast", {})))

    assert result.status == "cancelled"
    assert calls_seen == ["c0", "c1"]
    first, second, third = h.results()
    assert output(first)["tool"] == "bash"  # finished before the cancel: kept
    for content in (second, third):
        assert output(content) == {
            "error": "Tool execution was cancelled",
            "cancelled": True,
            "tool": "grep" if content is second else "fast",
        }


# -- the reduction as a function -------------------------------------------------------------


def answer(result: HookResult, registered: int, name: str = "s") -> HookAnswer:
    return HookAnswer(handler=name, registered=registered, result=result)


def test_reduce_answers_point_by_point() -> None:
    deny = answer(HookResult(action="deny", reason="r"), 5)
    low = answer(modify("a", priority=1), 0)
    high_late = answer(modify("b", priority=4), 3)
    high_early = answer(modify("c", priority=4), 2)
    garbage = answer(HookResult(action="modify", data={"x": 1}, priority=99), 1)

    assert reduce_answers([]) is None
    assert reduce_answers([answer(HookResult(), 0)]) is None
    assert reduce_answers([low, high_late, high_early, garbage]) is high_early
    assert reduce_answers([low, deny, high_early]) is deny
    assert reduce_answers([garbage]) is None


# -- config and mounting ---------------------------------------------------------------------


def test_config_defaults_and_errors_name_the_key() -> None:
    config = LoopEventsConfig.from_dict({"max_iterations": 3, "default_provider": "x"})
    assert (config.parallel_tools, config.scheduler_timeout, config.max_iterations) == (
        False,
        1.0,
        3,
    )
    with pytest.raises(ConfigError, match="scheduler_timeout"):
        LoopEventsOrchestrator({"scheduler_timeout": 0})
    with pytest.raises(ConfigError, match="scheduler_timeout"):
        LoopEventsOrchestrator({"scheduler_timeout": float("nan")})
    assert CONFIG_SCHEMA.module == "loop-events"
    assert {"scheduler_timeout", "parallel_tools", "extended_thinking"} <= set(
        CONFIG_SCHEMA.settings
    )
    assert [p.key for p in CONFIG_SCHEMA.check({"scheduler_timeout": "soon"})] == [
        "scheduler_timeout"
    ]


async def test_mount_makes_it_the_orchestrator() -> None:
    coordinator = MockCoordinator()

    await mount(coordinator, {"scheduler_timeout": 0.5})

    orchestrator = coordinator.get("orchestrator")
    assert isinstance(orchestrator, LoopEventsOrchestrator)
    assert orchestrator.scheduler_timeout == 0.5


# -- the example schedulers ------------------------------------------------------------------


async def test_the_cost_scheduler_vetoes_once_the_turn_budget_would_be_exceeded() -> None:
    h = Harness()
    cost = CostScheduler({"budget": 5, "costs": {"bash": 2, "grep": 4}, "default_cost": 1})
    cost.register(h.hooks)
    calls = [("bash", {}), ("bash", {}), ("grep", {}), ("fast", {}), ("bash", {})]

    await h.run(calling(*calls))

    results = h.results()
    assert [output(r)["tool"] for r in (results[0], results[1], results[3])] == [
        "bash",
        "bash",
        "fast",
    ]
    assert results[2] == (
        "Error: cost budget exceeded: grep costs 4, 4 of 5 already spent this turn"
    )
    assert results[4] == (
        "Error: cost budget exceeded: bash costs 2, 5 of 5 already spent this turn"
    )
    # The turn's spending is forgotten when it ends: the next turn starts at zero.
    assert cost.spent(h.orchestrator.last_result.trace_id) == 0.0  # type: ignore[union-attr]
    await h.run(calling(("grep", {})))
    assert output(h.results()[-1])["tool"] == "grep"


async def test_the_cost_scheduler_charges_the_tool_the_router_selected() -> None:
    h = Harness()
    CostScheduler({"budget": 2.5, "costs": {"bash": 1, "grep": 2}}).register(h.hooks)
    RouterScheduler({"routes": {"bash": "grep"}}).register(h.hooks)

    await h.run(calling(("bash", {}), ("bash", {})))

    first, second = h.results()
    assert output(first)["tool"] == "grep"  # checked as bash (1), charged as grep (2)
    # Charged as bash, the second call would fit (1 + 1 <= 2.5).
    assert second == "Error: cost budget exceeded: bash costs 1, 2 of 2.5 already spent this turn"


async def test_the_router_rewrites_names_and_merges_arguments() -> None:
    h = Harness()
    RouterScheduler(
        {
            "routes": {
                "bash": {"tool": "fast", "arguments": {"timeout": 10}},
                "grep": {"arguments": {"ignore_case": True}},
            },
            "priority": 5,
        }
    ).register(h.hooks)

    await h.run(calling(("bash", {"cmd": "ls"}), ("grep", {"pattern": "x"}), ("fast", {})))

    assert h.tools["fast"].inputs == [{"cmd": "ls", "timeout": 10}, {}]
    assert h.tools["grep"].inputs == [{"pattern": "x", "ignore_case": True}]
    sources = [(d["tool"], d["source"], d["original_tool"]) for d in h.events(TOOL_SELECTED)]
    assert sources == [
        ("fast", "scheduler", "bash"),
        ("grep", "scheduler", None),
        ("fast", "llm", None),
    ]


async def test_a_higher_priority_router_wins_over_a_lower_one() -> None:
    h = Harness()
    RouterScheduler({"routes": {"bash": "grep"}, "priority": 1}).register(h.hooks, "low")
    RouterScheduler({"routes": {"bash": "fast"}, "priority": 2}).register(h.hooks, "high")

    await h.run(calling(("bash", {})))

    assert len(h.tools["fast"].inputs) == 1


@pytest.mark.parametrize(
    ("factory", "config", "key"),
    [
        (CostScheduler, {"budget": -1}, "budget"),
        (CostScheduler, {"costs": {"bash": "cheap"}}, "costs"),
        (CostScheduler, {"costs": {"bash": -2}}, "costs.bash"),
        (CostScheduler, {"default_cost": float("inf")}, "default_cost"),
        (RouterScheduler, {"routes": {"bash": 3}}, "routes.bash"),
        (RouterScheduler, {"routes": {"bash": {"tool": "x", "extra": 1}}}, "routes.bash"),
        (RouterScheduler, {"routes": {"bash": {"arguments": [1]}}}, "routes.bash"),
        (RouterScheduler, {"routes": ["bash"]}, "routes"),
    ],
)
def test_scheduler_config_errors_name_the_key(factory: Any, config: Any, key: str) -> None:
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        factory(config)


async def test_the_scheduler_modules_mount_and_clean_up() -> None:
    coordinator = MockCoordinator()

    undo_cost = await mount_cost(coordinator, {"budget": 1})
    undo_router = await mount_router(coordinator, {"routes": {"a": "b"}})

    assert coordinator.hooks.list_handlers(TOOL_SELECTING)[TOOL_SELECTING] == [
        "hooks-scheduler-cost",
        "hooks-scheduler-router",
    ]
    assert mount_cost.config_schema.module == "hooks-scheduler-cost"  # type: ignore[attr-defined]
    assert mount_router.config_schema.module == "hooks-scheduler-router"  # type: ignore[attr-defined]
    undo_cost()
    undo_router()
    assert coordinator.hooks.list_handlers() == {}
