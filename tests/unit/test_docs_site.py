"""The docs site: its generated parts agree with the code, it shows no raw reST or escaped
pipes (``mkdocs build --strict`` fails on them), and its nav is in reading order."""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

from amplifier_anyio import events
from tiers import needs

ROOT = Path(__file__).resolve().parents[2]


def load_hook() -> ModuleType:
    path = ROOT / "docs" / "_hooks" / "events_reference.py"
    spec = importlib.util.spec_from_file_location("events_reference", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_event_reference_lists_every_event_once_and_who_emits_it() -> None:
    hook = load_hook()
    page = (ROOT / "docs" / "events.md").read_text(encoding="utf-8")
    rendered = hook.on_page_markdown(page)
    assert hook.MARKER not in rendered
    rows = [line for line in rendered.splitlines() if line.startswith("| `")]
    assert [row.split("`")[3] for row in rows] == list(events.ALL_EVENTS)
    for row in rows:
        event = row.split("`")[3]
        assert row.endswith("| yes |") == (event in events.EMITTED_EVENTS), row


def test_every_api_reference_page_names_a_public_package() -> None:
    pages = sorted((ROOT / "docs" / "reference").glob("*.md"))
    targets = [
        line.removeprefix("::: ").strip()
        for page in pages
        for line in page.read_text(encoding="utf-8").splitlines()
        if line.startswith("::: ")
    ]
    assert "amplifier_anyio" in targets
    assert "amplifier_anyio.kernel" in targets
    assert all(not part.startswith("_") for t in targets for part in t.split("."))


# -- what the site renders: Markdown, never raw reST ---------------------------------------

ROLE = re.compile(r":(?:py:)?(?:class|meth|func|attr|data|mod|exc|obj|const):`")


def docstrings(path: Path) -> Iterator[tuple[int, str]]:
    """``(line, text)`` of every docstring-like string statement of a source file (module,
    class, function and attribute docstrings)."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            yield node.lineno, node.value.value


def test_no_docstring_uses_a_rest_role() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{line}: {match.group(0)}"
        for path in sorted((ROOT / "src").rglob("*.py"))
        for line, text in docstrings(path)
        for match in ROLE.finditer(text)
    ]

    assert found == [], "write [`X`][amplifier_anyio.X] or `X`, not a reST role"


PLANTED_MODULE = '''\
"""A module for the docs test.

Raises {role} when it must.
"""


class Planted:
    """Nothing."""
'''

PLANTED_PAGE = """\
# Planted

| option | meaning |
|---|---|
| `--mode {cell}` | the mode |

::: planted
"""


def small_site(tmp_path: Path, *, role: str, cell: str) -> Path:
    """A site of one page rendering one module's docstring, with the project's hooks."""
    (tmp_path / "src").mkdir(parents=True)
    (tmp_path / "src" / "planted.py").write_text(PLANTED_MODULE.format(role=role))
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "index.md").write_text(PLANTED_PAGE.format(cell=cell))
    hooks = ROOT / "docs" / "_hooks"
    (tmp_path / "mkdocs.yml").write_text(
        "site_name: planted\n"
        "docs_dir: docs\n"
        "plugins:\n"
        "  - mkdocstrings:\n"
        "      handlers: {python: {paths: [src], options: {docstring_style: sphinx}}}\n"
        f"hooks:\n  - {hooks / 'raw_markup.py'}\n"
        "markdown_extensions: [tables]\n"
    )
    return tmp_path


def build(site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(site / "out")],
        cwd=site,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@needs("mkdocstrings")  # a site build (seconds)
def test_a_strict_build_fails_on_a_raw_role_or_an_escaped_pipe(tmp_path: Path) -> None:
    clean = build(small_site(tmp_path / "clean", role="`Planted`", cell="a or b"))
    planted = build(small_site(tmp_path / "planted", role=":class:`Planted`", cell="a\\|b"))

    assert clean.returncode == 0, clean.stderr
    assert planted.returncode != 0
    assert "index.md shows a reST role ':class:'" in planted.stderr
    assert "index.md shows an escaped pipe in the table cell '--mode a\\\\|b'" in planted.stderr


@needs("mkdocstrings")  # a site build (seconds)
def test_the_site_builds_strictly_and_its_reference_shows_no_role(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )

    assert done.returncode == 0, done.stderr
    pages = list((tmp_path / "site" / "reference").rglob("*.html"))
    assert len(pages) == len(list((ROOT / "docs" / "reference").glob("*.md")))
    for page in pages:
        assert ":class:" not in page.read_text(encoding="utf-8"), page
    kernel = (tmp_path / "site" / "reference" / "kernel" / "index.html").read_text("utf-8")
    assert 'href="../#amplifier_anyio.SessionError"' in kernel  # a cross-reference is a link


# -- the nav: reading order --------------------------------------------------------------------


def nav_pages(entries: list[Any], section: str = "") -> Iterator[tuple[str, str]]:
    """``(section, page)`` of every page of the nav, in order."""
    for entry in entries:
        (title, value), *_ = entry.items() if isinstance(entry, dict) else [(None, entry)]
        if isinstance(value, list):
            yield from nav_pages(value, section or str(title))
        else:
            yield section, str(value)


def test_the_nav_lists_every_page_once_in_reading_order() -> None:
    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))["nav"]
    pages = list(nav_pages(nav))
    files = sorted(str(path.relative_to(ROOT / "docs")) for path in (ROOT / "docs").rglob("*.md"))
    section_of = {page: section for section, page in pages}

    assert sorted(page for _, page in pages) == files  # every page, once
    assert pages[0] == ("Getting started", "index.md")
    assert [page for section, page in pages if section == "Getting started"][:2] == [
        "index.md",
        "cli.md",
    ]
    assert {section_of[p] for p in files if p.startswith("reference/")} == {"Reference"}
    assert pages[-1][0] == "Reference"
    assert section_of["hooks-approval.md"] == section_of["hooks.md"]
