"""The exported conformance checks: every built-in module passes its check, and a module
that breaks a rule fails with the rule's name — on asyncio and trio.

(The HTTP providers are checked against a real server in
``tests/integration/test_fakellm_kit.py``.)
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from amplifier_anyio.contexts import persistent
from amplifier_anyio.contexts.simple import SimpleContextManager
from amplifier_anyio.errors import ConformanceError
from amplifier_anyio.hooks import approval, logging, otel, schedulers
from amplifier_anyio.models import (
    ChatRequest,
    ChatResponse,
    HookResult,
    Message,
    TextBlock,
    ToolCall,
    ToolResult,
    ToolSpec,
    structure,
)
from amplifier_anyio.orchestrators import loop_basic, loop_events, loop_lifecycle, loop_streaming
from amplifier_anyio.providers.scripted import ScriptedProvider
from amplifier_anyio.testing import MockContextManager, MockCoordinator, MockTool, conformance
from amplifier_anyio.testing.conformance import (
    check_context,
    check_hook,
    check_orchestrator,
    check_provider,
    check_tool,
)
from amplifier_anyio.tools import bash, compute, demo, filesystem

pytestmark = pytest.mark.anyio


async def mounted_tools(mount: Any, config: dict[str, Any] | None = None) -> dict[str, Any]:
    coordinator = MockCoordinator()
    await mount(coordinator, config)
    tools: dict[str, Any] = coordinator.get("tools")
    return tools


def sample_inputs(tmp_path: Path) -> dict[str, dict[str, Any]]:
    (tmp_path / "notes.txt").write_text("one\ntwo\n")
    return {
        "word_count": {"text": "a b c"},
        "reverse_words": {"text": "a b c"},
        "read_file": {"file_path": str(tmp_path / "notes.txt")},
        "write_file": {"file_path": str(tmp_path / "new.txt"), "content": "hi"},
        "edit_file": {
            "file_path": str(tmp_path / "notes.txt"),
            "old_string": "one",
            "new_string": "uno",
        },
        "list_directory": {"path": str(tmp_path)},
        "glob": {"pattern": "*.txt", "path": str(tmp_path)},
        "bash": {"command": "echo hi"},
        "hash_work": {"rounds": 3},
        "probe": {"sleep": 0, "value": 1},
    }


# -- tools ----------------------------------------------------------------------------------


async def test_every_built_in_tool_passes_check_tool(tmp_path: Path) -> None:
    here = {"working_dir": str(tmp_path)}
    modules = [
        (demo.mount, {"delay": 0}),
        (filesystem.mount, here),
        (bash.mount, here),
        (compute.mount, None),
    ]
    inputs = sample_inputs(tmp_path)
    checked = []
    for mount, config in modules:
        for name, tool in (await mounted_tools(mount, config)).items():
            await check_tool(tool, inputs[name])
            checked.append(name)
    assert sorted(checked) == sorted(inputs)
    await check_tool(MockTool("mock_tool"))


class Swallower(MockTool):
    """Catches the cancellation and answers anyway."""

    async def execute(self, input: dict[str, Any]) -> ToolResult:
        try:
            await anyio.sleep(1)
        except anyio.get_cancelled_exc_class():
            return ToolResult(output="finished anyway")
        return ToolResult(output="slept")


class NeverChecks(MockTool):
    """An async execute that never reaches a checkpoint."""

    async def execute(self, input: dict[str, Any]) -> ToolResult:
        return ToolResult(output="instant")


class LateSwallower(MockTool):
    """Lets a cancel through at its first checkpoints; swallows one at its third."""

    async def execute(self, input: dict[str, Any]) -> ToolResult:
        await anyio.lowlevel.checkpoint()
        await anyio.lowlevel.checkpoint()
        try:
            await anyio.lowlevel.checkpoint()
        except anyio.get_cancelled_exc_class():
            return ToolResult(output="finished anyway")
        await anyio.lowlevel.checkpoint()
        return ToolResult(output="done")


class Unserialisable(MockTool):
    async def execute(self, input: dict[str, Any]) -> ToolResult:
        await anyio.lowlevel.checkpoint()
        return ToolResult(output={"when": object()})


@pytest.mark.parametrize(
    ("tool", "rule"),
    [
        (lambda: MockTool("my tool!"), "tool.name: expected 1-64 letters"),
        (lambda: MockTool("t", description=" "), "tool.description"),
        (lambda: MockTool("t", input_schema={"type": "array"}), "tool.schema"),
        (lambda: Swallower("t"), "tool.cancellation: execute returned inside a cancelled scope"),
        (lambda: NeverChecks("t"), "tool.cancellation"),
        (
            lambda: LateSwallower("t"),
            "tool.cancellation: execute cancelled at checkpoint 3 of 4 returned: it swallowed",
        ),
        (lambda: Unserialisable("t"), "tool.output"),
        (lambda: MockTool("t", delay=60), "tool.result: execute did not finish within"),
    ],
)
async def test_a_broken_tool_fails_check_tool_naming_the_rule(
    tool: Any, rule: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(conformance, "_TIMEOUT", 0.2)
    with pytest.raises(ConformanceError) as caught:
        await check_tool(tool())
    assert str(caught.value).startswith(rule)
    assert isinstance(caught.value, AssertionError)


# -- providers ------------------------------------------------------------------------------


def hello() -> ChatResponse:
    return ChatResponse(content=[TextBlock(text="Hello.")], finish_reason="stop")


class StreamingScripted(ScriptedProvider):
    def __init__(self, *, wrong_deltas: bool = False) -> None:
        super().__init__(lambda request: hello())
        self.wrong_deltas = wrong_deltas

    @asynccontextmanager
    async def stream(
        self, request: ChatRequest, **kwargs: Any
    ) -> AsyncIterator[AsyncIterator[dict[str, Any]]]:
        response = await self.complete(request)

        async def events() -> AsyncIterator[dict[str, Any]]:
            delta = "Hullo." if self.wrong_deltas else "Hello."
            yield {"type": "content_block:delta", "index": 0, "block_type": "text", "delta": delta}
            yield {"type": "response", "response": response}

        yield events()


class Mutating(ScriptedProvider):
    async def complete(self, request: ChatRequest, **kwargs: Any) -> ChatResponse:
        await anyio.lowlevel.checkpoint()
        request.messages.append(request.messages[0])
        return hello()


def twin_calls(request: ChatRequest) -> ChatResponse:
    calls = [
        ToolCall(id="same", name="a", arguments={}),
        ToolCall(id="same", name="b", arguments={}),
    ]
    return ChatResponse(tool_calls=calls)


class SwallowsLate(ScriptedProvider):
    """complete() swallows a cancel at its second checkpoint."""

    async def complete(self, request: ChatRequest, **kwargs: Any) -> ChatResponse:
        await anyio.lowlevel.checkpoint()
        with contextlib.suppress(anyio.get_cancelled_exc_class()):
            await anyio.lowlevel.checkpoint()
        return hello()


class StreamSwallowsLate(StreamingScripted):
    """Its stream swallows a cancel between its events."""

    @asynccontextmanager
    async def stream(
        self, request: ChatRequest, **kwargs: Any
    ) -> AsyncIterator[AsyncIterator[dict[str, Any]]]:
        async def events() -> AsyncIterator[dict[str, Any]]:
            yield {
                "type": "content_block:delta",
                "index": 0,
                "block_type": "text",
                "delta": "Hello.",
            }
            with contextlib.suppress(anyio.get_cancelled_exc_class()):
                await anyio.lowlevel.checkpoint()
            yield {"type": "response", "response": hello()}

        await anyio.lowlevel.checkpoint()
        yield events()


class Parses(ScriptedProvider):
    """parse_tool_calls() gives ``shape(the response's calls)``."""

    def __init__(self, shape: Any) -> None:
        super().__init__(lambda request: hello())
        self.shape = shape

    def parse_tool_calls(self, response: ChatResponse) -> list[ToolCall]:
        return list(self.shape(list(response.tool_calls or [])))


async def test_the_scripted_providers_pass_check_provider() -> None:
    await check_provider(ScriptedProvider(lambda request: hello()))
    await check_provider(StreamingScripted())


@pytest.mark.parametrize(
    ("provider", "rule"),
    [
        (lambda: ScriptedProvider(lambda request: "Hello."), "provider.complete"),
        (lambda: Mutating([]), "provider.request_untouched"),
        (lambda: ScriptedProvider(twin_calls), "provider.tool_calls: tool call ids must be unique"),
        (
            lambda: StreamingScripted(wrong_deltas=True),
            "provider.stream: the text deltas add up to",
        ),
        (
            lambda: SwallowsLate([]),
            "provider.cancellation: complete() cancelled at checkpoint 2 of 2 returned",
        ),
        (
            StreamSwallowsLate,
            "provider.cancellation: open_stream() cancelled at checkpoint",
        ),
        (
            lambda: Parses(lambda calls: calls[:-1]),
            "provider.tool_calls: parse_tool_calls() dropped a call: gave ['call_1', 'call_2']",
        ),
        (
            lambda: Parses(lambda calls: [*calls, *calls[:1]]),
            "provider.tool_calls: parse_tool_calls() duplicated a call",
        ),
        (
            lambda: Parses(lambda calls: calls[::-1]),
            "provider.tool_calls: parse_tool_calls() reordered the calls",
        ),
        (
            lambda: Parses(lambda calls: []),
            "provider.tool_calls: parse_tool_calls() dropped a call: gave []",
        ),
    ],
)
async def test_a_broken_provider_fails_check_provider_naming_the_rule(
    provider: Any, rule: str
) -> None:
    with pytest.raises(ConformanceError) as caught:
        await check_provider(provider())
    assert str(caught.value).startswith(rule)


# -- contexts -------------------------------------------------------------------------------


async def test_every_built_in_context_passes_check_context(tmp_path: Path) -> None:
    await check_context(SimpleContextManager())
    await check_context(SimpleContextManager(max_tokens=400))
    coordinator = MockCoordinator()
    await persistent.mount(coordinator, {"path": str(tmp_path / "transcript.jsonl")})
    try:
        await check_context(coordinator.get("context"))
    finally:
        await coordinator.cleanup()
    await check_context(MockContextManager())


class SharesItsList(MockContextManager):
    async def get_messages(self) -> list[dict[str, Any]]:
        await anyio.lowlevel.checkpoint()
        return self.messages


class DropsToolResults(MockContextManager):
    async def get_messages_for_request(
        self, token_budget: int | None = None, provider: Any | None = None
    ) -> list[dict[str, Any]]:
        messages = await self.get_messages()
        return [m for m in messages if m["role"] != "tool"]


class Forgetful(MockContextManager):
    async def clear(self) -> None:
        await anyio.lowlevel.checkpoint()
        self.messages = self.messages[:1]


class SwallowsACancelInSetMessages(MockContextManager):
    """Lets a cancel through at its first checkpoint; swallows one at its second."""

    async def set_messages(self, messages: list[dict[str, Any]]) -> None:
        await anyio.lowlevel.checkpoint()
        try:
            await anyio.lowlevel.checkpoint()
        except anyio.get_cancelled_exc_class():
            return
        await super().set_messages(messages)


@pytest.mark.parametrize(
    ("context", "rule"),
    [
        (
            SwallowsACancelInSetMessages,
            "context.cancellation: set_messages() cancelled at checkpoint 2 of 3 returned: "
            "it swallowed the cancellation",
        ),
        (SharesItsList, "context.copies"),
        (DropsToolResults, "context.request_view: with no budget: the calls"),
        (Forgetful, "context.clear: messages remain after clear()"),
    ],
)
async def test_a_broken_context_fails_check_context_naming_the_rule(
    context: Any, rule: str
) -> None:
    with pytest.raises(ConformanceError) as caught:
        await check_context(context())
    assert str(caught.value).startswith(rule)


# -- hooks ----------------------------------------------------------------------------------


async def test_every_built_in_hook_module_passes_check_hook(tmp_path: Path) -> None:
    log = str(tmp_path / "{session_id}.jsonl")
    await check_hook(logging.mount, {"session_log_template": log})
    await check_hook(approval.mount, {"tools": ["bash"]})
    await check_hook(otel.mount)
    await check_hook(schedulers.mount_cost, {"budget": 10})
    await check_hook(schedulers.mount_router, {"routes": {"probe": "other"}})


async def says_yes(coordinator: Any, config: dict[str, Any]) -> Any:
    async def handler(event: str, data: dict[str, Any]) -> Any:
        await anyio.lowlevel.checkpoint()
        return "yes"

    return coordinator.hooks.register("tool:pre", handler)


async def raises(coordinator: Any, config: dict[str, Any]) -> Any:
    def handler(event: str, data: dict[str, Any]) -> Any:
        return data["missing"]

    return coordinator.hooks.register("tool:post", handler)


async def leaves_handlers(coordinator: Any, config: dict[str, Any]) -> Any:
    async def handler(event: str, data: dict[str, Any]) -> HookResult:
        await anyio.lowlevel.checkpoint()
        return HookResult()

    coordinator.hooks.register("prompt:submit", handler, name="sticky")
    return lambda: None


async def swallows_a_late_cancel(coordinator: Any, config: dict[str, Any]) -> Any:
    async def handler(event: str, data: dict[str, Any]) -> HookResult:
        await anyio.lowlevel.checkpoint()
        await anyio.lowlevel.checkpoint()
        try:
            await anyio.lowlevel.checkpoint()
        except anyio.get_cancelled_exc_class():
            return HookResult()
        await anyio.lowlevel.checkpoint()
        return HookResult()

    return coordinator.hooks.register("tool:pre", handler)


async def registers_nothing(coordinator: Any, config: dict[str, Any]) -> None:
    await anyio.lowlevel.checkpoint()


@pytest.mark.parametrize(
    ("mount", "rule"),
    [
        (says_yes, "hook.verdict: the handler of 'tool:pre' answered 'yes'"),
        (raises, "hook.verdict: the handler of 'tool:post' raised KeyError"),
        (leaves_handlers, "hook.cleanup: handlers left after the cleanup: {'prompt:submit'"),
        (registers_nothing, "hook.registers"),
        (
            swallows_a_late_cancel,
            "hook.cancellation: the handler of 'tool:pre' cancelled at checkpoint 3 of 4 "
            "returned: it swallowed the cancellation",
        ),
    ],
)
async def test_a_broken_hook_module_fails_check_hook_naming_the_rule(mount: Any, rule: str) -> None:
    with pytest.raises(ConformanceError) as caught:
        await check_hook(mount)
    assert str(caught.value).startswith(rule)


# -- orchestrators --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "module", [loop_basic, loop_streaming, loop_events, loop_lifecycle], ids=lambda m: m.__name__
)
async def test_every_built_in_orchestrator_passes_check_orchestrator(module: Any) -> None:
    coordinator = MockCoordinator()
    await module.mount(coordinator, {})
    await check_orchestrator(coordinator.get("orchestrator"))


class CompletionOrder:
    """Writes tool results as they finish (so their order follows the tools' timing)."""

    def __init__(self, *, terminal: int = 1) -> None:
        self.terminal = terminal

    async def execute(
        self, prompt: str, context: Any, providers: Any, tools: Any, hooks: Any, **kwargs: Any
    ) -> str:
        await hooks.emit("execution:start", {"prompt": prompt})
        await context.add_message({"role": "user", "content": prompt})
        provider = next(iter(providers.values()))
        text = ""
        try:
            while True:
                request = ChatRequest(
                    messages=[structure(m, Message) for m in await context.get_messages()],
                    tools=[
                        ToolSpec(name=t.name, parameters=t.input_schema, description="")
                        for t in tools.values()
                    ],
                )
                response = await provider.complete(request)
                if not response.tool_calls:
                    text = response.text
                    break
                calls = response.tool_calls
                await context.add_message(
                    {
                        "role": "assistant",
                        "content": "",
                        "tool_calls": [
                            {"id": c.id, "name": c.name, "arguments": c.arguments} for c in calls
                        ],
                    }
                )

                async def run(call: ToolCall) -> None:
                    result = await tools[call.name].execute(call.arguments)
                    await context.add_message(
                        {"role": "tool", "tool_call_id": call.id, "content": str(result.output)}
                    )

                async with anyio.create_task_group() as group:
                    for call in calls:
                        group.start_soon(run, call)
        finally:
            for _ in range(self.terminal):
                await hooks.emit("orchestrator:complete", {"status": "success"})
                await hooks.emit("execution:end", {"response": text})
        return text


@pytest.mark.parametrize(
    ("orchestrator", "rule"),
    [
        (
            CompletionOrder,
            "orchestrator.tool_pairing: the calls ['call_1', 'call_2'] are answered by "
            "['call_2', 'call_1']",
        ),
        (
            lambda: CompletionOrder(terminal=2),
            "orchestrator.terminal_events: orchestrator:complete and execution:end were "
            "emitted 2 and 2 times",
        ),
    ],
)
async def test_a_broken_orchestrator_fails_check_orchestrator_naming_the_rule(
    orchestrator: Any, rule: str
) -> None:
    with pytest.raises(ConformanceError) as caught:
        await check_orchestrator(orchestrator())
    assert str(caught.value).startswith(rule)


class SwallowsALateCancel:
    """loop-basic, then one checkpoint more at which a cancel is swallowed: the turn's
    last checkpoint (a cancel at any earlier one goes through)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    async def execute(self, *args: Any, **kwargs: Any) -> Any:
        answer = await self.inner.execute(*args, **kwargs)
        try:
            await anyio.lowlevel.checkpoint()
        except anyio.get_cancelled_exc_class():
            return answer
        return answer


async def test_an_orchestrator_that_swallows_a_late_cancel_fails_naming_the_rule() -> None:
    coordinator = MockCoordinator()
    await loop_basic.mount(coordinator, {})
    broken = SwallowsALateCancel(coordinator.get("orchestrator"))
    with pytest.raises(ConformanceError) as caught:
        await check_orchestrator(broken)
    found = re.fullmatch(
        r"orchestrator\.cancellation: execute cancelled at checkpoint (\d+) of (\d+) "
        r"returned: it swallowed the cancellation",
        str(caught.value),
    )
    assert found is not None, str(caught.value)
    # late in the turn: the cancels at the turn's own checkpoints went through
    assert int(found[2]) > 5
    assert int(found[1]) >= int(found[2]) - 1
