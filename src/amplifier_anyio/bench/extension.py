"""What a checkout's ``benchmarks`` package adds to a run: suites, fan-out rows, tables, a plot.

The wheel measures the fan-out against the task-group floor, ``HookRegistry.emit``, the tool
batch and compaction. The rest of the benchmark — the ``asyncio.gather`` floor, the peers,
the sessions, cancel, turn, executors, history and start-up suites, the targets and the
plot — is developer tooling with its own dependencies: it lives in the repository's
top-level ``benchmarks`` package, not in the wheel, and joins a run as an `Extension`.
``python -m benchmarks`` passes it; ``amplifier-anyio bench`` finds it with
`checkout_extension` when the package was imported from a checkout (an editable install,
``PYTHONPATH=src``), and runs the wheel's suites alone otherwise.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from rich.table import Table

    from .config import BenchConfig
    from .workloads import Job

__all__ = ("Extension", "Step", "Variant", "checkout_extension")

Step = Callable[[str], None]
"""Called once when a case is done, with a short description of it."""

Variant = tuple["Callable[[], Job]", "Callable[[], None] | None"]
"""An extra row of a fan-out case: how to prepare one timed job, and a check run after it."""


class Extension(Protocol):
    """The parts of a run that come from outside the wheel (see the module's docstring)."""

    suites: tuple[str, ...]
    """The ``--suite`` names it runs (beyond the wheel's fanout, emit, batch, compaction)."""

    def fanout_variants(
        self, config: BenchConfig, *, n: int, delay: float, hooks: int, on_asyncio: bool
    ) -> dict[str, Variant]:
        """Extra rows of one fan-out case: ``gather`` (the asyncio floor) and ``peer:NAME``."""
        ...

    async def backend_cases(
        self, name: str, config: BenchConfig, step: Step
    ) -> dict[str, list[Any]]:
        """Its per-backend cases on the running backend (named ``name``), by report key."""
        ...

    def count_steps(self, config: BenchConfig, backends: int) -> int:
        """How many times its cases call ``step`` in a run with ``backends`` backends."""
        ...

    def finish(
        self, report: dict[str, Any], config: BenchConfig, backends: list[str], step: Step
    ) -> None:
        """Run its suites that are not per backend into ``report``."""
        ...

    def judge(self, report: dict[str, Any], backends: list[str]) -> None:
        """Judge the finished ``report`` against its targets (``report["targets"]``)."""
        ...

    def tables(self, report: dict[str, Any], markdown: bool) -> list[Table]:
        """Its tables of ``report``, after the wheel's."""
        ...

    def notes(self, report: dict[str, Any]) -> list[str]:
        """Lines printed after the tables (what was skipped, and why)."""
        ...

    def plot_problem(self, path: Path) -> str | None:
        """Why ``--plot path`` cannot be drawn here, or None."""
        ...

    def write_plot(self, report: dict[str, Any], path: Path) -> None:
        """Draw the fan-out suite's plot into ``path``."""
        ...


def checkout_extension() -> Extension | None:
    """The ``benchmarks`` package of the checkout this package was imported from, or None.

    Only the repository this very package lives in counts (``src/amplifier_anyio`` beside
    ``pyproject.toml`` and ``benchmarks/``): an installed wheel never picks up some other
    ``benchmarks`` from the working directory or ``sys.path``.
    """
    root = Path(__file__).resolve().parents[3]
    init = root / "benchmarks" / "__init__.py"
    if not (init.is_file() and (root / "pyproject.toml").is_file()):
        return None
    loaded = sys.modules.get("benchmarks")
    if loaded is None or Path(getattr(loaded, "__file__", "") or "").resolve() != init:
        if loaded is not None:
            return None  # another package of that name is in use: leave it alone
        spec = importlib.util.spec_from_file_location(
            "benchmarks", init, submodule_search_locations=[str(init.parent)]
        )
        if spec is None or spec.loader is None:
            return None
        loaded = importlib.util.module_from_spec(spec)
        sys.modules["benchmarks"] = loaded
        spec.loader.exec_module(loaded)
    extension: Extension = loaded.extension()
    return extension
