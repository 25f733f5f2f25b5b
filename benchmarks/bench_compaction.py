"""Compaction cost against history size: ``python -m benchmarks.bench_compaction``.

A thin wrapper over :func:`amplifier_anyio.bench.compaction_suite` (also run by
``amplifier-anyio bench --suite compaction``).
"""

from __future__ import annotations

from typing import Any

from amplifier_anyio.bench import compaction_suite

SIZES = (100, 1_000, 10_000, 100_000)


def run(sizes: tuple[int, ...] = SIZES, repeats: int = 5) -> list[dict[str, Any]]:
    """One dict per history size: ``compact`` and ``get_messages_for_request`` timings."""
    return list(compaction_suite(tuple(sizes), repeats)["cases"])


if __name__ == "__main__":
    for case in run():
        print(
            f"{case['messages']:>8,} messages: compact {case['compact_us_per_message']:.2f} µs/msg,"
            f" request view {case['request_view_us_per_message']:.2f} µs/msg"
        )
