"""Structure-aware Markdown chunking: headings, code blocks and tables found with markdown-it-py's block rules.

``markdown_scan`` replays those rules line by line (three times as fast, and tested to give the same blocks);
markdown-it-py itself parses block quotes, and everything when ``parse_sections(..., scanner=False)``.

List parsing is switched off for speed (it is over a third of the parse): a list is read as paragraph text
whose lines are its items, so a long list is split between lines. A fenced block inside a list item is
still a fence (indented by up to three spaces) or an indented code block (four, after a blank line), so it
stays protected. YAML front matter (``---`` … ``---`` at the very top) is one block of the preamble.
"""

from __future__ import annotations

from toolkit.chunking.base import Chunker
from toolkit.chunking.document import Document, Span
from toolkit.chunking.markdown_sections import _parser, line_starts, parse_sections
from toolkit.chunking.structure import pack_sections

__all__ = ["MarkdownChunker", "_parser", "line_starts", "parse_sections"]


class MarkdownChunker(Chunker):
    """``markdown:size:overlap[:merge=50]``: headings first, then blocks; see toolkit.chunking.structure."""

    # Reads its own format's headings (its sections carry their heading paths); unchanged since version 1.
    algorithm_version = 1
    own_headings = True

    def spans(self, document: Document) -> list[Span]:
        sections, protected = parse_sections(document.text)
        merge = self.spec.options.get("merge", 50)
        return pack_sections(document, sections, self.size, self.overlap, merge, protected)
