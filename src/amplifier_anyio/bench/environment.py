"""Where a benchmark ran: machine, platform, interpreter, library versions, load."""

from __future__ import annotations

import os
import platform
import sys
from datetime import UTC, datetime
from importlib import metadata
from typing import Any

__all__ = ("environment", "load_average", "LoadWatch")

_PACKAGES = ("amplifier-anyio", "anyio", "trio", "uvloop", "attrs", "cattrs")


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def load_average() -> list[float] | None:
    """The 1, 5 and 15 minute load averages, where the platform has them."""
    try:
        return [round(value, 2) for value in os.getloadavg()]
    except (AttributeError, OSError):
        return None


class LoadWatch:
    """The highest 1-minute load average seen while a run goes: sampled at each step (a
    read of ``/proc/loadavg``, between timed runs, never inside one)."""

    def __init__(self) -> None:
        self.peak: float | None = None
        self.sample()

    def sample(self) -> None:
        """Read the load average now."""
        loads = load_average()
        if loads is not None:
            self.peak = loads[0] if self.peak is None else max(self.peak, loads[0])

    def busy(self, cores: int | None = None) -> dict[str, Any] | None:
        """``{"load", "cores"}`` when the peak was above the core count, else None."""
        cores = cores if cores is not None else os.cpu_count()
        if self.peak is None or not cores or self.peak <= cores:
            return None
        return {"load": self.peak, "cores": cores}


def environment() -> dict[str, Any]:
    """A JSON-ready description of this machine and of the installed versions."""
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": platform.machine(),
        "processor": platform.processor() or None,
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "versions": {package: _version(package) for package in _PACKAGES},
        "load_average_before": load_average(),
    }
