"""tool-filesystem under attack: every path that tries to leave the allowed tree is refused.

The corpus (``ATTACKS``) runs against all five tools on a real file system. The tree::

    tmp/
      outside/secret.txt, outside/dir/     <- must never be read, listed or changed
      work/                                <- working directory, the only allowed root
        inside.txt, sub/, symlinks and hard links built per attack

A case passes when the tool answers with an error result whose message names the path,
the secret never appears in what the model sees, and ``outside/`` is byte-for-byte as it
was. Then come the races: a symlink swapped in after the check (deterministically, by
swapping right after the check returns) and a thread flipping a directory and a symlink
while the tools run.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio.lowlevel
import pytest

from amplifier_anyio.models import ToolResult
from amplifier_anyio.tools import _paths
from amplifier_anyio.tools.filesystem import make_tools

pytestmark = pytest.mark.anyio

SECRET = "TOP SECRET 7f3a"


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    outside = tmp_path / "outside"
    (outside / "dir").mkdir(parents=True)
    (outside / "secret.txt").write_text(SECRET + "\n")
    (outside / "dir" / "secret.txt").write_text(SECRET + "\n")
    work = tmp_path / "work"
    (work / "sub").mkdir(parents=True)
    (work / "inside.txt").write_text("inside\n")
    monkeypatch.setenv("HOME", str(outside))  # so "~" leads out of the tree
    return tmp_path


def snapshot(root: Path) -> dict[str, bytes | str]:
    """Every entry under ``root`` with its content (files) or its target (symlinks)."""
    found: dict[str, bytes | str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            rel = str(path.relative_to(root))
            if path.is_symlink():
                found[rel] = "-> " + os.readlink(path)
            elif path.is_file():
                found[rel] = path.read_bytes()
            else:
                found[rel] = "dir"
    return found


Setup = Callable[[Path], None]


def link(name: str, target: str | Callable[[Path], str]) -> Setup:
    def make(tmp: Path) -> None:
        where = tmp / "work" / name
        where.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(target(tmp) if callable(target) else target, where)

    return make


def both(*setups: Setup) -> Setup:
    def make(tmp: Path) -> None:
        for setup in setups:
            setup(tmp)

    return make


def nothing(_tmp: Path) -> None:
    return None


def hard_link(tmp: Path) -> None:
    os.link(tmp / "outside" / "secret.txt", tmp / "work" / "hard.txt")


def secret_path(tmp: Path) -> str:
    return str(tmp / "outside" / "secret.txt")


def outside_dir(tmp: Path) -> str:
    return str(tmp / "outside")


# (id, setup, path given to the tool). A path may be a function of the temp dir.
ATTACKS: list[tuple[str, Setup, str | Callable[[Path], str]]] = [
    ("dotdot", nothing, "../outside/secret.txt"),
    ("dotdot-dir", nothing, "../outside"),
    ("dotdot-chain-etc", nothing, "../../../../../../../../../../etc/passwd"),
    ("dotdot-through-sub", nothing, "sub/../../outside/secret.txt"),
    ("dotdot-dots-and-slashes", nothing, "./sub/.//./../../outside/secret.txt"),
    ("dotdot-to-parent", nothing, ".."),
    ("dotdot-very-long", nothing, "../" * 2000 + "outside/secret.txt"),
    ("absolute-secret", nothing, secret_path),
    ("absolute-etc", nothing, "/etc/passwd"),
    ("absolute-root", nothing, "/"),
    ("absolute-dotdot-in-tree", nothing, lambda t: str(t / "work" / ".." / "outside")),
    ("proc-self-root", nothing, "/proc/self/root/etc/passwd"),
    ("symlink-dir-out", link("out", outside_dir), "out/secret.txt"),
    ("symlink-dir-out-itself", link("out", outside_dir), "out"),
    ("symlink-file-out", link("leak.txt", secret_path), "leak.txt"),
    ("symlink-relative-out", link("rel", "../outside/secret.txt"), "rel"),
    ("symlink-to-root", link("root", "/"), "root/etc/passwd"),
    ("symlink-absolute-etc", link("pw", "/etc/passwd"), "pw"),
    (
        "symlink-chain",
        both(link("c1", "c2"), link("c2", "c3"), link("c3", secret_path)),
        "c1",
    ),
    ("symlink-deep-out", link("sub/deep", "../../outside"), "sub/deep/secret.txt"),
    ("symlink-up-then-out", link("sub/up", ".."), "sub/up/../outside/secret.txt"),
    (
        "symlink-dangling-out",
        link("dangling", lambda t: str(t / "outside" / "new.txt")),
        "dangling",
    ),
    (
        "symlink-dangling-dir-out",
        link("gone", lambda t: str(t / "outside" / "missing")),
        "gone/new.txt",
    ),
    ("symlink-loop", both(link("la", "lb"), link("lb", "la")), "la"),
    ("symlink-loop-below", both(link("la", "lb"), link("lb", "la")), "la/x.txt"),
    ("symlink-self-loop", link("me", "me"), "me"),
    ("hard-link-out", hard_link, "hard.txt"),
    ("tilde", nothing, "~"),
    ("tilde-secret", nothing, "~/secret.txt"),
    ("tilde-root", nothing, "~root/.bashrc"),
    ("nul-alone", nothing, "\x00"),
    ("nul-truncation", nothing, "inside.txt\x00../../outside/secret.txt"),
    ("nul-before-dotdot", nothing, "\x00/../outside/secret.txt"),
    ("control-newline", nothing, "inside.txt\n../outside/secret.txt"),
    ("long-name", nothing, "a" * 300),
    ("long-path", nothing, "d/" * 3000 + "x"),
    ("fullwidth-dots", nothing, "\uff0e\uff0e/outside/secret.txt"),
    ("one-dot-leaders", nothing, "\u2024\u2024/outside/secret.txt"),
    ("two-dot-leader", nothing, "\u2025/outside/secret.txt"),
    ("division-slash", nothing, "..\u2215outside\u2215secret.txt"),
    ("fullwidth-solidus", nothing, "..\uff0foutside\uff0fsecret.txt"),
    ("fraction-slash", nothing, "..\u2044outside"),
    ("canadian-syllabics-dots", nothing, "\u1427\u1427/outside/secret.txt"),
    ("backslashes", nothing, "..\\outside\\secret.txt"),
    ("symlink-dir-out-trailing-slash", link("out", outside_dir), "out/"),
    ("symlink-in-sub-relative-out", link("sub/esc", "../../outside/secret.txt"), "sub/esc"),
    ("symlink-to-dotdot-dir", link("up", ".."), "up/outside/secret.txt"),
    ("proc-self-cwd-dotdot", nothing, "/proc/self/cwd/../outside/secret.txt"),
    ("double-slash-absolute", nothing, lambda t: "/" + secret_path(t)),
    ("dotdot-bounce-through-tree", nothing, "sub/../../work/../outside/secret.txt"),
    ("dotdot-trailing-dot", nothing, "../outside/."),
    ("absolute-with-dot-segments", nothing, lambda t: str(t / "work" / "." / ".." / "outside")),
    ("small-full-stops", nothing, "\ufe52\ufe52/outside/secret.txt"),
    ("ideographic-full-stops", nothing, "\u3002\u3002/outside/secret.txt"),
    ("reverse-solidus-lookalike", nothing, "..\u29f5outside\u29f5secret.txt"),
    ("tab-in-name", nothing, "inside.txt\t../outside/secret.txt"),
]

OPERATIONS: dict[str, Callable[[str], tuple[str, dict[str, Any]]]] = {
    "read": lambda p: ("read_file", {"file_path": p}),
    "write": lambda p: ("write_file", {"file_path": p, "content": "PWNED"}),
    "edit": lambda p: ("edit_file", {"file_path": p, "old_string": "TOP", "new_string": "PWN"}),
    "list": lambda p: ("list_directory", {"path": p}),
    "glob": lambda p: ("glob", {"pattern": "**/*", "path": p}),
}


def tools_for(tmp: Path, **config: Any) -> dict[str, Any]:
    tools = make_tools(None, {"working_dir": str(tmp / "work"), **config})
    return {tool.name: tool for tool in tools}


def assert_refused(result: ToolResult, path: str) -> None:
    assert not result.success, result.output
    assert result.error is not None
    message = str(result.error["message"])
    assert path in message or repr(path) in message, message
    assert SECRET not in result.get_serialized_output()


def test_the_corpus_is_large_enough() -> None:
    assert len(ATTACKS) >= 50
    assert len({name for name, _, _ in ATTACKS}) == len(ATTACKS)


@pytest.mark.parametrize("operation", sorted(OPERATIONS))
@pytest.mark.parametrize(("setup", "given"), [a[1:] for a in ATTACKS], ids=[a[0] for a in ATTACKS])
async def test_an_escape_is_refused_naming_the_path(
    tree: Path, operation: str, setup: Setup, given: str | Callable[[Path], str]
) -> None:
    setup(tree)
    path = given(tree) if callable(given) else given
    before = snapshot(tree / "outside")
    name, tool_input = OPERATIONS[operation](path)
    result = await tools_for(tree)[name].execute(tool_input)
    assert_refused(result, path)
    assert snapshot(tree / "outside") == before


GLOB_PATTERNS = [
    "../outside/*",
    "../**/secret.txt",
    "**/../../outside/*",
    "/etc/*",
    "~/*",
    "sub/../../*",
    "\x00*",
    "\uff0e\uff0e/*",
]


@pytest.mark.parametrize("pattern", GLOB_PATTERNS)
async def test_a_glob_pattern_that_leaves_the_tree_is_refused(tree: Path, pattern: str) -> None:
    result = await tools_for(tree)["glob"].execute({"pattern": pattern})
    assert_refused(result, pattern)


async def test_glob_never_descends_through_a_symlink(tree: Path) -> None:
    link("out", outside_dir)(tree)
    link("sub/root", "/")(tree)
    result = await tools_for(tree)["glob"].execute({"pattern": "**/*"})
    assert result.success
    paths = [m["path"] for m in result.output["matches"]]
    work = str(tree / "work")
    assert all(p.startswith(work + os.sep) for p in paths)
    assert {p.removeprefix(work + os.sep) for p in paths} == {
        "inside.txt",
        "sub",
        "out",
        "sub/root",
    }
    assert {m["type"] for m in result.output["matches"] if m["path"].endswith("out")} == {"link"}
    assert SECRET not in result.get_serialized_output()


async def test_a_listing_shows_a_symlink_without_following_it(tree: Path) -> None:
    link("out", outside_dir)(tree)
    result = await tools_for(tree)["list_directory"].execute({"path": "."})
    assert result.success
    assert {e["name"]: e["type"] for e in result.output["entries"]}["out"] == "link"
    assert "secret.txt" not in result.get_serialized_output()


# -- the race: a symlink swapped in after the check ---------------------------------------


@pytest.fixture
def swap_after_check(monkeypatch: pytest.MonkeyPatch) -> dict[str, Callable[[], None]]:
    """Run ``swaps["now"]()`` right after a path passed its check, before any open."""
    swaps: dict[str, Callable[[], None]] = {}
    real_resolve = _paths.Area.resolve

    def resolve_then_swap(self: _paths.Area, path: str) -> tuple[str, str]:
        resolved = real_resolve(self, path)
        swap = swaps.pop("now", None)
        if swap is not None:
            swap()
        return resolved

    monkeypatch.setattr(_paths.Area, "resolve", resolve_then_swap)
    return swaps


def swap_for_symlink(where: Path, target: Path) -> Callable[[], None]:
    def swap() -> None:
        parked = where.with_name(where.name + ".parked")
        where.rename(parked)
        os.symlink(target, where)

    return swap


RACES = {
    # operation: (entry that is swapped, the path given, whether the entry is a directory)
    "read": ("victim.txt", "victim.txt", False),
    "write": ("victim.txt", "victim.txt", False),
    "edit": ("victim.txt", "victim.txt", False),
    "list": ("victim", "victim", True),
    "glob": ("victim", "victim", True),
    "read-below": ("victim", "victim/TOP.txt", True),
    "write-below": ("victim", "victim/new.txt", True),
    "edit-below": ("victim", "victim/TOP.txt", True),
    "list-below": ("victim", "victim/inner", True),
    "glob-below": ("victim", "victim/inner", True),
}


@pytest.mark.parametrize("race", sorted(RACES))
async def test_a_symlink_swapped_in_after_the_check_is_not_followed(
    tree: Path, swap_after_check: dict[str, Callable[[], None]], race: str
) -> None:
    entry, given, is_dir = RACES[race]
    where = tree / "work" / entry
    if is_dir:
        (where / "inner").mkdir(parents=True)
        (where / "TOP.txt").write_text("TOP inside\n")
        target = tree / "outside"
        (target / "TOP.txt").write_text(SECRET + " TOP\n")
        (target / "inner").mkdir()
    else:
        where.write_text("TOP inside\n")
        target = tree / "outside" / "secret.txt"
    before = snapshot(tree / "outside")
    swap_after_check["now"] = swap_for_symlink(where, target)
    name, tool_input = OPERATIONS[race.removesuffix("-below")](given)
    result = await tools_for(tree)[name].execute(tool_input)
    assert "now" not in swap_after_check  # the swap did happen between check and use
    assert_refused(result, given)
    assert "symbolic link" in result.error["message"]  # type: ignore[index]
    assert snapshot(tree / "outside") == before


async def test_a_thread_flipping_a_directory_and_a_symlink_never_lets_a_tool_out(
    tree: Path,
) -> None:
    work = tree / "work"
    flip = work / "flip"
    flip.mkdir()
    (flip / "data.txt").write_text("inside data\n")
    (tree / "outside" / "data.txt").write_text(SECRET + "\n")
    before = snapshot(tree / "outside")
    stop = threading.Event()

    parked = work / "parked"

    def restore(n: int) -> None:
        # write_file may have made a fresh "flip" (mkdir -p) while it was missing, and may
        # make another between two attempts: each attempt moves it to a name of its own (a
        # name used twice fails for good once the first one holds a file).
        attempt = 0
        while parked.exists():
            attempt += 1
            try:
                if flip.is_symlink():
                    os.unlink(flip)
                elif flip.exists():
                    flip.rename(work / f"made-{n}-{attempt}")
                parked.rename(flip)
            except OSError:
                continue

    def flipper() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            try:
                flip.rename(parked)
                os.symlink(tree / "outside", flip)
                os.unlink(flip)
                parked.rename(flip)
            except OSError:
                restore(n)

    tools = tools_for(tree)
    thread = threading.Thread(target=flipper)
    thread.start()
    outcomes: list[ToolResult] = []
    try:
        for i in range(60):
            outcomes.append(await tools["read_file"].execute({"file_path": "flip/data.txt"}))
            outcomes.append(
                await tools["write_file"].execute({"file_path": f"flip/w{i}.txt", "content": "x"})
            )
            outcomes.append(await tools["list_directory"].execute({"path": "flip"}))
            outcomes.append(await tools["glob"].execute({"pattern": "*", "path": "flip"}))
            await anyio.lowlevel.checkpoint()
    finally:
        stop.set()
        thread.join()
    for result in outcomes:
        assert SECRET not in result.get_serialized_output()
        if result.success:
            assert "secret.txt" not in result.get_serialized_output()
    assert snapshot(tree / "outside") == before
