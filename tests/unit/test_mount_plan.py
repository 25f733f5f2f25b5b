"""MountPlan: upstream's shape from a dict, YAML or TOML; one-line errors naming the field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amplifier_anyio import AmplifierError, ConfigError, ModuleSpec, MountPlan
from tiers import examples

UPSTREAM_PLAN: dict[str, Any] = {
    "session": {
        "orchestrator": "loop-basic",
        "orchestrator_source": "git+https://example.invalid/loop-basic",
        "context": "context-simple",
        "injection_size_limit": 4096,
        "metadata": {"app": "tests"},
    },
    "orchestrator": {"config": {"max_iterations": 5}},
    "context": {"config": {"max_tokens": 1000}},
    "providers": [
        {"module": "provider-openai", "config": {"model": "gpt-4o"}, "instance_id": "openai"},
        {"module": "provider-openai", "config": {"model": "gpt-4o-mini"}, "instance_id": "mini"},
        {"module": "provider-anthropic", "source": "./providers/anthropic"},
    ],
    "tools": [{"module": "tool-filesystem", "config": {"allowed_write_paths": ["."]}}],
    "hooks": [{"module": "hooks-logging"}],
    "agents": {"reviewer": {"session": {"orchestrator": "loop-events"}}},
}

UPSTREAM_YAML = """\
session:
  orchestrator: loop-basic
  orchestrator_source: git+https://example.invalid/loop-basic
  context: context-simple
  injection_size_limit: 4096
  metadata: {app: tests}
orchestrator:
  config: {max_iterations: 5}
context:
  config: {max_tokens: 1000}
providers:
  - module: provider-openai
    config: {model: gpt-4o}
    instance_id: openai
  - module: provider-openai
    config: {model: gpt-4o-mini}
    instance_id: mini
  - module: provider-anthropic
    source: ./providers/anthropic
tools:
  - module: tool-filesystem
    config:
      allowed_write_paths: ["."]
hooks:
  - module: hooks-logging
agents:
  reviewer:
    session: {orchestrator: loop-events}
"""

UPSTREAM_TOML = """\
[session]
orchestrator = "loop-basic"
orchestrator_source = "git+https://example.invalid/loop-basic"
context = "context-simple"
injection_size_limit = 4096
metadata = { app = "tests" }

[orchestrator.config]
max_iterations = 5

[context.config]
max_tokens = 1000

[[providers]]
module = "provider-openai"
config = { model = "gpt-4o" }
instance_id = "openai"

[[providers]]
module = "provider-openai"
config = { model = "gpt-4o-mini" }
instance_id = "mini"

[[providers]]
module = "provider-anthropic"
source = "./providers/anthropic"

[[tools]]
module = "tool-filesystem"
config = { allowed_write_paths = ["."] }

[[hooks]]
module = "hooks-logging"

[agents.reviewer.session]
orchestrator = "loop-events"
"""


def minimal(**sections: Any) -> dict[str, Any]:
    return {"session": {"orchestrator": "loop-basic", "context": "context-simple"}, **sections}


def config_error(data: Any) -> str:
    with pytest.raises(ConfigError) as caught:
        MountPlan.from_dict(data)
    message = str(caught.value)
    assert "\n" not in message
    return message


# -- the shape -------------------------------------------------------------------------------


def test_upstream_string_forms_take_top_level_config_and_source() -> None:
    plan = MountPlan.from_dict(UPSTREAM_PLAN)

    assert plan.orchestrator == ModuleSpec(
        module="loop-basic",
        source="git+https://example.invalid/loop-basic",
        config={"max_iterations": 5},
    )
    assert plan.context == ModuleSpec(module="context-simple", config={"max_tokens": 1000})


def test_lists_keep_their_order_config_source_and_instance_ids() -> None:
    plan = MountPlan.from_dict(UPSTREAM_PLAN)

    assert [(p.module, p.instance_id, p.config) for p in plan.providers] == [
        ("provider-openai", "openai", {"model": "gpt-4o"}),
        ("provider-openai", "mini", {"model": "gpt-4o-mini"}),
        ("provider-anthropic", None, {}),
    ]
    assert plan.providers[2].source == "./providers/anthropic"
    assert plan.tools == (
        ModuleSpec(module="tool-filesystem", config={"allowed_write_paths": ["."]}),
    )
    assert plan.hooks == (ModuleSpec(module="hooks-logging"),)


def test_agents_and_session_settings_are_passed_through() -> None:
    plan = MountPlan.from_dict(UPSTREAM_PLAN)

    assert plan.agents == {"reviewer": {"session": {"orchestrator": "loop-events"}}}
    assert plan.session_settings == {"injection_size_limit": 4096, "metadata": {"app": "tests"}}
    assert plan.raw == UPSTREAM_PLAN


def test_table_forms_for_orchestrator_and_context() -> None:
    plan = MountPlan.from_dict(
        {
            "session": {
                "orchestrator": {"module": "loop-basic", "source": "./loop", "config": {"a": 1}},
                "context": {"module": "context-persistent", "config": {"path": "h.jsonl"}},
            }
        }
    )

    assert plan.orchestrator == ModuleSpec(module="loop-basic", source="./loop", config={"a": 1})
    assert plan.context == ModuleSpec(module="context-persistent", config={"path": "h.jsonl"})
    assert (plan.providers, plan.tools, plan.hooks, plan.agents) == ((), (), (), {})


def test_all_modules_lists_them_in_load_order() -> None:
    plan = MountPlan.from_dict(UPSTREAM_PLAN)

    assert [(kind, spec.module) for kind, spec in plan.all_modules()] == [
        ("orchestrator", "loop-basic"),
        ("context", "context-simple"),
        ("provider", "provider-openai"),
        ("provider", "provider-openai"),
        ("provider", "provider-anthropic"),
        ("tool", "tool-filesystem"),
        ("hook", "hooks-logging"),
    ]


@pytest.mark.parametrize(("suffix", "text"), [(".yaml", UPSTREAM_YAML), (".toml", UPSTREAM_TOML)])
def test_yaml_and_toml_give_the_same_plan_as_the_dict(suffix: str, text: str) -> None:
    assert MountPlan.from_text(text, suffix=suffix) == MountPlan.from_dict(UPSTREAM_PLAN)


@pytest.mark.parametrize(
    ("name", "text"),
    [("plan.yaml", UPSTREAM_YAML), ("plan.yml", UPSTREAM_YAML), ("plan.TOML", UPSTREAM_TOML)],
)
def test_plan_files_are_read_by_suffix(tmp_path: Path, name: str, text: str) -> None:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")

    assert MountPlan.from_file(path) == MountPlan.from_dict(UPSTREAM_PLAN)
    assert MountPlan.from_file(str(path)).raw == UPSTREAM_PLAN


# -- errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (minimal(providers=[{"config": {}}]), "providers[0].module: required"),
        (minimal(tools=["tool-a", {"module": ""}]), "tools[1].module: required"),
        ({"session": {"context": "context-simple"}}, "session.orchestrator: required"),
        ({"session": {"orchestrator": "loop-basic"}}, "session.context: required"),
        ({"providers": []}, "session: required"),
        ([], "<plan>: expected a table, got a list"),
        ({"session": "loop-basic"}, "session: expected a table, got a string"),
        (minimal(providers={"module": "p"}), "providers: expected a list, got a table"),
        (minimal(hooks=[["hooks-logging"]]), "hooks[0]: expected a table, got a list"),
        (
            minimal(providers=[{"module": 7}]),
            "providers[0].module: expected a module id string, got int",
        ),
        (
            minimal(tools=[{"module": "t", "config": ["x"]}]),
            "tools[0].config: expected a table, got a list",
        ),
        (
            minimal(tools=[{"module": "t", "source": 3}]),
            "tools[0].source: expected a string, got int",
        ),
        (
            minimal(providers=[{"module": "p", "instance_id": 1}]),
            "providers[0].instance_id: expected a string, got int",
        ),
        (
            {"session": {"orchestrator": "loop-basic", "context": 5}},
            "session.context: expected a module id or a {module, source, config} table, got int",
        ),
        (
            {"session": {"orchestrator": {"config": {}}, "context": "context-simple"}},
            "session.orchestrator.module: required",
        ),
        (
            {**minimal(), "orchestrator": "loop-basic"},
            "orchestrator: expected a table, got a string",
        ),
    ],
)
def test_errors_are_one_line_naming_the_field(data: Any, message: str) -> None:
    assert config_error(data) == message


def test_config_error_is_a_value_error_under_the_root() -> None:
    with pytest.raises(AmplifierError):
        MountPlan.from_dict({})
    with pytest.raises(ValueError, match="session: required"):
        MountPlan.from_dict({})


def test_a_second_provider_of_one_module_needs_an_instance_id() -> None:
    twice = minimal(providers=[{"module": "provider-openai"}, {"module": "provider-openai"}])

    assert config_error(twice) == (
        "providers[1].instance_id: required, 'provider-openai' is already used by providers[0]"
    )


def test_an_instance_id_may_not_repeat_either() -> None:
    clash = minimal(
        providers=[
            {"module": "provider-openai", "instance_id": "main"},
            {"module": "provider-anthropic", "instance_id": "main"},
        ]
    )

    assert config_error(clash).startswith("providers[1].instance_id: required, 'main'")


def test_the_same_tool_twice_is_allowed() -> None:
    plan = MountPlan.from_dict(minimal(tools=[{"module": "tool-bash"}, {"module": "tool-bash"}]))

    assert len(plan.tools) == 2


@pytest.mark.parametrize(
    ("name", "text", "kind"),
    [
        ("broken.yaml", "session: [unclosed\n", "YAML"),
        ("broken.toml", "[session\norchestrator = 1\n", "TOML"),
    ],
)
def test_unparsable_files_name_the_file_in_one_line(
    tmp_path: Path, name: str, text: str, kind: str
) -> None:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")

    with pytest.raises(ConfigError) as caught:
        MountPlan.from_file(path)

    message = str(caught.value)
    assert message.startswith(f"{path}: not valid {kind}: ")
    assert "\n" not in message


def test_a_valid_file_with_a_bad_plan_names_the_field(tmp_path: Path) -> None:
    path = tmp_path / "plan.yaml"
    path.write_text("session:\n  orchestrator: loop-basic\n", encoding="utf-8")

    with pytest.raises(ConfigError, match=r"^session\.context: required$"):
        MountPlan.from_file(path)


@pytest.mark.parametrize("name", ["plan.json", "plan"])
def test_an_unknown_suffix_is_refused_before_reading(tmp_path: Path, name: str) -> None:
    path = tmp_path / name  # never created: the suffix is checked first

    with pytest.raises(ConfigError, match="unknown plan format") as caught:
        MountPlan.from_file(path)
    assert str(path) in str(caught.value)
    assert "use .yaml, .yml or .toml" in str(caught.value)


def test_a_missing_file_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "absent.yaml"

    with pytest.raises(ConfigError, match="cannot read") as caught:
        MountPlan.from_file(path)
    assert str(path) in str(caught.value)


# -- round trip ------------------------------------------------------------------------------


def test_to_dict_round_trips_the_upstream_plan() -> None:
    plan = MountPlan.from_dict(UPSTREAM_PLAN)
    again = MountPlan.from_dict(plan.to_dict())

    assert again == plan
    assert again.session_settings == plan.session_settings
    assert again.to_dict() == plan.to_dict()


words = st.sampled_from(["loop", "basic", "tool", "bash", "provider", "x1"])
ids = st.builds("-".join, st.lists(words, min_size=1, max_size=3))
configs = st.dictionaries(
    words, st.none() | st.booleans() | st.integers() | st.lists(words, max_size=2), max_size=3
)
specs = st.builds(
    ModuleSpec,
    module=ids,
    source=st.none() | st.sampled_from(["./modules", "git+https://example.invalid/m"]),
    config=configs,
)


@st.composite
def plans(draw: st.DrawFn) -> MountPlan:
    providers = draw(st.lists(specs, max_size=3, unique_by=lambda s: s.module))
    return MountPlan(
        orchestrator=draw(specs),
        context=draw(specs),
        providers=tuple(providers),
        tools=tuple(draw(st.lists(specs, max_size=3))),
        hooks=tuple(draw(st.lists(specs, max_size=2))),
        agents=draw(st.dictionaries(ids, configs, max_size=2)),
    )


@settings(max_examples=examples(30))  # nested draws are slow; the shape space is small
@given(plans())
def test_to_dict_round_trips_through_from_dict(plan: MountPlan) -> None:
    assert MountPlan.from_dict(plan.to_dict()) == plan


# -- whatever a file holds, a bad one is one ConfigError naming it ---------------------------

DEEP = 20_000  # far past the interpreter's recursion limit

BAD_YAML = {
    "nested too deeply": "[" * DEEP + "]" * DEEP,
    "nested mappings too deeply": "{a: " * DEEP + "1" + "}" * DEEP,
    "an int tag on a word": "session: !!int abc\n",
    "a float tag on a word": "session: !!float abc\n",
    "a bool tag on a word": "session: !!bool maybe\n",
    "a timestamp tag on a word": "session: !!timestamp nope\n",
    "an impossible date": "session: 2020-13-45\n",
    "a python tag": "session: !!python/name:os.system\n",
    "undecodable binary": "session: !!binary 'a$b'\n",
    "a huge int": "session: !!int " + "9" * 5_000 + "\n",
    "a recursive alias": "session: &s {orchestrator: loop-basic, context: *s}\n",
    "aliases that expand to billions": (
        "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
        + "".join(
            f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 10)}]\n"
            for i in range(9)
        )
        + "session: {orchestrator: loop-basic, context: context-simple}\n"
        + "agents: {all: *j}\n"
    ),
    "two documents": "session: {}\n---\nsession: {}\n",
}

BAD_TOML = {
    "nested arrays too deeply": "a = " + "[" * DEEP + "]" * DEEP,
    "nested tables too deeply": "a = " + "{b = " * DEEP + "1" + "}" * DEEP,
    "a huge int": "a = " + "9" * 5_000,
}


def one_line_config_error(path: Path) -> str:
    """The ConfigError of ``MountPlan.from_file(path)``: one line that names the file."""
    try:
        MountPlan.from_file(path)
    except ConfigError as error:
        message = str(error)
    else:
        pytest.fail(f"{path.name}: no ConfigError")
    assert message.startswith(f"{path}: "), message
    assert "\n" not in message
    assert len(message) < 400 + len(str(path))
    return message


@pytest.mark.parametrize("text", BAD_YAML.values(), ids=BAD_YAML)
def test_any_unreadable_yaml_is_one_config_error_naming_the_file(tmp_path: Path, text: str) -> None:
    path = tmp_path / "plan.yaml"
    path.write_text(text, encoding="utf-8")

    assert one_line_config_error(path)


@pytest.mark.parametrize("text", BAD_TOML.values(), ids=BAD_TOML)
def test_any_unreadable_toml_is_one_config_error_naming_the_file(tmp_path: Path, text: str) -> None:
    path = tmp_path / "plan.toml"
    path.write_text(text, encoding="utf-8")

    assert one_line_config_error(path)


def test_nested_too_deeply_says_so(tmp_path: Path) -> None:
    path = tmp_path / "plan.yaml"
    path.write_text(BAD_YAML["nested too deeply"], encoding="utf-8")

    assert one_line_config_error(path) == f"{path}: not valid YAML: nested too deeply"


def test_aliases_are_not_expanded_without_bound(tmp_path: Path) -> None:
    path = tmp_path / "plan.yaml"
    path.write_text(BAD_YAML["aliases that expand to billions"], encoding="utf-8")

    assert "too large" in one_line_config_error(path)


def test_a_recursive_alias_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "plan.yaml"
    path.write_text(BAD_YAML["a recursive alias"], encoding="utf-8")

    assert "refers to itself" in one_line_config_error(path)


@pytest.mark.parametrize("name", ["plan.yaml", "plan.toml"])
def test_bytes_that_are_not_utf8_name_the_file_and_the_offset(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.write_bytes(b"session = 1\n\xff\xfe\n")

    assert one_line_config_error(path) == f"{path}: not UTF-8 text: byte 0xff at offset 12"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("- loop-basic\n", "expected a table, got a list"),
        ("just words\n", "expected a table, got a string"),
        ("", "empty"),
        ("# only a comment\n", "empty"),
        ("42\n", "expected a table, got int"),
    ],
)
def test_a_plan_that_is_not_a_table_names_the_file(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "plan.yaml"
    path.write_text(text, encoding="utf-8")

    assert one_line_config_error(path) == f"{path}: {problem}"


def test_a_byte_order_mark_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "plan.toml"
    path.write_bytes(b"\xef\xbb\xbf" + UPSTREAM_TOML.encode())

    assert MountPlan.from_file(path) == MountPlan.from_dict(UPSTREAM_PLAN)


def test_a_directory_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "plans.yaml"
    path.mkdir()

    assert "cannot read" in one_line_config_error(path)


@pytest.mark.parametrize("text", [*BAD_YAML.values(), "- x\n"], ids=[*BAD_YAML, "a list"])
def test_from_text_raises_only_config_errors(text: str) -> None:
    with pytest.raises(ConfigError, match=r"^plan\.yaml: "):
        MountPlan.from_text(text, suffix=".yaml", origin="plan.yaml")


@settings(max_examples=examples(200))
@given(st.binary(max_size=200), st.sampled_from([".yaml", ".toml"]))
def test_any_bytes_are_a_plan_or_a_config_error(data: bytes, suffix: str) -> None:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return
    try:
        MountPlan.from_text(text, suffix=suffix)
    except ConfigError as error:
        message = str(error)
    else:
        return
    assert "\n" not in message
