"""Boundary-aware chunking: cut the text into small pieces, embed each, and choose the cuts by a dynamic program
that maximises the similarity inside chunks under the token budget (the method of Chroma's ClusterSemanticChunker).

A chunk's reward is the sum of its pieces' pairwise similarities, each less the mean similarity of all pairs of the
document (so a piece that is no more alike than average adds nothing, and one that is less alike costs). The best
segmentation maximises the total reward over chunks whose text fits the budget. Pieces come from the recursive
splitter (paragraphs, lines, sentences, words) at ``piece`` tokens, so no sentence is cut unless it is longer than
a piece. It costs one embedding per piece at ingest; ``semantic`` (a threshold on the running chunk) is the
cheaper greedy cousin.
"""

from __future__ import annotations

import numpy as np

from toolkit.chunking.base import Chunker
from toolkit.chunking.document import Document, Span, trim
from toolkit.chunking.similarity import unit_vectors
from toolkit.chunking.split import split_range
from toolkit.errors import InputError

DEFAULT_PIECE = 50  # tokens, as in the report's configuration


class ClusterChunker(Chunker):
    """``cluster:size:0[:piece=50]``: needs an ``embedder``; overlap must be 0 (the cuts are chosen, not slid)."""

    def __init__(self, spec, *, tokenizer=None, embedder=None):
        super().__init__(spec, tokenizer=tokenizer, embedder=embedder)
        if embedder is None or not hasattr(embedder, "embed_documents"):
            raise InputError(
                "The cluster strategy needs an embedder to compare pieces; pass one "
                "(get_chunker(spec, embedder=get_embedder('hashing:64')) or `toolkit chunk --embedder REF`)."
            )
        if spec.overlap:
            raise InputError(f"The cluster strategy chooses its cuts and takes no overlap; use cluster:{spec.size}:0.")
        self.piece = min(int(spec.options.get("piece", DEFAULT_PIECE)) or DEFAULT_PIECE, spec.size)

    def spans(self, document: Document) -> list[Span]:
        text = document.text
        pieces = [p for p in (trim(text, s) for s in split_range(document, Span(0, len(text)), self.piece)) if p]
        if len(pieces) <= 1:
            return pieces
        vectors = unit_vectors(self.embedder, [text[p.start : p.end] for p in pieces])
        if vectors.shape[0] != len(pieces):
            raise InputError(
                f"The embedder returned {vectors.shape[0]} vectors for {len(pieces)} pieces; "
                "it must return one vector per input text."
            )
        cuts = segment(vectors, lambda s, e: document.fits(pieces[s].start, pieces[e].end, self.size))
        return [Span(pieces[s].start, pieces[e].end) for s, e in cuts]


def segment(vectors: np.ndarray, fits) -> list[tuple[int, int]]:
    """The (first, last) piece of each chunk of the best segmentation: dynamic programming over piece ends, each
    chunk's reward the sum of its pieces' pairwise (similarity - mean similarity). ``fits(first, last)`` says
    whether the pieces make a chunk within the budget; a piece alone always does (it may be atomic)."""
    n = len(vectors)
    total = vectors.sum(axis=0)
    # Mean pairwise similarity without the n x n matrix: |sum v|^2 = sum of all pairs' dot products (unit vectors).
    mean = (float(total @ total) - n) / (n * (n - 1))
    best = np.full(n + 1, -np.inf)
    best[0] = 0.0
    start = np.zeros(n + 1, dtype=int)
    for end in range(1, n + 1):  # chunks ending after piece end - 1
        last = end - 1
        reward = 0.0
        first = last
        while first >= 0:
            if first < last:
                # Adding piece `first` adds its similarity to every piece already in the chunk, counted twice
                # (the matrix is symmetric), as the report's sum over the sub-matrix does.
                reward += 2.0 * float((vectors[first + 1 : last + 1] @ vectors[first] - mean).sum())
                if not fits(first, last):
                    break
            candidate = best[first] + reward
            if candidate > best[end]:
                best[end], start[end] = candidate, first
            first -= 1
    cuts = []
    end = n
    while end > 0:
        cuts.append((int(start[end]), end - 1))
        end = int(start[end])
    return cuts[::-1]
