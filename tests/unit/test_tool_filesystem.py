"""tool-filesystem doing its job: reads, writes, edits, listings and globs on a real tree."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path
from typing import Any

import pytest

from amplifier_anyio import AmplifierSession
from amplifier_anyio.errors import ConfigError
from amplifier_anyio.events import ARTIFACT_READ, ARTIFACT_WRITE
from amplifier_anyio.kernel import ModuleCoordinator
from amplifier_anyio.tools import filesystem
from amplifier_anyio.tools.filesystem import CONFIG_SCHEMA, FilesystemConfig, make_tools

pytestmark = pytest.mark.anyio


def tools_in(work: Path, coordinator: Any = None, **config: Any) -> dict[str, Any]:
    return {t.name: t for t in make_tools(coordinator, {"working_dir": str(work), **config})}


@pytest.fixture
def work(tmp_path: Path) -> Path:
    root = tmp_path / "work"
    root.mkdir()
    return root


# -- read_file ---------------------------------------------------------------------------


async def test_read_numbers_lines_as_cat_n(work: Path) -> None:
    (work / "a.txt").write_text("alpha\nbeta\n\ngamma\n")
    result = await tools_in(work)["read_file"].execute({"file_path": "a.txt"})
    assert result.success
    assert result.output == {
        "file_path": str(work / "a.txt"),
        "content": "     1\talpha\n     2\tbeta\n     3\t\n     4\tgamma",
        "total_lines": 4,
        "lines_read": 4,
        "offset": 1,
    }


async def test_read_offset_and_limit_pick_a_window(work: Path) -> None:
    (work / "n.txt").write_text("".join(f"line {i}\n" for i in range(1, 101)))
    read = tools_in(work)["read_file"]
    result = await read.execute({"file_path": str(work / "n.txt"), "offset": 10, "limit": 3})
    assert result.output["content"] == "    10\tline 10\n    11\tline 11\n    12\tline 12"
    assert (result.output["total_lines"], result.output["lines_read"]) == (100, 3)
    past = await read.execute({"file_path": "n.txt", "offset": 500})
    assert past.success
    assert past.output["lines_read"] == 0


@pytest.mark.parametrize("bad", [0, -1, "x", 1.5, True])
async def test_read_refuses_a_bad_offset_naming_it(work: Path, bad: object) -> None:
    (work / "a.txt").write_text("a\n")
    result = await tools_in(work)["read_file"].execute({"file_path": "a.txt", "offset": bad})
    assert not result.success
    assert "offset must be an integer >= 1" in result.error["message"]  # type: ignore[index]


async def test_read_cuts_long_lines_and_defaults_to_2000_lines(work: Path) -> None:
    (work / "long.txt").write_text("x" * 2500 + "\n" + "y\n" * 2100)
    result = await tools_in(work)["read_file"].execute({"file_path": "long.txt"})
    first = result.output["content"].split("\n")[0]
    assert first == "     1\t" + "x" * 2000 + "... [truncated]"
    assert result.output["lines_read"] == 2000
    assert result.output["total_lines"] == 2101


async def test_read_of_an_empty_file_warns(work: Path) -> None:
    (work / "empty.txt").write_text("")
    result = await tools_in(work)["read_file"].execute({"file_path": "empty.txt"})
    assert result.success
    assert result.output["warning"] == "File exists but has empty contents"


async def test_read_refuses_a_binary_file_clearly(work: Path) -> None:
    (work / "blob.bin").write_bytes(b"\x7fELF\x00\x00\x01binary")
    result = await tools_in(work)["read_file"].execute({"file_path": "blob.bin"})
    assert not result.success
    assert result.error == {
        "message": "Cannot read blob.bin: it is a binary file (it contains NUL bytes)",
        "type": "BinaryFile",
    }


async def test_read_refuses_text_that_is_not_utf8(work: Path) -> None:
    (work / "latin.txt").write_bytes("café\n".encode("latin-1"))
    result = await tools_in(work)["read_file"].execute({"file_path": "latin.txt"})
    assert not result.success
    assert "not UTF-8" in result.error["message"]  # type: ignore[index]


async def test_read_refuses_a_file_over_the_size_cap(work: Path) -> None:
    (work / "big.txt").write_text("z" * 5000)
    result = await tools_in(work, max_file_bytes=4096)["read_file"].execute(
        {"file_path": "big.txt"}
    )
    assert not result.success
    assert result.output == "File too large: big.txt is 5000 bytes (max_file_bytes is 4096)"


async def test_read_of_a_directory_lists_it_as_upstream(work: Path) -> None:
    (work / "d").mkdir()
    (work / "f.txt").write_text("f")
    result = await tools_in(work)["read_file"].execute({"file_path": "."})
    assert result.output == {
        "file_path": str(work),
        "content": f"Directory: {work}\n\n  DIR  d\n  FILE f.txt",
        "is_directory": True,
        "entry_count": 2,
    }


async def test_read_of_a_fifo_is_refused_without_blocking(work: Path) -> None:
    os.mkfifo(work / "pipe")
    result = await tools_in(work)["read_file"].execute({"file_path": "pipe"})
    assert not result.success
    assert result.output == "pipe is not a regular file"


async def test_read_of_a_missing_file_names_it(work: Path) -> None:
    result = await tools_in(work)["read_file"].execute({"file_path": "nope.txt"})
    assert not result.success
    assert result.output == "Path not found: nope.txt"
    assert result.error["type"] == "FileNotFoundError"  # type: ignore[index]


async def test_read_follows_a_symlink_that_stays_inside(work: Path) -> None:
    (work / "real.txt").write_text("real\n")
    os.symlink("real.txt", work / "alias.txt")
    result = await tools_in(work)["read_file"].execute({"file_path": "alias.txt"})
    assert result.success
    assert result.output["file_path"] == str(work / "real.txt")


async def test_read_may_be_allowed_beyond_the_working_dir(tmp_path: Path, work: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "guide.md").write_text("guide\n")
    tools = tools_in(work, allowed_read_paths=[str(tmp_path / "docs")])
    result = await tools["read_file"].execute({"file_path": "../docs/guide.md"})
    assert result.success
    denied = await tools["read_file"].execute({"file_path": "../docs/../work/x"})
    assert not denied.success


async def test_read_and_write_emit_artifact_events(work: Path) -> None:
    coordinator = ModuleCoordinator()
    seen: list[tuple[str, dict[str, Any]]] = []

    async def record(event: str, data: dict[str, Any]) -> None:
        seen.append((event, {k: data[k] for k in ("path", "bytes")}))

    coordinator.hooks.register(ARTIFACT_READ, record)
    coordinator.hooks.register(ARTIFACT_WRITE, record)
    tools = tools_in(work, coordinator)
    await tools["write_file"].execute({"file_path": "a.txt", "content": "hello"})
    await tools["read_file"].execute({"file_path": "a.txt"})
    await tools["edit_file"].execute(
        {"file_path": "a.txt", "old_string": "hello", "new_string": "bye"}
    )
    path = str(work / "a.txt")
    assert seen == [
        (ARTIFACT_WRITE, {"path": path, "bytes": 5}),
        (ARTIFACT_READ, {"path": path, "bytes": 5}),
        (ARTIFACT_WRITE, {"path": path, "bytes": 3}),
    ]


async def test_a_hung_read_gives_up_after_io_timeout(
    work: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    release = threading.Event()

    def hang(*_args: object) -> None:
        release.wait(10)

    monkeypatch.setattr(filesystem.ReadFileTool, "_read", hang)
    try:
        result = await tools_in(work, io_timeout=0.2)["read_file"].execute({"file_path": "a"})
    finally:
        release.set()
    assert not result.success
    assert result.output == "timed out after 0.2 s waiting for the file system"


# -- write_file --------------------------------------------------------------------------


async def test_write_creates_parents_and_leaves_no_temp_file(work: Path) -> None:
    result = await tools_in(work)["write_file"].execute(
        {"file_path": "new/deep/f.txt", "content": "héllo\n"}
    )
    assert result.output == {"file_path": str(work / "new/deep/f.txt"), "bytes": 7}
    assert (work / "new/deep/f.txt").read_text() == "héllo\n"
    assert os.listdir(work / "new/deep") == ["f.txt"]


async def test_write_replaces_atomically_and_keeps_the_mode(work: Path) -> None:
    target = work / "run.sh"
    target.write_text("old\n")
    target.chmod(0o750)
    old_inode = target.stat().st_ino
    result = await tools_in(work)["write_file"].execute({"file_path": "run.sh", "content": ""})
    assert result.success
    assert target.read_text() == ""
    assert stat.S_IMODE(target.stat().st_mode) == 0o750
    assert target.stat().st_ino != old_inode  # a new file renamed over the old one


async def test_write_outside_the_write_paths_is_refused_even_when_readable(
    tmp_path: Path, work: Path
) -> None:
    tools = tools_in(work, allowed_read_paths=[str(tmp_path)])
    result = await tools["write_file"].execute({"file_path": "../x.txt", "content": "x"})
    assert not result.success
    assert "is not within allowed write paths" in result.output
    assert not (tmp_path / "x.txt").exists()


async def test_write_to_a_directory_and_over_the_cap_are_refused(work: Path) -> None:
    (work / "d").mkdir()
    tools = tools_in(work, max_file_bytes=10)
    onto_dir = await tools["write_file"].execute({"file_path": "d", "content": "x"})
    assert onto_dir.output == "d is a directory"
    too_big = await tools["write_file"].execute({"file_path": "b.txt", "content": "x" * 11})
    assert too_big.output == "File too large: b.txt is 11 bytes (max_file_bytes is 10)"
    assert not (work / "b.txt").exists()


async def test_write_without_content_is_an_input_error(work: Path) -> None:
    result = await tools_in(work)["write_file"].execute({"file_path": "a.txt"})
    assert result.output == "content is required and must be a string"


# -- edit_file ---------------------------------------------------------------------------


async def test_edit_replaces_a_unique_match(work: Path) -> None:
    (work / "m.py").write_text("def f():\n    return 1\n")
    result = await tools_in(work)["edit_file"].execute(
        {"file_path": "m.py", "old_string": "return 1", "new_string": "return 2"}
    )
    assert result.output == {
        "file_path": str(work / "m.py"),
        "replacements_made": 1,
        "bytes_written": 22,
    }
    assert (work / "m.py").read_text() == "def f():\n    return 2\n"


async def test_edit_refuses_an_ambiguous_match_unless_replace_all(work: Path) -> None:
    (work / "m.txt").write_text("a b a b a")
    edit = tools_in(work)["edit_file"]
    ambiguous = await edit.execute({"file_path": "m.txt", "old_string": "a", "new_string": "c"})
    assert not ambiguous.success
    assert ambiguous.error["occurrences"] == 3  # type: ignore[index]
    assert ambiguous.output.startswith("old_string appears 3 times in m.txt")
    assert (work / "m.txt").read_text() == "a b a b a"
    every = await edit.execute(
        {"file_path": "m.txt", "old_string": "a", "new_string": "c", "replace_all": True}
    )
    assert every.output["replacements_made"] == 3
    assert (work / "m.txt").read_text() == "c b c b c"


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("zzz", "y", "old_string not found in e.txt"),
        ("", "y", "old_string is required and must be a string"),
        ("same", "same", "old_string and new_string are the same"),
    ],
)
async def test_edit_errors_are_clear(work: Path, old: str, new: str, message: str) -> None:
    (work / "e.txt").write_text("same text\n")
    result = await tools_in(work)["edit_file"].execute(
        {"file_path": "e.txt", "old_string": old, "new_string": new}
    )
    assert result.output == message
    assert (work / "e.txt").read_text() == "same text\n"


async def test_edit_may_delete_text(work: Path) -> None:
    (work / "e.txt").write_text("keep DROP keep")
    result = await tools_in(work)["edit_file"].execute(
        {"file_path": "e.txt", "old_string": " DROP", "new_string": ""}
    )
    assert result.success
    assert (work / "e.txt").read_text() == "keep keep"


# -- list_directory and glob -------------------------------------------------------------


async def test_list_directory_puts_directories_first(work: Path) -> None:
    (work / "b.txt").write_text("bb")
    (work / "a").mkdir()
    os.symlink("b.txt", work / "c")
    result = await tools_in(work)["list_directory"].execute({})
    assert result.output["entries"] == [
        {"name": "a", "type": "dir", "size": None},
        {"name": "b.txt", "type": "file", "size": 2},
        {"name": "c", "type": "link", "size": None},
    ]
    assert result.output["content"] == f"Directory: {work}\n\n  DIR  a\n  FILE b.txt\n  LINK c"


async def test_list_directory_caps_entries_and_refuses_a_file(work: Path) -> None:
    for i in range(5):
        (work / f"f{i}").write_text("")
    tools = tools_in(work, max_results=3)
    capped = await tools["list_directory"].execute({"path": "."})
    assert (capped.output["entry_count"], len(capped.output["entries"])) == (5, 3)
    assert capped.output["results_capped"] is True
    on_file = await tools["list_directory"].execute({"path": "f0"})
    assert on_file.output == "Not a directory: f0"


@pytest.fixture
def project(work: Path) -> Path:
    for name in ["a.py", "src/b.py", "src/deep/c.py", "src/d.txt", "node_modules/m/x.py"]:
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        (work / name).write_text(name)
    return work


def rel(result: Any, base: Path) -> set[str]:
    return {os.path.relpath(m["path"], base) for m in result.output["matches"]}


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("**/*.py", {"a.py", "src/b.py", "src/deep/c.py"}),
        ("*.py", {"a.py"}),
        ("src/*", {"src/b.py", "src/deep", "src/d.txt"}),
        ("src/**", {"src", "src/b.py", "src/deep", "src/deep/c.py", "src/d.txt"}),
        ("**/[bc].py", {"src/b.py", "src/deep/c.py"}),
        ("**/[!b].py", {"a.py", "src/deep/c.py"}),
        ("src/?.txt", {"src/d.txt"}),
        ("./src/deep/*.py", {"src/deep/c.py"}),
    ],
)
async def test_glob_patterns_match_relative_paths(
    project: Path, pattern: str, expected: set[str]
) -> None:
    result = await tools_in(project)["glob"].execute({"pattern": pattern})
    assert result.success
    assert rel(result, project) == expected
    assert result.output["total_files"] == result.output["count"] == len(expected)


async def test_glob_filters_by_type_and_skips_ignored_directories(project: Path) -> None:
    glob = tools_in(project)["glob"]
    dirs = await glob.execute({"pattern": "**", "type": "dir"})
    assert rel(dirs, project) == {"src", "src/deep"}
    ignored = await glob.execute({"pattern": "**/x.py", "include_ignored": True})
    assert rel(ignored, project) == {"node_modules/m/x.py"}


async def test_glob_from_a_subdirectory_newest_first_and_capped(project: Path) -> None:
    os.utime(project / "src/b.py", (1, 1))
    result = await tools_in(project, max_results=1)["glob"].execute(
        {"pattern": "**/*.py", "path": "src"}
    )
    assert result.output["base_path"] == str(project / "src")
    assert result.output["total_files"] == 2
    assert rel(result, project / "src") == {"deep/c.py"}  # b.py is older
    assert result.output["results_capped"] is True


async def test_glob_stops_scanning_at_the_budget(project: Path) -> None:
    result = await tools_in(project, max_scanned_entries=2)["glob"].execute({"pattern": "**"})
    assert result.output["scan_capped"] is True


# -- config and mounting -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("max_file_bytes", 0),
        ("max_file_bytes", "big"),
        ("max_results", -3),
        ("io_timeout", float("nan")),
        ("max_line_length", 2.5),
    ],
)
def test_bad_numbers_are_config_errors_naming_the_key(key: str, value: object) -> None:
    with pytest.raises(ConfigError, match=key):
        FilesystemConfig.from_dict({key: value})


def test_a_single_allowed_path_may_be_a_string() -> None:
    config = FilesystemConfig.from_dict({"allowed_read_paths": "/srv"})
    assert config.allowed_read_paths == ("/srv",)


def test_the_schema_lists_the_keys() -> None:
    assert CONFIG_SCHEMA.check({"allowed_write_paths": ["."], "max_file_bytes": 10}) == []
    problems = CONFIG_SCHEMA.check({"max_file_byte": 1, "io_timeout": "soon"})
    assert [(p.key, p.kind) for p in problems] == [
        ("max_file_byte", "unknown"),
        ("io_timeout", "type"),
    ]


async def test_a_plan_mounts_the_five_tools_and_a_turn_reads_a_file(work: Path) -> None:
    (work / "notes.txt").write_text("remember the milk\n")
    call = {"id": "c1", "name": "read_file", "arguments": {"file_path": "notes.txt"}}
    plan = {
        "session": {"orchestrator": "loop-basic", "context": "context-simple"},
        "providers": [
            {
                "module": "provider-scripted",
                "config": {
                    "responses": [
                        {"content": [], "tool_calls": [call]},
                        {"content": [{"type": "text", "text": "done"}]},
                    ]
                },
            }
        ],
        "tools": [{"module": "tool-filesystem", "config": {"working_dir": str(work)}}],
    }
    async with AmplifierSession(plan) as session:
        assert set(session.coordinator.get("tools")) == {
            "read_file",
            "write_file",
            "edit_file",
            "list_directory",
            "glob",
        }
        result = await session.run("read my notes")
        messages = await session.coordinator.get("context").get_messages()
    assert result.text == "done"
    tool_message = next(m for m in messages if m["role"] == "tool")
    assert "remember the milk" in tool_message["content"]
