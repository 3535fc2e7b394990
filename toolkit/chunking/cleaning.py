"""Cleaning for text extracted from PDFs: repeated page headers and footers removed, hyphenated line wraps
joined, broken lines re-flowed into paragraphs.

The cleaned text is what gets stored and chunked, so chunk offsets refer to it, not to the extracted text.
"""

from __future__ import annotations

import re
from collections import Counter

_PAGE_NUMBER = re.compile(r"^\s*(?:page\s+)?[-–—]?\s*\d+\s*(?:(?:of|/)\s*\d+)?\s*[-–—]?\s*$", re.I)
_LIST_ITEM = re.compile(r"^\s*(?:[-*•▪◦]|\(?\d+[.)]|\(?[a-z][.)])\s+")
_HYPHEN_WRAP = re.compile(r"(?<=[^\W\d_])-\n[ \t]*(?=[a-z])")
_EDGE_LINES = 2  # lines at the top and bottom of a page that may be a running header or footer


def _shape(line: str) -> str:
    """A line with its digits blurred, so "Page 3" and "Page 4" count as the same running header."""
    return re.sub(r"\d+", "#", line.strip().lower())


def remove_running_lines(pages: list[str]) -> list[str]:
    """Drop lines at a page's top or bottom whose shape recurs on at least half the pages (min 3),
    and lone page numbers."""
    edges = []
    for page in pages:
        lines = [line for line in page.split("\n") if line.strip()]
        edges.append({_shape(line) for line in lines[:_EDGE_LINES] + lines[-_EDGE_LINES:]})
    counts = Counter(shape for shapes in edges for shape in shapes)
    threshold = max(3, (len(pages) + 1) // 2)
    running = {shape for shape, n in counts.items() if n >= threshold and len(shape) <= 120}
    cleaned = []
    for page in pages:
        lines = page.split("\n")
        content = [i for i, line in enumerate(lines) if line.strip()]
        edge = set(content[:_EDGE_LINES] + content[-_EDGE_LINES:])
        kept = [
            line
            for i, line in enumerate(lines)
            if not (i in edge and (_shape(line) in running or _PAGE_NUMBER.match(line)))
        ]
        cleaned.append("\n".join(kept))
    return cleaned


def reflow(text: str) -> str:
    """Join lines inside a paragraph with a space; blank lines and list items keep their breaks."""
    paragraphs = re.split(r"\n[ \t]*\n+", text)
    result = []
    for paragraph in paragraphs:
        lines = [line.strip() for line in paragraph.split("\n") if line.strip()]
        if not lines:
            continue
        out = lines[0]
        for line in lines[1:]:
            out += ("\n" if _LIST_ITEM.match(line) else " ") + line
        result.append(out)
    return "\n\n".join(result)


def clean_pdf_text(text: str) -> str:
    """The cleaned text. Pages are separated by form feeds (as pdftotext writes them); without form feeds
    only lone page-number lines are treated as page furniture."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    pages = text.split("\f")
    if len(pages) > 1:
        pages = remove_running_lines(pages)
    else:
        pages = ["\n".join(line for line in text.split("\n") if not _PAGE_NUMBER.match(line))]
    joined = "\n".join(page.strip("\n") for page in pages)
    joined = _HYPHEN_WRAP.sub("", joined)
    return reflow(joined)
