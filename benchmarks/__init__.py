"""Benchmarks of amplifier_anyio, from a checkout (not in the wheel).

``python -m benchmarks`` is ``amplifier-anyio bench`` with everything: the wheel's suites
(:mod:`amplifier_anyio.bench`: fan-out against the task-group floor, emit, tool batch,
compaction) and this package's (`checkout`: the ``asyncio.gather`` floor, the peers, the
turn, sessions, cancel, executors, history and start-up suites, the targets, the plot).
The other modules here are stand-alone measurements (``python -m benchmarks.bench_otel`` …).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .checkout import Checkout

__all__ = ("extension",)


def extension() -> Checkout:
    """The checkout's suites for the wheel's runner (imported on first use)."""
    from .checkout import Checkout  # noqa: PLC0415 - its suites import the runtime

    return Checkout()
