"""Every mount plan under ``docs/`` runs offline, as its comment says, on both backends.

The plans are run as a user runs them: the installed ``amplifier-anyio`` console script
in a subprocess (``run --plan docs/<plan> <prompt>``), from an empty working directory.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from _cli import console_script
from amplifier_anyio.kernel import MountPlan

ROOT = Path(__file__).resolve().parents[2]
PLANS = sorted((ROOT / "docs").glob("*.yaml"))


def test_the_docs_have_the_lifecycle_demo_plan() -> None:
    assert ROOT / "docs" / "lifecycle-demo.yaml" in PLANS


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@pytest.mark.parametrize("plan", PLANS, ids=[p.name for p in PLANS])
def test_a_docs_plan_runs_offline(plan: Path, backend: str, tmp_path: Path) -> None:
    MountPlan.from_file(plan)  # a valid plan, whatever the run says
    done = subprocess.run(
        [console_script(), "run", "--backend", backend, "--events", "--plan", str(plan), "look"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip()
    if plan.name == "lifecycle-demo.yaml":
        assert "has 4 words" in done.stdout
        for stage in ("plan", "route", "execute", "aggregate", "complete"):
            assert f"lifecycle:{stage}" in done.stdout + done.stderr
