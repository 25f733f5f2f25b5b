"""Peers as comparison rows of the fan-out suite: the same turn through other agent stacks.

``--suite peers`` (with the fan-out suite) adds, on the asyncio backends and for the cases
without hooks (K = 0), one variant per installed peer to each fan-out case: one turn of N
parallel calls of a tool that does ``anyio.sleep(D)`` and answers ``ok``, then the final
answer, each peer driven by its own offline test model (no network, nothing fetched):

- ``pydantic-ai``: an ``Agent`` on a ``FunctionModel`` that answers the first request with
  N ``ToolCallPart`` s and the second with the text ``done``; ``Agent.run``.
- ``openai-agents``: an ``Agent`` on a ``Model`` subclass that returns N
  ``function_call`` items, then an output message; ``Runner.run`` with tracing off.
- ``langgraph``: a ``StateGraph`` (model node, ``ToolNode``, ``tools_condition``) whose
  model is langchain-core's ``GenericFakeChatModel`` replying with N tool calls, then
  ``done``; ``ToolNode`` runs the calls in parallel.

- ``upstream-loop-basic`` / ``upstream-loop-basic-bare``: upstream Amplifier's loop-basic
  orchestrator (``BasicOrchestrator.execute``), imported from the module checkout that
  `LOOP_BASIC_PATH_ENV` names (the checkout's root or its
  ``amplifier_module_loop_basic`` package; nothing is fetched), with amplifier-core's
  models (``ChatResponse``, ``ToolCall``, ``ToolResult``), a scripted provider, an
  in-memory context, and either amplifier-core's own ``ModuleCoordinator`` and hook
  registry (the first row) or a minimal coordinator whose hooks answer at once and whose
  cancellation never fires (``-bare``: the loop without a kernel). Each needs
  amplifier-core (``amplifier-core==2.0.2`` is in the ``test`` extra).

These libraries run on asyncio only, so their rows are asyncio-only (on trio they are
listed as skipped, like a peer whose package is missing). Everything a run needs (agent,
model, tool, graph) is built outside the timed region; after each timed run the peer's
``check`` counts the N tool results in the turn's messages, so a broken adapter cannot
look fast. Install the peers with ``pip install 'amplifier-anyio[peers]'``.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import attrs

from amplifier_anyio.bench.workloads import Job

__all__ = (
    "PEERS",
    "Peer",
    "PydanticAITurn",
    "OpenAIAgentsTurn",
    "LangGraphTurn",
    "UpstreamLoopBasicTurn",
    "LOOP_BASIC_PATH_ENV",
    "peer_problem",
    "peer_turns",
    "skipped_peers",
)

_ANSWER = "done"

LOOP_BASIC_PATH_ENV = "AMPLIFIER_LOOP_BASIC_PATH"
"""The environment variable naming a checkout of upstream's loop-basic module."""

_LOOP_BASIC_PACKAGE = "amplifier_module_loop_basic"


def _sleep_tool(delay: float) -> Callable[[], Any]:
    async def sleep() -> str:
        """Sleep for the benchmark's delay."""
        await anyio.sleep(delay)
        return "ok"

    return sleep


def _verify(peer: str, answer: Any, results: int, n: int) -> None:
    if answer != _ANSWER or results != n:
        msg = f"{peer}: the turn ended with {answer!r} and {results}/{n} tool results"
        raise RuntimeError(msg)


@attrs.define(eq=False)
class PydanticAITurn:
    """pydantic-ai: an ``Agent`` on a ``FunctionModel`` (N tool calls, then ``done``)."""

    n: int
    delay: float
    _last: Any = attrs.field(init=False, default=None)

    def prepare(self) -> Job:
        """A fresh agent, ready to run one turn."""
        from pydantic_ai import Agent  # noqa: PLC0415 - an optional peer
        from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart  # noqa: PLC0415
        from pydantic_ai.models.function import FunctionModel  # noqa: PLC0415

        calls = [ToolCallPart("sleep", {}, tool_call_id=f"call_{i}") for i in range(self.n)]

        def model(messages: list[Any], info: Any) -> Any:
            if len(messages) == 1:
                return ModelResponse(parts=list(calls))
            return ModelResponse(parts=[TextPart(_ANSWER)])

        agent: Any = Agent(FunctionModel(model))
        agent.tool_plain(_sleep_tool(self.delay))

        async def turn() -> None:
            self._last = await agent.run("fan out")

        return turn

    def check(self) -> None:
        """Raise unless the last turn answered ``done`` after N tool returns."""
        from pydantic_ai.messages import ToolReturnPart  # noqa: PLC0415

        result, self._last = self._last, None
        if result is None:
            raise RuntimeError("pydantic-ai: the turn has not run")
        returns = sum(
            isinstance(part, ToolReturnPart)
            for message in result.all_messages()
            for part in message.parts
        )
        _verify("pydantic-ai", result.output, returns, self.n)


@attrs.define(eq=False)
class OpenAIAgentsTurn:
    """openai-agents: an ``Agent`` on a scripted ``Model`` (N function calls, then text)."""

    n: int
    delay: float
    _last: Any = attrs.field(init=False, default=None)

    def prepare(self) -> Job:
        """A fresh agent and model, ready to run one turn."""
        from agents import (  # noqa: PLC0415 - an optional peer
            Agent,
            ModelSettings,
            RunConfig,
            Runner,
            Usage,
            function_tool,
        )
        from agents.items import ModelResponse  # noqa: PLC0415
        from agents.models.interface import Model  # noqa: PLC0415
        from openai.types.responses import (  # noqa: PLC0415
            ResponseFunctionToolCall,
            ResponseOutputMessage,
            ResponseOutputText,
        )

        n = self.n
        calls = [
            ResponseFunctionToolCall(
                type="function_call", call_id=f"call_{i}", name="sleep", arguments="{}"
            )
            for i in range(n)
        ]
        text = ResponseOutputText(type="output_text", text=_ANSWER, annotations=[])
        final = ResponseOutputMessage(
            type="message", id="msg", role="assistant", status="completed", content=[text]
        )

        class Scripted(Model):  # type: ignore[misc, unused-ignore]  # Any without the peer
            requests = 0

            async def get_response(self, *args: Any, **kwargs: Any) -> Any:
                self.requests += 1
                output: list[Any] = list(calls) if self.requests == 1 else [final]
                return ModelResponse(output=output, usage=Usage(), response_id=None)

            def stream_response(self, *args: Any, **kwargs: Any) -> Any:
                raise NotImplementedError

        agent: Any = Agent(
            name="bench",
            model=Scripted(),
            tools=[function_tool(_sleep_tool(self.delay))],
            model_settings=ModelSettings(parallel_tool_calls=True),
        )
        config = RunConfig(tracing_disabled=True)

        async def turn() -> None:
            self._last = await Runner.run(agent, "fan out", run_config=config)

        return turn

    def check(self) -> None:
        """Raise unless the last turn answered ``done`` after N tool outputs."""
        from agents.items import ToolCallOutputItem  # noqa: PLC0415

        result, self._last = self._last, None
        if result is None:
            raise RuntimeError("openai-agents: the turn has not run")
        outputs = sum(isinstance(item, ToolCallOutputItem) for item in result.new_items)
        _verify("openai-agents", result.final_output, outputs, self.n)


@attrs.define(eq=False)
class LangGraphTurn:
    """LangGraph: model node, ``ToolNode`` and ``tools_condition`` on a fake chat model."""

    n: int
    delay: float
    _last: Any = attrs.field(init=False, default=None)

    def prepare(self) -> Job:
        """A fresh graph and model, ready to run one turn."""
        from langchain_core.language_models.fake_chat_models import (  # noqa: PLC0415
            GenericFakeChatModel,
        )
        from langchain_core.messages import AIMessage  # noqa: PLC0415
        from langchain_core.tools import tool  # noqa: PLC0415
        from langgraph.graph import START, MessagesState, StateGraph  # noqa: PLC0415
        from langgraph.prebuilt import ToolNode, tools_condition  # noqa: PLC0415

        calls = [
            {"name": "sleep", "args": {}, "id": f"call_{i}", "type": "tool_call"}
            for i in range(self.n)
        ]
        replies = iter([AIMessage(content="", tool_calls=calls), AIMessage(content=_ANSWER)])
        model = GenericFakeChatModel(messages=replies)

        async def call_model(state: Any) -> dict[str, Any]:
            return {"messages": [await model.ainvoke(state["messages"])]}

        graph: Any = StateGraph(MessagesState)
        graph.add_node("model", call_model)
        graph.add_node("tools", ToolNode([tool(_sleep_tool(self.delay))]))
        graph.add_edge(START, "model")
        graph.add_conditional_edges("model", tools_condition)
        graph.add_edge("tools", "model")
        app = graph.compile()

        async def turn() -> None:
            self._last = await app.ainvoke({"messages": [("user", "fan out")]})

        return turn

    def check(self) -> None:
        """Raise unless the last turn answered ``done`` after N tool messages."""
        from langchain_core.messages import ToolMessage  # noqa: PLC0415

        state, self._last = self._last, None
        if state is None:
            raise RuntimeError("langgraph: the turn has not run")
        messages = state["messages"]
        results = sum(isinstance(message, ToolMessage) for message in messages)
        _verify("langgraph", messages[-1].content, results, self.n)


def _loop_basic_init() -> Path | None:
    """The checkout's ``amplifier_module_loop_basic/__init__.py``, or None."""
    value = os.environ.get(LOOP_BASIC_PATH_ENV)
    if not value:
        return None
    root = Path(value).expanduser()
    for candidate in (root / _LOOP_BASIC_PACKAGE / "__init__.py", root / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _loop_basic_module() -> Any:
    """Upstream's loop-basic, imported once from the checkout (not from ``sys.path``)."""
    loaded = sys.modules.get(_LOOP_BASIC_PACKAGE)
    if loaded is not None:
        return loaded
    path = _loop_basic_init()
    if path is None:
        raise RuntimeError(f"{LOOP_BASIC_PATH_ENV} names no loop-basic checkout")
    spec = importlib.util.spec_from_file_location(_LOOP_BASIC_PACKAGE, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[_LOOP_BASIC_PACKAGE] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[_LOOP_BASIC_PACKAGE]
        raise
    return module


class _UpstreamContext:
    """An in-memory upstream-style context: messages as given, one list."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []

    async def add_message(self, message: dict[str, Any]) -> None:
        self.messages.append(message)

    async def get_messages(self) -> list[dict[str, Any]]:
        return list(self.messages)

    async def get_messages_for_request(
        self, token_budget: int | None = None, provider: Any = None
    ) -> list[dict[str, Any]]:
        return list(self.messages)


class _NoCancellation:
    """A cancellation that never fires (the bare coordinator's)."""

    is_cancelled = False
    is_immediate = False
    state = "none"

    def register_tool_start(self, tool_call_id: str, name: str) -> None:
        """Nothing to track."""

    def register_tool_complete(self, tool_call_id: str) -> None:
        """Nothing to track."""

    async def trigger_callbacks(self) -> None:
        """No callbacks."""


class _BareHooks:
    """Hooks that answer every event with one continue result, at once."""

    def __init__(self, result: Any) -> None:
        self._result = result

    async def emit(self, event: str, data: dict[str, Any]) -> Any:
        return self._result


class _BareCoordinator:
    """The least an upstream orchestrator needs of a coordinator: hooks, a cancellation,
    ``process_hook_result`` (here: the result as it is)."""

    def __init__(self, result: Any) -> None:
        self.hooks = _BareHooks(result)
        self.cancellation = _NoCancellation()

    async def process_hook_result(self, result: Any, event: str, source: str) -> Any:
        return result


@attrs.define(eq=False)
class UpstreamLoopBasicTurn:
    """Upstream's loop-basic with amplifier-core's coordinator (``bare``: a minimal one)."""

    n: int
    delay: float
    bare: bool = False
    _last: Any = attrs.field(init=False, default=None)

    def prepare(self) -> Job:
        """A fresh orchestrator, coordinator, context and provider, ready for one turn."""
        import amplifier_core  # noqa: PLC0415 - an optional peer
        from amplifier_core.message_models import (  # noqa: PLC0415
            ChatResponse,
            TextBlock,
            ToolCall,
        )

        module = _loop_basic_module()
        # non-empty arguments: upstream reads `tc.arguments or tc.get("arguments")`
        calls = [ToolCall(id=f"call_{i}", name="sleep", arguments={"i": i}) for i in range(self.n)]
        replies = iter(
            [
                ChatResponse(content=[], tool_calls=calls),
                ChatResponse(content=[TextBlock(text=_ANSWER)]),
            ]
        )
        ok = amplifier_core.ToolResult(success=True, output="ok")
        delay = self.delay

        class Provider:
            name = "scripted"

            async def complete(self, request: Any, **kwargs: Any) -> Any:
                return next(replies)

            def parse_tool_calls(self, response: Any) -> list[Any]:
                return list(response.tool_calls or [])

        class SleepTool:
            name = "sleep"
            description = "Sleep for the benchmark's delay."
            input_schema: dict[str, Any] = {"type": "object", "properties": {}}  # noqa: RUF012

            async def execute(self, input: dict[str, Any]) -> Any:
                await anyio.sleep(delay)
                return ok

        coordinator: Any = (
            _BareCoordinator(amplifier_core.HookResult())
            if self.bare
            else amplifier_core.ModuleCoordinator()
        )
        orchestrator = module.BasicOrchestrator({})
        context = _UpstreamContext()
        providers = {Provider.name: Provider()}
        tools = {SleepTool.name: SleepTool()}

        async def turn() -> None:
            answer = await orchestrator.execute(
                "fan out", context, providers, tools, coordinator.hooks, coordinator=coordinator
            )
            self._last = (answer, context)

        return turn

    def check(self) -> None:
        """Raise unless the last turn answered ``done`` after N tool messages."""
        last, self._last = self._last, None
        if last is None:
            raise RuntimeError("upstream-loop-basic: the turn has not run")
        answer, context = last
        results = sum(message.get("role") == "tool" for message in context.messages)
        _verify("upstream-loop-basic", answer, results, self.n)


def _loop_basic_problem() -> str | None:
    if not os.environ.get(LOOP_BASIC_PATH_ENV):
        return f"{LOOP_BASIC_PATH_ENV} is not set (a checkout of upstream's loop-basic module)"
    if _loop_basic_init() is None:
        value = os.environ[LOOP_BASIC_PATH_ENV]
        return f"{LOOP_BASIC_PATH_ENV}={value} holds no {_LOOP_BASIC_PACKAGE}/__init__.py"
    return None


@attrs.frozen
class Peer:
    """A peer row: its ``name``, the ``modules`` it needs, its ``turn`` class and what else
    it needs (``problem``: why it cannot run, or None)."""

    name: str
    modules: tuple[str, ...]
    turn: Callable[[int, float], Any]
    problem: Callable[[], str | None] | None = None


PEERS = (
    Peer("pydantic-ai", ("pydantic_ai",), PydanticAITurn),
    Peer("openai-agents", ("agents", "openai"), OpenAIAgentsTurn),
    Peer("langgraph", ("langgraph", "langchain_core"), LangGraphTurn),
    Peer(
        "upstream-loop-basic",
        ("amplifier_core",),
        UpstreamLoopBasicTurn,
        _loop_basic_problem,
    ),
    Peer(
        "upstream-loop-basic-bare",
        ("amplifier_core",),
        functools.partial(UpstreamLoopBasicTurn, bare=True),
        _loop_basic_problem,
    ),
)
"""The peers the fan-out suite compares with, in the order of their rows."""


def peer_problem(peer: Peer, *, on_asyncio: bool = True) -> str | None:
    """Why ``peer`` cannot run here (a missing package, or a backend other than asyncio)."""
    for module in peer.modules:
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed (pip install 'amplifier-anyio[peers]')"
    if peer.problem is not None and (problem := peer.problem()) is not None:
        return problem
    if not on_asyncio:
        return "runs on asyncio only"
    return None


def skipped_peers(*, on_trio: bool = False) -> dict[str, str]:
    """The peers that cannot run on this machine, with the reason (``on_trio``: a run
    that includes trio lists the installed peers as asyncio-only for its trio cases)."""
    skipped = {}
    for peer in PEERS:
        problem = peer_problem(peer)
        if problem is None and on_trio:
            problem = "runs on asyncio only: no rows on trio"
        if problem is not None:
            skipped[peer.name] = problem
    return skipped


def peer_turns(n: int, delay: float) -> dict[str, Any]:
    """One turn object per runnable peer (``prepare`` / ``check``), by variant name."""
    return {
        f"peer:{peer.name}": peer.turn(n, delay) for peer in PEERS if peer_problem(peer) is None
    }
