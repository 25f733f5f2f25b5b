"""Loading context-persistent: the fast reader reads what the line-by-line reader did.

What a user sees: the same history and the same estimates after a restart as before it
(non-ASCII text too), blank lines skipped, any bad line reported with its number.
"""

from __future__ import annotations

import gc
import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amplifier_anyio.contexts import ContextFileError, PersistentContextManager
from amplifier_anyio.contexts import persistent as persistent_module
from amplifier_anyio.contexts._jsonl import read_lines
from tiers import examples

pytestmark = pytest.mark.anyio


async def test_a_reload_has_the_history_and_the_estimates_of_before(tmp_path: Path) -> None:
    path = tmp_path / "ctx.jsonl"
    writer = PersistentContextManager(path)
    await writer.add_message({"role": "system", "content": "Sé breve. 简洁。🙂"})
    await writer.add_messages(
        [
            {"role": "user", "content": "ünïcödé " * 50},
            {"role": "assistant", "content": [{"type": "text", "text": "ok"}]},
        ]
    )
    reader = PersistentContextManager(path, read_only=True)  # the writer is open
    assert await reader.get_messages() == await writer.get_messages()
    assert reader.token_estimate == writer.token_estimate
    assert reader._costs == writer._costs


async def test_blank_lines_are_skipped_and_a_bad_line_is_named(tmp_path: Path) -> None:
    path = tmp_path / "ctx.jsonl"
    first, second = {"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}
    path.write_text(f"{json.dumps(first)}\n\n  \n{json.dumps(second)}\n", encoding="utf-8")
    assert await PersistentContextManager(path).get_messages() == [first, second]
    path.write_text(f"{json.dumps(first)}\n{json.dumps(first)} {json.dumps(second)}\n")
    with pytest.raises(ContextFileError, match=r"ctx\.jsonl:2:"):
        await PersistentContextManager(path).load()
    # a value that spans two lines is two bad lines, not one message
    path.write_text('{"role": "user", "content": [1,\n2]}\n{"role": "user"}\n')
    with pytest.raises(ContextFileError, match=r"ctx\.jsonl:1:"):
        await PersistentContextManager(path).load()


_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=30)
_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | _TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3),
    max_leaves=8,
)
_MESSAGES = st.builds(
    lambda role, extra: {"role": role, **extra},
    st.sampled_from(["user", "assistant", "tool", "system"]),
    st.dictionaries(_TEXT.filter(lambda key: key != "role"), _VALUES, max_size=3),
)


@given(messages=st.lists(_MESSAGES, max_size=8), blank=st.booleans(), torn=st.booleans())
@settings(max_examples=examples(50), deadline=None)
def test_the_reader_gives_each_line_and_its_length(
    tmp_path_factory: Any, messages: list[dict[str, Any]], blank: bool, torn: bool
) -> None:
    path = tmp_path_factory.mktemp("lines") / "ctx.jsonl"
    lines = [json.dumps(message, ensure_ascii=False) for message in messages]
    text = "".join(f"{line}\n" + ("\n" if blank else "") for line in lines)
    if torn:
        text += '{"role": "user", "cont'
    path.write_bytes(text.encode("utf-8"))
    read, lengths, was_torn = read_lines(path)
    assert read == messages
    assert lengths == [len(line) for line in lines]
    assert was_torn is torn


async def test_a_load_never_touches_the_hosts_garbage_collector(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "ctx.jsonl"
    async with PersistentContextManager(path) as writer:
        await writer.add_messages([{"role": "user", "content": f"m{i}"} for i in range(50)])
    toggled: list[str] = []
    during: list[bool] = []
    for name in ("disable", "enable"):
        real = getattr(gc, name)

        def record(real: Any = real, name: str = name) -> None:
            toggled.append(name)
            real()

        monkeypatch.setattr(gc, name, record)
    real_read = persistent_module._jsonl.read_lines

    def read_lines_seeing_gc(*args: Any, **kwargs: Any) -> Any:
        during.append(gc.isenabled())  # in the worker thread, mid-load
        return real_read(*args, **kwargs)

    monkeypatch.setattr(persistent_module._jsonl, "read_lines", read_lines_seeing_gc)

    async def load() -> None:
        await PersistentContextManager(path, read_only=True).load()

    try:
        for host_enabled in (True, False):
            (gc.enable if host_enabled else gc.disable)()
            toggled.clear()
            async with anyio.create_task_group() as group:  # overlapping loads
                for _ in range(3):
                    group.start_soon(load)
            assert gc.isenabled() is host_enabled  # the host's setting, as it left it
            assert toggled == []  # never touched
    finally:
        monkeypatch.undo()
        gc.enable()
    assert during
    assert all(during[:3])
