"""``chat`` wraps an answer at word boundaries before the terminal's edge (`WordWrap`).

Pure text in, text out: no event loop, so no backend to vary (the pty test in
tests/integration/test_cli_chat.py runs the REPL on asyncio and trio).
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from amplifier_anyio.cli.chat import WordWrap


def wrapped(width: int | None, *pieces: str) -> str:
    wrap = WordWrap(width)
    return "".join(wrap.feed(piece) for piece in pieces) + wrap.flush()


def test_a_word_that_would_cross_the_edge_starts_the_next_line() -> None:
    text = "Your prompt has 2 words and 11 characters."
    assert wrapped(30, text) == "Your prompt has 2 words and 11\ncharacters."


def test_pieces_split_inside_words_wrap_as_the_whole_text_does() -> None:
    text = "the quick brown fox jumps over the lazy dog"
    whole = wrapped(12, text)
    assert wrapped(12, "the qu", "ick bro", "wn fox j", "umps over the l", "azy dog") == whole
    assert whole == "the quick\nbrown fox\njumps over\nthe lazy dog"


def test_newlines_and_indentation_are_kept() -> None:
    assert wrapped(20, "list:\n  - one item\n  - two") == "list:\n  - one item\n  - two"


def test_a_word_longer_than_the_line_is_cut_at_the_edge() -> None:
    assert wrapped(5, "ab abcdefghij") == "ab\nabcde\nfghij"


def test_wide_characters_count_two_cells() -> None:
    assert wrapped(6, "日本 語です") == "日本\n語です"


def test_without_a_width_the_text_is_unchanged() -> None:
    assert wrapped(None, "a" * 500, " b") == "a" * 500 + " b"


words = st.text(alphabet="abcdefgh", min_size=1, max_size=12)


@given(st.lists(words, min_size=1, max_size=40), st.integers(12, 80), st.data())
def test_no_line_is_wider_than_the_terminal_and_no_word_is_cut(
    chosen: list[str], width: int, data: st.DataObject
) -> None:
    text = " ".join(chosen)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(text)), max_size=6)))
    pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]

    out = wrapped(width, *pieces)

    assert all(len(line) <= width for line in out.split("\n"))
    assert out.split() == chosen  # every word whole, in order
