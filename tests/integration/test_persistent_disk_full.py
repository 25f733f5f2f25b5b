"""context-persistent on a disk that really fills up: a 64 KiB tmpfs.

Messages are appended until the file system has no room left. The append that does not
fit must fail whole with :class:`ContextFileError`, and the file must stay loadable and
equal to the history in memory, before and after space is freed again. Mounting needs
privileges (root in a sandbox, for example); where it is not allowed the test is skipped.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from amplifier_anyio.contexts import ContextFileError, PersistentContextManager

pytestmark = pytest.mark.anyio

SIZE = 64 * 1024


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs of 64 KiB mounted on a fresh directory, unmounted afterwards."""
    if not sys.platform.startswith("linux") or shutil.which("mount") is None:
        pytest.skip("cannot mount a tmpfs here: not Linux, or no mount command")
    point = tmp_path / "disk"
    point.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={SIZE}", "tmpfs", str(point)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield point
    finally:
        subprocess.run(["umount", str(point)], capture_output=True, check=True)


def message(number: int) -> dict[str, Any]:
    # sizes that do not divide the page size, so some write ends up cut short
    return {"role": "user", "content": f"{number}:" + "é" * (700 + 37 * (number % 11))}


def contents(path: Path) -> bytes:
    return path.read_bytes() if path.exists() else b""


async def fill(
    manager: PersistentContextManager, path: Path
) -> tuple[int, bytes, ContextFileError]:
    """Append until an append fails: its number, the file before it, and its error."""
    for number in range(1000):  # far more than fits
        before = contents(path)
        try:
            await manager.add_message(message(number))
        except ContextFileError as exc:
            return number, before, exc
    pytest.fail("the 64 KiB disk never filled up")


async def test_a_full_disk_fails_the_append_whole_and_the_file_stays_loadable(
    small_disk: Path,
) -> None:
    path = small_disk / "ctx.jsonl"
    ballast = small_disk / "ballast"
    ballast.write_bytes(b"\0" * (16 * 1024))  # room to free later
    manager = PersistentContextManager(path)
    failed, before, error = await fill(manager, path)
    assert failed > 10
    assert error.path == path
    assert f"{path}: cannot append: No space left on device" in str(error)
    assert isinstance(error.__cause__, OSError)
    assert path.read_bytes() == before  # the failed append left nothing behind
    history = await manager.get_messages()
    assert history == [message(number) for number in range(failed)]
    assert await PersistentContextManager(path, read_only=True).get_messages() == history

    # a batch that does not fit fails whole too
    with pytest.raises(ContextFileError):
        await manager.add_messages([message(number) for number in range(failed, failed + 30)])
    assert path.read_bytes() == before
    assert await manager.get_messages() == history

    ballast.unlink()
    await manager.add_message(message(failed))
    await manager.add_messages([message(failed + 1), message(failed + 2)])
    history = await manager.get_messages()
    assert history == [message(number) for number in range(failed + 3)]
    assert await PersistentContextManager(path, read_only=True).get_messages() == history
    await manager.aclose()  # the writer lock's descriptor, before the unmount
