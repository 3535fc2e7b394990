"""Structure-aware HTML chunking with the same rules as Markdown (see toolkit.chunking.structure).

The standard library's HTML tokenizer reports where each tag starts, which is what exact offsets need
(selectolax and lxml do not expose source positions). Chunk bodies are slices of the HTML source, so they
keep their markup; heading paths are the headings' text. Text outside block elements (loose text directly
in a <div>) belongs to no block and is not chunked.
"""

from __future__ import annotations

from toolkit.chunking.base import Chunker
from toolkit.chunking.document import Document, Span
from toolkit.chunking.html_sections import parse_sections
from toolkit.chunking.structure import pack_sections

__all__ = ["HtmlChunker", "parse_sections"]


class HtmlChunker(Chunker):
    """``html:size:overlap[:merge=50]``: headings h1–h6 first, then blocks, as for Markdown."""

    # Reads its own format's headings (its sections carry their heading paths); unchanged since version 1.
    algorithm_version = 1
    own_headings = True

    def spans(self, document: Document) -> list[Span]:
        sections, protected = parse_sections(document.text)
        merge = self.spec.options.get("merge", 50)
        return pack_sections(document, sections, self.size, self.overlap, merge, protected)
