"""Property: no generated secret reaches hooks-logging's file, whole or in pieces.

Each example draws secrets — key-shaped (``sk-…``, ``AKIA…``, ``Bearer …``) or opaque
values under a secret key spelt in camel, snake, kebab or upper case — and puts each in
one position: a value (nested in mappings and lists), a dict key, free text, ``key=value``
text, JSON text (once or twice encoded, as a tool message inside a request), split across
streamed ``content_block:delta`` pieces (then the assembled block at
``content_block:end``), or redacted for its key on ``tool:post`` and quoted in prose by a
later request. The records go through `EventLog.record` (the handler's snapshot) into a
real `JsonlFileSink` file, on asyncio and on trio; the file's bytes must hold no
substring of 8 characters or more of any secret's random part.
"""

from __future__ import annotations

import itertools
import json
import string
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amplifier_anyio.hooks.logging import EventLog, JsonlFileSink, LoggingConfig
from tiers import examples

PIECE = 8
_ALNUM = string.ascii_letters + string.digits
_random = st.text(alphabet=_ALNUM, min_size=16, max_size=40).filter(lambda s: len(set(s)) >= 8)
_aws = st.text(alphabet=string.ascii_uppercase + string.digits, min_size=16, max_size=16).filter(
    lambda s: len(set(s)) >= 8
)
_key_words = st.sampled_from(
    [
        *[("access", "token"), ("client", "secret"), ("user", "password"), ("api", "key")],
        *[("refresh", "token"), ("private", "key"), ("password",), ("auth", "token")],
    ]
)
_spellings = st.sampled_from(["camel", "snake", "kebab", "upper", "pascal"])


def spell(words: tuple[str, ...], how: str) -> str:
    if how == "camel":
        return words[0] + "".join(w.title() for w in words[1:])
    if how == "pascal":
        return "".join(w.title() for w in words)
    if how == "kebab":
        return "-".join(words)
    if how == "upper":
        return "_".join(words).upper()
    return "_".join(words)


@st.composite
def secrets(draw: st.DrawFn) -> tuple[str, str, str | None]:
    """(the secret as written, its random part, the key it needs, if any)."""
    kind = draw(st.sampled_from(["sk", "aws", "bearer", "keyed"]))
    if kind == "aws":
        part = draw(_aws)
        return f"AKIA{part}", part, None
    part = draw(_random)
    if kind == "sk":
        return f"sk-{part}", part, None
    if kind == "bearer":
        return f"Bearer {part}", part, None
    return part, part, spell(draw(_key_words), draw(_spellings))


POSITIONS = ("value", "dict key", "text", "assignment", "json", "json twice", "deltas", "later")


def events_for(
    secret: str, key: str | None, position: str, cuts: list[int]
) -> list[tuple[str, dict[str, Any]]]:
    """The events that carry ``secret`` in ``position``."""
    name = key or "note"
    if key is None and position in ("assignment", "later"):
        position = "text"  # a shaped secret needs no key
    if key is not None and position == "dict key":
        position = "value"  # an opaque value is a secret only under its key
    if key is not None and position == "text":
        position = "assignment"  # …so it comes with its key
    if position == "value":
        data = {"tool_input": {"outer": [{name: secret, "n": 1}], "other": "x"}}
        return [("tool:pre", data)]
    if position == "dict key":
        return [("tool:post", {"result": {"output": {secret: "value", "ok": True}}})]
    if position == "text":
        return [("llm:response", {"response": {"text": f"here: {secret} (done)"}})]
    if position == "assignment":
        return [("llm:response", {"response": {"text": f"config {name}={secret} end"}})]
    if position in ("json", "json twice"):
        text = json.dumps({"result": {name: secret, "size": 3}})
        if position == "json twice":
            text = json.dumps({"content": text})
        message = {"role": "tool", "tool_call_id": "c1", "content": text}
        return [("llm:request", {"request": {"messages": [message]}})]
    if position == "deltas":
        text = f"the value {name}: {secret} is set" if key else f"use {secret} now"
        points = sorted({0, len(text), *(c % (len(text) + 1) for c in cuts)})
        pieces = [text[a:b] for a, b in itertools.pairwise(points) if b > a]
        events: list[tuple[str, dict[str, Any]]] = [
            ("content_block:start", {"index": 0, "block_type": "text"})
        ]
        events += [
            ("content_block:delta", {"index": 0, "block_type": "text", "delta": piece})
            for piece in pieces
        ]
        block = {"type": "text", "text": text}
        events.append(("content_block:end", {"index": 0, "block": block}))
        return events
    assert position == "later"
    return [
        ("tool:post", {"result": {"output": {name: secret}}}),
        ("llm:request", {"request": {"messages": [{"content": f"it said {secret}."}]}}),
    ]


def leaked(raw: str, part: str) -> list[str]:
    return [part[i : i + PIECE] for i in range(len(part) - PIECE + 1) if part[i : i + PIECE] in raw]


async def write_log(path: Path, events: list[tuple[str, dict[str, Any]]]) -> str:
    log = EventLog(LoggingConfig())  # the default configuration
    sink = JsonlFileSink(path)
    await sink.write([log.record(event, data) for event, data in events])
    await sink.aclose()
    return await anyio.Path(path).read_text(encoding="utf-8")


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@given(
    placed=st.lists(
        st.tuples(
            secrets(), st.sampled_from(POSITIONS), st.lists(st.integers(0, 200), max_size=12)
        ),
        min_size=1,
        max_size=6,
    )
)
@settings(max_examples=examples(100), deadline=None)
def test_no_generated_secret_reaches_the_file_whole_or_in_pieces(
    backend: str,
    placed: list[tuple[tuple[str, str, str | None], str, list[int]]],
    tmp_path_factory: Any,
) -> None:
    events: list[tuple[str, dict[str, Any]]] = []
    blank: list[tuple[str, dict[str, Any]]] = []  # the same, each secret's part blanked
    for (secret, part, key), position, cuts in placed:
        events += events_for(secret, key, position, cuts)
        blank += events_for(secret.replace(part, "~" * len(part)), key, position, cuts)
    folder = tmp_path_factory.mktemp("log")
    raw = anyio.run(write_log, folder / "events.jsonl", events, backend=backend)
    assert len(raw.splitlines()) == len(events)
    # a piece of a secret that the log holds without any secret is the log's own text (a
    # random "0mplifier0000000" has "mplifier", as the record's schema name has): no leak
    own = anyio.run(write_log, folder / "blank.jsonl", blank, backend=backend)
    for (secret, part, _key), position, _cuts in placed:
        found = [piece for piece in leaked(raw, part) if piece not in own]
        assert found == [], (position, secret, raw)
