"""Retrieval metrics over character spans: recall@k, MRR, nDCG@k, span recall / precision / IoU, precision-Ω.

A span is `(doc_id, start, end)` with `end` exclusive. Retrieved spans are the chunks returned for one query,
best first; gold spans are the query's answers. Definitions and worked examples are in docs/evaluation.md.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import NamedTuple


class Span(NamedTuple):
    """Characters `start` to `end` (exclusive) of document `doc_id`."""

    doc_id: str
    start: int
    end: int

    @property
    def length(self) -> int:
        return max(self.end - self.start, 0)

    def contains(self, other: Span) -> bool:
        return self.doc_id == other.doc_id and self.start <= other.start and other.end <= self.end


def _spans(spans: Iterable[Sequence]) -> list[Span]:
    return [span if isinstance(span, Span) else Span(*span) for span in spans]


def _merge(spans: Iterable[Span]) -> list[Span]:
    """The union of spans as disjoint, sorted spans."""
    merged: list[Span] = []
    for span in sorted((s for s in spans if s.length), key=lambda s: (s.doc_id, s.start)):
        last = merged[-1] if merged else None
        if last and last.doc_id == span.doc_id and span.start <= last.end:
            merged[-1] = Span(last.doc_id, last.start, max(last.end, span.end))
        else:
            merged.append(span)
    return merged


def _covered(gold: Sequence[Span], retrieved: Sequence[Span]) -> int:
    """Gold characters that lie in at least one retrieved span, each character counted once."""
    pieces = [
        Span(g.doc_id, max(g.start, r.start), min(g.end, r.end))
        for g in _merge(gold)
        for r in retrieved
        if g.doc_id == r.doc_id and max(g.start, r.start) < min(g.end, r.end)
    ]
    return sum(s.length for s in _merge(pieces))


def first_hit_rank(retrieved: Sequence, gold: Sequence, k: int | None = None) -> int | None:
    """1-based rank of the first retrieved span that wholly contains some gold span, or None."""
    retrieved, gold = _spans(retrieved), _spans(gold)
    for rank, chunk in enumerate(retrieved[:k] if k is not None else retrieved, start=1):
        if any(chunk.contains(answer) for answer in gold):
            return rank
    return None


def recall_at_k(retrieved: Sequence, gold: Sequence, k: int) -> float:
    """1.0 when a whole gold span lies inside ONE of the top-k retrieved spans, else 0.0."""
    return 1.0 if first_hit_rank(retrieved, gold, k) is not None else 0.0


def reciprocal_rank(retrieved: Sequence, gold: Sequence, k: int | None = None) -> float:
    """1 / rank of the first retrieved span holding a whole gold span (0.0 if none); MRR is its mean."""
    rank = first_hit_rank(retrieved, gold, k)
    return 0.0 if rank is None else 1.0 / rank


def ndcg_at_k(retrieved: Sequence, gold: Sequence, k: int) -> float:
    """Binary-gain nDCG@k: each gold span earns gain 1 at the first rank whose span wholly contains it.

    DCG = sum of 1 / log2(rank + 1) over those ranks; the ideal puts min(#gold, k) gains at ranks 1, 2, ...
    A repeat of an already found answer (overlapping chunks) earns nothing.
    """
    retrieved, gold = _spans(retrieved)[:k], list(dict.fromkeys(_spans(gold)))
    if not gold:
        return 0.0
    found: set[Span] = set()
    dcg = 0.0
    for rank, chunk in enumerate(retrieved, start=1):
        new = [answer for answer in gold if answer not in found and chunk.contains(answer)]
        if new:
            found.update(new)
            dcg += len(new) / math.log2(rank + 1)
    ideal = sum(1 / math.log2(rank + 1) for rank in range(1, min(len(gold), k) + 1))
    return dcg / ideal


def span_recall(retrieved: Sequence, gold: Sequence) -> float:
    """Share of gold characters that appear in any retrieved span."""
    retrieved, gold = _spans(retrieved), _spans(gold)
    total = sum(s.length for s in _merge(gold))
    return _covered(gold, retrieved) / total if total else 0.0


def span_precision(retrieved: Sequence, gold: Sequence) -> float:
    """Share of retrieved characters that are gold; overlapping retrieved text counts each time retrieved."""
    retrieved, gold = _spans(retrieved), _spans(gold)
    total = sum(s.length for s in retrieved)
    return _covered(gold, retrieved) / total if total else 0.0


def span_iou(retrieved: Sequence, gold: Sequence) -> float:
    """|gold ∩ retrieved| / |gold ∪ retrieved|, where the union counts every retrieved character each time
    it is retrieved plus the gold characters no retrieved span covers (Chroma's definition)."""
    retrieved, gold = _spans(retrieved), _spans(gold)
    covered = _covered(gold, retrieved)
    union = sum(s.length for s in retrieved) + sum(s.length for s in _merge(gold)) - covered
    return covered / union if union else 0.0


def precision_omega(chunks: Sequence, gold: Sequence) -> float:
    """Precision if retrieval returned exactly the chunks holding any gold text: the ceiling these chunks set.

    `chunks` is every chunk of the corpus (or at least of the gold documents), not the retrieved ones.
    """
    chunks, gold = _spans(chunks), _spans(gold)
    holding = [c for c in chunks if any(c.doc_id == g.doc_id and c.start < g.end and g.start < c.end for g in gold)]
    return span_precision(holding, gold)


def cut_answers(chunks: Sequence, gold: Sequence) -> int:
    """How many gold spans no single chunk holds whole: answers a chunk boundary cuts in two."""
    chunks, gold = _spans(chunks), _spans(gold)
    return sum(not any(chunk.contains(answer) for chunk in chunks) for answer in gold)


@dataclass(frozen=True)
class QueryScores:
    """Every metric for one query (`k` applies to recall, MRR and nDCG; span metrics use all retrieved)."""

    recall: float
    reciprocal_rank: float
    ndcg: float
    span_recall: float
    span_precision: float
    span_iou: float
    retrieved_chars: int
    precision_omega: float | None = None


def score_query(retrieved: Sequence, gold: Sequence, k: int, chunks: Sequence | None = None) -> QueryScores:
    """Score one query's retrieval (best first) against its gold spans; only the top k retrieved count.

    Give `chunks` (all chunks of the corpus) to get precision-Ω as well.
    """
    top = _spans(retrieved)[:k]
    return QueryScores(
        recall=recall_at_k(top, gold, k),
        reciprocal_rank=reciprocal_rank(top, gold, k),
        ndcg=ndcg_at_k(top, gold, k),
        span_recall=span_recall(top, gold),
        span_precision=span_precision(top, gold),
        span_iou=span_iou(top, gold),
        retrieved_chars=sum(s.length for s in top),
        precision_omega=None if chunks is None else precision_omega(chunks, gold),
    )


@dataclass(frozen=True)
class RetrievalMetrics:
    """Means over queries of each `QueryScores` field (recall is recall@k, reciprocal_rank is MRR)."""

    queries: int
    k: int
    recall: float
    mrr: float
    ndcg: float
    span_recall: float
    span_precision: float
    span_iou: float
    retrieved_chars: float
    precision_omega: float | None

    def to_dict(self) -> dict:
        return asdict(self)


def aggregate(scores: Sequence[QueryScores], k: int) -> RetrievalMetrics:
    """Mean of every metric over the queries (each query weighs the same)."""
    n = len(scores)

    def mean(name: str) -> float:
        return sum(getattr(s, name) for s in scores) / n if n else 0.0

    omegas = [s.precision_omega for s in scores if s.precision_omega is not None]
    return RetrievalMetrics(
        queries=n,
        k=k,
        recall=mean("recall"),
        mrr=mean("reciprocal_rank"),
        ndcg=mean("ndcg"),
        span_recall=mean("span_recall"),
        span_precision=mean("span_precision"),
        span_iou=mean("span_iou"),
        retrieved_chars=mean("retrieved_chars"),
        precision_omega=sum(omegas) / len(omegas) if omegas else None,
    )


def evaluate_retrieval(
    results: Iterable[tuple[Sequence, Sequence]], k: int, chunks: Sequence | None = None
) -> RetrievalMetrics:
    """Score `(retrieved, gold)` pairs, one per query, and average them."""
    return aggregate([score_query(retrieved, gold, k, chunks) for retrieved, gold in results], k)
