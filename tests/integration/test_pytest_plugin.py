"""Installing amplifier_anyio gives an outside project's pytest the Hypothesis settings
the strategies need, unless that project chose its own profile.

Each outside pytest is a fresh interpreter loading every installed plugin (seconds each):
those tests are in the full tier (marked slow)."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

OUTSIDER_TEST = textwrap.dedent(
    """
    from hypothesis import HealthCheck, given, settings

    from amplifier_anyio.testing import strategies as ast


    def test_profile():
        print("PROFILE", settings.get_current_profile_name())
        print("SUPPRESSED", sorted(h.name for h in settings().suppress_health_check))


    @given(ast.conversations(max_turns=6, max_tool_calls=4))
    def test_a_first_property(conversation):
        assert isinstance(conversation, list)
    """
)


# Variables by which Hypothesis decides it runs on CI (and loads its own ``ci`` profile).
CI_VARIABLES = (
    "CI",
    "TF_BUILD",
    "BUILDKITE",
    "CIRCLECI",
    "CIRRUS_CI",
    "CODEBUILD_BUILD_ID",
    "GITHUB_ACTIONS",
    "GITLAB_CI",
    "HEROKU_TEST_RUN_ID",
    "TEAMCITY_VERSION",
    "bamboo.buildKey",
    "__TOX_ENVIRONMENT_VARIABLE_ORIGINAL_CI",
)


def run_pytest(
    project: Path, *args: str, ci: bool = False, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """An outside project's pytest, on a developer's machine or (``ci``) on a CI runner,
    whatever machine runs this test; ``env``: more variables."""
    environment = {
        k: v for k, v in os.environ.items() if k not in CI_VARIABLES and k != "HYPOTHESIS_PROFILE"
    }
    environment.update(env or {})
    if ci:
        environment["CI"] = "true"
    # amplifier-core (installed for the upstream-module tests) brings a pytest plugin that
    # needs pytest-asyncio, which it does not declare: it is not what these tests are about.
    blocked = ("-p", "no:amplifier_module")
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", *blocked, *args],
        cwd=project,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_the_plugin_is_registered_with_pytest() -> None:
    found = importlib.metadata.entry_points(group="pytest11").select(name="amplifier_anyio")
    assert [ep.value for ep in found] == ["amplifier_anyio.testing.pytest_plugin"]


@pytest.mark.slow
def test_an_outside_project_gets_the_relaxed_profile(tmp_path: Path) -> None:
    (tmp_path / "test_outsider.py").write_text(OUTSIDER_TEST, encoding="utf-8")
    result = run_pytest(tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "PROFILE amplifier-anyio\n" in result.stdout
    assert "SUPPRESSED ['data_too_large', 'large_base_example', 'too_slow']" in result.stdout


@pytest.mark.slow
def test_a_project_profile_wins_and_the_plugin_can_be_turned_off(tmp_path: Path) -> None:
    (tmp_path / "test_outsider.py").write_text(OUTSIDER_TEST, encoding="utf-8")
    (tmp_path / "conftest.py").write_text(
        "from hypothesis import settings\n"
        "settings.register_profile('mine', max_examples=5)\n"
        "settings.load_profile('mine')\n",
        encoding="utf-8",
    )
    assert "PROFILE mine\n" in run_pytest(tmp_path).stdout
    (tmp_path / "conftest.py").unlink()
    off = run_pytest(tmp_path, "-p", "no:amplifier_anyio", "-k", "test_profile")
    assert "PROFILE default\n" in off.stdout
    chosen = run_pytest(tmp_path, "--hypothesis-profile=amplifier-anyio-ci", "-k", "test_profile")
    assert "PROFILE amplifier-anyio-ci\n" in chosen.stdout, chosen.stdout + chosen.stderr


@pytest.mark.slow
def test_on_a_ci_runner_the_plugin_replaces_hypothesis_own_ci_profile(tmp_path: Path) -> None:
    (tmp_path / "test_outsider.py").write_text(OUTSIDER_TEST, encoding="utf-8")
    result = run_pytest(tmp_path, ci=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "PROFILE amplifier-anyio-ci\n" in result.stdout
    assert "SUPPRESSED ['data_too_large', 'large_base_example', 'too_slow']" in result.stdout
    off = run_pytest(tmp_path, "-p", "no:amplifier_anyio", "-k", "test_profile", ci=True)
    assert "PROFILE ci\n" in off.stdout


@pytest.mark.slow
def test_a_project_ci_profile_is_kept_on_a_ci_runner(tmp_path: Path) -> None:
    (tmp_path / "test_outsider.py").write_text(OUTSIDER_TEST, encoding="utf-8")
    (tmp_path / "conftest.py").write_text(
        "from hypothesis import settings\n"
        "settings.register_profile('ci', max_examples=7, deadline=None)\n"
        "settings.load_profile('ci')\n",
        encoding="utf-8",
    )
    result = run_pytest(tmp_path, "-k", "test_profile", ci=True)
    assert "PROFILE ci\n" in result.stdout, result.stdout + result.stderr
    assert "data_too_large" not in result.stdout  # the project's profile, not the plugin's


CASSETTE_TEST = textwrap.dedent(
    """
    import os

    import anyio
    import pytest

    from amplifier_anyio import AmplifierSession

    PLAN = {
        "session": {"orchestrator": "loop-basic", "context": "context-simple"},
        "providers": [{"module": "provider-scripted", "config": {"demo": True}}],
        "tools": [{"module": "tool-demo"}],
    }


    @pytest.mark.parametrize("word", ["alpha", "beta"])
    def test_turn(cassette, word):
        async def main():
            plan = {**PLAN, "session": {**PLAN["session"], "cassette": cassette.to_dict()}}
            async with AmplifierSession(plan) as session:
                result = await session.run(f"{word} {os.environ.get('PROMPT', 'hello')}")
                mode = session.coordinator.get_capability("cassette").statistics().mode
                print("MODE", word, mode, cassette.tools)
                assert result.status == "success", f"{type(result.error).__name__}: {result.error}"

        anyio.run(main)


    @pytest.mark.cassette(tools=True)
    def test_tools(cassette):
        print("TOOLS", cassette.tools, cassette.mode)
    """
)


@pytest.mark.slow
def test_the_cassette_fixture_records_once_and_replays_in_ci(tmp_path: Path) -> None:
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test_outsider.py").write_text(CASSETTE_TEST, encoding="utf-8")
    files = tmp_path / "tests" / "cassettes" / "test_outsider"

    first = run_pytest(tmp_path)  # a developer's machine: once
    assert first.returncode == 0, first.stdout + first.stderr
    assert "MODE alpha record False" in first.stdout
    assert sorted(p.name for p in files.iterdir()) == [
        "test_turn[alpha].jsonl",
        "test_turn[beta].jsonl",
    ]
    assert "TOOLS True auto" in first.stdout

    again = run_pytest(tmp_path, ci=True)  # CI: none, replay only
    assert again.returncode == 0, again.stdout + again.stderr
    assert "MODE alpha replay False" in again.stdout
    assert "TOOLS True replay" in again.stdout

    (files / "test_turn[beta].jsonl").unlink()
    failed = run_pytest(tmp_path, "-k", "turn", ci=True, env={"PROMPT": "changed"})
    assert failed.returncode == 1
    assert "2 failed" in failed.stdout
    # alpha drifted; beta has no cassette any more
    assert (
        "CassetteMismatchError: lane 'root', call 0: the request differs from the recording "
        "at messages[0].content" in failed.stdout
    )
    assert "test_turn[beta].jsonl: no such cassette" in failed.stdout

    rerecorded = run_pytest(tmp_path, "--cassette-mode", "all", env={"PROMPT": "changed"})
    assert rerecorded.returncode == 0, rerecorded.stdout + rerecorded.stderr
    assert "MODE alpha record False" in rerecorded.stdout
    assert "changed" in (files / "test_turn[alpha].jsonl").read_text()
