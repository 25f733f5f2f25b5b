"""A provider call reads top to bottom in one module (``runtime/_provider_call``).

The turn engine reaches the provider only through it; what it calls — building the
request, racing providers, asking one provider and relaying its stream — are leaves that
never import the engine or the path back.
"""

from __future__ import annotations

import ast
from pathlib import Path

import amplifier_anyio.runtime

RUNTIME = Path(amplifier_anyio.runtime.__file__).parent
LEAVES = ("_requests", "_race", "_streaming", "_prompt_cache")


def _imported(module: str) -> set[str]:
    """The runtime modules ``module`` imports, anywhere in it (``TYPE_CHECKING`` included)."""
    tree = ast.parse((RUNTIME / f"{module}.py").read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module is not None:
                found.add(node.module)
            else:
                found.update(alias.name for alias in node.names)
    return found


def test_the_engine_reaches_providers_only_through_the_provider_call() -> None:
    imported = _imported("_turn")
    assert "_provider_call" in imported
    assert not imported & {"_race", "_streaming", "_prompt_cache"}


def test_the_provider_call_owns_request_race_stream_and_response() -> None:
    assert {"_requests", "_race", "_streaming", "_prompt_cache"} <= _imported("_provider_call")


def test_the_leaves_never_call_back_up() -> None:
    for leaf in LEAVES:
        assert not _imported(leaf) & {"_turn", "_provider_call"}, leaf
