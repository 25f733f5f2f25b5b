"""Plans are checked before they run: ``validate_plan``, ``validate --strict`` and
``AmplifierSession(strict=True)`` against the config schemas modules declare."""

from __future__ import annotations

import importlib.metadata
import logging
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from amplifier_anyio import AmplifierSession, ConfigError, validate_plan
from amplifier_anyio.cli import app
from amplifier_anyio.config_schema import ConfigSchema, Setting, schema_of
from amplifier_anyio.kernel import ENTRY_POINT_GROUP
from tiers import needs

pytestmark = pytest.mark.anyio

SCHEMA_MODULE = "amplifier_module_tool_schemaprobe"
SCHEMA_SOURCE = textwrap.dedent(
    '''
    """A tool module that declares a schema and records what its mount saw."""
    from amplifier_anyio.config_schema import ConfigSchema, Setting
    from amplifier_anyio.errors import ConfigError

    SEEN = []
    CLEANED = []

    CONFIG_SCHEMA = ConfigSchema(
        "tool-schemaprobe",
        {"limit": Setting((int,), "a count"), "label": Setting((str,), "a name")},
    )

    async def mount(coordinator, config):
        SEEN.append((dict(config), getattr(coordinator, "validating", None)))
        if config.get("limit", 0) < 0:
            raise ConfigError("tool-schemaprobe.limit: expected >= 0")
        return lambda: CLEANED.append(dict(config))
    '''
)


@pytest.fixture
def probe_source(tmp_path: Path) -> Iterator[Path]:
    package = tmp_path / "modules" / SCHEMA_MODULE
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(SCHEMA_SOURCE, encoding="utf-8")
    yield package.parent
    sys.modules.pop(SCHEMA_MODULE, None)


def probe_module() -> Any:
    return sys.modules[SCHEMA_MODULE]


def plan_with(source: Path, *tools: dict[str, Any], **session: Any) -> dict[str, Any]:
    return {
        "session": {"orchestrator": "loop-basic", "context": "context-simple", **session},
        "providers": [{"module": "provider-scripted", "config": {"demo": True}}],
        "tools": [{"module": "tool-schemaprobe", "source": str(source), **t} for t in tools],
    }


# -- the schema itself -----------------------------------------------------------------------


def test_a_schema_reports_unknown_keys_and_wrong_types_in_order() -> None:
    schema = ConfigSchema(
        "m",
        {"n": Setting((int,)), "x": Setting((float,)), "on": Setting((bool,))},
        aliases={"num": "n"},
        extra={"passthrough"},
    )
    problems = schema.check(
        {"n": True, "x": 3, "num": "7", "on": 1, "passthrough": object(), "nope": 1, "y": None}
    )
    assert [(p.key, p.kind) for p in problems] == [
        ("n", "type"),  # a bool is not an integer
        ("num", "type"),  # an alias is checked as its key
        ("on", "type"),  # and an integer is not a bool
        ("nope", "unknown"),
        ("y", "unknown"),
    ]
    assert str(problems[0]) == "m.n: expected an integer, got True"
    assert "known: n, num, on, passthrough, x" in str(problems[3])


def test_a_schema_from_an_attrs_class_types_each_field() -> None:
    from amplifier_anyio.orchestrators.loop_basic import CONFIG_SCHEMA  # noqa: PLC0415

    settings = CONFIG_SCHEMA.settings
    assert settings["max_iterations"].types == (int,)
    assert settings["tool_timeout"].accepts(2)
    assert settings["tool_timeout"].accepts(None)
    assert not settings["tool_timeout"].accepts("2")
    assert not settings["parallel_tools"].accepts(1)


BUILT_IN = sorted(
    (
        ep
        for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
        if ep.value.startswith("amplifier_anyio.")
    ),
    key=lambda ep: ep.name,
)
FULL_TIER = {"tool-mcp": "mcp"}
"""Built-in modules that import a package of the test-full extra, and the package."""


def test_the_built_in_modules_are_registered() -> None:
    assert len(BUILT_IN) >= 8


@pytest.mark.parametrize(
    "ep",
    [
        pytest.param(
            ep, id=ep.name, marks=needs(FULL_TIER[ep.name]) if ep.name in FULL_TIER else ()
        )
        for ep in BUILT_IN
    ],
)
def test_every_built_in_module_declares_a_schema(ep: importlib.metadata.EntryPoint) -> None:
    assert schema_of(ep.load()) is not None, f"{ep.name} declares no config schema"


# -- validate_plan ---------------------------------------------------------------------------


async def test_validate_plan_reports_every_problem_at_once(probe_source: Path) -> None:
    plan = plan_with(
        probe_source,
        {"config": {"limit": "many", "colour": "blue"}},
        {"config": {"limit": -1}, "instance_id": "second"},
    )
    plan["tools"].append({"module": "tool-does-not-exist"})
    plan["session"]["orchestrator"] = {"module": "loop-basic", "config": {"max_iterations": 0.5}}

    report = await validate_plan(plan)
    assert not report.ok
    assert report.errors == (
        "orchestrator 'loop-basic': loop-basic.max_iterations: expected an integer, got 0.5",
        "tool 'tool-schemaprobe': tool-schemaprobe.limit: expected an integer, got 'many'",
        "tool 'tool-schemaprobe': tool-schemaprobe.limit: expected >= 0",
        report.errors[3],
    )
    assert report.errors[3].startswith("tool 'tool-does-not-exist': module 'tool-does-not-exist'")
    [warning] = report.warnings
    assert warning.startswith("tool 'tool-schemaprobe': tool-schemaprobe.colour: unknown key")

    strict = await validate_plan(plan, strict=True)
    assert len(strict.errors) == 5
    assert strict.warnings == ()
    assert "colour: unknown key" in strict.errors[2]


async def test_validate_plan_mounts_offline_and_cleans_up(
    probe_source: Path, tmp_path: Path
) -> None:
    transcript = tmp_path / "not" / "yet" / "there.jsonl"
    plan = plan_with(
        probe_source,
        {"config": {"limit": 3}},
        context={"module": "context-persistent", "config": {"path": str(transcript)}},
    )
    report = await validate_plan(plan, strict=True)
    assert report.ok, report
    # The module was mounted, knowing it was a validation, and its cleanup ran.
    assert probe_module().SEEN == [({"limit": 3}, True)]
    assert probe_module().CLEANED == [{"limit": 3}]
    assert not (tmp_path / "not").exists()  # no transcript directory was created


async def test_validate_plan_reports_a_context_path_that_cannot_be(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    plan = {
        "session": {
            "orchestrator": "loop-basic",
            "context": {"module": "context-persistent", "config": {"path": str(blocker / "t")}},
        }
    }
    report = await validate_plan(plan)
    [error] = report.errors
    assert error.startswith("context 'context-persistent': context-persistent.path: cannot create")


async def test_validate_plan_names_an_unparsable_plan(tmp_path: Path) -> None:
    path = tmp_path / "plan.yaml"
    path.write_text("session: [1, 2]\n")
    report = await validate_plan(path)
    assert len(report.errors) == 1
    assert "session" in report.errors[0]


# -- a strict session ------------------------------------------------------------------------


async def test_a_strict_session_refuses_every_schema_problem_before_mounting(
    probe_source: Path,
) -> None:
    plan = plan_with(
        probe_source,
        {"config": {"limit": 1, "colour": "blue"}},
        {"config": {"label": 7}, "instance_id": "b"},
    )
    with pytest.raises(ConfigError) as caught:
        async with AmplifierSession(plan, strict=True):
            pytest.fail("a strict session must not start")
    assert str(caught.value) == (
        "tool 'tool-schemaprobe': tool-schemaprobe.colour: unknown key (known: label, limit); "
        "tool 'tool-schemaprobe': tool-schemaprobe.label: expected a string, got 7"
    )
    assert probe_module().SEEN == []  # nothing was mounted


async def test_a_lenient_session_warns_of_unknown_keys_and_starts(
    probe_source: Path, caplog: pytest.LogCaptureFixture
) -> None:
    plan = plan_with(probe_source, {"config": {"limit": 1, "colour": "blue"}})
    with caplog.at_level(logging.WARNING, logger="amplifier_anyio"):
        async with AmplifierSession(plan) as session:
            result = await session.run("hello there")
    assert result.status == "success"
    [warning] = [r.getMessage() for r in caplog.records if "colour" in r.getMessage()]
    assert warning.startswith("tool 'tool-schemaprobe': tool-schemaprobe.colour: unknown key")


async def test_a_wrong_type_stops_even_a_lenient_session(probe_source: Path) -> None:
    plan = plan_with(probe_source, {"config": {"limit": "3"}})
    with pytest.raises(ConfigError, match="limit: expected an integer, got '3'"):
        async with AmplifierSession(plan):
            pytest.fail("the session must not start")


async def test_an_optional_module_with_a_bad_config_is_only_a_warning(
    probe_source: Path, caplog: pytest.LogCaptureFixture
) -> None:
    plan = plan_with(probe_source, {"config": {"limit": "3"}, "optional": True})
    with caplog.at_level(logging.WARNING, logger="amplifier_anyio"):
        async with AmplifierSession(plan, strict=True) as session:
            assert (await session.run("hi")).status == "success"
    assert any("limit: expected an integer" in r.getMessage() for r in caplog.records)


# -- the command -----------------------------------------------------------------------------


def write_plan(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "plan.yaml"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


SLOPPY = """
    session:
      orchestrator: {module: loop-basic, config: {max_iterations: 4, turbo: true}}
      context: context-simple
    providers:
      - module: provider-scripted
        config: {demo: true, colour: blue}
    tools:
      - module: tool-demo
        config: {delay: 0.01}
"""


def test_validate_warns_of_unknown_keys_and_passes(tmp_path: Path) -> None:
    path = write_plan(tmp_path, SLOPPY)
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 0, result.output
    warnings = result.stderr.splitlines()
    assert [w.split(": ")[1] for w in warnings] == [
        "orchestrator 'loop-basic'",
        "provider 'provider-scripted'",
    ]
    assert all(w.startswith("warning: ") for w in warnings)
    assert result.stdout.startswith(f"ok: {path}")


def test_validate_strict_prints_every_problem_and_exits_2(tmp_path: Path) -> None:
    path = write_plan(tmp_path, SLOPPY.replace("delay: 0.01", "delay: soon"))
    result = CliRunner().invoke(app, ["validate", "--strict", str(path)])
    assert result.exit_code == 2, result.output
    errors = result.stderr.splitlines()
    assert all(e.startswith("error: ") for e in errors)
    assert [e.split(": ", 2)[2].split(":")[0] for e in errors] == [
        "loop-basic.turbo",
        "provider-scripted.colour",
        "tool-demo.delay",
    ]
    assert "Traceback" not in result.output
    assert result.stdout == ""


def test_run_strict_refuses_the_sloppy_plan_in_one_line(tmp_path: Path) -> None:
    path = write_plan(tmp_path, SLOPPY)
    result = CliRunner().invoke(app, ["run", "--strict", "--plan", str(path), "hi"])
    assert result.exit_code == 2, result.output
    [line] = result.stderr.splitlines()
    assert line.startswith("error: orchestrator 'loop-basic': loop-basic.turbo: unknown key")
    assert "provider-scripted.colour" in line


TYPO_PLAN = {
    "session": {"orchestrator": "loop-basic", "context": "context-simple", "contxt": 1},
    "providers": [{"module": "provider-scripted", "confg": {"demo": True}}],
    "tool": [{"module": "tool-demo"}],
    "orchestrator": {"config": {}, "conifg": {}},
}
TYPOS = [
    "unknown top-level key 'tool'",
    "session: unknown key 'contxt'",
    "orchestrator: unknown key 'conifg'",
    "providers[0]: unknown key 'confg'",
]


async def test_keys_the_plan_does_not_define_are_reported_warnings_or_strict_errors() -> None:
    lenient = await validate_plan(TYPO_PLAN)
    assert lenient.ok
    assert sorted(w for w in lenient.warnings if "unknown" in w) == sorted(TYPOS)

    strict = await validate_plan(TYPO_PLAN, strict=True)
    assert not strict.ok
    assert sorted(e for e in strict.errors if "unknown" in e) == sorted(TYPOS)


async def test_a_strict_session_refuses_a_plan_with_a_misspelt_key() -> None:
    with pytest.raises(ConfigError, match="providers\\[0\\]: unknown key 'confg'"):
        async with AmplifierSession(TYPO_PLAN, strict=True) as session:
            await session.run("hi")


async def test_an_upstream_mount_plan_has_no_unknown_keys() -> None:
    plan = {
        "session": {
            "orchestrator": {"module": "loop-basic", "source": None, "config": {}},
            "context": "context-simple",
            "context_source": None,
            "injection_budget_per_turn": 1000,
            "injection_size_limit": 4000,
            "metadata": {"app": "x"},
        },
        "context": {"config": {"max_tokens": 100000}},
        "providers": [
            {"module": "provider-scripted", "config": {"demo": True}, "instance_id": "a"}
        ],
        "tools": [{"module": "tool-demo", "optional": True}],
        "hooks": [],
        "agents": {"helper": {"session": {"orchestrator": "loop-basic"}}},
    }
    report = await validate_plan(plan, strict=True)
    assert not [line for line in (*report.errors, *report.warnings) if "unknown" in line], report
