"""mkdocs hook: a page that shows markup the renderer did not understand is a build warning
(an error under ``mkdocs build --strict``).

The site renders Markdown, docstrings included: a reST role (``:class:`X```) shows as the
raw text ``:class:X`` and a pipe escaped for a table cell (``a\\|b`` in a code span) shows
its backslash. Write a docstring cross-reference as ``[`X`][amplifier_anyio.X]`` (or a
code span), and keep pipes out of table cells ("a or b").
"""

from __future__ import annotations

import html
import logging
import re
from typing import Any

log = logging.getLogger("mkdocs.hooks.raw_markup")

ROLE = re.compile(r":(?:py:)?(?:class|meth|func|attr|data|mod|exc|obj|const|ref|doc):(?=<code>|`)")
"""A reST role as the HTML shows it: ``:class:`` right before the code span of its target."""

CELL = re.compile(r"<td[^>]*>(.*?)</td>", re.DOTALL)


def problems(page_html: str) -> list[str]:
    """What the rendered page shows raw: each reST role, each table cell with ``\\|``."""
    found = [f"a reST role {match.group(0)!r}" for match in ROLE.finditer(page_html)]
    for cell in CELL.findall(page_html):
        if "\\|" in cell:
            text = html.unescape(re.sub(r"<[^>]+>", "", cell))
            found.append(f"an escaped pipe in the table cell {text[:80]!r}")
    return found


def on_page_content(page_html: str, page: Any, **_kwargs: Any) -> str:
    """Warn once per problem, naming the page."""
    for problem in problems(page_html):
        log.warning(
            "%s shows %s (Markdown: see docs/_hooks/raw_markup.py)", page.file.src_uri, problem
        )
    return page_html
