"""The command line as a newcomer runs it: the installed ``amplifier-anyio`` console script."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest


def console_script() -> str:
    """The path of ``amplifier-anyio`` beside this interpreter (the venv's), else on PATH."""
    beside = Path(sys.executable).parent / "amplifier-anyio"
    found = str(beside) if beside.exists() else shutil.which("amplifier-anyio")
    if found is None:
        pytest.fail("the amplifier-anyio console script is not installed")
    return found
