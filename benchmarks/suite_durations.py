"""Where the test suite's time goes: ``python -m benchmarks.suite_durations RUN.xml …``.

Reads the JUnit files of pytest runs (``pytest --junitxml=RUN.xml``; a test's time there is
its setup, call and teardown, so a module fixture that starts a server counts in the first
test that uses it) and prints Markdown tables: the time by directory, by marker and the
most expensive files. With several files, one column each (a before / after comparison).

Markers are not in JUnit files: ``--marker slow=slow.txt`` names a file of node ids, the
output of ``pytest --collect-only -q -m slow`` in the tree that defines the marker; a test
of a run is counted under the first marker whose list holds it, else under ``(none)``.
"""

from __future__ import annotations

import argparse
import collections
import xml.etree.ElementTree as ET
from collections.abc import Callable, Sequence
from pathlib import Path


def node_id(classname: str, name: str) -> str:
    """A JUnit class name and test name, as pytest writes them, back to a node id:
    ``tests.unit.test_x.TestY`` + ``test_z[trio]`` -> ``tests/unit/test_x.py::TestY::test_z[trio]``.
    """
    parts = classname.split(".")
    cut = next((i for i, part in enumerate(parts) if part.startswith("test_")), len(parts) - 1)
    path = "/".join(parts[: cut + 1]) + ".py"
    return "::".join([path, *parts[cut + 1 :], name])


def read_run(path: Path) -> dict[str, float]:
    """Node id -> seconds, for every test case of a JUnit file (skipped ones count 0 s)."""
    times: dict[str, float] = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        times[node_id(case.get("classname", ""), case.get("name", ""))] = float(
            case.get("time", "0")
        )
    return times


def read_markers(specs: Sequence[str]) -> list[tuple[str, set[str]]]:
    markers = []
    for spec in specs:
        name, _, listing = spec.partition("=")
        lines = Path(listing).read_text(encoding="utf-8").splitlines()
        markers.append((name, {line.strip() for line in lines if "::" in line}))
    return markers


def group(times: dict[str, float], key: Callable[[str], str]) -> dict[str, tuple[int, float]]:
    counts: collections.Counter[str] = collections.Counter()
    seconds: dict[str, float] = collections.defaultdict(float)
    for nodeid, duration in times.items():
        label = key(nodeid)
        counts[label] += 1
        seconds[label] += duration
    return {label: (counts[label], seconds[label]) for label in counts}


def table(title: str, runs: dict[str, dict[str, tuple[int, float]]], top: int = 0) -> str:
    labels = sorted(
        {label for groups in runs.values() for label in groups},
        key=lambda label: -max(groups.get(label, (0, 0.0))[1] for groups in runs.values()),
    )
    if top:
        labels = labels[:top]
    header = f"| {title} | " + " | ".join(f"{run}: tests | {run}: s" for run in runs) + " |"
    rule = "|---|" + "---:|---:|" * len(runs)
    rows = []
    for label in labels:
        cells = []
        for groups in runs.values():
            count, seconds = groups.get(label, (0, 0.0))
            cells.append(f"{count} | {seconds:.1f}")
        rows.append(f"| {label} | " + " | ".join(cells) + " |")
    if not top:
        cells = []
        for groups in runs.values():
            cells.append(
                f"{sum(c for c, _ in groups.values())} | {sum(s for _, s in groups.values()):.1f}"
            )
        rows.append("| **total** | " + " | ".join(cells) + " |")
    return "\n".join([header, rule, *rows])


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="JUnit files, as NAME=FILE or FILE")
    parser.add_argument("--marker", action="append", default=[], help="NAME=NODE_IDS_FILE")
    parser.add_argument("--files", type=int, default=15, help="how many files to list")
    args = parser.parse_args(argv)

    runs = {}
    for spec in args.runs:
        name, _, path = spec.rpartition("=")
        runs[name or Path(path).stem] = read_run(Path(path))
    markers = read_markers(args.marker)

    def directory(nodeid: str) -> str:
        return nodeid.split("::", maxsplit=1)[0].rsplit("/", 1)[0] + "/"

    def marker(nodeid: str) -> str:
        return next((name for name, ids in markers if nodeid in ids), "(none)")

    def file(nodeid: str) -> str:
        return nodeid.split("::", maxsplit=1)[0]

    print(table("directory", {r: group(t, directory) for r, t in runs.items()}))
    if markers:
        print()
        print(table("marker", {r: group(t, marker) for r, t in runs.items()}))
    print()
    print(table("file", {r: group(t, file) for r, t in runs.items()}, top=args.files))


if __name__ == "__main__":
    main()
