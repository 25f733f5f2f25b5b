"""Upstream bundles and profiles as published: resolved, validated and run.

The bundles are written the way amplifier-foundation publishes them (a ``bundle.md`` with
YAML front matter and the instruction as its body, behaviors without ``session`` in
``behaviors/``, agent files in ``agents/``, ``includes`` by path, by ``name:path`` and by
``git+file://`` URL of a real git repository made here) and the way amplifier-app-cli's
profiles were (``profile: {extends: …}``). Each one is resolved, shown by ``validate
--resolved`` and runs a turn on our provider-scripted.
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import pytest
from _agents_kit import Children, answer, calls, task, tool_results
from typer.testing import CliRunner

from amplifier_anyio import AmplifierSession, ChatRequest, ChatResponse, TurnStatus
from amplifier_anyio.cli import app
from amplifier_anyio.errors import ConfigError
from amplifier_anyio.providers.scripted import ScriptedProvider
from amplifier_anyio.session import validate_plan
from amplifier_anyio.session._bundles import compose, extend, resolve_plan_file

pytestmark = pytest.mark.anyio


def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
    return root


def replies(*texts: str) -> str:
    """provider-scripted's config: one text reply per turn (YAML flow style)."""
    items = [{"content": [{"type": "text", "text": t}], "finish_reason": "stop"} for t in texts]
    return json.dumps({"responses": items})


def git_repo(root: Path, files: dict[str, str]) -> Path:
    """A real git repository (branch main) holding ``files``."""
    write(root, files)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-C", str(root)]
    subprocess.run(["git", "init", "-q", "-b", "main", str(root)], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "bundle"], check=True)
    return root


@pytest.fixture(autouse=True)
def module_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "cache"
    monkeypatch.setenv("AMPLIFIER_ANYIO_MODULE_CACHE", str(cache))
    return cache


@pytest.fixture
def published(tmp_path: Path) -> Path:
    """A bundle as foundation publishes one: a ``.md`` root, local and namespaced
    includes, a git include, agents and a context file."""
    shared = git_repo(
        tmp_path / "shared-repo",
        {
            "bundle.md": """
                ---
                bundle: {name: shared}
                ---
                The shared bundle's own instruction (replaced by the includer's).
                """,
            "behaviors/audit.yaml": """
                bundle: {name: shared-audit}
                hooks:
                  - module: hooks-scheduler-cost
                    config: {priority: 7}
                """,
            "agents/reviewer.md": """
                ---
                meta:
                  name: reviewer
                  description: Reviews changes.
                tools:
                  - module: tool-filesystem
                    source: ./tools/fs
                ---
                You review.
                """,
        },
    )
    root = tmp_path / "demo"
    write(
        root,
        {
            "bundle.md": f"""
                ---
                bundle:
                  name: demo
                  version: 1.0.0
                includes:
                  - ./behaviors/tools.yaml
                  - bundle: demo:behaviors/limits
                  - git+file://{shared}@main#subdirectory=behaviors/audit.yaml
                session:
                  orchestrator:
                    module: loop-basic
                    config: {{max_iterations: 4}}
                  context:
                    module: context-simple
                providers:
                  - module: provider-scripted
                    config: {replies("hello from the bundle", "again")}
                tools:
                  - module: tool-demo
                    config: {{delay: 0}}
                agents:
                  include: [helper, shared:reviewer]
                context:
                  include: [context/style.md]
                ---
                You are the demo bundle. Be brief.
                """,
            "behaviors/tools.yaml": """
                bundle: {name: demo-tools}
                tools:
                  - module: tool-demo
                    config: {delay: 5}
                session:
                  orchestrator:
                    config: {max_iterations: 9, extended_thinking: false}
                """,
            "behaviors/limits.yaml": """
                session:
                  orchestrator:
                    config: {reasoning_effort: low}
                """,
            "agents/helper.md": """
                ---
                meta: {name: helper, description: Helps.}
                ---
                You help.
                """,
            "context/style.md": "Write in short sentences.\n",
        },
    )
    return root / "bundle.md"


async def test_a_published_bundle_resolves_with_upstreams_precedence(published: Path) -> None:
    resolved = await resolve_plan_file(published)

    plan = resolved.plan
    assert resolved.upstream
    assert resolved.warnings == ()
    orchestrator = plan["session"]["orchestrator"]
    assert orchestrator["module"] == "loop-basic"
    # the includes in order, then the includer: its value wins, the others' stay
    assert orchestrator["config"] == {
        "max_iterations": 4,
        "extended_thinking": False,
        "reasoning_effort": "low",
    }
    # one tool-demo entry, merged by module id: the includer's delay
    assert plan["tools"] == [{"module": "tool-demo", "config": {"delay": 0}}]
    assert plan["hooks"] == [{"module": "hooks-scheduler-cost", "config": {"priority": 7}}]
    helper, reviewer = plan["agents"]["helper"], plan["agents"]["shared:reviewer"]
    assert (helper["description"], helper["instruction"]) == ("Helps.", "You help.")
    assert reviewer["name"] == "reviewer"
    [fs] = reviewer["tools"]  # a relative source is the agent's directory's
    assert Path(fs["source"]).is_absolute()
    assert fs["source"].endswith("agents/tools/fs")
    assert plan["instruction"].startswith("You are the demo bundle. Be brief.\n\n---\n\n")
    assert "Write in short sentences." in plan["instruction"]
    assert "<context_file paths=" in plan["instruction"]
    lines = "\n".join(resolved.resolved)
    for part in ("./behaviors/tools.yaml", "demo:behaviors/limits", "git+file://", "helper"):
        assert part in lines


async def test_a_published_bundle_runs_a_turn_with_its_instruction(published: Path) -> None:
    async with AmplifierSession(published) as session:
        first = await session.run("hi")
        second = await session.run("and again")
        messages = await session.coordinator.get("context").get_messages()
        [request, _] = session.coordinator.get("providers")["scripted"].requests

    assert (first.status, first.text, second.text) == (
        TurnStatus.SUCCESS,
        "hello from the bundle",
        "again",
    )
    system = request.messages[0]
    assert system.role == "system"
    assert system.content.startswith("You are the demo bundle.")
    assert [m["role"] for m in messages].count("system") == 1  # added once, at the start
    assert session.plan is not None
    assert set(session.plan.agents) == {"helper", "shared:reviewer"}


async def test_validate_reports_what_it_resolved(published: Path) -> None:
    report = await validate_plan(published)

    assert report.ok, report.errors
    assert any("demo:behaviors/limits ->" in line for line in report.resolved)
    assert report.plan is not None
    assert report.plan["instruction"].startswith("You are the demo bundle.")
    assert report.plan["session"]["orchestrator"]["config"]["max_iterations"] == 4


def test_the_cli_prints_the_resolved_plan_and_runs_the_bundle(published: Path) -> None:
    shown = CliRunner().invoke(app, ["validate", "--resolved", str(published)])
    ran = CliRunner().invoke(app, ["run", "--plan", str(published), "hi"])

    assert shown.exit_code == 0, shown.output
    assert "  resolved: bundle.md: includes: ./behaviors/tools.yaml -> " in shown.stdout
    assert "instruction: |-\n  You are the demo bundle. Be brief.\n" in shown.stdout
    assert "max_iterations: 4" in shown.stdout
    assert ran.exit_code == 0, ran.output
    assert ran.stdout == "hello from the bundle\n"


# -- profiles ------------------------------------------------------------------------------


@pytest.fixture
def profiles(tmp_path: Path) -> Path:
    """Profiles as amplifier-app-cli published them: ``extends`` by path, by sibling name
    and by ``collection:name`` (the collection's ``profiles/`` directory)."""
    write(
        tmp_path / "collection",
        {
            "profiles/foundation.md": f"""
                ---
                profile: {{name: foundation}}
                session:
                  orchestrator: {{module: loop-basic, config: {{max_iterations: 3}}}}
                  context: {{module: context-simple}}
                providers:
                  - module: provider-scripted
                    config: {replies("from the base profile")}
                tools:
                  - module: tool-demo
                    config: {{delay: 1}}
                ---
                You are the foundation profile.
                """,
        },
    )
    return write(
        tmp_path / "mine",
        {
            "base.md": f"""
                ---
                profile:
                  name: base
                  extends: {tmp_path / "collection" / "profiles" / "foundation.md"}
                tools:
                  - module: tool-demo
                    config: {{delay: 0}}
                ---
                """,
            "dev.md": f"""
                ---
                profile: {{name: dev, extends: base}}
                session:
                  orchestrator: {{config: {{max_iterations: 6}}}}
                providers:
                  - module: provider-scripted
                    config: {replies("from the dev profile")}
                ---
                You are the dev profile.
                """,
            "by-collection.md": """
                ---
                profile: {name: by-collection, extends: "base-collection:foundation"}
                ---
                """,
        },
    )


async def test_a_profile_extends_its_parents(profiles: Path) -> None:
    resolved = await resolve_plan_file(profiles / "dev.md")

    plan = resolved.plan
    assert plan["session"]["orchestrator"] == {
        "module": "loop-basic",
        "config": {"max_iterations": 6},
    }
    assert plan["tools"] == [{"module": "tool-demo", "config": {"delay": 0}}]
    # a profile's list replaces its parent's (a bundle's would be appended to)
    [scripted] = plan["providers"]
    assert [r["content"][0]["text"] for r in scripted["config"]["responses"]] == [
        "from the dev profile"
    ]
    assert plan["instruction"] == "You are the dev profile."
    assert sorted(line.split(" -> ")[0] for line in resolved.resolved) == [
        f"base.md: extends: {profiles.parent / 'collection' / 'profiles' / 'foundation.md'}",
        "dev.md: extends: base",
    ]
    async with AmplifierSession(profiles / "dev.md") as session:
        result = await session.run("hi")
    assert result.text == "from the dev profile"


async def test_a_profile_extends_a_collection_profile_by_name(profiles: Path) -> None:
    collection = str(profiles.parent / "collection")
    resolved = await resolve_plan_file(
        profiles / "by-collection.md", registry={"base-collection": collection}
    )
    assert resolved.warnings == ()
    assert resolved.plan["instruction"] == "You are the foundation profile."


# -- fragments, problems, strictness --------------------------------------------------------


async def test_a_fragment_alone_is_an_error_that_says_what_it_is(tmp_path: Path) -> None:
    fragment = write(tmp_path, {"behavior.yaml": "tools: [{module: tool-demo}]\n"})
    with pytest.raises(ConfigError, match=r"session: required .*bundle fragment"):
        await resolve_plan_file(fragment / "behavior.yaml")


@pytest.fixture
def broken(tmp_path: Path) -> Path:
    return (
        write(
            tmp_path,
            {
                "bundle.yaml": f"""
                bundle: {{name: broken}}
                includes: [./missing.yaml, nowhere:behaviors/x, ./loop.yaml]
                agents: {{include: [ghost]}}
                session: {{orchestrator: loop-basic, context: context-simple}}
                providers:
                  - module: provider-scripted
                    config: {replies("still runs")}
                """,
                "loop.yaml": "includes: [./bundle.yaml]\n",
            },
        )
        / "bundle.yaml"
    )


async def test_references_that_cannot_be_resolved_are_warnings_and_the_rest_runs(
    broken: Path,
) -> None:
    resolved = await resolve_plan_file(broken)

    problems = "\n".join(resolved.warnings)
    assert "'./missing.yaml' skipped" in problems
    assert "'nowhere:behaviors/x' skipped: " in problems
    assert "no bundle named 'nowhere'" in problems
    assert "includes itself (bundle.yaml -> loop.yaml -> bundle.yaml)" in problems
    assert "agents.include: 'ghost' skipped" in problems
    assert len(resolved.warnings) == 4
    async with AmplifierSession(broken) as session:
        assert (await session.run("hi")).text == "still runs"


async def test_strict_makes_them_errors(broken: Path) -> None:
    with pytest.raises(ConfigError, match=r"missing\.yaml"):
        async with AmplifierSession(broken, strict=True):
            pass
    report = await validate_plan(broken, strict=True)
    assert not report.ok
    assert any("'ghost' skipped" in error for error in report.errors)


def test_the_cli_warns_and_runs_or_with_strict_refuses(broken: Path) -> None:
    ran = CliRunner().invoke(app, ["run", "--plan", str(broken), "hi"])
    refused = CliRunner().invoke(app, ["run", "--strict", "--plan", str(broken), "hi"])

    assert ran.exit_code == 0, ran.output
    assert ran.stdout == "still runs\n"
    assert len([w for w in ran.stderr.splitlines() if w.startswith("warning: ")]) == 4
    assert refused.exit_code == 2
    [line] = refused.stderr.splitlines()
    assert line.startswith("error: bundle.yaml: includes: './missing.yaml' skipped")


async def test_a_plan_of_ours_is_not_touched(tmp_path: Path) -> None:
    plan = write(tmp_path, {"plan.yaml": "session: {orchestrator: loop-basic, context: c}\n"})
    resolved = await resolve_plan_file(plan / "plan.yaml")
    assert not resolved.upstream
    assert resolved.plan == {"session": {"orchestrator": "loop-basic", "context": "c"}}


async def test_a_dict_plan_with_includes_is_resolved_from_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tmp_path, {"behaviors/extra.yaml": "tools: [{module: tool-demo, config: {delay: 0}}]\n"})
    monkeypatch.chdir(tmp_path)
    plan: dict[str, Any] = {
        "includes": ["behaviors/extra"],
        "session": {"orchestrator": "loop-basic", "context": "context-simple"},
        "providers": [{"module": "provider-scripted", "config": json.loads(replies("ok"))}],
    }
    async with AmplifierSession(plan) as session:
        assert "reverse_words" in session.coordinator.get("tools")
        assert (await session.run("hi")).text == "ok"


# -- the merge rules -------------------------------------------------------------------------


def test_compose_follows_upstreams_bundle_rules() -> None:
    base = {
        "session": {"orchestrator": {"module": "a", "config": {"x": [1, 2], "y": 1}}},
        "tools": [{"module": "t1", "config": {"k": [1]}}, {"module": "t2"}],
        "agents": {"one": {"description": "base"}, "two": {}},
        "instruction": "base",
    }
    overlay = {
        "session": {"orchestrator": {"config": {"x": [2, 3]}}},
        "tools": [{"module": "t1", "config": {"k": [2]}}, {"module": "t3"}],
        "agents": {"one": {"description": "overlay"}},
        "instruction": "overlay",
    }
    assert compose(base, overlay) == {
        "session": {"orchestrator": {"module": "a", "config": {"x": [1, 2, 3], "y": 1}}},
        "tools": [{"module": "t1", "config": {"k": [1, 2]}}, {"module": "t2"}, {"module": "t3"}],
        "agents": {"one": {"description": "overlay"}, "two": {}},
        "instruction": "overlay",
    }
    assert base["tools"][0] == {"module": "t1", "config": {"k": [1]}}  # inputs untouched


def test_extend_follows_upstreams_profile_rules() -> None:
    parent = {"tools": [{"module": "t1", "source": "git+x", "config": {"k": [1], "a": 1}}]}
    child = {"tools": [{"module": "t1", "config": {"k": [2]}}], "agents": "all"}
    assert extend(parent, child) == {
        "tools": [{"module": "t1", "source": "git+x", "config": {"k": [2], "a": 1}}],
        "agents": "all",
    }


def test_two_instances_of_one_provider_stay_two() -> None:
    one = {"providers": [{"module": "provider-openai", "instance_id": "fast"}]}
    two = {"providers": [{"module": "provider-openai", "instance_id": "smart"}]}
    assert [p["instance_id"] for p in compose(one, two)["providers"]] == ["fast", "smart"]


@pytest.mark.skipif(os.name == "nt", reason="file URLs of POSIX paths")
async def test_a_file_uri_include_is_a_path(tmp_path: Path) -> None:
    write(tmp_path, {"b/extra.yaml": "hooks: [{module: hooks-scheduler-cost}]\n"})
    root = write(
        tmp_path,
        {
            "a/bundle.yaml": f"""
                includes: ["file://{tmp_path}/b/extra.yaml"]
                session: {{orchestrator: loop-basic, context: context-simple}}
                """,
        },
    )
    resolved = await resolve_plan_file(root / "a")
    assert resolved.plan["hooks"] == [{"module": "hooks-scheduler-cost"}]


async def test_a_resumed_history_keeps_its_own_system_message(tmp_path: Path) -> None:
    def plan(instruction: str) -> dict[str, Any]:
        transcript = {"path": str(tmp_path / "transcript.jsonl")}
        return {
            "session": {
                "orchestrator": "loop-basic",
                "context": {"module": "context-persistent", "config": transcript},
            },
            "providers": [{"module": "provider-scripted", "config": json.loads(replies("ok"))}],
            "instruction": instruction,
        }

    async with AmplifierSession(plan("You are the first.")) as session:
        await session.run("hi")
    async with AmplifierSession(plan("You are the second.")) as session:
        await session.run("hi again")
        messages = await session.coordinator.get("context").get_messages()

    systems = [m["content"] for m in messages if m["role"] == "system"]
    assert systems == ["You are the first."]
    assert [m["role"] for m in messages][:2] == ["system", "user"]


async def test_a_git_include_that_cannot_be_cloned_is_skipped_with_gits_reason(
    tmp_path: Path,
) -> None:
    root = write(
        tmp_path,
        {
            "bundle.yaml": f"""
                includes: ["git+file://{tmp_path}/no-such-repo@main"]
                session: {{orchestrator: loop-basic, context: context-simple}}
                """,
        },
    )
    resolved = await resolve_plan_file(root / "bundle.yaml")

    [warning] = resolved.warnings
    assert warning.startswith("bundle.yaml: includes: 'git+file://")
    assert "skipped: git clone failed: fatal:" in warning


async def test_a_git_reference_that_is_no_url_is_a_warning_not_a_crash(tmp_path: Path) -> None:
    root = write(
        tmp_path,
        {
            "bundle.yaml": """
                includes: ["git+nonsense"]
                session: {orchestrator: loop-basic, context: context-simple}
                """,
        },
    )
    resolved = await resolve_plan_file(root / "bundle.yaml")
    [warning] = resolved.warnings
    assert "'git+nonsense' skipped: " in warning
    assert "expected git+<scheme>://<location>" in warning


async def test_an_included_agent_runs_with_its_own_instruction_not_the_bundles(
    tmp_path: Path,
) -> None:
    bundle = write(
        tmp_path,
        {
            "bundle.md": """
                ---
                bundle: {name: team}
                session: {orchestrator: loop-basic, context: context-simple}
                providers: [{module: provider-scripted, config: {}}]
                tools: [{module: tool-task}]
                agents: {include: [helper]}
                ---
                You are the team lead.
                """,
            "agents/helper.md": """
                ---
                meta: {name: helper, description: Helps.}
                provider_preferences: [{provider: anthropic, model: claude-*}]
                model_role: general
                ---
                You help.
                """,
        },
    )
    children = Children({"helper": [answer("helped")]})

    def lead(request: ChatRequest) -> ChatResponse:
        results = tool_results(request)
        return answer(results[0]) if results else calls(task("helper"))

    async with AmplifierSession(bundle / "bundle.md", strict=True) as session:
        session.child_setup.append(children)
        await session.coordinator.mount("providers", ScriptedProvider(lead), name="scripted")
        result = await session.run("delegate it")
        [child] = children.sessions
        child_messages = await child.coordinator.get("context").get_messages()

    assert result.status is TurnStatus.SUCCESS, result.error
    assert json.loads(result.text)["response"] == "helped"
    systems = [m["content"] for m in child_messages if m["role"] == "system"]
    assert systems == ["You help."]  # the agent's, once; not the lead's
