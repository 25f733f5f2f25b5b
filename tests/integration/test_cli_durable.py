"""Deferred approvals through the command line: ``run`` stops with exit 3 and the waiting
calls, ``sessions show`` lists them, ``sessions approve`` decides one out of process, and
``chat --resume`` continues the turn with ``/resume`` (or decides with ``/approve``).

The plan is offline, with two modules loaded from a ``source`` directory the test writes:
a model that asks for the ``guarded`` tool until it sees the tool's result, then answers
with what it saw; and the ``guarded`` tool, which defers until its call is approved, then
appends the call id to a side-effect file. context-persistent keeps the transcript and its
journal under a temporary ``AMPLIFIER_HOME``; every command is a new session, as a new
process would open it.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner, Result

from amplifier_anyio.cli import app

GUARDED = textwrap.dedent(
    """
    import anyio

    from amplifier_anyio import ApprovalDeferred
    from amplifier_anyio.kernel import current_tool_call
    from amplifier_anyio.models import ToolResult


    class Guarded:
        name = "guarded"
        description = "appends its call id to a file, once someone approves it"
        input_schema = {"type": "object"}

        def __init__(self, path):
            self.path = path

        async def execute(self, tool_input):
            call = current_tool_call()
            if not call.approved:
                raise ApprovalDeferred(f"May {call.tool_call_id} write {tool_input['tag']}?")
            async with await anyio.open_file(self.path, "a") as handle:
                await handle.write(call.tool_call_id + "\\n")
            return ToolResult(output=f"wrote {tool_input['tag']}")


    async def mount(coordinator, config):
        await coordinator.mount("tools", Guarded(config["path"]), name="guarded")
    """
)


MODEL = textwrap.dedent(
    """
    from amplifier_anyio.models import ChatResponse, TextBlock, ToolCall
    from amplifier_anyio.providers.scripted import ScriptedProvider


    def reply(request):
        last = request.messages[-1]
        if last.role == "tool":
            return ChatResponse(content=[TextBlock(text=f"the model saw: {last.content}")])
        call = ToolCall(id="g1", name="guarded", arguments={"tag": "alpha"})
        return ChatResponse(tool_calls=[call])


    async def mount(coordinator, config):
        await coordinator.mount("providers", ScriptedProvider(reply, name="judge"), name="judge")
    """
)


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("AMPLIFIER_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    package = tmp_path / "modules" / "amplifier_module_tool_guarded"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(GUARDED, encoding="utf-8")
    model = tmp_path / "modules" / "amplifier_module_provider_judge"
    model.mkdir()
    (model / "__init__.py").write_text(MODEL, encoding="utf-8")
    plan = {
        "session": {
            "orchestrator": "loop-basic",
            "context": "context-persistent",  # the transcript goes where `sessions` looks
        },
        "providers": [{"module": "provider-judge", "source": str(tmp_path / "modules")}],
        "tools": [
            {
                "module": "tool-guarded",
                "source": str(tmp_path / "modules"),
                "config": {"path": str(tmp_path / "side-effects.txt")},
            }
        ],
    }
    (tmp_path / "plan.yaml").write_text(yaml.safe_dump(plan), encoding="utf-8")
    return tmp_path


def invoke(*args: str, stdin: str | None = None) -> Result:
    return CliRunner().invoke(app, list(args), input=stdin)


def side_effects(workspace: Path) -> list[str]:
    path = workspace / "side-effects.txt"
    return path.read_text("utf-8").split() if path.exists() else []


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_run_stops_awaiting_approval_and_a_later_chat_resumes_the_turn(
    workspace: Path, backend: str
) -> None:
    held = invoke("run", "--plan", "plan.yaml", "--backend", backend, "--json", "write it")

    assert held.exit_code == 3, held.output
    record = json.loads(held.stdout)
    assert record["status"] == "awaiting_approval"
    (pending,) = record["pending_approvals"]
    assert (pending["call_id"], pending["tool"]) == ("g1", "guarded")
    assert pending["prompt"] == "May g1 write alpha?"
    assert "sessions approve" in held.stderr
    assert side_effects(workspace) == []  # nothing ran yet
    session_id = record["session_id"]

    shown = invoke("sessions", "show", session_id)
    assert shown.exit_code == 0, shown.output
    assert "waiting for approval (1)" in shown.stdout
    assert "g1  guarded" in shown.stdout

    refused = invoke("sessions", "approve", session_id, "nope", "allow")
    assert refused.exit_code == 2
    assert "nope" in refused.stderr
    approved = invoke("sessions", "approve", session_id, "g1", "allow")
    assert approved.exit_code == 0, approved.output
    assert "allow recorded for g1" in approved.stderr
    assert side_effects(workspace) == []  # approving runs nothing

    chat = invoke(
        "chat", "--plan", "plan.yaml", "--backend", backend, "--resume", session_id,
        stdin="/resume\n/exit\n",
    )  # fmt: skip
    assert chat.exit_code == 0, chat.output
    assert "the model saw: wrote alpha" in chat.stdout, chat.stderr
    assert side_effects(workspace) == ["g1"]  # exactly once


def test_chat_shows_the_waiting_call_and_approve_in_chat_continues(workspace: Path) -> None:
    held = invoke("run", "--plan", "plan.yaml", "--json", "write it")
    session_id = json.loads(held.stdout)["session_id"]

    chat = invoke(
        "chat", "--plan", "plan.yaml", "--resume", session_id,
        stdin="/approve g2 allow\n/approve g1 deny\n/exit\n",
    )  # fmt: skip

    assert chat.exit_code == 0, chat.output
    assert "waiting for approval (1)" in chat.stderr  # shown when the chat opens
    assert "no call 'g2' is waiting for approval (waiting: g1)" in chat.stderr
    assert "the model saw: Denied" in chat.stdout, chat.stderr  # the model heard of it
    assert side_effects(workspace) == []  # denied: never ran
    shown = invoke("sessions", "show", "--json", session_id)
    results = [json.loads(line) for line in shown.stdout.splitlines()]
    (answer,) = [m for m in results if m.get("role") == "tool"]
    assert "Denied" in str(answer["content"])


# -- the flow a new user follows: hooks-approval defers, the session keeps its plan ---------

DEPLOY = textwrap.dedent(
    """
    import anyio

    from amplifier_anyio.kernel import current_tool_call


    class Deploy:
        name = "deploy"
        description = "deploys a service"
        input_schema = {"type": "object", "properties": {"service": {"type": "string"}}}

        def __init__(self, path):
            self.path = path

        async def execute(self, tool_input):
            async with await anyio.open_file(self.path, "a") as handle:
                await handle.write(current_tool_call().tool_call_id + "\\n")
            return f"deployed {tool_input['service']}"


    async def mount(coordinator, config):
        await coordinator.mount("tools", Deploy(config["path"]), name="deploy")
    """
)

DEPLOYER = textwrap.dedent(
    """
    from amplifier_anyio.models import ChatResponse, TextBlock, ToolCall
    from amplifier_anyio.providers.scripted import ScriptedProvider


    def reply(request):
        last = request.messages[-1]
        if last.role == "tool":
            return ChatResponse(content=[TextBlock(text=f"the model saw: {last.content}")])
        call = ToolCall(id="d1", name="deploy", arguments={"service": "web"})
        return ChatResponse(tool_calls=[call])


    async def mount(coordinator, config):
        await coordinator.mount("providers", ScriptedProvider(reply, name="ops"), name="ops")
    """
)


@pytest.fixture
def deploy_plan(workspace: Path) -> Path:
    """A plan whose deploy tool runs only once approved (hooks-approval, default: defer)."""
    modules = workspace / "modules"
    (modules / "amplifier_module_tool_deploy").mkdir()
    (modules / "amplifier_module_tool_deploy" / "__init__.py").write_text(DEPLOY, "utf-8")
    (modules / "amplifier_module_provider_ops").mkdir()
    (modules / "amplifier_module_provider_ops" / "__init__.py").write_text(DEPLOYER, "utf-8")
    plan = {
        "session": {"orchestrator": "loop-basic", "context": "context-persistent"},
        "providers": [{"module": "provider-ops", "source": str(modules)}],
        "tools": [
            {
                "module": "tool-deploy",
                "source": str(modules),
                "config": {"path": str(workspace / "side-effects.txt")},
            }
        ],
        "hooks": [
            {"module": "hooks-approval", "config": {"tools": ["deploy"], "default": "defer"}}
        ],
    }
    path = workspace / "deploy.yaml"
    path.write_text(yaml.safe_dump(plan), encoding="utf-8")
    return path


def held_deploy(backend: str) -> str:
    held = invoke("run", "--plan", "deploy.yaml", "--backend", backend, "--json", "ship it")
    assert held.exit_code == 3, held.output
    record = json.loads(held.stdout)
    (pending,) = record["pending_approvals"]
    assert (pending["call_id"], pending["tool"], pending["input"]) == (
        "d1",
        "deploy",
        {"service": "web"},
    )
    assert "d1  deploy" in held.stderr  # the waiting call is listed
    assert f"sessions approve {record['session_id']} CALL allow|deny" in held.stderr
    session_id: str = record["session_id"]
    return session_id


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_the_documented_flow_resumes_under_the_sessions_own_plan(
    workspace: Path, deploy_plan: Path, backend: str
) -> None:
    session_id = held_deploy(backend)
    assert side_effects(workspace) == []

    approved = invoke("sessions", "approve", session_id, "d1", "allow")
    assert approved.exit_code == 0, approved.output
    assert f"amplifier-anyio run --resume {session_id}" in approved.stderr

    chat = invoke("chat", "--backend", backend, "--resume", session_id, stdin="/resume\n/exit\n")
    assert chat.exit_code == 0, chat.output
    assert f"plan: {deploy_plan} (the one session {session_id} ran under)" in chat.stderr
    assert "the model saw: deployed web" in chat.stdout, chat.stderr
    assert side_effects(workspace) == ["d1"]  # run once, under the session's own plan


def test_a_plan_without_the_held_calls_tool_is_refused_and_the_approval_kept(
    workspace: Path, deploy_plan: Path
) -> None:
    session_id = held_deploy("asyncio")
    assert invoke("sessions", "approve", session_id, "d1", "allow").exit_code == 0

    elsewhere = invoke("run", "--resume", session_id, "--plan", "plan.yaml")  # no deploy tool
    assert elsewhere.exit_code == 1, elsewhere.output
    (line,) = [line for line in elsewhere.stderr.splitlines() if line.startswith("error:")]
    assert "the held call d1 needs the tool 'deploy'" in line
    assert side_effects(workspace) == []

    resumed = invoke("run", "--resume", session_id)  # its own plan: the approval still holds
    assert resumed.exit_code == 0, resumed.output
    assert resumed.stdout.strip() == "the model saw: deployed web"
    assert side_effects(workspace) == ["d1"]


def test_a_stored_plan_that_is_gone_is_one_line(workspace: Path, deploy_plan: Path) -> None:
    session_id = held_deploy("asyncio")
    deploy_plan.unlink()
    gone = invoke("run", "--resume", session_id)
    assert gone.exit_code == 2
    assert f"session {session_id} ran under the plan {deploy_plan}, which cannot be read" in (
        gone.stderr
    )
