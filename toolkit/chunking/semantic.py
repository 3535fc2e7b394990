"""Semantic chunking: embed every sentence, start a new chunk where similarity to the running chunk drops.

It costs one embedding per sentence at ingest; evaluate it against ``markdown`` or ``sentence`` before
adopting it. The budget still applies: a chunk also closes when the next sentence would not fit.
"""

from __future__ import annotations

from toolkit.chunking.base import Chunker
from toolkit.chunking.document import Document, Span
from toolkit.chunking.sentence import sentence_spans
from toolkit.chunking.similarity import unit_vectors
from toolkit.errors import InputError

DEFAULT_THRESHOLD = 0.5


class SemanticChunker(Chunker):
    """``semantic:size:overlap[:threshold=0.5]``: ``overlap`` counts sentences; needs an ``embedder``."""

    def __init__(self, spec, *, tokenizer=None, embedder=None):
        super().__init__(spec, tokenizer=tokenizer, embedder=embedder)
        if embedder is None or not hasattr(embedder, "embed_documents"):
            raise InputError(
                "The semantic strategy needs an embedder to compare sentences; pass one "
                "(get_chunker(spec, embedder=get_embedder('hashing:64')) or `toolkit chunk --embedder REF`)."
            )
        self.threshold = float(spec.options.get("threshold", DEFAULT_THRESHOLD))

    def spans(self, document: Document) -> list[Span]:
        import numpy as np

        text = document.text
        sentences = sentence_spans(text)
        if not sentences:
            return []
        vectors = unit_vectors(self.embedder, [text[a:b] for a, b in sentences])
        if vectors.shape[0] != len(sentences):
            raise InputError(
                f"The embedder returned {vectors.shape[0]} vectors for {len(sentences)} sentences; "
                "it must return one vector per input text."
            )
        spans: list[Span] = []
        current: list[int] = []
        total = np.zeros(vectors.shape[1])
        for i, (_, end) in enumerate(sentences):
            if current:
                centroid = total / (np.linalg.norm(total) or 1.0)
                similar = float(vectors[i] @ centroid) >= self.threshold
                if not similar or not document.fits(sentences[current[0]][0], end, self.size):
                    spans.append(self._span(document, sentences, current))
                    current = current[-self.overlap :] if self.overlap and similar else []
                    while current and not document.fits(sentences[current[0]][0], end, self.size):
                        current.pop(0)
                    total = vectors[current].sum(axis=0) if current else np.zeros(vectors.shape[1])
            current.append(i)
            total = total + vectors[i]
        spans.append(self._span(document, sentences, current))
        return spans

    def _span(self, document, sentences, indices) -> Span:
        start, end = sentences[indices[0]][0], sentences[indices[-1]][1]
        atomic = len(indices) == 1 and not document.fits(start, end, self.size)
        return Span(start, end, atomic=atomic)
