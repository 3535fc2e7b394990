"""Cleaning for text extracted from PDFs: repeated page headers and footers removed, page numbers dropped,
hyphenated line wraps joined, broken lines re-flowed into paragraphs.

Two readers use the same rules: ``clean_pdf_text`` for extracted ``.txt`` (pages separated by form feeds, as
pdftotext writes them) and ``toolkit.text.pdf`` for PDFs read directly (which knows where each line sits on its page).
The cleaned text is what gets stored and chunked, so chunk offsets refer to it, not to the extracted text.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

_PAGE_NUMBER = re.compile(r"^\s*(?:page\s+)?[-–—]?\s*\d+\s*(?:(?:of|/)\s*\d+)?\s*[-–—]?\s*$", re.I)
_LIST_ITEM = re.compile(r"^\s*(?:[-*•▪◦]|\(?\d+[.)]|\(?[a-z][.)])\s+")
_SOFT_HYPHEN = "\u00ad"
EDGE_LINES = 2  # lines at the top and bottom of a page that may be a running header or footer
# A running header is at most this long; a longer line at a page's edge is body text that happens to repeat.
_MAX_RUNNING_CHARS = 120


def is_page_number(line: str) -> bool:
    """A line that is only a page number: "7", "- 7 -", "Page 7", "7 of 12", "7/12"."""
    return bool(_PAGE_NUMBER.match(line))


def line_shape(line: str) -> str:
    """A line with its digits blurred, so "Page 3" and "Page 4" count as the same running header."""
    return re.sub(r"\d+", "#", " ".join(line.split()).lower())


def running_shapes(edges: Sequence[set[str]]) -> set[str]:
    """The shapes (see ``line_shape``) of running headers and footers: among the edge lines of each page (one
    set of shapes a page), those found on at least half the pages, and on two pages at least."""
    counts = Counter(shape for shapes in edges for shape in shapes)
    threshold = max(2, math.ceil(len(edges) / 2))
    return {shape for shape, n in counts.items() if n >= threshold and 0 < len(shape) <= _MAX_RUNNING_CHARS}


def is_list_item(line: str) -> bool:
    return bool(_LIST_ITEM.match(line))


def join_wrapped(head: str, tail: str) -> str:
    """``head`` followed by the line ``tail`` that continues its paragraph: a word hyphenated at the wrap is joined
    ("deliv-" + "ery"), a soft hyphen dropped, a list item kept on its own line, anything else joined with a space.
    Only the end of ``head`` is looked at, so a long paragraph is built in linear time."""
    tail = tail.strip()
    if not head:
        return tail
    if not tail:
        return head
    if head.endswith(_SOFT_HYPHEN):
        return head[:-1] + tail
    if head.endswith("-") and len(head) > 1 and head[-2].isalpha() and tail[0].islower():
        return head[:-1] + tail
    return head + ("\n" if is_list_item(tail) else " ") + tail


def join_lines(lines: Sequence[str]) -> str:
    """The lines of one paragraph re-flowed into one line (list items keep their own lines)."""
    text = ""
    for line in lines:
        if line.strip():
            text = join_wrapped(text, line)
    return text


def remove_running_lines(pages: list[str]) -> list[str]:
    """Drop lines at a page's top or bottom whose shape recurs on at least half the pages (two at least),
    and lone page numbers there."""
    edges = []
    for page in pages:
        lines = [line for line in page.split("\n") if line.strip()]
        edges.append({line_shape(line) for line in lines[:EDGE_LINES] + lines[-EDGE_LINES:]})
    running = running_shapes(edges)
    cleaned = []
    for page in pages:
        lines = page.split("\n")
        content = [i for i, line in enumerate(lines) if line.strip()]
        edge = set(content[:EDGE_LINES] + content[-EDGE_LINES:])
        kept = [
            line
            for i, line in enumerate(lines)
            if not (i in edge and (line_shape(line) in running or is_page_number(line)))
        ]
        cleaned.append("\n".join(kept))
    return cleaned


def reflow(text: str) -> str:
    """Join lines inside a paragraph with a space; blank lines and list items keep their breaks."""
    paragraphs = re.split(r"\n[ \t]*\n+", text)
    result = [join_lines(paragraph.split("\n")) for paragraph in paragraphs]
    return "\n\n".join(paragraph for paragraph in result if paragraph)


def clean_pdf_text(text: str) -> str:
    """The cleaned text. Pages are separated by form feeds (as pdftotext writes them); without form feeds
    only lone page-number lines are treated as page furniture."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    pages = text.split("\f")
    if len(pages) > 1:
        pages = remove_running_lines(pages)
    else:
        pages = ["\n".join(line for line in text.split("\n") if not is_page_number(line))]
    return reflow("\n".join(page.strip("\n") for page in pages))
