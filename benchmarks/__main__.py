"""``python -m benchmarks [--quick] [--json FILE] [--plot FILE.png] …``.

The same command as ``amplifier-anyio bench``, options and all.
"""

from __future__ import annotations

import sys

import typer

from amplifier_anyio.cli import app


def main() -> None:
    """Run the ``bench`` command with this process's arguments."""
    group = typer.main.get_group(app)
    group.commands["bench"].main(args=sys.argv[1:], prog_name="python -m benchmarks")


if __name__ == "__main__":
    main()
