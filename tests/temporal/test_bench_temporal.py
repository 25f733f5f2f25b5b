"""``python -m benchmarks.bench_temporal`` runs whole: the durable turn, the in-process
turn and the bare Temporal floor, their CPU, and a failover (one repeat each)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).parents[2]


def test_the_benchmark_reports_the_turn_beside_its_floor_and_a_failover() -> None:
    options = ["--repeats", "1", "--failovers", "1", "--backend", "trio"]
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench_temporal", *options],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    for variant in ("in-process", "durable", "bare Temporal"):
        assert re.search(rf"\| trio \| {variant} \| [\d.]+ \| [\d.]+ \|", out), out
    assert re.search(r"trio: the durable turn's median is [+-][\d.]+ ms \([\d.]+x\)", out), out
    for variant in ("durable", "bare Temporal"):  # CPU per turn: server, worker, client, sum
        assert re.search(rf"\| trio \| {variant} \| \d+ \| \d+ \| \d+ \| \d+ \|", out), out
    assert re.search(r"\| trio \| 1 kills \| [\d.]+ \| [\d.]+ \| [\d.]+ \|", out), out
