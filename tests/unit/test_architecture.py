"""The house's one import rule (docs/architecture.md), read from the source with ``ast``.

Every import counts: at module level, inside function bodies and under ``TYPE_CHECKING``.
A package may import its own modules and the packages of lower layers, never a higher
one; two packages of one layer never import each other. The layers, bottom to top, are
`LAYERS`; a top-level module or package missing from it fails the test, so a new one
must be given its place.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "amplifier_anyio"

LAYERS: tuple[frozenset[str], ...] = (
    frozenset({"errors", "events", "models", "config_schema", "_lazy", "__version__"}),
    frozenset({"interfaces"}),
    frozenset({"kernel"}),
    frozenset({"providers", "contexts", "lifecycle", "hooks"}),
    frozenset({"runtime"}),
    frozenset({"orchestrators", "tools", "executors", "testing"}),
    frozenset({"session"}),
    frozenset({"temporal", "mcp"}),
    frozenset({"bench"}),
    frozenset({"cli"}),
    frozenset({"__init__", "__main__"}),
)
"""The layers, bottom to top: the ground floor (values and names), the module protocols,
the kernel, the modules that need only the kernel, the runtime every orchestrator shares,
what is built on it, the application layer, what serves sessions (durable sessions on
Temporal, MCP: its client and `mcp serve`), the benchmark runner, the command line, and
the package's own front door."""

DEPRECATED_ALIASES = (
    "mcp_server",
    "mcp_tasks",
    "tools/mcp",
    "testing/cassette",
    "providers/pricing",
)
"""Old import paths kept for one release (packages under ``src/amplifier_anyio``): each
only re-exports its new home, so it is outside the rule."""


def deprecated(path: Path) -> bool:
    rel = path.relative_to(SRC).as_posix()
    return any(rel == f"{a}.py" or rel.startswith(f"{a}/") for a in DEPRECATED_ALIASES)


def is_top(name: str) -> bool:
    return (SRC / name).is_dir() or (SRC / f"{name}.py").exists()


def layer_of(name: str) -> int:
    for rank, names in enumerate(LAYERS):
        if name in names:
            return rank
    raise AssertionError(f"{name!r} has no layer: give it one in LAYERS and architecture.md")


def top_of(path: Path) -> str:
    rel = path.relative_to(SRC)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def imported_tops(path: Path) -> list[tuple[str, int]]:
    """The package-level names of this package that ``path`` imports, with their lines."""
    rel = path.relative_to(SRC).with_suffix("").parts
    package = list(rel[:-1])  # the importing module's own package, as a list of parts
    found: list[tuple[str, int]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                target = base + (node.module.split(".") if node.module else [])
                if not target:  # ``from . import x`` at the package's top
                    found.extend((alias.name, node.lineno) for alias in node.names)
                    continue
                found.append((target[0], node.lineno))
            elif node.module and node.module.split(".")[0] == "amplifier_anyio":
                parts = node.module.split(".")
                if len(parts) > 1:
                    found.append((parts[1], node.lineno))
                else:
                    found.extend((alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "amplifier_anyio" and len(parts) > 1:
                    found.append((parts[1], node.lineno))
    return found


def edges() -> dict[tuple[str, str], list[str]]:
    """(importer, imported) → where, between different top-level packages."""
    seen: dict[tuple[str, str], list[str]] = {}
    for path in sorted(SRC.rglob("*.py")):
        if deprecated(path):
            continue
        source = top_of(path)
        for target, line in imported_tops(path):
            if target != source and is_top(target):
                where = f"{path.relative_to(SRC)}:{line}"
                seen.setdefault((source, target), []).append(where)
    return seen


def test_every_package_has_a_layer() -> None:
    tops = {top_of(p) for p in SRC.rglob("*.py") if not deprecated(p)}
    for name in sorted(tops):
        layer_of(name)


def test_no_package_imports_one_above_it() -> None:
    upward = [
        f"{source} (layer {layer_of(source)}) imports {target} (layer {layer_of(target)}) "
        f"at {', '.join(where)}"
        for (source, target), where in sorted(edges().items())
        if layer_of(target) > layer_of(source)
    ]
    assert not upward, "\n".join(upward)


def test_no_two_packages_import_each_other() -> None:
    found = edges()
    mutual = sorted(
        f"{a} <-> {b}: {found[a, b][0]} and {found[b, a][0]}"
        for (a, b) in found
        if a < b and (b, a) in found
    )
    assert not mutual, "\n".join(mutual)


def test_packages_of_one_layer_do_not_import_each_other() -> None:
    sideways = [
        f"{source} imports {target} at {where[0]}"
        for (source, target), where in sorted(edges().items())
        if layer_of(source) == layer_of(target) and layer_of(source) > 0
    ]
    assert not sideways, "\n".join(sideways)


@pytest.mark.parametrize("path", sorted((SRC / "kernel").glob("*.py")), ids=lambda p: p.name)
def test_the_kernel_imports_only_the_ground_floor(path: Path) -> None:
    allowed = LAYERS[0] | LAYERS[1] | {"kernel"}
    above = [f"{t} (line {line})" for t, line in imported_tops(path) if t not in allowed]
    assert not above, f"kernel/{path.name} imports {', '.join(above)}"
