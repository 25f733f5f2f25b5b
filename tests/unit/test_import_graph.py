"""No import circle among the package's modules, counting the imports that hide one:
``TYPE_CHECKING`` blocks and imports inside functions (a circle there is still two
modules that cannot be understood, tested or moved apart)."""

from __future__ import annotations

import ast
from pathlib import Path

import amplifier_anyio

PACKAGE = Path(amplifier_anyio.__file__).parent
NAME = "amplifier_anyio"


def modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = (NAME, *path.relative_to(PACKAGE).with_suffix("").parts)
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def imported(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """Every package module ``name`` imports, wherever the import statement is."""
    base = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names if alias.name in known)
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                parts = base.split(".")
                parts = parts[: len(parts) - (node.level - 1)]
                module = ".".join([*parts, module] if module else parts)
            for alias in node.names:
                candidate = f"{module}.{alias.name}"
                targets.add(candidate if candidate in known else module)
    return {t for t in targets if t in known and t != name}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def package_edges(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Drop a package's imports of its own submodules (its ``__init__`` re-exports them,
    and importing a submodule always runs the package first: that is not a circle)."""
    return {
        name: {t for t in targets if not t.startswith(f"{name}.")}
        for name, targets in graph.items()
    }


def test_no_module_imports_itself_around_a_circle() -> None:
    known = modules()
    graph = package_edges({name: imported(name, path, known) for name, path in known.items()})
    assert circles(graph) == []


def test_the_check_finds_a_circle() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
