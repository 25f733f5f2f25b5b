"""The package's metadata: what `pip install .` brings."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _names(requirements: list[str]) -> set[str]:
    return {re.split(r"[<>=!~;\[ ]", r, maxsplit=1)[0].lower() for r in requirements}


def test_trio_is_a_core_dependency() -> None:
    """README and docs run `anyio.run(main, backend="trio")` after `pip install .` alone."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]

    assert "trio" in _names(project["dependencies"])
