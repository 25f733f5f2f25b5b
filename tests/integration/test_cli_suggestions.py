"""An unknown option suggests only options close to it."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from amplifier_anyio.cli import app


@pytest.mark.parametrize(
    ("args", "suggested"),
    [
        (["validate", "--frobnicate", "x"], None),
        (["run", "--frobnicate", "x"], None),
        (["run", "--jsn", "x"], "--json"),
        (["validate", "--strct", "x"], "--strict"),
    ],
)
def test_an_unknown_option_suggests_only_close_ones(args: list[str], suggested: str | None) -> None:
    done = CliRunner().invoke(app, args)

    assert done.exit_code == 2
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"error: no such option: {args[1]}")
    if suggested is None:
        assert "Possible options" not in line
    else:
        assert f"(Possible options: {suggested})" in line
