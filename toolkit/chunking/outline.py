"""The heading outline of a Markdown or HTML document, for strategies that split without reading headings.

The ``markdown`` and ``html`` strategies build heading paths while they pack sections. Every other strategy
(fixed, sentence, recursive, semantic, cluster) splits by its own rule; for a Markdown or HTML source, each of its
chunks gets the path of the headings enclosing the chunk's start, read from the same parsers the structure-aware
strategies use (so the two agree on what a heading is). The source's format is the one ``toolkit.text.sources``
gives its file name: a document id ending in ``.md`` is Markdown, whatever reads it.
"""

from __future__ import annotations

from bisect import bisect_right
from pathlib import PurePosixPath


class Outline:
    """Where each heading starts and the path down to it; ``path_at(offset)`` is the path enclosing ``offset``."""

    def __init__(self, entries: list[tuple[int, tuple[str, ...]]]):
        entries.sort(key=lambda entry: entry[0])
        self.starts = [start for start, _ in entries]
        self.paths = [path for _, path in entries]

    def path_at(self, offset: int) -> tuple[str, ...]:
        i = bisect_right(self.starts, offset) - 1
        return self.paths[i] if i >= 0 else ()


def source_format(doc_id: str | None) -> str | None:
    """``markdown``, ``html`` or another format of ``toolkit.text.sources.FORMATS``, by the id's extension."""
    if not doc_id:
        return None
    from toolkit.text.sources import FORMATS

    if "/" in doc_id:
        return FORMATS.get(PurePosixPath(doc_id).suffix.lower())
    # A bare name is its own last component: its suffix as PurePosixPath gives it (from the last dot, unless the
    # name starts or ends there), without building a path (which took 3% of the ``recursive`` strategy's time).
    dot = doc_id.rfind(".")
    return FORMATS.get(doc_id[dot:].lower() if 0 < dot < len(doc_id) - 1 else "")


def heading_outline(text: str, file_format: str | None) -> Outline | None:
    """The outline of a Markdown or HTML text (None for other formats, or when the text has no heading)."""
    if file_format == "markdown":
        from toolkit.chunking.markdown_sections import parse_sections
    elif file_format == "html":
        from toolkit.chunking.html_sections import parse_sections
    else:
        return None
    sections, _ = parse_sections(text)
    entries = [(section.heading_start, section.path) for section in sections if section.path]
    return Outline(entries) if entries else None
