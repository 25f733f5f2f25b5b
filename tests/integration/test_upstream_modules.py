"""Modules written for amplifier-core, mounted unchanged into our sessions.

The modules below are written the way upstream's are (their answers are amplifier-core's
pydantic models: ``HookResult``, ``ToolResult``, ``ChatResponse``, content blocks,
``ToolCall``), as packages in a temporary directory. Each is mounted by ``source`` (the
directory) and by entry point (a tiny ``*.dist-info`` on ``sys.path`` naming the same
packages), and the test checks which of the two the loader used. Everything runs on
asyncio and on trio: the pydantic models need no event loop.
"""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from amplifier_anyio import AmplifierSession
from amplifier_anyio.kernel import ENTRY_POINT_GROUP
from tiers import needs

pytestmark = [pytest.mark.anyio, *needs("amplifier_core")]

ORCHESTRATORS = ("loop-basic", "loop-streaming", "loop-events", "loop-lifecycle")
HOW = ("source", "entry-point")

PACKAGES: dict[str, dict[str, str]] = {
    # A policy hook: deny listed tools, modify another's input, inject after a tool.
    "upstream-policy": {
        "__init__.py": """
from amplifier_core import HookResult


async def mount(coordinator, config):
    deny = set(config.get("deny", ()))
    rewrite = config.get("rewrite") or {}
    inject = config.get("inject")

    async def on_pre(event, data):
        if data.get("tool_name") in deny:
            return HookResult(action="deny", reason="blocked by upstream policy")
        if rewrite:
            return HookResult(action="modify", data={**data, "tool_input": rewrite})
        return HookResult(action="continue")

    async def on_post(event, data):
        if inject:
            return HookResult(
                action="inject_context",
                context_injection=inject["text"],
                ephemeral=inject.get("ephemeral", False),
            )
        return HookResult()

    off_pre = coordinator.hooks.register("tool:pre", on_pre, priority=0, name="upstream-pre")
    off_post = coordinator.hooks.register("tool:post", on_post, priority=0, name="upstream-post")

    def cleanup():
        off_pre()
        off_post()

    return cleanup
""",
    },
    # A tool answering with amplifier-core ToolResults, success and failure with output.
    "upstream-tool": {
        "__init__.py": """
from amplifier_core import ToolResult


class ProbeTool:
    name = "probe_tool"
    description = "Echoes its text, or fails like a shell command when asked to."
    input_schema = {"type": "object", "properties": {"text": {"type": "string"}}}

    def __init__(self):
        self.inputs = []
        self.ready_tools = None

    async def execute(self, input):
        self.inputs.append(input)
        if input.get("fail"):
            return ToolResult(
                success=False,
                output={"stdout": "partial", "stderr": "boom", "returncode": 2},
                error={"message": "exit status 2"},
            )
        return ToolResult(success=True, output={"echo": input.get("text")})

    async def on_session_ready(self, coordinator):
        self.ready_tools = sorted(coordinator.get("tools"))


async def mount(coordinator, config):
    tool = ProbeTool()
    await coordinator.mount("tools", tool, name=tool.name)
""",
    },
    # A provider answering with amplifier-core ChatResponses: a tool call, then text.
    # It also plans and aggregates for loop-lifecycle (the instructions say which).
    "upstream-provider": {
        "__init__.py": """
import json

from amplifier_core import ChatResponse, ProviderInfo, TextBlock, ToolCall, Usage
from amplifier_core.message_models import ThinkingBlock, ToolCallBlock


def _text(message):
    content = message.content
    if isinstance(content, str):
        return content
    return "".join(getattr(block, "text", "") for block in content)


class ProbeProvider:
    name = "upstream-provider"

    def __init__(self, config):
        self.input = config.get("input", {"text": "hi"})
        self.requests = []

    def get_info(self):
        return ProviderInfo(
            id="upstream-provider",
            display_name="Upstream probe",
            defaults={"context_window": 100000, "max_output_tokens": 1000},
        )

    async def list_models(self):
        return []

    async def complete(self, request, **kwargs):
        self.requests.append(request)
        last = _text(request.messages[-1])
        usage = Usage(input_tokens=3, output_tokens=2, total_tokens=5)
        if "orchestrator-lifecycle-plan" in last:
            plan = [{"id": "s1", "tool": "probe_tool", "input": self.input}]
            return ChatResponse(content=[TextBlock(text=json.dumps(plan))], usage=usage)
        if "orchestrator-lifecycle-aggregate" in last:
            return ChatResponse(content=[TextBlock(text="all done")], usage=usage)
        roles = [m.role for m in request.messages]
        last_user = len(roles) - 1 - roles[::-1].index("user")
        if "tool" in roles[last_user:]:
            return ChatResponse(
                content=[
                    ThinkingBlock(thinking="hmm", signature="sig"),
                    TextBlock(text="all done"),
                ],
                usage=usage,
                finish_reason="stop",
            )
        call_id = f"call-{len(self.requests)}"
        return ChatResponse(
            content=[
                TextBlock(text="let me check"),
                ToolCallBlock(id=call_id, name="probe_tool", input=self.input),
            ],
            tool_calls=[ToolCall(id=call_id, name="probe_tool", arguments=self.input)],
            usage=usage,
            finish_reason="tool_calls",
        )

    def parse_tool_calls(self, response):
        return [
            ToolCall(id=c.id, name=c.name, arguments=dict(c.arguments))
            for c in response.tool_calls or []
        ]


async def mount(coordinator, config):
    provider = ProbeProvider(config)
    await coordinator.mount("providers", provider, name=provider.name)
""",
    },
    # on_session_ready at package level while mount lives in a submodule (upstream's
    # contract: a module-level function of the module's package).
    "upstream-ready": {
        "__init__.py": """
from ._impl import mount


async def on_session_ready(coordinator):
    coordinator.register_capability("probe.ready_saw_tools", sorted(coordinator.get("tools")))
""",
        "_impl.py": """
async def mount(coordinator, config):
    coordinator.register_capability("probe.mounted", True)
""",
    },
    # An upstream-style orchestrator: stores the provider's pydantic blocks as they
    # are, reads session_state, asks the context should_compact() / compact().
    "upstream-orchestrator": {
        "__init__.py": """
class UpstreamLoop:
    def __init__(self):
        self.compact_checks = []

    async def execute(self, prompt, context, providers, tools, hooks, **kwargs):
        coordinator = kwargs["coordinator"]
        goal = coordinator.session_state.get("goal")
        await context.add_message({"role": "user", "content": prompt})
        provider = next(iter(providers.values()))
        from amplifier_core import ChatRequest, Message

        messages = await context.get_messages()
        request = ChatRequest(messages=[Message(role="user", content=prompt)])
        response = await provider.complete(request)
        await context.add_message({"role": "assistant", "content": response.content})
        self.compact_checks.append(await context.should_compact())
        await context.compact()
        return f"{goal}: {len(messages)} before"


async def mount(coordinator, config):
    await coordinator.mount("orchestrator", UpstreamLoop())
""",
    },
}


def package_of(module_id: str) -> str:
    return "amplifier_module_" + module_id.replace("-", "_")


@pytest.fixture(scope="module")
def upstream_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The upstream-style packages, and a distribution whose entry points name them."""
    root = tmp_path_factory.mktemp("upstream-modules")
    for module_id, files in PACKAGES.items():
        package = root / package_of(module_id)
        package.mkdir()
        for name, text in files.items():
            (package / name).write_text(text, encoding="utf-8")
    dist_info = root / "amp_upstream_probe-1.0.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: amp-upstream-probe\nVersion: 1.0\n", encoding="utf-8"
    )
    lines = [f"{m} = {package_of(m)}:mount" for m in PACKAGES]
    (dist_info / "entry_points.txt").write_text(
        f"[{ENTRY_POINT_GROUP}]\n" + "\n".join(lines) + "\n", encoding="utf-8"
    )
    sys.path.append(str(root))
    importlib.invalidate_caches()
    yield root
    sys.path.remove(str(root))
    for name in list(sys.modules):
        if name.startswith(tuple(package_of(m) for m in PACKAGES)):
            del sys.modules[name]
    importlib.invalidate_caches()


def entry(module_id: str, how: str, root: Path, **config: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"module": module_id, "config": config}
    if how == "source":
        spec["source"] = str(root)
    return spec


def scripted(orchestrator: str, tool_input: dict[str, Any]) -> dict[str, Any]:
    """Our own scripted provider: one call of probe_tool, then an answer (loop-lifecycle:
    a one-step plan, then the aggregate). Hook and tool tests use it, so that they show
    the upstream hook or tool alone."""
    if orchestrator == "loop-lifecycle":
        plan = [{"id": "s1", "tool": "probe_tool", "input": tool_input}]
        replies = [text_reply(json.dumps(plan)), text_reply("all done")]
    else:
        call = {"id": "call-1", "name": "probe_tool", "arguments": tool_input}
        replies = [
            {"content": [{"type": "text", "text": "let me check"}], "tool_calls": [call]},
            text_reply("all done"),
        ]
    return {"module": "provider-scripted", "config": {"responses": replies}}


def text_reply(reply: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": reply}], "finish_reason": "stop"}


def plan_with(
    root: Path,
    how: str,
    orchestrator: str = "loop-basic",
    *,
    provider: str = "scripted",
    tool_input: dict[str, Any] | None = None,
    **policy: Any,
) -> dict[str, Any]:
    tool_input = tool_input or {"text": "hi"}
    if provider == "scripted":
        provider_entry = scripted(orchestrator, tool_input)
    else:
        provider_entry = entry("upstream-provider", how, root, input=tool_input)
    return {
        "session": {"orchestrator": orchestrator, "context": "context-simple"},
        "providers": [provider_entry],
        "tools": [entry("upstream-tool", how, root)],
        "hooks": [entry("upstream-policy", how, root, **policy)],
    }


def requests_of(session: AmplifierSession) -> list[Any]:
    """The requests our scripted provider received."""
    return list(session.coordinator.get("providers")["scripted"].requests)


def origin(session: AmplifierSession, module_id: str, root: Path, how: str) -> str:
    found = session.loader.origin_of(module_id, str(root) if how == "source" else None)
    assert found is not None
    return found


def tool_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [m for m in messages if m["role"] == "tool"]


# -- hook verdicts ---------------------------------------------------------------------------


@pytest.mark.parametrize("how", HOW)
@pytest.mark.parametrize("orchestrator", ORCHESTRATORS)
async def test_an_upstream_deny_on_tool_pre_stops_the_tool(
    upstream_dir: Path, orchestrator: str, how: str
) -> None:
    plan = plan_with(upstream_dir, how, orchestrator, deny=["probe_tool"])
    async with AmplifierSession(plan) as session:
        result = await session.run("check it")
        messages = await session.coordinator.get("context").get_messages()
        tool = session.coordinator.get("tools")["probe_tool"]

        assert tool.inputs == []  # the tool never ran
        [answer] = tool_messages(messages)
        assert answer["content"] == "Denied by hook: blocked by upstream policy"
        if orchestrator == "loop-lifecycle":  # a denied step fails the plan (fail_fast)
            assert "Denied by hook" in str(result.error.__cause__)
        else:
            assert result.error is None
        expected = "source" if how == "source" else "entry point"
        assert origin(session, "upstream-policy", upstream_dir, how).startswith(expected)


@pytest.mark.parametrize("how", HOW)
@pytest.mark.parametrize("orchestrator", ["loop-basic", "loop-events"])
async def test_an_upstream_modify_on_tool_pre_changes_the_input(
    upstream_dir: Path, orchestrator: str, how: str
) -> None:
    plan = plan_with(upstream_dir, how, orchestrator, rewrite={"text": "sanitised"})
    async with AmplifierSession(plan) as session:
        await session.run("check it")
        tool = session.coordinator.get("tools")["probe_tool"]

        assert tool.inputs == [{"text": "sanitised"}]


@pytest.mark.parametrize("how", HOW)
async def test_an_upstream_ephemeral_injection_reaches_the_next_request(
    upstream_dir: Path, how: str
) -> None:
    plan = plan_with(
        upstream_dir, how, inject={"text": "NOTE: tool was audited", "ephemeral": True}
    )
    async with AmplifierSession(plan) as session:
        await session.run("check it")
        messages = await session.coordinator.get("context").get_messages()

        first, second = requests_of(session)
        said = [str(m.content) for m in second.messages]
        assert any("NOTE: tool was audited" in text for text in said)
        assert not any("NOTE" in str(m.content) for m in first.messages)
        assert not any("NOTE" in str(m.get("content")) for m in messages)  # ephemeral


@pytest.mark.parametrize("how", HOW)
async def test_an_upstream_persistent_injection_is_kept_in_the_context(
    upstream_dir: Path, how: str
) -> None:
    plan = plan_with(upstream_dir, how, inject={"text": "NOTE: remember this"})
    async with AmplifierSession(plan) as session:
        await session.run("check it")
        messages = await session.coordinator.get("context").get_messages()

        kept = [m for m in messages if m.get("content") == "NOTE: remember this"]
        assert len(kept) == 1
        assert kept[0]["metadata"]["source"] == "hook"


# -- tool results ----------------------------------------------------------------------------


@pytest.mark.parametrize("how", HOW)
@pytest.mark.parametrize("fail", [False, True], ids=["success", "failure"])
async def test_an_upstream_tool_result_reaches_the_model_as_json(
    upstream_dir: Path, how: str, fail: bool
) -> None:
    plan = plan_with(upstream_dir, how, tool_input={"text": "hi", "fail": fail})
    async with AmplifierSession(plan) as session:
        result = await session.run("check it")

        tool_message = next(m for m in requests_of(session)[1].messages if m.role == "tool")
        if fail:
            assert json.loads(tool_message.content) == {
                "stdout": "partial",
                "stderr": "boom",
                "returncode": 2,
            }
        else:
            assert json.loads(tool_message.content) == {"echo": "hi"}
        assert result.text == "all done"


async def test_an_upstream_failure_is_reported_as_a_failure_to_tool_post(
    upstream_dir: Path,
) -> None:
    plan = plan_with(upstream_dir, "source", tool_input={"fail": True})
    seen: list[dict[str, Any]] = []
    async with AmplifierSession(plan) as session:

        async def record(event: str, data: dict[str, Any]) -> None:
            seen.append(data["result"])

        session.coordinator.hooks.register("tool:post", record, priority=5)
        await session.run("check it")

    [result] = seen
    assert result["success"] is False
    assert result["error"] == {"message": "exit status 2"}
    assert result["output"]["stderr"] == "boom"


# -- provider responses ----------------------------------------------------------------------


@pytest.mark.parametrize("how", HOW)
@pytest.mark.parametrize("orchestrator", ["loop-basic", "loop-streaming"])
async def test_upstream_chat_responses_drive_our_loop_over_two_turns(
    upstream_dir: Path, orchestrator: str, how: str
) -> None:
    plan = plan_with(upstream_dir, how, orchestrator, provider="upstream")
    async with AmplifierSession(plan) as session:
        first = await session.run("check it")
        second = await session.run("again")
        messages = await session.coordinator.get("context").get_messages()

    assert (first.text, second.text) == ("all done", "all done")  # thinking never leaks
    assert first.usage.total_tokens == 10
    assistant = [m for m in messages if m["role"] == "assistant"]
    assert len(assistant) == 4
    for message in assistant:
        assert all(isinstance(block, dict) for block in message["content"])
    assert assistant[1]["content"][0] == {"type": "thinking", "thinking": "hmm", "signature": "sig"}


# -- on_session_ready, session_state, contexts for upstream orchestrators ---------------------


@pytest.mark.parametrize("how", HOW)
async def test_on_session_ready_of_the_package_and_of_the_mounted_object_run(
    upstream_dir: Path, how: str
) -> None:
    plan = {
        "session": {"orchestrator": "loop-basic", "context": "context-simple"},
        "providers": [scripted("loop-basic", {})],
        "hooks": [entry("upstream-ready", how, upstream_dir)],
        "tools": [entry("upstream-tool", how, upstream_dir)],
    }
    async with AmplifierSession(plan) as session:
        coordinator = session.coordinator
        tool = coordinator.get("tools")["probe_tool"]

        assert coordinator.get_capability("probe.mounted") is True
        # Run once every module was mounted (the tool comes after the hook in the plan).
        assert coordinator.get_capability("probe.ready_saw_tools") == ["probe_tool"]
        assert tool.ready_tools == ["probe_tool"]


@pytest.mark.parametrize("how", HOW)
async def test_an_upstream_orchestrator_runs_on_our_context(upstream_dir: Path, how: str) -> None:
    plan = {
        "session": {
            "orchestrator": entry("upstream-orchestrator", how, upstream_dir),
            "context": "context-simple",
        },
        "providers": [entry("upstream-provider", how, upstream_dir)],
    }
    async with AmplifierSession(plan) as session:
        session.coordinator.session_state["goal"] = "probe"
        first = await session.run("one")
        second = await session.run("two")
        context = session.coordinator.get("context")
        messages = await context.get_messages()
        view = await context.get_messages_for_request()
        orchestrator = session.coordinator.get("orchestrator")

    assert (first.text, second.text) == ("probe: 1 before", "probe: 3 before")
    assert orchestrator.compact_checks == [False, False]
    # The pydantic blocks it stored are plain dicts in our context.
    assert messages[1]["content"][1] == {
        "type": "tool_call",
        "id": "call-1",
        "name": "probe_tool",
        "input": {"text": "hi"},
    }
    assert view == messages
