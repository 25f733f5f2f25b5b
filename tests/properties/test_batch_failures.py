"""Property: one call's failure stays that call's result ("failures stay local").

Each example draws a batch of 1..12 tool calls. Each call, on its own, may succeed, raise,
return an error result or output that cannot be serialised, or name a tool that is not
mounted; its ``tool:pre`` hooks may inject context (ephemeral or not, within or over the
size limit), raise, ask for approval, deny, or modify the data (sandboxing the input,
giving data that is not a dict, or an input that is not a dict); its ``tool:post`` hooks
may inject, raise, deny, or replace the result (text, a dict, a set). The approval
system allows (in any of the accepted spellings), gives an odd answer, answers None,
raises, raises a timeout, or hangs past ``approval_timeout``, with default allow or deny.
The batch runs in a turn of loop-basic, in parallel (limited or not) or one at a time.

For every call its expected content is computed from its own plan alone, by the rules
written out in :func:`predict`; the turn must give exactly that, one ``role: tool``
message per call, in call order, right after the assistant message. So a sibling's
failure can never show up in a call's result (as a cancellation or anything else), and
the turn must end with status ``success`` and no exception group.

Hook handlers are shared by the whole batch and find the plan of the call from the
event's ``tool_call_id``. The modifying ``tool:pre`` handler runs last: after a modify
with data that is not a dict, later handlers could not read the call id any more.

The trio leg runs on a virtual clock (autojump), so an approval system that hangs costs
nothing; on asyncio a hanging approval gets a tiny ``approval_timeout``.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any, Literal

import anyio
import attrs
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st
from trio.testing import MockClock

from amplifier_anyio.errors import ApprovalTimeoutError
from amplifier_anyio.events import TOOL_POST, TOOL_PRE
from amplifier_anyio.kernel import current_tool_call
from amplifier_anyio.models import ChatResponse, HookResult, TextBlock, ToolCall, ToolResult
from amplifier_anyio.orchestrators import LoopBasicOrchestrator
from amplifier_anyio.providers.scripted import ScriptedProvider
from amplifier_anyio.testing import MockContextManager, MockCoordinator
from tiers import examples

pytestmark = pytest.mark.anyio


@pytest.fixture(
    scope="module",
    params=[
        pytest.param("asyncio", id="asyncio"),
        pytest.param("trio", id="trio-autojump"),
    ],
)
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, object]]:
    """asyncio (debug), or trio on a virtual clock; module-scoped for ``@given``."""
    if request.param == "asyncio":
        return ("asyncio", {"debug": True})
    return ("trio", {"clock": MockClock(autojump_threshold=0)})


LIMIT = 64
"""``session.injection_size_limit`` of every example (characters)."""

HANG_TIMEOUT = {"asyncio": 0.001, "trio": 30.0}
"""``approval_timeout`` of an ask whose approval system hangs (seconds; virtual on trio)."""

# What the engine says; kept here so that a change of wording is one edit.
UNSERIALISABLE = (
    "Error: the tool's output cannot be serialised: Object of type set is not JSON serializable"
)
BAD_DATA = "Error: a hook gave data of type list, not a dict"
BAD_INPUT = "Error: arguments must be a JSON object, not list"
POST_NOT_JSON = (
    "Error: a tool:post hook gave a result that is not JSON: "
    "Object of type set is not JSON serializable"
)
NOT_FOUND = "Error: Tool 'missing' not found"

ALLOW_SPELLINGS = ("allow", "Allow", "ALLOW ONCE", " allow always ", "Allow Always")
ODD_ANSWERS: tuple[object, ...] = ("Deny", "no", "yes", "allowed", "", "allow twice", True, 1)


# -- plans -----------------------------------------------------------------------------------


@attrs.frozen
class Ask:
    """A ``tool:pre`` ask_user and how the approval system answers it."""

    answer: Literal["allow", "odd", "none", "raise", "timeout", "hang"]
    value: object  # the allow spelling, the odd answer, or the timeout exception class
    default: Literal["allow", "deny"]


@attrs.frozen
class Injection:
    ephemeral: bool
    oversized: bool


@attrs.frozen
class Plan:
    """What happens to one call, decided before the batch runs."""

    index: int
    name: Literal["probe", "missing"]
    tool: Literal["ok", "raise", "error", "unserialisable"]
    checkpoints: int
    pre_inject: Injection | None
    pre_raise: bool
    pre_ask: Ask | None
    pre_deny: bool
    pre_modify: Literal["input", "bad_data", "bad_input"] | None
    post_inject: Injection | None
    post_raise: bool
    post_deny: bool
    post_modify: Literal["text", "dict", "set"] | None

    @property
    def id(self) -> str:
        return f"call_{self.index}"

    @property
    def arguments(self) -> dict[str, Any]:
        return {"n": self.index}

    @property
    def prompt(self) -> str:
        return f"approve {self.id}"


def note(event_name: str, plan: Plan, injection: Injection) -> str:
    """The injected text; over the size limit when the plan says so."""
    text = f"{event_name} note for {plan.id}"
    return text + " " + "#" * LIMIT if injection.oversized else text


injections = st.none() | st.none() | st.builds(Injection, st.booleans(), st.booleans())


@st.composite
def asks(draw: st.DrawFn) -> Ask:
    answer = draw(st.sampled_from(("allow", "allow", "odd", "none", "raise", "timeout", "hang")))
    value: object = None
    if answer == "allow":
        value = draw(st.sampled_from(ALLOW_SPELLINGS))
    elif answer == "odd":
        value = draw(st.sampled_from(ODD_ANSWERS))
    elif answer == "timeout":
        value = draw(st.sampled_from((ApprovalTimeoutError, TimeoutError)))
    return Ask(answer, value, draw(st.sampled_from(("allow", "deny"))))


def rarely(strategy: st.SearchStrategy[Any], one_in: int = 4) -> st.SearchStrategy[Any]:
    """``strategy`` about once in ``one_in`` draws, otherwise None."""
    return st.integers(1, one_in).flatmap(lambda k: strategy if k == 1 else st.none())


def plans(index: int) -> st.SearchStrategy[Plan]:
    return st.builds(
        Plan,
        index=st.just(index),
        name=st.sampled_from(("probe",) * 9 + ("missing",)),
        tool=st.sampled_from(("ok", "ok", "ok", "raise", "error", "unserialisable")),
        checkpoints=st.integers(0, 2),
        pre_inject=injections,
        pre_raise=st.booleans(),
        pre_ask=rarely(asks(), 3),
        pre_deny=st.integers(0, 7).map(lambda k: k == 0),
        pre_modify=rarely(st.sampled_from(("input", "input", "bad_data", "bad_input")), 2),
        post_inject=injections,
        post_raise=st.booleans(),
        post_deny=st.integers(0, 7).map(lambda k: k == 0),
        post_modify=rarely(st.sampled_from(("text", "dict", "set")), 3),
    )


@attrs.frozen
class Scenario:
    plans: tuple[Plan, ...]
    parallel: bool
    max_parallel: int | None


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    size = draw(st.integers(1, 12))
    return Scenario(
        plans=tuple(draw(plans(i)) for i in range(size)),
        parallel=draw(st.sampled_from((True, True, False))),
        max_parallel=draw(st.none() | st.integers(1, 4)),
    )


# -- the rules, by hand ----------------------------------------------------------------------


@attrs.frozen
class Expected:
    content: str
    ran_with: dict[str, Any] | None  # the tool's input, None when it must not run
    asked: bool
    injections: tuple[tuple[str, str, bool], ...]  # (event, text, ephemeral) that are kept


def too_large(plan: Plan, text: str) -> str:
    return f"Error: context injection from {plan.name} is {len(text)} characters, over {LIMIT}"


def refusal(ask: Ask, prompt: str) -> str | None:
    """The content of a call whose approval was refused; None when it was allowed."""
    if ask.answer == "allow":
        return None
    if ask.answer in ("odd", "none"):  # fail closed, whatever the default
        return f"Denied by hook: User denied: {prompt}"
    if ask.answer == "raise":  # fail closed, whatever the default
        return f"Denied by hook: Approval failed - denied: {prompt}"
    if ask.default == "allow":  # only a timeout takes the default
        return None
    return f"Denied by hook: Approval timeout - denied by default: {prompt}"


PRE_RAISED = (
    "Denied by hook: hook 'pre_raise' failed on tool:pre: RuntimeError: a tool:pre hook "
    "failed (denied: fail closed)"
)


def predict(plan: Plan) -> Expected:
    """The call's result from its own plan alone.

    tool:pre: a raising handler denies (a gate fails closed; it runs before the others
    that could deny); deny > ask_user > inject_context > modify; the data (a modify's) is applied
    whatever the action, after an allowed approval too. The call's own failures (an
    oversized injection, data that is not a dict, output that cannot be serialised, a
    post result that is not JSON) become its error result. tool:post runs on every result
    the call produced (an error result included) unless one of the above failed first.
    """
    kept: list[tuple[str, str, bool]] = []
    if plan.pre_raise:  # a gate fails closed: the raising guard denies, naming itself
        return Expected(PRE_RAISED, None, False, ())
    asked = plan.pre_ask is not None and not plan.pre_deny
    if plan.pre_deny:
        return Expected(f"Denied by hook: no {plan.id}", None, False, ())
    if plan.pre_ask is not None:  # ask_user wins over the injection, which is dropped
        refused = refusal(plan.pre_ask, plan.prompt)
        if refused is not None:
            return Expected(refused, None, asked, ())
    elif plan.pre_inject is not None:
        text = note(TOOL_PRE, plan, plan.pre_inject)
        if plan.pre_inject.oversized:
            return Expected(too_large(plan, text), None, asked, ())
        kept.append((TOOL_PRE, text, plan.pre_inject.ephemeral))
    if plan.pre_modify == "bad_data":
        return Expected(BAD_DATA, None, asked, tuple(kept))
    tool_input = plan.arguments
    if plan.pre_modify == "input":
        tool_input = {**plan.arguments, "sandboxed": True}
    ran_with: dict[str, Any] | None = None
    if plan.name == "missing":
        content = NOT_FOUND
    elif plan.pre_modify == "bad_input":
        content = BAD_INPUT
    else:
        ran_with = tool_input
        if plan.tool == "unserialisable":
            return Expected(UNSERIALISABLE, ran_with, asked, tuple(kept))
        content = {
            "ok": json.dumps({"call": plan.id, "input": tool_input}),
            "raise": f"Error: {plan.id} failed",
            "error": f"Error: {plan.id} refused",
        }[plan.tool]
    if not plan.post_deny:  # a deny on tool:post leaves the result (and drops injections)
        if plan.post_inject is not None:
            text = note(TOOL_POST, plan, plan.post_inject)
            if plan.post_inject.oversized:
                return Expected(too_large(plan, text), ran_with, asked, tuple(kept))
            kept.append((TOOL_POST, text, plan.post_inject.ephemeral))
        if plan.post_modify == "set":
            return Expected(POST_NOT_JSON, ran_with, asked, tuple(kept))
        if plan.post_modify == "text":
            content = f"redacted {plan.id}"
        elif plan.post_modify == "dict":
            content = json.dumps({"redacted": plan.id})
    return Expected(content, ran_with, asked, tuple(kept))


# -- the modules -----------------------------------------------------------------------------


class Probe:
    """The one tool: behaves as each call's plan says and records its inputs."""

    name = "probe"
    description = "Does what the plan says."
    input_schema: dict[str, Any] = {"type": "object"}  # noqa: RUF012 - read only

    def __init__(self, plans: dict[str, Plan]) -> None:
        self.plans = plans
        self.inputs: dict[str, Any] = {}
        self.in_flight = 0
        self.max_in_flight = 0

    async def execute(self, tool_input: dict[str, Any]) -> Any:
        call = current_tool_call()
        assert call is not None
        plan = self.plans[call.tool_call_id]
        self.inputs[plan.id] = tool_input
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            for _ in range(plan.checkpoints):
                await anyio.lowlevel.checkpoint()
        finally:
            self.in_flight -= 1
        if plan.tool == "raise":
            raise RuntimeError(f"{plan.id} failed")
        if plan.tool == "error":
            return ToolResult(success=False, error={"message": f"{plan.id} refused"})
        if plan.tool == "unserialisable":
            return {"s": {1, 2}}  # a set inside a dict
        return ToolResult(output={"call": plan.id, "input": tool_input})


class Approvals:
    """Answers each prompt as the plan of its call says; records the prompts."""

    def __init__(self, plans: dict[str, Plan]) -> None:
        self.plans = plans
        self.prompts: list[str] = []

    async def request_approval(
        self, prompt: str, options: list[str], timeout: float, default: str
    ) -> object:
        await anyio.lowlevel.checkpoint()
        self.prompts.append(prompt)
        ask = self.plans[prompt.removeprefix("approve ")].pre_ask
        assert ask is not None
        assert default == ask.default
        if ask.answer in ("allow", "odd"):
            return ask.value
        if ask.answer == "none":
            return None
        if ask.answer == "raise":
            raise RuntimeError("the approval dialog crashed")
        if ask.answer == "timeout":
            assert isinstance(ask.value, type)
            raise ask.value("nobody answered")
        await anyio.sleep_forever()
        raise AssertionError("unreachable")


def register_hooks(coordinator: MockCoordinator, plans: dict[str, Plan], backend: str) -> None:
    """The tool:pre and tool:post handlers, in a fixed order; each acts per call."""

    def plan_of(data: dict[str, Any]) -> Plan:
        return plans[data["tool_call_id"]]

    def inject(event_name: str, plan: Plan, injection: Injection) -> HookResult:
        return HookResult(
            action="inject_context",
            context_injection=note(event_name, plan, injection),
            ephemeral=injection.ephemeral,
        )

    async def pre_inject(event_name: str, data: dict[str, Any]) -> HookResult | None:
        await anyio.lowlevel.checkpoint()
        plan = plan_of(data)
        return None if plan.pre_inject is None else inject(event_name, plan, plan.pre_inject)

    def pre_raise(event_name: str, data: dict[str, Any]) -> None:
        if plan_of(data).pre_raise:
            raise RuntimeError("a tool:pre hook failed")

    def pre_ask(event_name: str, data: dict[str, Any]) -> HookResult | None:
        plan = plan_of(data)
        if plan.pre_ask is None:
            return None
        timeout = HANG_TIMEOUT[backend] if plan.pre_ask.answer == "hang" else 300.0
        return HookResult(
            action="ask_user",
            approval_prompt=plan.prompt,
            approval_default=plan.pre_ask.default,
            approval_timeout=timeout,
        )

    def pre_deny(event_name: str, data: dict[str, Any]) -> HookResult | None:
        plan = plan_of(data)
        return HookResult(action="deny", reason=f"no {plan.id}") if plan.pre_deny else None

    async def pre_modify(event_name: str, data: dict[str, Any]) -> HookResult | None:
        await anyio.lowlevel.checkpoint()
        plan = plan_of(data)
        if plan.pre_modify == "input":
            sandboxed = {**data["tool_input"], "sandboxed": True}
            return HookResult(action="modify", data={**data, "tool_input": sandboxed})
        if plan.pre_modify == "bad_data":
            return HookResult(action="modify", data=[1])  # type: ignore[arg-type]
        if plan.pre_modify == "bad_input":
            return HookResult(action="modify", data={**data, "tool_input": [1, 2]})
        return None

    async def post_inject(event_name: str, data: dict[str, Any]) -> HookResult | None:
        await anyio.lowlevel.checkpoint()
        plan = plan_of(data)
        return None if plan.post_inject is None else inject(event_name, plan, plan.post_inject)

    def post_raise(event_name: str, data: dict[str, Any]) -> None:
        if plan_of(data).post_raise:
            raise RuntimeError("a tool:post hook failed")

    def post_deny(event_name: str, data: dict[str, Any]) -> HookResult | None:
        plan = plan_of(data)
        return HookResult(action="deny", reason=f"no {plan.id}") if plan.post_deny else None

    def post_modify(event_name: str, data: dict[str, Any]) -> HookResult | None:
        plan = plan_of(data)
        replacement: object = {
            None: None,
            "text": f"redacted {plan.id}",
            "dict": {"redacted": plan.id},
            "set": {1, 2},
        }[plan.post_modify]
        if replacement is None:
            return None
        return HookResult(action="modify", data={**data, "result": replacement})

    hooks = coordinator.hooks
    for priority, handler in enumerate((pre_inject, pre_raise, pre_ask, pre_deny, pre_modify)):
        hooks.register(TOOL_PRE, handler, priority=priority, name=handler.__name__)
    for priority, handler in enumerate((post_inject, post_raise, post_deny, post_modify)):
        hooks.register(TOOL_POST, handler, priority=priority, name=handler.__name__)


# -- the property ----------------------------------------------------------------------------


def label(scenario: Scenario) -> None:
    """Statistics (``--hypothesis-show-statistics``): what the examples covered."""
    event(f"calls: {len(scenario.plans)}")
    event(f"parallel: {scenario.parallel}, limit: {scenario.max_parallel is not None}")
    kinds = set()
    for plan in scenario.plans:
        kinds.add(f"tool {plan.tool}")
        if plan.pre_ask is not None:
            kinds.add(f"approval {plan.pre_ask.answer}")
        if plan.pre_modify is not None:
            kinds.add(f"pre modify {plan.pre_modify}")
        if plan.post_modify is not None:
            kinds.add(f"post modify {plan.post_modify}")
        for injection in (plan.pre_inject, plan.post_inject):
            if injection is not None and injection.oversized:
                kinds.add("oversized injection")
    for kind in sorted(kinds):
        event(f"has {kind}")


@settings(max_examples=examples(500))
@given(scenario=scenarios())
async def test_each_call_gets_exactly_its_own_result(
    anyio_backend: tuple[str, dict[str, object]], scenario: Scenario
) -> None:
    label(scenario)
    backend = anyio_backend[0]
    plans = {plan.id: plan for plan in scenario.plans}
    approvals = Approvals(plans)
    coordinator = MockCoordinator(
        {"session": {"injection_size_limit": LIMIT}}, approval_system=approvals
    )
    register_hooks(coordinator, plans, backend)
    context = MockContextManager()
    await coordinator.mount("context", context)
    probe = Probe(plans)
    calls = [ToolCall(id=p.id, name=p.name, arguments=p.arguments) for p in scenario.plans]
    provider = ScriptedProvider(
        [
            ChatResponse(content=[TextBlock(text="calling")], tool_calls=calls),
            ChatResponse(content=[TextBlock(text="done")]),
        ]
    )
    orchestrator = LoopBasicOrchestrator(
        {"parallel_tools": scenario.parallel, "max_parallel_tools": scenario.max_parallel}
    )

    # Never an exception (group or not): every failure here belongs to one call.
    result = await orchestrator.run_turn(
        "go", context, {"scripted": provider}, {"probe": probe}, coordinator.hooks,
        coordinator=coordinator,
    )  # fmt: skip

    assert (str(result.status), result.error, result.text) == ("success", None, "done")
    expected = [predict(plan) for plan in scenario.plans]
    messages = context.messages
    count = len(calls)
    assert messages[0] == {"role": "user", "content": "go"}
    assert messages[1]["role"] == "assistant"
    assert [c["id"] for c in messages[1]["tool_calls"]] == [c.id for c in calls]
    answers = messages[2 : 2 + count]
    assert [(m["role"], m["tool_call_id"], m["name"]) for m in answers] == [
        ("tool", c.id, c.name) for c in calls
    ]
    for plan, want, message in zip(scenario.plans, expected, answers, strict=True):
        assert message["content"] == want.content, plan
    # Each tool ran exactly when its own plan lets it, with the (possibly modified) input.
    assert probe.inputs == {
        p.id: e.ran_with
        for p, e in zip(scenario.plans, expected, strict=True)
        if e.ran_with is not None
    }
    assert Counter(approvals.prompts) == Counter(
        p.prompt for p, e in zip(scenario.plans, expected, strict=True) if e.asked
    )
    if not scenario.parallel:
        assert probe.max_in_flight <= 1
    elif scenario.max_parallel is not None:
        assert probe.max_in_flight <= scenario.max_parallel

    # Persistent injections follow the batch's results; ephemeral ones reach the next
    # request only. Both in completion order: compared as sorted lists.
    *persisted, answer = messages[2 + count :]
    assert answer["role"] == "assistant"
    assert all(m["role"] == "system" and m["metadata"]["source"] == "hook" for m in persisted)
    kept = [i for e in expected for i in e.injections]
    # An oversized injection is refused: it is neither persisted nor sent.
    assert sorted(m["content"] for m in persisted) == sorted(
        text for _, text, ephemeral in kept if not ephemeral
    )
    second = provider.requests[1].messages
    assert len(second) >= len(messages) - 1
    ephemeral_sent = [m.content for m in second[len(messages) - 1 :]]
    assert all(isinstance(text, str) for text in ephemeral_sent)
    assert sorted(ephemeral_sent) == sorted(  # type: ignore[type-var]
        text for _, text, ephemeral in kept if ephemeral
    )
