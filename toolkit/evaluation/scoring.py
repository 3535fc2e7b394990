"""Scoring one configuration's retrieval on labelled queries: the units each query got (chunks, merged passages or
small-to-big contexts), every metric of ``toolkit.evaluation.metrics``, cut answers and sentences, and what the
retrieved text costs; the same for the offline run and for a stored version."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from toolkit.evaluation.metrics import Span, aggregate, cut_answers, score_query
from toolkit.evaluation.queries import LabelledQuery
from toolkit.evaluation.report import ConfigResult, Unit


def score_config(
    spec: str,
    chunker_version: str,
    chunks: Sequence,
    parents: dict | None,
    hits: Sequence[Sequence],
    documents: dict[str, str],
    queries: Sequence[LabelledQuery],
    k: int,
    input_price: float,
    *,
    budget: int | None = None,
    retrieved: Sequence[Sequence] | None = None,
) -> ConfigResult:
    """Score one configuration from its searched ``chunks``, its small-to-big ``parents`` (chunk id → parent,
    or None), and per query the chunks found, best first (for small-to-big, enough to make k contexts). With a
    token ``budget`` the hits are assembled into at most k passages within it
    (`toolkit.evaluation.retrieval.assemble`); ``retrieved`` gives per query what was handed over instead (units with
    doc id, span and tokens, as served)."""
    from toolkit.chunking.files import sentences_cut

    small_to_big = parents is not None
    units = list(parents.values()) if small_to_big else list(chunks)
    spans_by_doc: dict[str, list[Span]] = defaultdict(list)
    for unit in units:
        spans_by_doc[unit.doc_id].append(Span(unit.doc_id, unit.start, unit.end))
    scored, tokens, counts = [], [], []
    for n, (q, found) in enumerate(zip(queries, hits, strict=True)):
        if retrieved is not None:
            retrieved_units = list(retrieved[n])
        elif small_to_big:
            retrieved_units = _contexts(found, parents, documents, k)
        elif budget is not None:
            retrieved_units = _passages(found, documents, k, budget)
        else:
            retrieved_units = [_unit(c) for c in found[:k]]
        counts.append(len(retrieved_units))
        gold_docs = {span.doc_id for span in q.answers}
        candidates = [span for doc in gold_docs for span in spans_by_doc.get(doc, [])]
        scored.append(score_query([(u.doc_id, u.start, u.end) for u in retrieved_units], q.answers, k, candidates))
        tokens.append(sum(u.tokens for u in retrieved_units))
    metrics = aggregate(scored, k)
    first_hits = [_first_hit(s, q, k) for s, q in zip(scored, queries, strict=True)]
    hits_at = [sum(1 for rank in first_hits if rank is not None and rank <= depth_) for depth_ in range(1, k + 1)]
    all_gold = [span for q in queries for span in q.answers]
    all_units = [Span(u.doc_id, u.start, u.end) for u in units]
    sentences = cut = 0
    by_doc = defaultdict(list)
    for unit in units:
        by_doc[unit.doc_id].append(unit)
    for doc_id, doc_units in by_doc.items():
        total, doc_cut = sentences_cut(documents[doc_id], doc_units)
        sentences += total
        cut += doc_cut
    mean_tokens = sum(tokens) / len(tokens)
    return ConfigResult(
        spec=spec,
        chunker_version=chunker_version,
        chunks=len(chunks),
        parents=len(parents) if small_to_big else None,
        mean_chunk_tokens=sum(c.token_count for c in chunks) / len(chunks),
        mean_chunk_chars=sum(len(c.text) for c in chunks) / len(chunks),
        answers=len(all_gold),
        cut_answers=cut_answers(all_units, all_gold),
        sentences=sentences,
        cut_sentences=cut,
        recall=metrics.recall,
        mrr=metrics.mrr,
        ndcg=metrics.ndcg,
        span_recall=metrics.span_recall,
        span_precision=metrics.span_precision,
        span_iou=metrics.span_iou,
        precision_omega=metrics.precision_omega,
        retrieved_tokens=mean_tokens,
        retrieved_chars=metrics.retrieved_chars,
        input_cost_per_query=mean_tokens * input_price / 1e6,
        recall_at=[h / len(queries) for h in hits_at],
        hits_at=hits_at,
        ranks=first_hits,
        passages=sum(counts) / len(counts),
    )


def _unit(chunk) -> Unit:
    return Unit(chunk.doc_id, chunk.start, chunk.end, chunk.token_count)


def _first_hit(scores, query: LabelledQuery, k: int) -> int | None:
    # The reciprocal rank already holds the rank of the first whole answer (0 when none in the top k).
    return round(1 / scores.reciprocal_rank) if scores.reciprocal_rank else None


def _passages(hits: list, documents: dict[str, str], k: int, budget: int) -> list[Unit]:
    """Hits assembled into passages as ``toolkit.search_passages`` assembles them
    (`toolkit.evaluation.retrieval.assemble`)."""
    from toolkit.evaluation.retrieval import assemble

    return [Unit(p.doc_id, p.start, p.end, p.tokens) for p in assemble(hits, k, budget, documents)]


def _contexts(hits: list, parents: dict, documents: dict[str, str], k: int) -> list[Unit]:
    """Small-to-big: each hit's parent span (or the hit itself without one); spans of a document that
    overlap merge into one context, ranked by its best hit; the first k contexts."""
    from toolkit.chunking import compose_embed_text
    from toolkit.text.tokens import count_tokens

    pieces = []  # (best rank, doc_id, start, end, the parent chunk or hit)
    for rank, hit in enumerate(hits):
        parent = parents.get(hit.parent_id, hit)
        pieces.append((rank, hit.doc_id, parent.start, parent.end, parent))
    groups: list[dict] = []
    for doc_id in dict.fromkeys(p[1] for p in pieces):
        current = None
        for piece in sorted((p for p in pieces if p[1] == doc_id), key=lambda p: (p[2], p[3], p[0])):
            if current is not None and piece[2] < current["end"]:
                current["end"] = max(current["end"], piece[3])
                current["best"] = min(current["best"], piece[0])
                current["members"][piece[4].chunk_id] = piece[4]
            else:
                current = {"doc_id": doc_id, "start": piece[2], "end": piece[3], "best": piece[0]}
                current["members"] = {piece[4].chunk_id: piece[4]}
                groups.append(current)
    contexts = []
    for group in sorted(groups, key=lambda g: g["best"])[:k]:
        members = list(group["members"].values())
        if len(members) == 1:
            tokens = members[0].token_count
        else:
            first = min(members, key=lambda c: c.start)
            body = documents[group["doc_id"]][group["start"] : group["end"]]
            tokens = count_tokens(compose_embed_text(first.heading_path, "", body))
        contexts.append(Unit(group["doc_id"], group["start"], group["end"], tokens))
    return contexts
