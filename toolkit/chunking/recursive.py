"""The ``recursive`` strategy: paragraphs, then lines, then sentences, then words, then characters, each chunk
within its budget (the splitter itself is ``toolkit.chunking.split``, shared with every strategy)."""

from __future__ import annotations

from toolkit.chunking.base import Chunker
from toolkit.chunking.document import Document, Span
from toolkit.chunking.split import PROSE_SEPARATORS, _CountingSplitter, split_range
from toolkit.text.tokens import Cl100kTokenizer


class RecursiveChunker(Chunker):
    """``recursive:size:overlap``: paragraphs → lines → sentences → words, each chunk within budget."""

    separators = PROSE_SEPARATORS

    def spans(self, document: Document) -> list[Span]:
        text = document.text
        if not text:
            return []
        return split_range(document, Span(0, len(text)), self.size, separators=self.separators, overlap=self.overlap)

    def counted_spans(self, document: Document) -> list[tuple[Span, int]]:
        if self.unit != "tokens" or not isinstance(document.tokenizer, Cl100kTokenizer) or not document.text:
            return super().counted_spans(document)
        try:
            # The counting splitter measures bodies alone: a title (context=title) is planned for by a smaller
            # budget, then attached and the spans checked again exactly.
            budget = max(1, self.size - document.reserved)
            counted = _CountingSplitter(document, budget, min(self.overlap, budget - 1), self.separators).run()
        except UnicodeEncodeError as error:  # a lone surrogate reached the engine
            raise document.surrogate_error(error) from error
        if not document.title and document.outline is None:
            return counted
        return self.finish_spans(document, [span for span, _ in counted])
