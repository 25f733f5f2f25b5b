"""mkdocs hook: the event reference table is generated from ``amplifier_anyio.events``,
so the page can never disagree with the code."""

from __future__ import annotations

from typing import Any

MARKER = "<!-- events-table -->"


def events_table() -> str:
    """One row per canonical event: its constant, its name and who emits it."""
    from amplifier_anyio import events  # noqa: PLC0415 - the hook runs inside mkdocs

    constant_of = {
        getattr(events, name): name
        for name in events.__all__
        if isinstance(getattr(events, name), str)
    }
    rows = ["| constant | event | emitted by a built-in module |", "|---|---|---|"]
    for event in events.ALL_EVENTS:
        emitted = "yes" if event in events.EMITTED_EVENTS else "reserved"
        rows.append(f"| `{constant_of[event]}` | `{event}` | {emitted} |")
    return "\n".join(rows)


def on_page_markdown(markdown: str, **_kwargs: Any) -> str:
    """Replace the marker with the generated table."""
    return markdown.replace(MARKER, events_table()) if MARKER in markdown else markdown
