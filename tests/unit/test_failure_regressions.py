"""Regressions of "failures stay local": one test per rule, each through a real turn.

- Hook data is applied whatever the action (deny aside): a ``tool:pre`` modify beside an
  injection, or behind an allowed ``ask_user``, and a ``tool:post`` redaction beside an
  injection all take effect.
- A call's own failure (output that cannot be serialised, hook data or input of the wrong
  shape, a post result that is not JSON, a raising approval system, an oversized
  injection) is that call's result; its siblings keep their real results and the turn
  ends with status success, not with an exception group.
- Approval fails closed: None, an odd answer or a raising approval system denies even
  with ``approval_default="allow"``; only a timeout takes the default.
- KeyboardInterrupt and SystemExit from a tool leave ``run_turn`` and
  ``AmplifierSession.run`` bare, with one call and with several in parallel.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest

from amplifier_anyio import AmplifierSession
from amplifier_anyio.errors import (
    AmplifierError,
    ApprovalTimeoutError,
    ValidationError,
    unwrap_group,
)
from amplifier_anyio.events import TOOL_POST, TOOL_PRE
from amplifier_anyio.kernel import TurnResult
from amplifier_anyio.models import (
    ChatResponse,
    HookResult,
    Message,
    TextBlock,
    ToolCall,
    ToolResult,
)
from amplifier_anyio.orchestrators import LoopBasicOrchestrator
from amplifier_anyio.providers.scripted import ScriptedProvider
from amplifier_anyio.testing import MockContextManager, MockCoordinator, ScriptedApprovalSystem

pytestmark = pytest.mark.anyio

LIMIT = 40
"""The ``session.injection_size_limit`` of these coordinators (characters)."""


class Echo:
    """Answers with its input after a few checkpoints; records every input."""

    name = "echo"
    description = "Echoes its input."
    input_schema: dict[str, Any] = {"type": "object"}  # noqa: RUF012 - read only

    def __init__(self, outputs: dict[int, Any] | None = None) -> None:
        self.outputs = outputs or {}
        self.inputs: list[dict[str, Any]] = []

    async def execute(self, tool_input: dict[str, Any]) -> Any:
        self.inputs.append(tool_input)
        for _ in range(3):  # a failing sibling had every chance to cancel this one
            await anyio.lowlevel.checkpoint()
        return self.outputs.get(tool_input.get("n"), ToolResult(output={"got": tool_input}))


def echo_calls(count: int) -> list[ToolCall]:
    return [ToolCall(id=f"c{n}", name="echo", arguments={"n": n}) for n in range(count)]


def got(tool_input: dict[str, Any]) -> str:
    return json.dumps({"got": tool_input})


def coordinator_with(approval_system: Any = None) -> MockCoordinator:
    return MockCoordinator(
        {"session": {"injection_size_limit": LIMIT}}, approval_system=approval_system
    )


async def run_turn(
    coordinator: MockCoordinator,
    calls: list[ToolCall],
    tools: dict[str, Any],
    *,
    parallel: bool = True,
) -> tuple[TurnResult, MockContextManager, ScriptedProvider]:
    """One turn of loop-basic: the calls, then the answer "done"."""
    context = MockContextManager()
    await coordinator.mount("context", context)
    provider = ScriptedProvider(
        [
            ChatResponse(content=[TextBlock(text="calling")], tool_calls=calls),
            ChatResponse(content=[TextBlock(text="done")]),
        ]
    )
    orchestrator = LoopBasicOrchestrator({"parallel_tools": parallel})
    result = await orchestrator.run_turn(
        "go", context, {"scripted": provider}, tools, coordinator.hooks, coordinator=coordinator
    )
    return result, context, provider


def tool_contents(context: MockContextManager) -> list[str]:
    return [m["content"] for m in context.messages if m["role"] == "tool"]


def sandbox(event: str, data: dict[str, Any]) -> HookResult:
    """A tool:pre hook that confines the call to a sandbox."""
    return HookResult(action="modify", data={**data, "tool_input": {"n": 0, "sandboxed": True}})


def note(event: str, data: dict[str, Any]) -> HookResult:
    return HookResult(action="inject_context", context_injection="a note", ephemeral=True)


# -- hook data is applied whatever the action ------------------------------------------------


async def test_a_tool_pre_modify_is_applied_when_another_hook_injects_context() -> None:
    coordinator = coordinator_with()
    coordinator.hooks.register(TOOL_PRE, sandbox)
    coordinator.hooks.register(TOOL_PRE, note)
    tool = Echo()

    result, context, provider = await run_turn(coordinator, echo_calls(1), {"echo": tool})

    assert tool.inputs == [{"n": 0, "sandboxed": True}]
    assert tool_contents(context) == [got({"n": 0, "sandboxed": True})]
    assert provider.requests[1].messages[-1].content == "a note"  # the injection too
    assert result.status == "success"


async def test_a_tool_pre_modify_is_applied_behind_ask_user_after_an_allow() -> None:
    approvals = ScriptedApprovalSystem(["Allow once"])
    coordinator = coordinator_with(approvals)
    coordinator.hooks.register(TOOL_PRE, sandbox)
    coordinator.hooks.register(
        TOOL_PRE, lambda event, data: HookResult(action="ask_user", approval_prompt="Run it?")
    )
    tool = Echo()

    result, context, _ = await run_turn(coordinator, echo_calls(1), {"echo": tool})

    assert [r["prompt"] for r in approvals.requests] == ["Run it?"]
    assert tool.inputs == [{"n": 0, "sandboxed": True}]
    assert tool_contents(context) == [got({"n": 0, "sandboxed": True})]
    assert result.status == "success"


async def test_a_tool_post_redaction_takes_effect_beside_an_injection() -> None:
    coordinator = coordinator_with()
    coordinator.hooks.register(
        TOOL_POST, lambda event, data: HookResult(action="modify", data={**data, "result": "***"})
    )
    coordinator.hooks.register(TOOL_POST, note)

    result, context, provider = await run_turn(coordinator, echo_calls(1), {"echo": Echo()})

    assert tool_contents(context) == ["***"]
    assert provider.requests[1].messages[-1].content == "a note"
    assert result.status == "success"


# -- a call's own failure is that call's result ----------------------------------------------


def on_c1(answer: HookResult) -> Any:
    """A hook that answers only for call c1 (the failing one)."""

    def handler(event: str, data: dict[str, Any]) -> HookResult | None:
        return answer if data["tool_call_id"] == "c1" else None

    return handler


def post_set_result(event: str, data: dict[str, Any]) -> HookResult | None:
    if data["tool_call_id"] != "c1":
        return None
    return HookResult(action="modify", data={**data, "result": {"a", "b"}})


def modify_input_to_a_list(event: str, data: dict[str, Any]) -> HookResult | None:
    if data["tool_call_id"] != "c1":
        return None
    return HookResult(action="modify", data={**data, "tool_input": [1, 2]})


class RaisingApprovals:
    async def request_approval(self, **kwargs: Any) -> str:
        await anyio.lowlevel.checkpoint()
        raise RuntimeError("the approval dialog crashed")


OVERSIZED = "x" * (LIMIT + 1)

FAILURES: dict[str, tuple[str, Any, Any, bool]] = {
    # kind: (event to hook, handler, approval system, does the tool run), content of c1 below
    "unserialisable output": (TOOL_PRE, None, None, True),
    "tool:pre data not a dict": (
        TOOL_PRE,
        on_c1(HookResult(action="modify", data=[1])),  # type: ignore[arg-type]
        None,
        False,
    ),
    "tool:pre input not a dict": (TOOL_PRE, modify_input_to_a_list, None, False),
    "tool:post result a set": (TOOL_POST, post_set_result, None, True),
    "approval system raises": (
        TOOL_PRE,
        on_c1(HookResult(action="ask_user", approval_prompt="Run c1?", approval_default="allow")),
        RaisingApprovals(),
        False,
    ),
    "oversized injection": (
        TOOL_PRE,
        on_c1(HookResult(action="inject_context", context_injection=OVERSIZED)),
        None,
        False,
    ),
}
FAILURE_CONTENT = {
    "unserialisable output": (
        "Error: the tool's output cannot be serialised: Object of type set is not JSON serializable"
    ),
    "tool:pre data not a dict": "Error: a hook gave data of type list, not a dict",
    "tool:pre input not a dict": "Error: arguments must be a JSON object, not list",
    "tool:post result a set": (
        "Error: a tool:post hook gave a result that is not JSON: "
        "Object of type set is not JSON serializable"
    ),
    "approval system raises": "Denied by hook: Approval failed - denied: Run c1?",
    "oversized injection": (
        f"Error: context injection from echo is {LIMIT + 1} characters, over {LIMIT}"
    ),
}


@pytest.mark.parametrize("parallel", [True, False], ids=["parallel", "sequential"])
@pytest.mark.parametrize("kind", list(FAILURES))
async def test_a_call_failure_is_its_own_result_and_siblings_keep_theirs(
    kind: str, parallel: bool
) -> None:
    event, handler, approvals, runs = FAILURES[kind]
    coordinator = coordinator_with(approvals)
    if handler is not None:
        coordinator.hooks.register(event, handler)
    tool = Echo({1: {"s": {1, 2}}} if kind == "unserialisable output" else None)

    result, context, _ = await run_turn(
        coordinator, echo_calls(3), {"echo": tool}, parallel=parallel
    )

    assert tool_contents(context) == [got({"n": 0}), FAILURE_CONTENT[kind], got({"n": 2})]
    ran = sorted(i["n"] for i in tool.inputs if isinstance(i, dict))
    assert ran == ([0, 1, 2] if runs else [0, 2])
    assert (str(result.status), result.error, result.text) == ("success", None, "done")


async def test_an_oversized_injection_is_kept_out_of_the_turn() -> None:
    # The call that carried it gets the error result; the injection it was refused for
    # must not reach the model anyway: neither persisted after the batch's results
    # (c1's, not ephemeral) nor sent with the next request (c0's, ephemeral).
    refused = {"c0": ("e" * (LIMIT + 1), True), "c1": ("p" * (LIMIT + 1), False)}

    def oversized(event: str, data: dict[str, Any]) -> HookResult | None:
        if data["tool_call_id"] not in refused:
            return None
        text, ephemeral = refused[data["tool_call_id"]]
        return HookResult(action="inject_context", context_injection=text, ephemeral=ephemeral)

    coordinator = coordinator_with()
    coordinator.hooks.register(TOOL_PRE, oversized)

    result, context, provider = await run_turn(coordinator, echo_calls(3), {"echo": Echo()})

    too_large = f"Error: context injection from echo is {LIMIT + 1} characters, over {LIMIT}"
    assert tool_contents(context) == [too_large, too_large, got({"n": 2})]
    assert result.status == "success"
    texts = [text for text, _ in refused.values()]
    persisted = [m["content"] for m in context.messages if m["content"] in texts]
    sent = [m.content for m in provider.requests[1].messages if m.content in texts]
    assert (persisted, sent) == ([], [])


# -- approval fails closed; only a timeout takes the default ---------------------------------


class Answering:
    """An approval system that gives one fixed answer, or raises it."""

    def __init__(self, answer: object) -> None:
        self.answer = answer
        self.asked = 0

    async def request_approval(self, **kwargs: Any) -> object:
        await anyio.lowlevel.checkpoint()
        self.asked += 1
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer


def ask_allowing_by_default(timeout: float = 300.0) -> Any:
    def handler(event: str, data: dict[str, Any]) -> HookResult:
        return HookResult(
            action="ask_user",
            approval_prompt="Run it?",
            approval_default="allow",
            approval_timeout=timeout,
        )

    return handler


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        pytest.param(None, "User denied: Run it?", id="None"),
        pytest.param("yes", "User denied: Run it?", id="yes"),
        pytest.param("Deny", "User denied: Run it?", id="Deny"),
        pytest.param(True, "User denied: Run it?", id="True"),
        pytest.param(RuntimeError("crashed"), "Approval failed - denied: Run it?", id="raises"),
    ],
)
async def test_approval_fails_closed_whatever_the_default(answer: object, reason: str) -> None:
    approvals = Answering(answer)
    coordinator = coordinator_with(approvals)
    coordinator.hooks.register(TOOL_PRE, ask_allowing_by_default())
    tool = Echo()

    result, context, _ = await run_turn(coordinator, echo_calls(2), {"echo": tool})

    assert approvals.asked == 2
    assert tool.inputs == []
    assert tool_contents(context) == [f"Denied by hook: {reason}"] * 2
    assert result.status == "success"


class TestOnlyATimeoutTakesTheDefault:
    @pytest.fixture
    def anyio_backend(
        self, virtual_backend: tuple[str, dict[str, object]]
    ) -> tuple[str, dict[str, object]]:
        return virtual_backend

    @pytest.mark.parametrize("how", ["ApprovalTimeoutError", "TimeoutError", "hangs"])
    @pytest.mark.parametrize("default", ["allow", "deny"])
    async def test_a_timeout_takes_approval_default(self, how: str, default: str) -> None:
        answer: object = {
            "ApprovalTimeoutError": ApprovalTimeoutError("no answer"),
            "TimeoutError": TimeoutError(),
            "hangs": None,
        }[how]

        class Approvals:
            async def request_approval(self, **kwargs: Any) -> str:
                await anyio.lowlevel.checkpoint()
                if isinstance(answer, BaseException):
                    raise answer
                await anyio.sleep_forever()
                raise AssertionError("unreachable")

        coordinator = coordinator_with(Approvals())
        coordinator.hooks.register(
            TOOL_PRE,
            lambda event, data: HookResult(
                action="ask_user",
                approval_prompt="Run it?",
                approval_default=default,  # type: ignore[arg-type]
                approval_timeout=0.05,
            ),
        )
        tool = Echo()

        result, context, _ = await run_turn(coordinator, echo_calls(1), {"echo": tool})

        if default == "allow":
            assert tool_contents(context) == [got({"n": 0})]
        else:
            assert tool.inputs == []
            assert tool_contents(context) == [
                "Denied by hook: Approval timeout - denied by default: Run it?"
            ]
        assert result.status == "success"


# -- KeyboardInterrupt and SystemExit leave bare ---------------------------------------------
#
# These run their own event loop (anyio.run): on asyncio an interrupt raised in a child
# task stops the loop itself (asyncio re-raises it out of the task), which would take
# the test runner's loop down with it. Each test records what the caller of run_turn /
# session.run caught, and what left the loop.


class Interrupting:
    """The call with ``stop`` raises ``kind``; the others wait to be cancelled."""

    name = "stop"
    description = "Stops the process."
    input_schema: dict[str, Any] = {"type": "object"}  # noqa: RUF012 - read only

    def __init__(self, kind: type[BaseException]) -> None:
        self.kind = kind

    async def execute(self, tool_input: dict[str, Any]) -> str:
        await anyio.lowlevel.checkpoint()
        if tool_input.get("stop"):
            raise self.kind()
        await anyio.sleep_forever()
        raise AssertionError("unreachable")


def interrupting_calls(count: int) -> list[dict[str, Any]]:
    return [
        {"id": f"c{n}", "name": "stop", "arguments": {"stop": n == count // 2}}
        for n in range(count)
    ]


async def interrupted_turn(
    kind: type[BaseException], count: int, caught: list[BaseException]
) -> None:
    coordinator = MockCoordinator()
    context = MockContextManager()
    await coordinator.mount("context", context)
    provider = ScriptedProvider(
        [
            ChatResponse(
                content=[TextBlock(text="calling")],
                tool_calls=[ToolCall(**c) for c in interrupting_calls(count)],
            ),
            ChatResponse(content=[TextBlock(text="done")]),
        ]
    )
    try:
        await LoopBasicOrchestrator().run_turn(
            "go", context, {"scripted": provider}, {"stop": Interrupting(kind)},
            coordinator.hooks, coordinator=coordinator,
        )  # fmt: skip
    except BaseException as exc:  # what the caller sees is the subject
        caught.append(exc)
    assert len(tool_contents(context)) == count  # no call left unanswered


async def interrupted_session(
    kind: type[BaseException], count: int, caught: list[BaseException]
) -> None:
    reply = {"content": [{"type": "text", "text": "calling"}]}
    plan = {
        "session": {"orchestrator": "loop-basic", "context": "context-simple"},
        "providers": [
            {
                "module": "provider-scripted",
                "config": {
                    "responses": [
                        {**reply, "tool_calls": interrupting_calls(count)},
                        {"content": [{"type": "text", "text": "done"}]},
                    ]
                },
            }
        ],
    }
    async with AmplifierSession(plan) as session:
        await session.coordinator.mount("tools", Interrupting(kind), name="stop")
        try:
            await session.run("go")
        except BaseException as exc:  # what the caller sees is the subject
            caught.append(exc)


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@pytest.mark.parametrize("count", [1, 3], ids=["one call", "three parallel calls"])
@pytest.mark.parametrize("kind", [KeyboardInterrupt, SystemExit])
@pytest.mark.parametrize("through", ["run_turn", "session.run"])
def test_an_interrupt_from_a_tool_leaves_bare(
    through: str, kind: type[BaseException], count: int, backend: str
) -> None:
    caught: list[BaseException] = []
    scenario = interrupted_turn if through == "run_turn" else interrupted_session
    left: BaseException | None = None
    try:
        anyio.run(scenario, kind, count, caught, backend=backend)
    except BaseException as exc:  # asyncio lets it out of the loop too
        left = exc

    assert [type(exc) for exc in caught] == [kind]
    assert left is None or type(left) is kind


# -- one exception root and one group policy --------------------------------------------------


def test_a_closed_field_out_of_range_raises_an_error_of_the_one_root() -> None:
    with pytest.raises(ValidationError, match="role must be one of") as caught:
        Message(role="bogus", content="x")  # type: ignore[arg-type]
    assert isinstance(caught.value, AmplifierError)
    assert isinstance(caught.value, ValueError)  # callers catching ValueError still do


def test_unwrap_group_gives_the_one_error_a_caller_should_see() -> None:
    plain = ValueError("plain")
    assert unwrap_group(plain) is plain
    only = KeyError("only")
    assert unwrap_group(BaseExceptionGroup("g", [ExceptionGroup("inner", [only])])) is only
    interrupt = KeyboardInterrupt()
    mixed = BaseExceptionGroup("g", [ValueError("a"), BaseExceptionGroup("i", [interrupt])])
    assert unwrap_group(mixed) is interrupt  # wins wherever it is
    exit_ = SystemExit(3)
    assert unwrap_group(BaseExceptionGroup("g", [RuntimeError("a"), exit_])) is exit_
    several = ExceptionGroup("g", [ValueError("a"), KeyError("b")])
    assert unwrap_group(several) is several  # two real failures stay a group
