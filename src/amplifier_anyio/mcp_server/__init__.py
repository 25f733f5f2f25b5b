"""Deprecated: moved to `amplifier_anyio.mcp.serve`; this alias is removed in the next release.

A package, not a module file, so that version control follows the old file to its new
place. Importing it warns once and leaves the new module under the old name.
"""

from __future__ import annotations

import amplifier_anyio.mcp.serve as _moved
from amplifier_anyio._lazy import moved
from amplifier_anyio.mcp.serve import *  # noqa: F403 - the old path offers what the new one does

__all__ = _moved.__all__

moved(__name__, _moved, "import amplifier_anyio.mcp.serve")
