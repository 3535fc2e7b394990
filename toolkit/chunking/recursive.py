"""Recursive splitting: paragraphs, then lines, then sentences, then words, then characters.

``split_range`` is also the fallback every other strategy uses for a piece that is over its budget;
it never cuts inside a protected range (a code fence or a table) unless told to.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from itertools import pairwise

from toolkit.chunking.base import Chunker, Document, Span
from toolkit.chunking.sentence import SENTENCE_BOUNDARY

PROSE_SEPARATORS = (
    re.compile(r"\n[ \t]*\n\s*"),  # blank lines: paragraphs
    re.compile(r"\n"),  # lines
    SENTENCE_BOUNDARY,  # sentences
    re.compile(r"[ \t]+"),  # words
)


def split_range(
    document: Document,
    span: Span,
    budget: int,
    *,
    separators=PROSE_SEPARATORS,
    overlap: int = 0,
    protected: list[tuple[int, int]] | None = None,
    in_tokens: bool = False,
    ignore_protection: bool = False,
) -> list[Span]:
    """Split ``span`` into spans whose size is at most ``budget`` (heading path and context included).

    Cuts go after a separator match, trying coarser separators first; pieces are packed greedily, with
    ``overlap`` (same unit) of trailing pieces repeated at the start of the next span. A cut is never
    placed strictly inside a ``protected`` range; a protected range that alone is over the budget comes
    back as one atomic span (unless ``ignore_protection``, used for the embedding model's hard limit).
    """
    splitter = _Splitter(document, span, budget, separators, overlap, protected or [], in_tokens)
    splitter.ignore_protection = ignore_protection
    return splitter.run()


class _Splitter:
    def __init__(self, document, span, budget, separators, overlap, protected, in_tokens):
        self.document = document
        self.text = document.text
        self.heading_path = span.heading_path
        self.context = span.context
        self.span = span
        self.budget = budget
        self.separators = separators
        self.overlap = overlap
        self.protected = sorted(protected)
        self.protected_starts = [start for start, _ in self.protected]
        self.in_tokens = in_tokens
        self.ignore_protection = False
        self.out: list[Span] = []

    def fits(self, start: int, end: int, budget: int | None = None) -> bool:
        budget = self.budget if budget is None else budget
        if self.in_tokens and self.document.unit == "chars":
            return self.exact_size(start, end) <= budget
        return self.document.fits(start, end, budget, self.heading_path, self.context)

    def exact_size(self, start: int, end: int) -> int:
        if self.in_tokens or self.document.unit == "tokens":
            # Measured as the chunk will be stored (whitespace trimmed), so the count is cached once.
            text = self.text
            while start < end and text[start].isspace():
                start += 1
            while end > start and text[end - 1].isspace():
                end -= 1
            return self.document.tokens(start, end) + self.document.prefix_tokens(self.heading_path, self.context)
        return end - start

    def allowed(self, position: int) -> bool:
        if self.ignore_protection or not self.protected:
            return True
        i = bisect_right(self.protected_starts, position) - 1
        return i < 0 or not (self.protected[i][0] < position < self.protected[i][1])

    def run(self) -> list[Span]:
        self.split(self.span.start, self.span.end, 0)
        return self.out

    def emit(self, start: int, end: int, atomic: bool = False) -> None:
        self.out.append(Span(start, end, self.heading_path, self.context, atomic or self.span.atomic))

    def split(self, start: int, end: int, level: int) -> None:
        if self.exact_size(start, end) <= self.budget:
            self.emit(start, end)
            return
        if level >= len(self.separators):
            self.split_characters(start, end)
            return
        cuts = [m.end() for m in self.separators[level].finditer(self.text, start, end)]
        if cuts and cuts[-1] >= end:
            cuts.pop()
        if self.protected and not self.ignore_protection:
            cuts = [cut for cut in cuts if self.allowed(cut)]
        if not cuts:
            self.split(start, end, level + 1)
            return
        bounds = [start, *cuts, end]
        parts = list(pairwise(bounds))
        self.pack(parts, level)

    def pack(self, parts: list[tuple[int, int]], level: int) -> None:
        n = len(parts)
        i = 0
        fits = self.fits
        # Where the planning estimate alone says "fits" (see Document.fits), the greedy extension below
        # would say so too: jump there by bisection instead of asking part by part.
        sure = None
        if not (self.in_tokens and self.document.unit == "chars"):  # that case measures exactly (see fits)
            sure = self.document.sure_fit_ends(parts, self.budget, self.heading_path, self.context)
        while i < n:
            start = parts[i][0]
            j = i
            if sure is not None:
                ends, threshold = sure
                j = max(i, bisect_left(ends, threshold(start), i) - 1)
            while j + 1 < n and fits(start, parts[j + 1][1]):
                j += 1
            end = parts[j][1]
            if j == i and not fits(start, end):
                self.split(start, end, level + 1)
            else:
                self.emit(start, end)
            if j + 1 >= n:
                break
            k = j + 1
            if self.overlap:
                while k - 1 > i and fits(parts[k - 1][0], end, self.overlap):
                    k -= 1
            i = k

    def split_characters(self, start: int, end: int) -> None:
        """Last resort (one word longer than the budget): the longest prefixes that fit."""
        if not self.ignore_protection and self.protected and not all(self.allowed(p) for p in (start + 1, end - 1)):
            self.emit(start, end, atomic=True)
            return
        while start < end:
            low, high = start + 1, end
            while low < high:  # largest cut with size <= budget
                middle = (low + high + 1) // 2
                if self.exact_size(start, middle) <= self.budget:
                    low = middle
                else:
                    high = middle - 1
            if self.exact_size(start, low) > self.budget:
                # The heading path and context alone fill the budget: one-character chunks would be
                # absurd, so the unit is kept whole and flagged.
                self.emit(start, end, atomic=True)
                return
            self.emit(start, low)
            start = low


class RecursiveChunker(Chunker):
    """``recursive:size:overlap``: paragraphs → lines → sentences → words, each chunk within budget."""

    separators = PROSE_SEPARATORS

    def spans(self, document: Document) -> list[Span]:
        text = document.text
        if not text:
            return []
        return split_range(document, Span(0, len(text)), self.size, separators=self.separators, overlap=self.overlap)
