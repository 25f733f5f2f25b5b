"""tool-bash's deny rules against a corpus of wrapped commands, run for real.

``probe`` (a user rule: ``denied_commands: ["probe*"]``), ``sudo`` (the standard profile's
privilege rule) and ``mkfs.probe`` (every profile's mkfs rule) are stand-ins on ``PATH``
that only touch a marker file, named after themselves, in a temporary directory. Every
command of the corpus wraps one of them (assignments, env with its options, nice -n,
nohup, timeout, xargs, time, command, exec, stdbuf, setsid, …) in a pipeline, a list or
a subshell, and goes through the tool: each must be refused, and no marker may appear.
The same stand-ins, run where nothing is refused, do leave their markers.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

from amplifier_anyio.tools.bash import BashTool

sys.path.insert(0, str(Path(__file__).parents[1] / "unit"))

from test_bash_safety import WRAPPERS

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(sys.platform == "win32", reason="POSIX shell stand-ins"),
]

STAND_INS = ("probe", "sudo", "mkfs.probe")
PLACES = ("CMD", "echo x | CMD", "true && CMD", "false || CMD", "( CMD )", "echo $(CMD)")


@pytest.fixture
def stand_ins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory first on PATH holding the stand-ins; returns the marker directory."""
    bin_dir, markers = tmp_path / "bin", tmp_path / "markers"
    bin_dir.mkdir()
    markers.mkdir()
    for name in STAND_INS:
        script = bin_dir / name
        # the marker path is written into the script: `env -i` leaves no variable behind
        script.write_text(f"#!/bin/sh\ntouch '{markers / name}'\n", encoding="utf-8")
        script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    return markers


def corpus(bin_dir: Path) -> list[str]:
    wrappers = [w.replace("PATH=/usr/bin:/bin", f"PATH={bin_dir}") for w in WRAPPERS]
    return [
        place.replace("CMD", f"{wrapper} {name} --now")
        for wrapper in wrappers
        for name in STAND_INS
        for place in PLACES
    ]


def markers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def tool(tmp_path: Path, profile: str) -> BashTool:
    config: dict[str, Any] = {"safety_profile": profile, "denied_commands": ["probe*"]}
    return BashTool(config, working_dir=str(tmp_path))


async def test_nothing_in_the_corpus_runs(tmp_path: Path, stand_ins: Path) -> None:
    bash = tool(tmp_path, "standard")
    commands = corpus(tmp_path / "bin")
    assert len(commands) > 500
    allowed = []
    for command in commands:
        result = await bash.execute({"command": command})
        if (result.error or {}).get("type") != "CommandDenied":
            allowed.append(command)
    assert allowed == []
    assert markers(stand_ins) == []  # no marker: nothing ran


async def test_the_stand_ins_do_run_where_nothing_is_refused(
    tmp_path: Path, stand_ins: Path
) -> None:
    bash = tool(tmp_path, "unrestricted")
    for place in PLACES:
        command = place.replace("CMD", "FOO=1 nice -n 5 env -u HOME probe --now")
        result = await bash.execute({"command": f"{command}; sudo; mkfs.probe"})
        assert result.success, result
    assert markers(stand_ins) == sorted(STAND_INS)


NESTS = (
    "bash -c 'CMD'",
    "bash -lc 'CMD'",
    "sh -ec 'CMD'",
    "bash -xc 'CMD'",
    "bash -c -- 'CMD'",
    "sh -e -c 'CMD'",
    "bash -o pipefail -c 'CMD'",
    "bash -euxc 'CMD'",
    "sh -c \"bash -lc 'CMD'\"",
    "coproc CMD; wait",
    "coproc NAME { CMD; }; wait",
    "function f { CMD; }; f",
    "function f() { CMD; }; f",
    "f() { CMD; }; f",
    "for i in 1; do CMD; done",
    "case x in *) CMD;; esac",
    "trap 'CMD' EXIT",
    "nice -n 5 -- CMD",
    "env -- CMD",
)
"""Nested shells with their usual flags, ``--``, and shell keywords around a command."""


def nested_corpus(bin_dir: Path) -> list[str]:
    # by full path: a login shell (-l) resets PATH
    commands = [
        nest.replace("CMD", f"{bin_dir / name} --now") for nest in NESTS for name in STAND_INS
    ]
    return [form for c in commands for form in (c, f"true && {c}", f"( {c} )")]


async def test_nothing_in_the_nested_corpus_runs(tmp_path: Path, stand_ins: Path) -> None:
    bash = tool(tmp_path, "standard")
    allowed = []
    for command in nested_corpus(tmp_path / "bin"):
        result = await bash.execute({"command": command})
        if (result.error or {}).get("type") != "CommandDenied":
            allowed.append(command)
    assert allowed == []
    assert markers(stand_ins) == []


@pytest.mark.parametrize("nest", NESTS)
async def test_each_nested_form_does_run_where_nothing_is_refused(
    tmp_path: Path, stand_ins: Path, nest: str
) -> None:
    bash = tool(tmp_path, "unrestricted")
    probe = tmp_path / "bin" / "probe"
    result = await bash.execute({"command": nest.replace("CMD", f"{probe} --now")})
    assert result.success, result
    assert markers(stand_ins) == ["probe"]  # so the corpus's commands would really run
