"""``python -m benchmarks [--quick] [--json FILE] [--plot FILE.png] [--suite NAME] …``.

The ``amplifier-anyio bench`` command, options and all, with this checkout's suites, the
targets and the plot (`benchmarks.extension`) whatever ``amplifier_anyio`` was installed as.
"""

from __future__ import annotations

import sys

import typer

from amplifier_anyio.cli import app

from . import extension


def main() -> None:
    """Run the ``bench`` command with this process's arguments and this checkout's suites."""
    group = typer.main.get_command(app)
    command = group.get_command(typer.Context(group), "bench")  # type: ignore[attr-defined]
    command.main(args=sys.argv[1:], prog_name="python -m benchmarks", obj=extension())


if __name__ == "__main__":
    main()
