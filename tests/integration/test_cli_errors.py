"""Bad input gets one clear line: bad plan files, session start-up failures, bench output paths.

The commands run in-process (typer's CliRunner) on the offline demo modules; every failure
must be exit code 2 and one ``error: …`` line on stderr, never a traceback or an exception
escaping the command.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from benchmarks import extension
from typer.testing import CliRunner, Result

from amplifier_anyio.cli import app
from tiers import needs

DEEP = 20_000

BILLION_LAUGHS = (
    "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
    + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 10)}]\n" for i in range(9)
    )
    + "session: {orchestrator: loop-basic, context: context-simple}\n"
    + "agents: {all: *j}\n"
)

BAD_PLANS: dict[str, tuple[str, bytes, str]] = {
    # id: (file name, content, the problem after "error: <path>: ")
    "deep yaml": ("plan.yaml", b"[" * DEEP + b"]" * DEEP, "not valid YAML: nested too deeply"),
    "deep toml": ("plan.toml", b"a = " + b"[" * DEEP + b"]" * DEEP, "not valid TOML: nested"),
    "an int tag": ("plan.yaml", b"session: !!int abc\n", "not valid YAML: a value could not"),
    "a timestamp tag": ("plan.yaml", b"x: !!timestamp nope\n", "not valid YAML: a value"),
    "a bool tag": ("plan.yaml", b"x: !!bool maybe\n", "not valid YAML: a value could not"),
    "bad base64": ("plan.yaml", b"x: !!binary 'a$b'\n", "not valid YAML: failed to decode"),
    "a python tag": ("plan.yaml", b"x: !!python/name:os.system\n", "not valid YAML: could"),
    "a recursive alias": ("plan.yaml", b"session: &s {context: *s}\n", "refers to itself"),
    "an alias bomb": ("plan.yaml", BILLION_LAUGHS.encode(), "too large"),
    "latin-1 bytes": ("plan.toml", b"[session]\norchestrator = '\xe9'\n", "not UTF-8 text"),
    "a list": ("plan.yaml", b"- loop-basic\n", "expected a table, got a list"),
    "an empty file": ("plan.yml", b"", "empty"),
    "a number": ("plan.yaml", b"42\n", "expected a table, got int"),
}


def invoke(*args: str) -> Result:
    return CliRunner().invoke(app, list(args))


def one_line_error(result: Result) -> str:
    """The single stderr line of a failed command, checked to be a clean exit 2."""
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    assert "Traceback" not in result.output
    assert result.exit_code == 2, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    return " ".join(lines[0].split())


# -- bad plan files --------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["run", "validate"])
@pytest.mark.parametrize(("name", "content", "problem"), BAD_PLANS.values(), ids=BAD_PLANS)
def test_a_bad_plan_file_is_one_line_naming_it(
    tmp_path: Path, command: str, name: str, content: bytes, problem: str
) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    args = ["run", "--plan", str(path), "hi"] if command == "run" else ["validate", str(path)]

    message = one_line_error(invoke(*args))

    assert message.startswith(f"error: {path}: {problem}"), message


def test_a_plan_path_that_is_a_directory_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "plan.yaml"
    path.mkdir()

    message = one_line_error(invoke("run", "--plan", str(path), "hi"))

    assert message.startswith(f"error: {path}: cannot read")


# -- failures while the session starts -------------------------------------------------------

RAISING_MOUNT = """\
async def mount(coordinator, config):
    raise {error}
"""


def plan_file(directory: Path, session: str, **modules: str) -> Path:
    """A demo plan with the given ``session`` line; ``modules`` become source packages."""
    for module_id, code in modules.items():
        package = directory / ("amplifier_module_" + module_id.replace("-", "_"))
        package.mkdir()
        (package / "__init__.py").write_text(code, encoding="utf-8")
    path = directory / "plan.yaml"
    path.write_text(
        f"session: {session}\n"
        "providers: [{module: provider-scripted, config: {demo: true}}]\n"
        "tools: [{module: tool-demo, config: {delay: 0}}]\n",
        encoding="utf-8",
    )
    return path


@pytest.mark.parametrize(
    ("error", "shown"),
    [
        ('RuntimeError("boom at mount")', "RuntimeError: boom at mount"),
        ('KeyError("model")', "KeyError: 'model'"),
        ('ExceptionGroup("mounting", [OSError("disk\\nfull")])', "OSError: disk full"),
    ],
)
@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_an_orchestrator_whose_mount_raises_is_one_line_naming_it(
    tmp_path: Path, backend: str, error: str, shown: str
) -> None:
    module = f"loop-boom-{uuid.uuid4().hex[:8]}"  # imported modules stay in sys.modules
    session = (
        f"{{orchestrator: {{module: {module}, source: '{tmp_path}'}}, context: context-simple}}"
    )
    path = plan_file(tmp_path, session, **{module: RAISING_MOUNT.format(error=error)})

    message = one_line_error(invoke("run", "--backend", backend, "--plan", str(path), "hi"))

    assert message == f"error: orchestrator '{module}': {shown}"


def test_a_context_config_of_the_wrong_type_names_the_context(tmp_path: Path) -> None:
    context = "{module: context-simple, config: {max_tokens: many}}"
    path = plan_file(tmp_path, f"{{orchestrator: loop-basic, context: {context}}}")

    message = one_line_error(invoke("run", "--plan", str(path), "hi"))

    assert message == (
        "error: context 'context-simple': "
        "context-simple.max_tokens: expected an integer, got 'many'"
    )


def test_a_context_path_that_is_a_directory_names_the_context(tmp_path: Path) -> None:
    folder = tmp_path / "transcript"
    folder.mkdir()
    context = f"{{module: context-persistent, config: {{path: '{folder}'}}}}"
    path = plan_file(tmp_path, f"{{orchestrator: loop-basic, context: {context}}}")

    message = one_line_error(invoke("run", "--plan", str(path), "hi"))

    assert message == (
        f"error: context 'context-persistent': context-persistent.path: {folder} is a directory"
    )


def test_an_orchestrator_that_does_not_import_is_one_line(tmp_path: Path) -> None:
    module = f"loop-broken-{uuid.uuid4().hex[:8]}"
    session = (
        f"{{orchestrator: {{module: {module}, source: '{tmp_path}'}}, context: context-simple}}"
    )
    path = plan_file(tmp_path, session, **{module: "import not_a_module_anywhere\n"})

    message = one_line_error(invoke("run", "--plan", str(path), "hi"))

    assert message.startswith(f"error: module '{module}' could not be loaded: ")


def test_a_bad_orchestrator_config_names_the_orchestrator(tmp_path: Path) -> None:
    path = plan_file(tmp_path, "{orchestrator: loop-basic, context: context-simple}")
    path.write_text(
        path.read_text(encoding="utf-8") + "orchestrator: {config: {max_iterations: lots}}\n",
        encoding="utf-8",
    )

    message = one_line_error(invoke("run", "--plan", str(path), "hi"))

    assert message == (
        "error: orchestrator 'loop-basic': loop-basic.max_iterations: expected an integer, "
        "got 'lots'"
    )


@pytest.mark.parametrize("key", ["turn_timeout", "tool_timeout"])
@pytest.mark.parametrize("value", [".nan", ".inf", "-1"])
def test_a_timeout_that_is_not_a_finite_positive_number_is_one_line(
    tmp_path: Path, key: str, value: str
) -> None:
    path = plan_file(tmp_path, "{orchestrator: loop-basic, context: context-simple}")
    path.write_text(
        path.read_text(encoding="utf-8") + f"orchestrator: {{config: {{{key}: {value}}}}}\n",
        encoding="utf-8",
    )

    for command in (("run", "--plan", str(path), "hi"), ("validate", str(path))):
        message = one_line_error(invoke(*command))
        assert f"loop-basic.{key}" in message, message


def test_a_misspelt_required_tool_fails_the_start_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "plan.yaml"
    path.write_text(
        "session: {orchestrator: loop-basic, context: context-simple}\n"
        "providers: [{module: provider-scripted, config: {demo: true}}]\n"
        "tools: [{module: tool-dmeo}]\n",
        encoding="utf-8",
    )

    result = invoke("run", "--plan", str(path), "count my words")

    assert result.exit_code == 2, result.output
    [line] = result.stderr.splitlines()
    assert line.startswith("error: module 'tool-dmeo' not found (tried: ")


def test_a_misspelt_tool_is_one_warning_and_the_turn_still_answers(tmp_path: Path) -> None:
    path = tmp_path / "plan.yaml"
    path.write_text(
        "session: {orchestrator: loop-basic, context: context-simple}\n"
        "providers: [{module: provider-scripted, config: {demo: true}}]\n"
        "tools: [{module: tool-dmeo, optional: true}]\n",  # max_iterations unbounded
        encoding="utf-8",
    )

    result = invoke("run", "--plan", str(path), "count my words")

    assert result.exit_code == 0, result.output
    [warning] = result.stderr.splitlines()
    assert warning.startswith("warning: tool 'tool-dmeo' not loaded: module 'tool-dmeo' not found")
    assert "word_count" in result.stdout


# -- bench output paths ----------------------------------------------------------------------

BENCH = ["bench", "--size", "2", "--repeats", "1", "--suite", "fanout", "--backend", "asyncio"]


@pytest.mark.slow  # a measured run of the benchmark
def test_bench_json_into_a_missing_folder_creates_it(tmp_path: Path) -> None:
    path = tmp_path / "out" / "runs" / "bench.json"

    result = invoke(*BENCH, "--json", str(path))

    assert result.exit_code == 0, result.output
    assert json.loads(path.read_text(encoding="utf-8"))["backends"] == ["asyncio"]


@pytest.mark.parametrize("option", ["--json", pytest.param("--plot", marks=needs("matplotlib"))])
@pytest.mark.parametrize("where", ["under a file", "a folder"])
def test_bench_output_that_cannot_be_written_is_one_line_before_measuring(
    tmp_path: Path, option: str, where: str
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("", encoding="utf-8")
    path = blocker / "out.png" if where == "under a file" else tmp_path

    result = invoke(*BENCH, option, str(path))

    message = one_line_error(result)
    assert message.startswith(f"error: {option} {path}: ")
    assert result.stdout == ""  # refused before minutes of measuring, not after


@needs("matplotlib")
def test_bench_plot_into_a_missing_folder_creates_it(tmp_path: Path) -> None:
    path = tmp_path / "plots" / "fanout.png"

    # the plot is the checkout's (benchmarks/), as `python -m benchmarks` runs it
    result = CliRunner().invoke(app, [*BENCH, "--plot", str(path)], obj=extension())

    assert result.exit_code == 0, result.output
    assert path.read_bytes().startswith(b"\x89PNG")


@needs("matplotlib")
def test_bench_plot_in_an_unknown_format_is_one_line_before_measuring(tmp_path: Path) -> None:
    path = tmp_path / "fanout.docx"

    result = invoke(*BENCH, "--plot", str(path))

    assert one_line_error(result).startswith(f"error: --plot {path}: ")
    assert result.stdout == ""


# -- events ----------------------------------------------------------------------------------


def test_events_print_a_prompt_with_square_brackets_as_it_is() -> None:
    wide = {"COLUMNS": "1000"}  # one event a line
    result = CliRunner().invoke(app, ["run", "--events", "what does [/bold] mean"], env=wide)

    assert result.exit_code == 0, result.output
    assert "error" not in result.stderr  # rich took "[/bold]" for markup: the hook failed
    submitted = [line for line in result.stderr.splitlines() if " prompt:submit " in line]
    assert len(submitted) == 1
    assert "[/bold]" in submitted[0]


# -- bad usage: the project's one line, never Typer's box ------------------------------------

USAGE_ERRORS: dict[str, tuple[list[str], str]] = {
    "a missing argument": (
        ["run"],
        "error: missing argument 'PROMPT' — try 'amplifier-anyio run --help'",
    ),
    "an unknown option": (
        ["run", "--nope", "hi"],
        "error: no such option: --nope",
    ),
    "an unknown command": (
        ["nope"],
        "error: no such command 'nope' — try 'amplifier-anyio --help'",
    ),
    "an unknown option before the command": (
        ["--nope"],
        "error: no such option: --nope — try 'amplifier-anyio --help'",
    ),
    "an option without its value": (
        ["run", "--plan"],
        "error: option '--plan' requires an argument",
    ),
    "an extra argument": (
        ["run", "one", "two"],
        "error: got unexpected extra argument(s) (two) — try 'amplifier-anyio run --help'",
    ),
    "a value that is not a number": (
        ["bench", "--size", "many"],
        "error: invalid value for '--size': ",
    ),
    "a number out of range": (
        ["bench", "--repeats", "0"],
        "error: invalid value for '--repeats': ",
    ),
    "a sub-command's missing argument": (
        ["sessions", "rm"],
        "error: missing argument 'ID' — try 'amplifier-anyio sessions rm --help'",
    ),
    "an unknown sub-command": (
        ["sessions", "nope"],
        "error: no such command 'nope' — try 'amplifier-anyio sessions --help'",
    ),
    "an unknown option of a sub-command": (
        ["mcp", "serve", "--nope"],
        "error: no such option: --nope — try 'amplifier-anyio mcp serve --help'",
    ),
    "a bad backend for run": (
        ["run", "--backend", "curio", "hi"],
        "error: --backend: must be one of asyncio, trio, not 'curio'",
    ),
    "a bad backend for chat": (
        ["chat", "--backend", "curio"],
        "error: --backend: must be one of asyncio, trio, not 'curio'",
    ),
}


@pytest.mark.parametrize(("args", "message"), USAGE_ERRORS.values(), ids=USAGE_ERRORS)
def test_bad_usage_is_one_line_and_exit_2(args: list[str], message: str) -> None:
    result = invoke(*args)

    assert one_line_error(result).startswith(message)
    assert "Usage:" not in result.output
    assert "╭" not in result.output  # Typer's error box
    assert result.stdout == ""
