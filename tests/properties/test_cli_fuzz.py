"""Fuzz: whatever a plan file holds, ``validate`` and ``run`` end with a code, not a traceback.

Generated plan files — YAML and TOML token soup, the demo plan with its text cut and
spliced, random bytes, and structured plans around the demo plan with wrong types, unknown
keys, missing module ids and bad numbers, dumped to YAML — go through the commands
in-process. The exit code is 0, 1 (the turn itself failed: only for a plan that parses) or
2, no exception escapes, and no output holds a traceback.

``run`` uses the offline demo modules only: module ids are drawn from the built-in offline
ones and ids that exist nowhere, never a network provider, and a guard fails the example
if anything opens a socket. Durations in generated plans stay short or invalid, never
long: a valid plan may ask for an hour-long tool, and waiting for it proves nothing.

Examples per test follow the Hypothesis profile: ``ci`` runs 1 000 files through
``validate`` (500 files — the nine in ten that do not parse also go through ``run``, which
must refuse them alike — and 500 structured plans) and 600 structured plans through
``run``: about 1 050 files through ``run`` in all. Other profiles run their share
(``tiers.examples``).
"""

from __future__ import annotations

import copy
import math
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner, Result

from amplifier_anyio import ConfigError, MountPlan
from amplifier_anyio.cli import app
from tiers import examples

TEXT_EXAMPLES, PLAN_EXAMPLES, RUN_EXAMPLES = examples(500), examples(500), examples(600)

fuzz_settings = settings(suppress_health_check=[HealthCheck.too_slow], deadline=None)

OFFLINE = (
    "loop-basic",
    "loop-streaming",
    "context-simple",
    "context-persistent",
    "provider-scripted",
    "tool-demo",
)
NOWHERE = ("tool-dmeo", "provider-nowhere", "loop-nowhere", "x", "Tool Demo", "tool_demo")
NETWORK = ("provider-openai", "provider-anthropic")
MODULE_IDS = (*OFFLINE, *NOWHERE)
assert not set(MODULE_IDS) & set(NETWORK)

DEMO_YAML = """\
session:
  orchestrator: loop-basic
  context: {module: context-simple, config: {max_tokens: 100000}}
orchestrator:
  config: {max_iterations: 4}
providers:
  - module: provider-scripted
    config: {demo: true}
tools:
  - module: tool-demo
    config: {delay: 0}
"""

DEMO_TOML = """\
[session]
orchestrator = "loop-basic"
context = "context-simple"

[orchestrator.config]
max_iterations = 4

[[providers]]
module = "provider-scripted"
config = { demo = true }

[[tools]]
module = "tool-demo"
config = { delay = 0 }
"""

YAML_TOKENS = (
    *("session:", "orchestrator:", "context:", "providers:", "tools:", "hooks:", "agents:"),
    *("module:", "config:", "source:", "instance_id:", "metadata:", "max_iterations:"),
    *MODULE_IDS,
    *("\n", "\n  ", "\n    ", "- ", "{", "}", "[", "]", ", ", ": ", "'", '"', "#", "|", ">"),
    *("&a ", "*a", "&b ", "*b", "<<: *a", "? ", "---\n", "...\n", "%YAML 1.1\n", "%TAG ! x\n"),
    *("!!int ", "!!float ", "!!bool ", "!!binary ", "!!timestamp ", "!!set ", "!!omap "),
    *("!!str ", "!!null ", "!!map ", "!!seq ", "!!python/name:os.system ", "!custom "),
    *(".nan", ".inf", "-.inf", "-1", "0", "1e999", "99999999999999999999999", "0x1F", "0o17"),
    *("~", "null", "true", "no", "2020-13-45", "2001-12-14t21:59:43.10-05:00", "\t", "\\u00e9"),
)
TOML_TOKENS = (
    *("[session]", "[orchestrator.config]", "[[providers]]", "[[tools]]", "[context]"),
    *("orchestrator", "context", "module", "config", "source", "max_iterations", "delay"),
    *(f'"{module_id}"' for module_id in MODULE_IDS),
    *("\n", " = ", "=", "{", "}", "[", "]", ", ", ".", '"', "'", '"""', "'''", "#", "\\"),
    *("inf", "nan", "-inf", "-1", "0", "1e999", "99999999999999999999999", "0x1F", "true"),
    *("1979-05-27T07:32:00Z", "1979-13-45", "07:32:00", "\\u00e9", "\\U0001F600", "\t"),
)


def soup(tokens: tuple[str, ...]) -> st.SearchStrategy[str]:
    piece = st.sampled_from(tokens) | st.text(max_size=4)
    return st.lists(piece, max_size=40).map("".join)


@st.composite
def spliced(draw: st.DrawFn, text: str, tokens: tuple[str, ...]) -> str:
    """The demo plan with a few spans cut out or replaced: near-valid text."""
    for _ in range(draw(st.integers(1, 3))):
        start = draw(st.integers(0, len(text)))
        end = draw(st.integers(start, min(len(text), start + 12)))
        text = text[:start] + draw(st.sampled_from(("", *tokens))) + text[end:]
    return text


def encoded(suffix: str, text: st.SearchStrategy[str]) -> st.SearchStrategy[tuple[str, bytes]]:
    return text.map(lambda t: (suffix, t.encode("utf-8", "surrogatepass")))


plan_files = st.one_of(
    encoded(".yaml", soup(YAML_TOKENS)),
    encoded(".yaml", spliced(DEMO_YAML, YAML_TOKENS)),
    encoded(".toml", soup(TOML_TOKENS)),
    encoded(".toml", spliced(DEMO_TOML, TOML_TOKENS)),
    st.tuples(st.sampled_from([".yaml", ".yml", ".toml"]), st.binary(max_size=300)),
)

# -- structured plans around the demo plan ---------------------------------------------------

BAD_VALUES = st.sampled_from(
    [
        *(None, True, False, -1, 0, 10**30, -(10**30), math.nan, math.inf, -math.inf, 1.5),
        *("", "x", "-1", "nan", [], {}, [1], ["x"], {"a": 1}, {"module": 7}),
    ]
).map(copy.deepcopy)  # a fresh list or table each time: mutations never share one
# Durations: short, or invalid in every way — never long (see the module docstring).
DURATIONS = st.sampled_from([0, 0.0, 0.001, -1, math.nan, "x", "0", None, True, [], {}, [0]]).map(
    copy.deepcopy
)
UNKNOWN_KEYS = st.sampled_from(["colour", "modules", "Session", "tool", "", "config", "0"])


def entry(module_ids: st.SearchStrategy[str], config: st.SearchStrategy[Any]) -> Any:
    """A module entry: usually a table, sometimes a bare id or a value of the wrong type."""
    table = st.fixed_dictionaries(
        {"module": module_ids},
        optional={
            "config": config,
            "source": st.sampled_from(["./nowhere", "", "~nobody-here/x", "\x00"]) | BAD_VALUES,
            "instance_id": st.sampled_from(["main", "second"]) | BAD_VALUES,
            "colour": BAD_VALUES,
        },
    )
    return table | module_ids | BAD_VALUES


MODULES = st.sampled_from(MODULE_IDS) | BAD_VALUES
ANY_CONFIG = st.dictionaries(UNKNOWN_KEYS, BAD_VALUES, max_size=3) | BAD_VALUES


@st.composite
def demo_configs(draw: st.DrawFn, durations: str) -> Any:
    """Config of a demo module: its duration key short or invalid, plus bad extra keys."""
    config = {durations: draw(DURATIONS)}
    config.update(draw(st.dictionaries(UNKNOWN_KEYS, BAD_VALUES, max_size=2)))
    return draw(st.just(config) | BAD_VALUES)


@st.composite
def context_configs(draw: st.DrawFn, transcripts: Path) -> Any:
    keys = ("max_tokens", "compaction_threshold", "target_usage", "safety_margin", "path")
    config = draw(st.dictionaries(st.sampled_from(keys), BAD_VALUES, max_size=3))
    if "path" in config and isinstance(config["path"], str):
        config["path"] = str(transcripts / (config["path"] or "transcript.jsonl"))
    return config


@st.composite
def wild_plans(draw: st.DrawFn, transcripts: Path) -> dict[str, Any]:
    """Every section drawn on its own, often of the wrong type: mostly refused plans."""
    session: dict[str, Any] = {
        "orchestrator": draw(st.sampled_from(["loop-basic", "loop-streaming"]) | MODULES),
        "context": draw(
            st.sampled_from(["context-simple", "context-persistent"])
            | st.fixed_dictionaries(
                {"module": st.sampled_from(["context-simple", "context-persistent"]) | MODULES},
                optional={"config": context_configs(transcripts)},
            )
            | MODULES
        ),
    }
    session.update(draw(st.dictionaries(UNKNOWN_KEYS, BAD_VALUES, max_size=2)))
    iterations = st.sampled_from([4, -1, 0, 1]) | BAD_VALUES
    loop_config = st.fixed_dictionaries(
        {},
        optional={
            "max_iterations": iterations,
            "parallel_tools": BAD_VALUES,
            "max_parallel_tools": BAD_VALUES,
            "turn_timeout": BAD_VALUES,
            "tool_timeout": BAD_VALUES,
            "colour": BAD_VALUES,
        },
    )
    provider = st.fixed_dictionaries(
        {"module": st.just("provider-scripted"), "config": demo_configs("latency")},
        optional={"instance_id": st.sampled_from(["main", "second"]) | BAD_VALUES},
    ).map(lambda p: {**p, "config": {"demo": True, **p["config"]}} if _is_table(p["config"]) else p)
    tool = st.fixed_dictionaries({"module": st.just("tool-demo"), "config": demo_configs("delay")})
    plan: dict[str, Any] = {
        "session": draw(st.just(session) | BAD_VALUES),
        "orchestrator": draw(st.fixed_dictionaries({"config": loop_config}) | BAD_VALUES),
        "providers": draw(st.lists(provider | entry(MODULES, ANY_CONFIG), max_size=3) | BAD_VALUES),
        "tools": draw(st.lists(tool | entry(MODULES, ANY_CONFIG), max_size=3) | BAD_VALUES),
        "hooks": draw(st.lists(entry(MODULES, ANY_CONFIG), max_size=2) | BAD_VALUES),
        "agents": draw(st.dictionaries(UNKNOWN_KEYS, BAD_VALUES, max_size=2) | BAD_VALUES),
    }
    for key in draw(st.sets(st.sampled_from(sorted(plan)))):
        del plan[key]  # a missing section, a missing session
    plan.update(draw(st.dictionaries(UNKNOWN_KEYS, BAD_VALUES, max_size=2)))
    return plan


@st.composite
def demo_plans(draw: st.DrawFn, transcripts: Path) -> dict[str, Any]:
    """A valid variant of the demo plan: every module offline, every wait short."""
    contexts = st.sampled_from(
        [
            "context-simple",
            {"module": "context-simple", "config": {"max_tokens": 50_000}},
            {"module": "context-persistent", "config": {"path": str(transcripts / "t.jsonl")}},
        ]
    )
    loop_config = st.fixed_dictionaries(
        {"max_iterations": st.sampled_from([4, -1, 1, 2])},
        optional={
            "parallel_tools": st.booleans(),
            "max_parallel_tools": st.integers(1, 4),
            "turn_timeout": st.just(60),
        },
    )
    return {
        "session": {
            "orchestrator": draw(st.sampled_from(["loop-basic", "loop-streaming"])),
            "context": draw(contexts),
        },
        "orchestrator": {"config": draw(loop_config)},
        "providers": [{"module": "provider-scripted", "config": {"demo": True}}],
        "tools": draw(st.sampled_from([[{"module": "tool-demo", "config": {"delay": 0}}], []])),
    }


@st.composite
def mutated_demo_plans(draw: st.DrawFn, transcripts: Path) -> dict[str, Any]:
    """The demo plan with one to three places set wrong, removed or added to."""
    plan = draw(demo_plans(transcripts))
    for _ in range(draw(st.integers(1, 3))):
        places = list(_places(plan))
        container, key = draw(st.sampled_from(places))
        action = draw(st.sampled_from(["set", "set", "delete", "add"]))
        if action == "delete" and key is not None:
            del container[key]
        elif action == "add" or key is None:
            if isinstance(container, dict):
                container[draw(UNKNOWN_KEYS)] = draw(BAD_VALUES)
            else:
                container.append(draw(entry(MODULES, ANY_CONFIG)))
        elif key in ("delay", "latency"):
            container[key] = draw(DURATIONS)
        else:
            container[key] = draw(BAD_VALUES | st.sampled_from(MODULE_IDS))
    return plan


def _places(value: Any) -> Iterator[tuple[Any, Any]]:
    """``(container, key)`` for every value of a plan, and ``(container, None)`` per container."""
    if isinstance(value, dict):
        yield value, None
        for key, item in value.items():
            yield value, key
            yield from _places(item)
    elif isinstance(value, list):
        yield value, None
        for index, item in enumerate(value):
            yield value, index
            yield from _places(item)


def structured_plans(transcripts: Path) -> st.SearchStrategy[dict[str, Any]]:
    plans = st.one_of(
        demo_plans(transcripts),
        mutated_demo_plans(transcripts),
        mutated_demo_plans(transcripts),
        mutated_demo_plans(transcripts),
        wild_plans(transcripts),
    )
    return plans.map(_checked_offline)


def _checked_offline(plan: dict[str, Any]) -> dict[str, Any]:
    _check_offline(plan)
    return plan


def _is_table(value: Any) -> bool:
    return isinstance(value, dict)


def _check_offline(value: Any) -> None:
    """The guard: no generated plan names a module that would reach the network."""
    if isinstance(value, dict):
        assert value.get("module") not in NETWORK
        for item in value.values():
            _check_offline(item)
    elif isinstance(value, list):
        for item in value:
            _check_offline(item)
    else:
        assert value not in NETWORK


def _no_long_waits(value: Any) -> None:
    """A tool-demo without a delay would sleep its default 0.3 s a call: give it none."""
    if isinstance(value, dict):
        if value.get("module") == "tool-demo":
            config = value.setdefault("config", {})
            if isinstance(config, dict):
                config.setdefault("delay", 0)
        for item in value.values():
            _no_long_waits(item)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            if item == "tool-demo":
                value[index] = {"module": "tool-demo", "config": {"delay": 0}}
            _no_long_waits(item)


# -- the harness -----------------------------------------------------------------------------


class Workspace:
    """A directory for the generated files, HOME and the cwd, and the network guard."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.transcripts = root / "transcripts"
        self.transcripts.mkdir()
        self.connections: list[Any] = []

    def write(self, suffix: str, data: bytes) -> Path:
        path = self.root / f"plan{suffix}"
        path.write_bytes(data)
        return path


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workspace]:
    space = Workspace(tmp_path_factory.mktemp("fuzz"))

    def refuse(sock: socket.socket, address: Any) -> None:
        space.connections.append(address)
        raise OSError("the fuzz test allows no network")

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HOME", str(space.root))  # context-persistent's default path
        patch.chdir(space.root)
        patch.setattr(socket.socket, "connect", refuse)
        patch.setattr(socket.socket, "connect_ex", refuse)
        yield space
    assert space.connections == []


def invoke(args: list[str]) -> Result:
    return CliRunner().invoke(app, args)


def check(result: Result, path: Path, *, allowed: tuple[int, ...]) -> None:
    # An exception escaping the command is a crash whatever the exit code says.
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        f"{type(result.exception).__name__}: {result.exception}\n{path.read_bytes()[:500]!r}"
    )
    assert result.exit_code in allowed, result.output
    event(f"exit {result.exit_code}")
    assert "Traceback" not in result.output, result.output
    if result.exit_code == 2:
        lines = result.stderr.splitlines()
        assert lines, result.output
        assert all(line.startswith(("error: ", "warning: ")) for line in lines), result.stderr
    if result.exit_code == 1:
        # Only a turn fails with 1: the plan itself must have parsed.
        MountPlan.from_file(path)


def parses(path: Path) -> bool:
    try:
        MountPlan.from_file(path)
    except ConfigError:
        return False
    return True


# -- the properties --------------------------------------------------------------------------


@settings(fuzz_settings, max_examples=TEXT_EXAMPLES)
@given(plan_files)
def test_validate_any_file(workspace: Workspace, plan_file: tuple[str, bytes]) -> None:
    path = workspace.write(*plan_file)

    result = invoke(["validate", str(path)])

    check(result, path, allowed=(0, 2))
    if result.exit_code == 0:
        assert parses(path)
    elif not parses(path):
        # A file that does not parse never starts a session: cheap to run, and it must
        # fail the same way. (A text plan that parses is not run: it might name a long
        # tool delay, or a network provider.)
        ran = invoke(["run", "--plan", str(path), "hi"])
        check(ran, path, allowed=(2,))
        assert ran.stderr == result.stderr


@settings(fuzz_settings, max_examples=PLAN_EXAMPLES)
@given(st.data())
def test_validate_any_structured_plan(workspace: Workspace, data: st.DataObject) -> None:
    plan = data.draw(structured_plans(workspace.transcripts))
    path = workspace.write(".yaml", yaml.safe_dump(plan, allow_unicode=True).encode())

    result = invoke(["validate", str(path)])

    check(result, path, allowed=(0, 2))


@settings(fuzz_settings, max_examples=RUN_EXAMPLES)
@given(
    st.data(),
    st.sampled_from(["asyncio", "trio"]),
    st.booleans(),
)
def test_run_any_structured_plan_offline(
    workspace: Workspace, data: st.DataObject, backend: str, events: bool
) -> None:
    plan = data.draw(structured_plans(workspace.transcripts))
    _no_long_waits(plan)
    path = workspace.write(".yaml", yaml.safe_dump(plan, allow_unicode=True).encode())
    args = ["run", "--backend", backend, "--plan", str(path)]

    result = invoke([*args, *(["--events"] if events else []), "count my words"])

    check(result, path, allowed=(0, 1, 2))
    assert workspace.connections == []
