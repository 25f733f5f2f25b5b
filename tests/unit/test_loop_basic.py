"""loop-basic: provider choice, injections, the iteration limit, errors, events, cancel."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest

from amplifier_anyio.errors import ConfigError, RateLimitError
from amplifier_anyio.events import (
    EXECUTION_END,
    EXECUTION_START,
    LLM_REQUEST,
    LLM_RESPONSE,
    ORCHESTRATOR_COMPLETE,
    PROMPT_COMPLETE,
    PROMPT_SUBMIT,
    PROVIDER_ERROR,
    PROVIDER_REQUEST,
    PROVIDER_RESPONSE,
    TOOL_POST,
    TOOL_PRE,
)
from amplifier_anyio.kernel import CancellationToken, TurnResult
from amplifier_anyio.models import (
    ChatRequest,
    ChatResponse,
    HookResult,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    ToolResult,
    Usage,
)
from amplifier_anyio.orchestrators import LoopBasicConfig, LoopBasicOrchestrator
from amplifier_anyio.orchestrators.loop_basic import mount
from amplifier_anyio.providers.scripted import ScriptedProvider
from amplifier_anyio.testing import EventRecorder, MockContextManager, MockCoordinator, MockTool

pytestmark = pytest.mark.anyio

REMINDER = """<system-reminder source="orchestrator-loop-limit">
You have reached the maximum number of iterations for this turn.
Please provide a response to the user now, summarizing your progress
and noting what remains to be done. You can continue in the next turn
if needed.

DO NOT mention this iteration limit or reminder to the user explicitly.
Simply wrap up naturally.
</system-reminder>"""


def text(value: str, **kw: Any) -> ChatResponse:
    return ChatResponse(content=[TextBlock(text=value)], **kw)


def calling(*names: str, prefix: str = "c") -> ChatResponse:
    return ChatResponse(
        content=[TextBlock(text="let me look")],
        tool_calls=[ToolCall(id=f"{prefix}{i}", name=n) for i, n in enumerate(names)],
    )


class Harness:
    """A coordinator with a recorder, a context, and a way to run one turn."""

    def __init__(self, **config: Any) -> None:
        self.coordinator = MockCoordinator()
        self.recorder = EventRecorder()
        self.recorder.attach(self.coordinator.hooks)
        self.context = MockContextManager()
        self.orchestrator = LoopBasicOrchestrator(config)

    @property
    def hooks(self) -> Any:
        return self.coordinator.hooks

    async def run(
        self, providers: dict[str, Any], tools: dict[str, Any] | None = None, prompt: str = "hi"
    ) -> TurnResult:
        await self.coordinator.mount("context", self.context)
        return await self.orchestrator.run_turn(
            prompt, self.context, providers, tools or {}, self.hooks, coordinator=self.coordinator
        )

    def names(self) -> list[str]:
        return self.recorder.names()

    def payload(self, event: str) -> dict[str, Any]:
        [(_, data)] = self.recorder.get_events(event)
        return data


def assert_terminal_events_last(harness: Harness, status: str) -> None:
    names = harness.names()
    assert names.count(ORCHESTRATOR_COMPLETE) == 1
    assert names.count(EXECUTION_END) == 1
    assert names[-2:] == [ORCHESTRATOR_COMPLETE, EXECUTION_END]
    assert harness.payload(ORCHESTRATOR_COMPLETE)["status"] == status


# -- provider selection ----------------------------------------------------------------------


async def test_the_provider_with_the_lowest_priority_number_answers() -> None:
    high = ScriptedProvider([text("from high")], name="high", priority=1)
    low = ScriptedProvider([text("from low")], name="low", priority=5)

    result = await Harness().run({"low": low, "high": high})

    assert result.text == "from high"
    assert (len(high.requests), len(low.requests)) == (1, 0)


async def test_priority_may_come_from_the_provider_config() -> None:
    plain = ScriptedProvider([text("plain")])
    configured = ScriptedProvider([text("configured")])
    configured.config = {"priority": 0}  # type: ignore[attr-defined]

    result = await Harness().run({"plain": plain, "configured": configured})

    assert result.text == "configured"


async def test_default_provider_breaks_a_priority_tie() -> None:
    first = ScriptedProvider([text("first")])
    second = ScriptedProvider([text("second")])

    result = await Harness(default_provider="second").run({"first": first, "second": second})

    assert result.text == "second"


async def test_priority_wins_over_default_provider() -> None:
    preferred = ScriptedProvider([text("preferred")], priority=0)
    default = ScriptedProvider([text("default")], priority=10)

    result = await Harness(default_provider="default").run(
        {"default": default, "preferred": preferred}
    )

    assert result.text == "preferred"


async def test_an_unknown_default_provider_is_a_config_error_naming_it() -> None:
    harness = Harness(default_provider="nowhere")
    providers = {"scripted": ScriptedProvider([text("x")])}

    result = await harness.run(providers)

    assert result.status == "error"
    assert isinstance(result.error, ConfigError)
    assert "nowhere" in str(result.error)
    assert_terminal_events_last(harness, "error")
    with pytest.raises(ConfigError, match="nowhere"):
        await harness.orchestrator.execute(
            "hi", harness.context, providers, {}, harness.hooks, coordinator=harness.coordinator
        )


async def test_a_turn_whose_provider_selection_fails_leaves_no_user_message_behind() -> None:
    failing = Harness(default_provider="nowhere")
    scripted = ScriptedProvider([text("answered")])

    result = await failing.run({"scripted": scripted}, prompt="first try")

    assert result.status == "error"
    assert await failing.context.get_messages() == []  # nothing half-recorded
    # The retry on the same context sends the prompt once, not twice.
    retry = LoopBasicOrchestrator({})
    again = await retry.run_turn(
        "second try", failing.context, {"scripted": scripted}, {}, failing.hooks,
        coordinator=failing.coordinator,
    )  # fmt: skip
    assert again.text == "answered"
    (request,) = scripted.requests
    assert [m.role for m in request.messages] == ["user"]
    assert contents(request) == ["second try"]


# -- injections ------------------------------------------------------------------------------


def contents(request: ChatRequest) -> list[Any]:
    return [m.content for m in request.messages]


async def test_ephemeral_prompt_submit_injection_reaches_the_first_request_only() -> None:
    harness = Harness()
    harness.hooks.register(
        PROMPT_SUBMIT,
        lambda e, d: HookResult(
            action="inject_context", context_injection="today is Tuesday", ephemeral=True
        ),
    )
    provider = ScriptedProvider([calling("t"), text("done")])

    await harness.run({"p": provider}, {"t": MockTool("t")})

    first, second = provider.requests
    assert contents(first)[-1] == "today is Tuesday"
    assert first.messages[-1].role == "system"
    assert "today is Tuesday" not in contents(second)
    assert all(m["content"] != "today is Tuesday" for m in harness.context.messages)


async def test_ephemeral_provider_request_injection_reaches_that_request_only() -> None:
    harness = Harness()

    def once(event: str, data: dict[str, Any]) -> HookResult | None:
        if data["iteration"] != 0:
            return None
        return HookResult(
            action="inject_context",
            context_injection="be brief",
            context_injection_role="user",
            ephemeral=True,
        )

    harness.hooks.register(PROVIDER_REQUEST, once)
    provider = ScriptedProvider([calling("t"), text("done")])

    await harness.run({"p": provider}, {"t": MockTool("t")})

    first, second = provider.requests
    assert (first.messages[-1].role, first.messages[-1].content) == ("user", "be brief")
    assert "be brief" not in contents(second)
    assert all(m["content"] != "be brief" for m in harness.context.messages)


async def test_persistent_prompt_submit_injection_is_stored() -> None:
    harness = Harness()
    harness.hooks.register(
        PROMPT_SUBMIT,
        lambda e, d: HookResult(action="inject_context", context_injection="house rules"),
    )
    provider = ScriptedProvider([text("done")])

    await harness.run({"p": provider})

    stored = [m["content"] for m in harness.context.messages]
    assert "house rules" in stored
    assert "house rules" in contents(provider.requests[0])


# -- iteration limit -------------------------------------------------------------------------


async def test_iteration_limit_asks_for_a_wrap_up_without_tools() -> None:
    harness = Harness(max_iterations=2)
    provider = ScriptedProvider(
        [calling("t"), calling("t", prefix="d"), text("here is where I am")]
    )
    tool = MockTool("t")

    result = await harness.run({"p": provider}, {"t": tool})

    assert len(provider.requests) == 3
    final = provider.requests[-1]
    assert (final.messages[-1].role, final.messages[-1].content) == ("user", REMINDER)
    assert final.tools is None
    assert all(r.tools for r in provider.requests[:-1])
    assert result.text == "here is where I am"
    assert isinstance(result.text, str)
    assert result.status == "incomplete"
    assert tool.call_count == 2
    requests = [d for _, d in harness.recorder.get_events(PROVIDER_REQUEST)]
    assert [d.get("max_reached", False) for d in requests] == [False, False, True]
    # The reminder is for that request only.
    assert all(m["content"] != REMINDER for m in harness.context.messages)
    assert_terminal_events_last(harness, "incomplete")


async def test_a_final_answer_within_the_limit_is_a_success() -> None:
    harness = Harness(max_iterations=2)
    provider = ScriptedProvider([calling("t"), text("done")])

    result = await harness.run({"p": provider}, {"t": MockTool("t")})

    assert (result.text, result.status, result.turn_count) == ("done", "success", 2)


# -- provider errors -------------------------------------------------------------------------


async def test_an_llm_error_is_reported_with_its_retry_details() -> None:
    error = RateLimitError("slow down", status_code=429, retryable=True)
    harness = Harness()
    provider = ScriptedProvider([error], name="scripted")

    result = await harness.run({"scripted": provider})

    assert result.status == "error"
    assert result.error is error
    data = harness.payload(PROVIDER_ERROR)
    assert data["provider"] == "scripted"
    assert data["error"] == {"type": "RateLimitError", "msg": str(error)}
    assert (data["retryable"], data["status_code"]) == (True, 429)
    end = harness.payload(EXECUTION_END)
    assert (end["status"], end["error"]) == (
        "error",
        {"type": "RateLimitError", "msg": str(error)},
    )
    assert_terminal_events_last(harness, "error")


async def test_a_plain_exception_is_reported_without_retry_details() -> None:
    harness = Harness()

    await harness.run({"p": ScriptedProvider([RuntimeError("socket closed")])})

    data = harness.payload(PROVIDER_ERROR)
    assert data["error"] == {"type": "RuntimeError", "msg": "socket closed"}
    assert "retryable" not in data
    assert "status_code" not in data


async def test_execute_re_raises_the_original_exception() -> None:
    error = RateLimitError("slow down", status_code=429, retryable=True)
    harness = Harness()

    with pytest.raises(RateLimitError) as raised:
        await harness.orchestrator.execute(
            "hi", harness.context, {"p": ScriptedProvider([error])}, {}, harness.hooks
        )

    assert raised.value is error
    assert harness.orchestrator.last_result is not None
    assert harness.orchestrator.last_result.error is error


# -- responses -------------------------------------------------------------------------------


async def test_thinking_never_leaks_into_the_answer() -> None:
    provider = ScriptedProvider(
        [
            ChatResponse(
                content=[
                    ThinkingBlock(thinking="the user seems tired", signature="sig-1"),
                    TextBlock(text="Here you go."),
                    ThinkingBlock(thinking="more private thoughts"),
                ]
            )
        ]
    )

    result = await Harness().run({"p": provider})

    assert result.text == "Here you go."


async def test_the_assistant_message_keeps_its_thinking_signature_and_tool_calls() -> None:
    harness = Harness()
    provider = ScriptedProvider(
        [
            ChatResponse(
                content=[ThinkingBlock(thinking="need a tool", signature="sig-9")],
                tool_calls=[ToolCall(id="a", name="t", arguments={"q": 1})],
            ),
            text("done"),
        ]
    )

    await harness.run({"p": provider}, {"t": MockTool("t")})

    assistant = harness.context.messages[1]
    assert assistant["role"] == "assistant"
    assert assistant["content"] == [
        {"type": "thinking", "thinking": "need a tool", "signature": "sig-9"}
    ]
    assert assistant["tool_calls"] == [{"id": "a", "name": "t", "arguments": {"q": 1}}]
    # …and goes back to the provider unchanged.
    [block] = provider.requests[1].messages[1].content
    assert block == ThinkingBlock(thinking="need a tool", signature="sig-9")


class KwargsProvider(ScriptedProvider):
    """Records the keyword arguments of every ``complete`` call."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.kwargs: list[dict[str, Any]] = []

    async def complete(self, request: ChatRequest, **kwargs: Any) -> ChatResponse:
        self.kwargs.append(kwargs)
        return await super().complete(request, **kwargs)


@pytest.mark.parametrize("effort", ["low", "medium", "high", None])
async def test_reasoning_effort_reaches_every_request(effort: str | None) -> None:
    provider = ScriptedProvider([calling("t"), text("a"), text("wrap")])

    await Harness(reasoning_effort=effort, max_iterations=1).run(
        {"p": provider}, {"t": MockTool("t")}
    )

    assert [r.reasoning_effort for r in provider.requests] == [effort, effort]


@pytest.mark.parametrize("enabled", [True, False])
async def test_extended_thinking_is_passed_to_complete(enabled: bool) -> None:
    provider = KwargsProvider([calling("t"), text("done")])

    await Harness(extended_thinking=enabled).run({"p": provider}, {"t": MockTool("t")})

    expected = {"extended_thinking": True} if enabled else {}
    assert provider.kwargs == [expected, expected]


async def test_usage_is_summed_over_the_turn() -> None:
    usage = Usage(input_tokens=10, output_tokens=2, total_tokens=12)
    provider = ScriptedProvider(
        [
            ChatResponse(tool_calls=[ToolCall(id="a", name="t")], usage=usage),
            text("done", usage=usage),
        ]
    )

    result = await Harness().run({"p": provider}, {"t": MockTool("t")})

    assert result.usage == Usage(input_tokens=20, output_tokens=4, total_tokens=24)
    assert result.turn_count == 2


# -- config and mount ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "key"),
    [
        ({"max_iterations": "many"}, "max_iterations"),
        ({"max_iterations": -2}, "max_iterations"),
        ({"max_parallel_tools": 0}, "max_parallel_tools"),
        ({"tool_timeout": 0}, "tool_timeout"),
        ({"turn_timeout": -1}, "turn_timeout"),
        ({"parallel_tools": "sometimes"}, "parallel_tools"),
    ],
)
def test_invalid_config_is_a_config_error_naming_the_key(config: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError, match=key):
        LoopBasicOrchestrator(config)


def test_config_defaults() -> None:
    assert LoopBasicConfig.from_dict(None) == LoopBasicConfig(
        max_iterations=-1,
        parallel_tools=True,
        max_parallel_tools=None,
        tool_timeout=None,
        turn_timeout=None,
        extended_thinking=False,
        reasoning_effort=None,
        default_provider=None,
    )


async def test_mount_puts_loop_basic_at_the_orchestrator_mount_point() -> None:
    coordinator = MockCoordinator()

    await mount(coordinator, {"max_iterations": 3, "tool_timeout": 2.5})

    orchestrator = coordinator.get("orchestrator")
    assert isinstance(orchestrator, LoopBasicOrchestrator)
    assert (orchestrator.config.max_iterations, orchestrator.config.tool_timeout) == (3, 2.5)
    assert coordinator.mount_history[-1]["mount_point"] == "orchestrator"


# -- events ----------------------------------------------------------------------------------


class ConfiguredModel(ScriptedProvider):
    """A provider with a configured default model, as the HTTP providers have."""

    model = "gpt-4o-mini"


@pytest.mark.parametrize(
    ("provider_class", "model"), [(ScriptedProvider, "scripted"), (ConfiguredModel, "gpt-4o-mini")]
)
async def test_llm_request_names_the_model_the_provider_asks_for(
    provider_class: type[ScriptedProvider], model: str
) -> None:
    # the request names no model: the provider's default is the one asked for
    harness = Harness()
    provider = provider_class([text("Hi.")], name="p")

    await harness.run({"p": provider})

    assert provider.requests[0].model is None
    assert harness.payload(LLM_REQUEST)["model"] == model


async def test_a_turn_emits_the_documented_events_and_payloads() -> None:
    harness = Harness()
    usage = Usage(input_tokens=5, output_tokens=1, total_tokens=6)
    provider = ScriptedProvider(
        [
            ChatResponse(tool_calls=[ToolCall(id="a", name="t", arguments={"x": 1})], usage=usage),
            text("All done.", usage=usage),
        ],
        name="scripted",
    )

    result = await harness.run({"scripted": provider}, {"t": MockTool("t", "out")}, prompt="go")

    assert harness.names() == [
        EXECUTION_START,
        PROMPT_SUBMIT,
        PROVIDER_REQUEST,
        LLM_REQUEST,
        LLM_RESPONSE,
        PROVIDER_RESPONSE,
        TOOL_PRE,
        TOOL_POST,
        PROVIDER_REQUEST,
        LLM_REQUEST,
        LLM_RESPONSE,
        PROVIDER_RESPONSE,
        PROMPT_COMPLETE,
        ORCHESTRATOR_COMPLETE,
        EXECUTION_END,
    ]
    # llm:request / llm:response carry the whole request and response; checked, then
    # set aside so the indexes below are the upstream events'.
    llm = [d for name, d in harness.recorder.events if name in (LLM_REQUEST, LLM_RESPONSE)]
    assert llm[0]["request"]["messages"] == [{"role": "user", "content": "go"}]
    assert (llm[0]["provider"], llm[0]["message_count"]) == ("scripted", 1)
    assert llm[1]["response"]["tool_calls"] == [{"id": "a", "name": "t", "arguments": {"x": 1}}]
    assert llm[3]["response"]["content"] == [{"type": "text", "text": "All done."}]
    events = [e for e in harness.recorder.events if e[0] not in (LLM_REQUEST, LLM_RESPONSE)]
    assert {d["trace_id"] for _, d in events} == {result.trace_id}
    assert result.trace_id

    def fields(index: int, *keys: str) -> dict[str, Any]:
        return {k: events[index][1][k] for k in keys}

    assert fields(0, "prompt") == {"prompt": "go"}
    assert fields(1, "prompt") == {"prompt": "go"}
    assert fields(2, "provider", "iteration", "stream") == {
        "provider": "scripted",
        "iteration": 0,
        "stream": False,
    }
    assert fields(3, "provider", "usage", "tool_calls", "finish_reason", "response_id") == {
        "provider": "scripted",
        "usage": {"input_tokens": 5, "output_tokens": 1, "total_tokens": 6},
        "tool_calls": 1,
        "finish_reason": None,
        "response_id": None,
    }
    pre = fields(4, "tool_name", "tool_call_id", "tool_input", "index")
    assert pre == {"tool_name": "t", "tool_call_id": "a", "tool_input": {"x": 1}, "index": 0}
    assert events[5][1]["result"]["output"] == "out"
    assert events[4][1]["parallel_group_id"] == events[5][1]["parallel_group_id"]
    assert fields(6, "iteration") == {"iteration": 1}
    assert fields(8, "response_preview", "length") == {
        "response_preview": "All done.",
        "length": 9,
    }
    assert fields(9, "orchestrator", "turn_count", "status") == {
        "orchestrator": "loop-basic",
        "turn_count": 2,
        "status": "success",
    }
    assert fields(10, "response", "status") == {"response": "All done.", "status": "completed"}


async def test_prompt_complete_preview_is_capped() -> None:
    harness = Harness()

    await harness.run({"p": ScriptedProvider([text("x" * 500)])})

    data = harness.payload(PROMPT_COMPLETE)
    assert (len(data["response_preview"]), data["length"]) == (200, 500)


async def test_each_batch_has_its_own_parallel_group_id() -> None:
    harness = Harness()
    provider = ScriptedProvider(
        [calling("t", "t", prefix="a"), calling("t", "t", "t", prefix="b"), text("done")]
    )

    await harness.run({"p": provider}, {"t": MockTool("t")})

    groups: dict[str, set[str]] = {}
    for _, data in harness.recorder.get_events(TOOL_PRE):
        groups.setdefault(data["tool_call_id"][0], set()).add(data["parallel_group_id"])
    assert len(groups["a"]) == len(groups["b"]) == 1
    assert groups["a"] != groups["b"]


# -- every path ends with the terminal events ------------------------------------------------


class CancellingTool:
    """Requests a cancel while running, then keeps running until it is done or cancelled."""

    name = "cancel"

    def __init__(self, how: Any) -> None:
        self.how = how
        self.finished = False

    async def execute(self, tool_input: dict[str, Any]) -> ToolResult:
        await self.how()
        await anyio.sleep(0.01)
        self.finished = True
        return ToolResult(output="finished anyway")


async def test_prompt_submit_deny_ends_the_turn_before_any_request() -> None:
    harness = Harness()
    harness.hooks.register(PROMPT_SUBMIT, lambda e, d: HookResult(action="deny", reason="quiet"))
    provider = ScriptedProvider([text("never")])

    result = await harness.run({"p": provider})

    assert (result.text, result.status) == ("Operation denied: quiet", "incomplete")
    assert provider.requests == []
    assert_terminal_events_last(harness, "incomplete")


async def test_prompt_submit_deny_is_honoured_without_a_coordinator() -> None:
    harness = Harness()
    harness.hooks.register(PROMPT_SUBMIT, lambda e, d: HookResult(action="deny", reason="quiet"))
    provider = ScriptedProvider([text("never")])

    result = await harness.orchestrator.run_turn(
        "hi", harness.context, {"p": provider}, {}, harness.hooks
    )

    assert result.text == "Operation denied: quiet"
    assert provider.requests == []


async def test_provider_request_deny_ends_the_turn() -> None:
    harness = Harness()
    harness.hooks.register(
        PROVIDER_REQUEST, lambda e, d: HookResult(action="deny", reason="budget")
    )

    result = await harness.run({"p": ScriptedProvider([text("never")])})

    assert result.text == "Operation denied: budget"
    assert_terminal_events_last(harness, "incomplete")


async def test_graceful_cancel_lets_the_batch_finish_then_stops() -> None:
    harness = Harness()
    tool = CancellingTool(harness.coordinator.request_cancel)
    other = MockTool("other", "other result", delay=0.02)
    provider = ScriptedProvider([calling("cancel", "other"), text("never reached")])

    result = await harness.run({"p": provider}, {"cancel": tool, "other": other})

    assert result.status == "cancelled"
    assert len(provider.requests) == 1
    assert [m["content"] for m in harness.context.messages if m["role"] == "tool"] == [
        "finished anyway",
        "other result",
    ]
    assert harness.names().index("cancel:requested") < harness.names().index(ORCHESTRATOR_COMPLETE)
    assert harness.payload(EXECUTION_END)["status"] == "cancelled"
    assert "error" not in harness.payload(EXECUTION_END)
    assert_terminal_events_last(harness, "cancelled")


@pytest.mark.parametrize("nowait", [False, True])
async def test_immediate_cancel_interrupts_the_batch(nowait: bool) -> None:
    harness = Harness()

    async def cancel_now() -> None:
        if nowait:
            harness.coordinator.request_cancel_nowait(immediate=True)
        else:
            await harness.coordinator.request_cancel(immediate=True)

    tool = CancellingTool(cancel_now)
    provider = ScriptedProvider([calling("cancel", "slow"), text("never reached")])

    result = await harness.run(
        {"p": provider}, {"cancel": tool, "slow": MockTool("slow", delay=60)}
    )

    assert result.status == "cancelled"
    assert not tool.finished
    results = [m["content"] for m in harness.context.messages if m["role"] == "tool"]
    assert [json.loads(r) for r in results] == [
        {"error": "Tool execution was cancelled", "cancelled": True, "tool": "cancel"},
        {"error": "Tool execution was cancelled", "cancelled": True, "tool": "slow"},
    ]
    assert harness.names().count("cancel:requested") == 1
    assert harness.coordinator.cancellation.running_tools == set()
    assert_terminal_events_last(harness, "cancelled")


async def test_immediate_cancel_works_without_a_coordinator() -> None:
    orchestrator = LoopBasicOrchestrator()
    hooks = MockCoordinator().hooks
    recorder = EventRecorder()
    recorder.attach(hooks)
    token = CancellationToken()  # the caller accepts the turn, so it holds the token

    async def cancel_now() -> None:
        await anyio.lowlevel.checkpoint()
        token.request_immediate()

    context = MockContextManager()
    provider = ScriptedProvider([calling("cancel"), text("never reached")])

    result = await orchestrator.run_turn(
        "hi",
        context,
        {"p": provider},
        {"cancel": CancellingTool(cancel_now)},
        hooks,
        cancellation=token,
    )

    assert result.status == "cancelled"
    [tool_message] = [m for m in context.messages if m["role"] == "tool"]
    assert json.loads(tool_message["content"])["cancelled"] is True
    assert recorder.names()[-2:] == [ORCHESTRATOR_COMPLETE, EXECUTION_END]


async def test_the_token_is_reset_for_the_next_turn() -> None:
    harness = Harness()
    tool = CancellingTool(lambda: harness.coordinator.request_cancel(immediate=True))
    provider = ScriptedProvider([calling("cancel"), text("second turn answer")])

    first = await harness.run({"p": provider}, {"cancel": tool})
    second = await harness.run({"p": provider}, {"cancel": tool})

    assert (first.status, second.status) == ("cancelled", "success")
    assert second.text == "second turn answer"


async def test_the_host_cancel_propagates_after_the_terminal_events() -> None:
    harness = Harness()
    host = anyio.CancelScope()

    async def cancel_host() -> None:
        await anyio.lowlevel.checkpoint()
        host.cancel()

    provider = ScriptedProvider([calling("cancel"), text("never reached")])
    returned = False

    with host:
        await harness.run({"p": provider}, {"cancel": CancellingTool(cancel_host)})
        returned = True

    assert host.cancelled_caught
    assert not returned
    assert_terminal_events_last(harness, "cancelled")
    assert harness.payload(EXECUTION_END)["status"] == "cancelled"
    [tool_message] = [m for m in harness.context.messages if m["role"] == "tool"]
    assert json.loads(tool_message["content"])["cancelled"] is True
