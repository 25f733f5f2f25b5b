"""The benchmark's plot: an overhead below zero (a busy machine's noise) is clipped at zero
and marked as noise, never drawn as a speed-up below the axis.

Plotting is synchronous and has no event loop: these tests have no backend to vary.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from benchmarks.report import NOISE_LABEL, write_plot

from tiers import needs

pytestmark = needs("matplotlib")


def case(backend: str, n: int, overhead: float) -> dict[str, Any]:
    return {
        "backend": backend,
        "hooks": 0,
        "n": n,
        "delay_ms": 0.0,
        "overhead_us_per_call": overhead,
    }


@pytest.fixture
def drawn(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The figures `write_plot` saves, caught as it saves them."""
    from matplotlib.figure import Figure  # noqa: PLC0415 - only when matplotlib is there

    figures: list[Any] = []
    save = Figure.savefig

    def caught(self: Any, *args: Any, **kwargs: Any) -> None:
        figures.append(self)
        save(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", caught)
    return figures


def test_an_overhead_below_zero_is_drawn_at_zero_and_marked_as_noise(
    tmp_path: Path, drawn: list[Any]
) -> None:
    report = {
        "fanout": [
            case("asyncio", 10, 4.0),
            case("asyncio", 100, -2.5),  # the floor's median happened to be the slower
            case("trio", 10, -0.7),
            case("trio", 100, 3.0),
        ]
    }
    path = tmp_path / "plot.png"

    write_plot(report, path)

    assert path.stat().st_size > 0
    (axis,) = drawn[0].axes
    lines = {line.get_label(): line for line in axis.get_lines()}
    for line in lines.values():
        assert min(line.get_ydata()) >= 0, line.get_label()
    assert list(lines["asyncio, K=0"].get_ydata()) == [4.0, 0.0]
    assert list(lines["trio, K=0"].get_ydata()) == [0.0, 3.0]
    noise = lines[NOISE_LABEL]
    assert sorted(noise.get_xdata()) == [10, 100]
    assert list(noise.get_ydata()) == [0.0, 0.0]
    assert axis.get_ylim()[0] == 0
    assert NOISE_LABEL in [text.get_text() for text in axis.get_legend().get_texts()]


def test_a_plot_without_noise_has_no_noise_marker(tmp_path: Path, drawn: list[Any]) -> None:
    write_plot({"fanout": [case("asyncio", 10, 4.0), case("asyncio", 100, 2.0)]}, tmp_path / "p")

    labels = [line.get_label() for line in drawn[0].axes[0].get_lines()]
    assert NOISE_LABEL not in labels
