"""Every ```python block of README.md and docs/*.md runs, so documented examples cannot rot.

Each block is a complete program: it runs on its own in a fresh interpreter, in an empty
working directory, with warnings as errors and a time limit. A block that is deliberately
not runnable (a fragment, or one that needs a server or a package we do not install) is
marked by a ``<!-- not-run -->`` line right before its opening fence. A block that needs
a package of an extra (its text says which: ``pip install '.[mcp]'``) is marked by a
``<!-- needs: EXTRA ... -->`` line there instead: it runs here (the test extras bring those
packages) and is left out of the fresh ``pip install .`` run (test_docs_fresh_install.py).
The blocks are independent, so they all start at once and each test reads its own
block's outcome.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
import tomllib
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOT_RUN = "<!-- not-run -->"
NEEDS = re.compile(r"<!-- needs: ([\w\- ]+) -->")
TIME_LIMIT = 60.0  # seconds per block, far above what any example needs


class Example(NamedTuple):
    """One fenced python block: where it is, its code, whether it is marked not-run, and
    the extras it needs beyond ``pip install .`` (``<!-- needs: ... -->``)."""

    where: str
    code: str
    runnable: bool
    needs: tuple[str, ...] = ()


def extract(text: str, origin: str) -> list[Example]:
    """The ```python blocks of a Markdown text, in order."""
    examples: list[Example] = []
    lines = text.splitlines()
    previous = ""  # the last non-blank line before the current one
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.strip() == "```python":
            indent = line[: len(line) - len(line.lstrip())]
            start = i + 1
            end = start
            while end < len(lines) and lines[end].strip() != "```":
                end += 1
            if end == len(lines):
                msg = f"{origin}:{i + 1}: a ```python block is never closed"
                raise ValueError(msg)
            body = [code.removeprefix(indent) for code in lines[start:end]]
            code = textwrap.dedent("\n".join(body)) + "\n"
            needs = NEEDS.fullmatch(previous.strip())
            extras = tuple(needs.group(1).split()) if needs else ()
            examples.append(Example(f"{origin}:{i + 1}", code, previous.strip() != NOT_RUN, extras))
            previous, i = "```", end + 1
            continue
        if line.strip():
            previous = line
        i += 1
    return examples


def documented_examples() -> list[Example]:
    files = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    found: list[Example] = []
    for path in files:
        found.extend(extract(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT))))
    return found


EXAMPLES = documented_examples()
RUNNABLE = [example for example in EXAMPLES if example.runnable]


class Outcome(NamedTuple):
    returncode: int | None  # None: the time limit passed
    output: str


def run_example(
    example: Example,
    workdir: Path,
    python: str = sys.executable,
    env: Mapping[str, str] | None = None,
) -> Outcome:
    """Run one block as a script of its own, with ``python``, in the new ``workdir``
    (``env``: the environment, else this process's)."""
    workdir.mkdir()
    script = workdir / "example.py"
    script.write_text(example.code, encoding="utf-8")
    try:
        done = subprocess.run(
            [python, "-W", "error", str(script)],
            cwd=workdir,
            capture_output=True,
            text=True,
            timeout=TIME_LIMIT,
            check=False,
            env=env,
        )
    except subprocess.TimeoutExpired as exc:
        return Outcome(None, f"{exc.stdout or ''}{exc.stderr or ''}")
    return Outcome(done.returncode, done.stdout + done.stderr)


def run_examples(
    examples: list[Example],
    root: Path,
    python: str = sys.executable,
    env: Mapping[str, str] | None = None,
) -> dict[str, Outcome]:
    """Run every block at once (each in its own directory under ``root``), by place."""
    workdirs = [root / f"block-{n}" for n in range(len(examples))]
    count = len(examples)
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = pool.map(run_example, examples, workdirs, [python] * count, [env] * count)
        return {example.where: result for example, result in zip(examples, results, strict=True)}


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> Mapping[str, Outcome]:
    return run_examples(RUNNABLE, tmp_path_factory.mktemp("docs-examples"))


@pytest.mark.slow
@pytest.mark.parametrize("example", RUNNABLE, ids=[example.where for example in RUNNABLE])
def test_documented_example_runs(outcomes: Mapping[str, Outcome], example: Example) -> None:
    outcome = outcomes[example.where]

    assert outcome.returncode is not None, f"{example.where}: over {TIME_LIMIT}s\n{outcome.output}"
    assert outcome.returncode == 0, f"{example.where} failed:\n{outcome.output}"


def test_the_readme_and_the_session_guide_have_runnable_examples() -> None:
    places = {example.where.split(":")[0] for example in RUNNABLE}

    assert {"README.md", "docs/session.md"} <= places


# -- the extractor itself --------------------------------------------------------------------

SAMPLE = """\
# Title

```python
print("one")
```

Text, then a marked block:

<!-- not-run -->

```python
import a_package_we_do_not_have
```

- in a list:

  ```python
  if True:
      print("indented")
  ```

```sh
echo not python
```
"""


def test_extract_finds_python_blocks_and_honours_the_marker() -> None:
    examples = extract(SAMPLE, "sample.md")

    assert [(e.where, e.runnable) for e in examples] == [
        ("sample.md:3", True),
        ("sample.md:11", False),
        ("sample.md:17", True),
    ]
    assert examples[0].code == 'print("one")\n'
    assert examples[2].code == 'if True:\n    print("indented")\n'


def test_a_needs_marker_names_the_extras_of_a_runnable_block() -> None:
    text = "<!-- needs: mcp otel -->\n```python\nx = 1\n```\n```python\ny = 2\n```\n"

    assert [(e.runnable, e.needs) for e in extract(text, "t.md")] == [
        (True, ("mcp", "otel")),
        (True, ()),
    ]


def test_every_needed_extra_is_one_of_the_package() -> None:
    """A block's ``needs`` names extras a reader can install: ``pip install '.[NAME]'``."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    extras = set(project["optional-dependencies"])

    assert {need for example in EXAMPLES for need in example.needs} <= extras


def test_a_marker_applies_only_to_the_next_block() -> None:
    text = "<!-- not-run -->\n```python\nx = 1\n```\n```python\ny = 2\n```\n"

    assert [e.runnable for e in extract(text, "t.md")] == [False, True]


def test_an_unclosed_block_is_reported() -> None:
    with pytest.raises(ValueError, match=r"t\.md:2: a ```python block is never closed"):
        extract("text\n```python\nprint()\n", "t.md")
