"""Sentence-aware chunking: whole sentences packed to the budget, overlap counted in whole sentences."""

from __future__ import annotations

import re

from toolkit.chunking.base import Chunker
from toolkit.chunking.document import Document, Span

# A sentence ends at . ! or ? (optionally followed by a closing quote or bracket) before whitespace,
# or at a blank line. Abbreviations such as "e.g." also end a sentence here: a documented limitation.
_BOUNDARY_OR_PARAGRAPH = re.compile(r"(?:(?<=[.!?])|(?<=[.!?][\"'”’)\]]))\s+|\n[ \t]*\n\s*")


def sentence_spans(text: str, start: int = 0, end: int | None = None) -> list[tuple[int, int]]:
    """(start, end) of each sentence in ``text[start:end]``, whitespace excluded."""
    end = len(text) if end is None else end
    spans = []
    position = start
    for match in _BOUNDARY_OR_PARAGRAPH.finditer(text, start, end):
        spans.append((position, match.start()))
        position = match.end()
    spans.append((position, end))
    result = []
    for a, b in spans:
        while a < b and text[a].isspace():
            a += 1
        while b > a and text[b - 1].isspace():
            b -= 1
        if a < b:
            result.append((a, b))
    return result


def pack_sentences(
    document: Document, sentences: list[tuple[int, int]], size: int, overlap: int, heading_path=(), context=""
) -> list[Span]:
    """Greedy packing: a chunk closes when the next sentence would not fit; the last ``overlap``
    sentences start the next chunk (fewer if they and the new sentence would not fit together).
    A single sentence over the budget becomes its own chunk, flagged atomic."""
    fits = document.fits
    spans: list[Span] = []
    current: list[tuple[int, int]] = []
    for sentence in sentences:
        if current and not fits(current[0][0], sentence[1], size, heading_path, context):
            spans.append(_span(document, current, size, heading_path, context))
            current = current[-overlap:] if overlap else []
            while current and not fits(current[0][0], sentence[1], size, heading_path, context):
                current.pop(0)
        current.append(sentence)
    if current:
        spans.append(_span(document, current, size, heading_path, context))
    return spans


def _span(document: Document, sentences, size, heading_path, context) -> Span:
    start, end = sentences[0][0], sentences[-1][1]
    atomic = len(sentences) == 1 and not document.fits(start, end, size, heading_path, context)
    return Span(start, end, heading_path, context, atomic)


class SentenceChunker(Chunker):
    """``sentence:size:overlap``: sentences are never cut; ``overlap`` is a number of sentences."""

    def spans(self, document: Document) -> list[Span]:
        return pack_sentences(document, sentence_spans(document.text), self.size, self.overlap)
