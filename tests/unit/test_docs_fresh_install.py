"""Every documented example runs after the README's first command alone (full tier).

The README tells a new user to run ``python3 -m venv .venv && .venv/bin/pip install .``
and then ``amplifier-anyio run "..."``. This builds that venv once per test session (from
the checkout, no extras: network to PyPI for the core dependencies), runs the README's
own command in it, and runs every runnable ```python block of README.md and docs/ with
its interpreter — the blocks and the runner of ``test_docs_examples`` — except those
marked ``<!-- needs: EXTRA -->`` (their text tells the reader to ``pip install
'.[EXTRA]'``). A block that imports a package only an extra brings, unmarked, fails here
while passing there: fix the example (or mark what it needs), or the packaging when a core
dependency is missing — never this test.
"""

from __future__ import annotations

import fcntl
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest
from test_docs_examples import RUNNABLE, Example, Outcome, extract, run_examples

ROOT = Path(__file__).resolve().parents[2]
INSTALL_LIMIT = 900.0  # seconds for `pip install .` (the core dependencies from PyPI)
BIN = "Scripts" if os.name == "nt" else "bin"

pytestmark = [pytest.mark.slow, pytest.mark.timeout(INSTALL_LIMIT + 300)]


def clean_env() -> dict[str, str]:
    """This process's environment without what would put another install on the path
    (the checkout's ``src`` through ``PYTHONPATH``, the test venv)."""
    leaks = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV")
    return {key: value for key, value in os.environ.items() if key not in leaks}


def readme_first_command() -> list[str]:
    """The README's first shell command, split at ``&&``: the fresh-machine one."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    match = re.search(r"^```sh\n(.*?)\n```", text, flags=re.MULTILINE | re.DOTALL)
    assert match is not None, "README.md has no ```sh block"
    return [part.strip() for part in match.group(1).split("&&")]


@pytest.fixture(scope="session")
def fresh_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``python -m venv`` + ``pip install <checkout>``: one per test session.

    Under pytest-xdist the workers share the run's base directory and a file lock: the
    first builds the venv, the others wait for it and use it."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # the run's directory, the same for every worker
    root = base / "fresh-install"
    root.mkdir(exist_ok=True)
    venv, done = root / "venv", root / "installed"
    with (root / "lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            subprocess.run(
                [sys.executable, "-m", "venv", str(venv)], check=True, timeout=120, env=clean_env()
            )
            install = subprocess.run(
                [str(venv / BIN / "python"), "-m", "pip", "install", "--quiet", str(ROOT)],
                capture_output=True,
                text=True,
                timeout=INSTALL_LIMIT,
                check=False,
                env=clean_env(),
            )
            assert install.returncode == 0, f"pip install . failed:\n{install.stderr}"
            done.write_text("ok\n", encoding="utf-8")
    return venv


CORE = [example for example in RUNNABLE if not example.needs]
"""The blocks a reader runs after ``pip install .`` alone (the others say which extra
they need: ``<!-- needs: ... -->`` and the text around them)."""


@pytest.fixture(scope="module")
def fresh_outcomes(
    fresh_venv: Path, tmp_path_factory: pytest.TempPathFactory
) -> Mapping[str, Outcome]:
    root = tmp_path_factory.mktemp("fresh-examples")
    return run_examples(CORE, root, str(fresh_venv / BIN / "python"), clean_env())


def test_the_readme_first_command_installs_the_package_alone() -> None:
    venv, install, run = readme_first_command()

    assert venv == "python3 -m venv .venv"
    assert install == ".venv/bin/pip install ."  # no extras: what this module installs
    assert run.startswith(".venv/bin/amplifier-anyio run ")


def test_the_readme_first_command_runs_its_turn(fresh_venv: Path, tmp_path: Path) -> None:
    *_, run = readme_first_command()
    program, *arguments = shlex.split(run)
    command = [str(fresh_venv / BIN / Path(program).name), *arguments]

    done = subprocess.run(
        command,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=clean_env(),
    )

    assert done.returncode == 0, f"{run}:\n{done.stdout}{done.stderr}"
    assert done.stdout.strip(), f"{run} printed nothing:\n{done.stderr}"


@pytest.mark.parametrize("example", CORE, ids=[example.where for example in CORE])
def test_documented_example_runs_after_pip_install_dot(
    fresh_outcomes: Mapping[str, Outcome], example: Example
) -> None:
    outcome = fresh_outcomes[example.where]

    assert outcome.returncode is not None, f"{example.where}: over the time limit\n{outcome.output}"
    assert outcome.returncode == 0, (
        f"{example.where} fails after `pip install .` alone (a test-only package?):\n"
        f"{outcome.output}"
    )


def test_a_block_that_needs_a_test_extra_fails_in_the_fresh_venv(
    fresh_venv: Path, tmp_path: Path
) -> None:
    """The check has teeth: hypothesis (the test extra) is not in the fresh venv."""
    [block] = extract("```python\nimport hypothesis\n```\n", "probe.md")

    python = str(fresh_venv / BIN / "python")
    [outcome] = run_examples([block], tmp_path, python, clean_env()).values()

    assert outcome.returncode != 0
    assert "No module named 'hypothesis'" in outcome.output


def test_the_fresh_venv_runs_its_own_install(fresh_venv: Path, tmp_path: Path) -> None:
    """Not the checkout's ``src`` (which a ``PYTHONPATH`` would put first)."""
    done = subprocess.run(
        [
            str(fresh_venv / BIN / "python"),
            "-c",
            "import amplifier_anyio; print(amplifier_anyio.__file__)",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env=clean_env(),
    )

    assert Path(done.stdout.strip()).is_relative_to(fresh_venv)
