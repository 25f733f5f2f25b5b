"""The docs site's generated parts agree with the code (``mkdocs build --strict`` runs in CI)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from amplifier_anyio import events

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
