"""Deprecated: the cassette moved to the runtime (`amplifier_anyio.runtime`, its names
re-exported by `amplifier_anyio.testing`); this alias is removed in the next release.

A package, not a module file, so that version control follows the old file to its new
place. Importing it warns once and leaves the new module under the old name.
"""

from __future__ import annotations

import amplifier_anyio.runtime._cassette as _moved
from amplifier_anyio._lazy import moved
from amplifier_anyio.runtime._cassette import *  # noqa: F403 - the old path offers what the new one does

__all__ = _moved.__all__

moved(__name__, _moved, "import its names from amplifier_anyio.testing or amplifier_anyio.runtime")
