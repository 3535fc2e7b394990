"""Passage assembly and the pieces of the offline ranking that need no database: hits merge when they overlap or
only whitespace lies between them, k passages and the token budget are never exceeded, a hit that would pass the
budget is skipped for a later one that fits, and RRF breaks ties as hybrid_search_chunks does."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from toolkit.errors import InputError
from toolkit.evaluation.retrieval import (
    BM25,
    Retrieval,
    assemble,
    cosine_distances,
    fuse,
    order_by,
    parse_retrieval,
    passage_budget,
    passage_tokens,
    split_retrievals,
    touches,
)

TEXT = "alpha beta. gamma delta.\n\nepsilon zeta. eta theta. iota kappa. lambda mu."


@dataclass
class Hit:
    doc_id: str
    start: int
    end: int
    token_count: int


DOCS = {"a": TEXT, "b": TEXT}


def span(text: str, doc="a") -> Hit:
    start = TEXT.index(text)
    return Hit(doc, start, start + len(text), len(text.split()))


def test_overlapping_and_adjacent_hits_merge_and_free_a_slot():
    hits = [span("alpha beta."), span("gamma delta."), span("epsilon zeta."), span("eta theta.", "b")]
    passages = assemble(hits, 2, 100, DOCS)
    # "alpha beta." and "gamma delta." touch (one space between): one passage; the paragraph break between
    # "gamma delta." and "epsilon zeta." is whitespace too, so the third joins; b's hit takes the second slot.
    assert [(p.doc_id, TEXT[p.start : p.end]) for p in passages] == [
        ("a", "alpha beta. gamma delta.\n\nepsilon zeta."),
        ("b", "eta theta."),
    ]
    # The merged passage: 39 characters at its members' 6 tokens per 36 characters = 6.5, rounded up.
    assert [p.tokens for p in passages] == [7, 2]
    assert [len(p.members) for p in passages] == [3, 1]


def test_merged_tokens_are_the_span_at_the_members_density_rounded_up():
    assert passage_tokens(10, 2, 10) == 2  # one chunk: its own count
    assert passage_tokens(39, 6, 36) == 7
    assert passage_tokens(30, 8, 40) == 6  # overlapping members: the span is shorter than their sum
    assert passage_budget(5, [100, 120, 110], 1.5) == 825
    assert passage_budget(5, [], 1.5) == 0


def test_k_passages_and_the_token_budget_are_never_exceeded():
    hits = [span("alpha beta."), span("eta theta."), span("lambda mu."), span("iota kappa.", "b")]
    passages = assemble(hits, 2, 100, DOCS)
    assert len(passages) == 2  # lambda mu. is a third passage: no slot left
    tight = assemble(hits, 5, 5, DOCS)
    assert sum(p.tokens for p in tight) <= 5
    # "alpha beta." (2) + "eta theta." (2) fit; "lambda mu." (2) would make 6: skipped; nothing later fits
    assert [TEXT[p.start : p.end] for p in tight] == ["alpha beta.", "eta theta."]


def test_a_hit_over_the_budget_is_skipped_for_a_later_one_that_fits():
    big = Hit("a", 0, len(TEXT), 12)
    passages = assemble([big, span("eta theta.", "b")], 3, 5, DOCS)
    assert [(p.doc_id, TEXT[p.start : p.end]) for p in passages] == [("b", "eta theta.")]


def test_once_k_passages_are_open_later_hits_only_extend_them():
    hits = [span("alpha beta."), span("eta theta.", "b"), span("lambda mu."), span("gamma delta.")]
    passages = assemble(hits, 2, 100, DOCS)
    # lambda mu. (a, not touching alpha beta.) would open a third: dropped; gamma delta. touches: extends.
    assert [(p.doc_id, TEXT[p.start : p.end]) for p in passages] == [
        ("a", "alpha beta. gamma delta."),
        ("b", "eta theta."),
    ]


def test_a_document_that_cannot_be_read_touches_only_by_overlap():
    hits = [span("alpha beta.", "c"), span("gamma delta.", "c")]
    assert len(assemble(hits, 5, 100, {})) == 2
    assert touches(None, (0, 14), (6, 20)) and not touches(None, (0, 11), (12, 24))


def test_touching_means_only_whitespace_between():
    assert touches(TEXT, (0, 11), (12, 24))
    assert touches(TEXT, (12, 24), (0, 11))
    assert touches(TEXT, (0, 14), (6, 20))
    assert not touches(TEXT, (0, 5), (12, 24))


def test_fusion_breaks_equal_scores_by_the_better_rank_then_chunk_id():
    ids = ["p", "x", "a", "q", "r", "s", "t", "u", "v"]  # x = 1, y = 2 (id "a")
    # rrf_k 0: x is 2nd by vector and 6th by text (1/2 + 1/6), y 3rd in both (1/3 + 1/3): equal scores.
    vector = [0, 1, 2, 3, 4, 5]
    text = [6, 7, 2, 8, 0, 1]
    ranked = fuse(vector, text, ids, 9, 0)
    assert ranked.index(1) < ranked.index(2)  # x's better rank (2) beats y's (3), although "a" < "x"
    # The same score and the same best rank: chunk id decides.
    assert fuse([0], [1], ["b", "a"], 2, 60) == [1, 0]


def test_bm25_ranks_a_rare_term_above_a_common_one_and_ties_by_chunk_id():
    documents = [{"refund": 1, "order": 1}, {"order": 2}, {"order": 1}, {"refund": 1, "order": 1}]
    bm25 = BM25(documents, [2, 2, 1, 2], 1.2, 0.75)
    scores = bm25.scores(["refund", "order"])
    assert scores[0] == scores[3] > scores[1]
    assert bm25.idf("refund") > bm25.idf("order")
    ranked = sorted(scores, key=lambda i: (-scores[i], ["d", "c", "b", "a"][i]))
    assert ranked[:2] == [3, 0]  # equal scores: chunk id "a" (index 3) before "d"


def test_cosine_ranking_orders_by_distance_then_chunk_id():
    vectors = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]], dtype=np.float32)
    distances = cosine_distances(np.array([[1.0, 0.1]], dtype=np.float32), vectors)[0]
    assert order_by(distances, ["z", "m", "a"], descending=False) == [2, 0, 1]


def test_retrieval_specs_parse_and_refuse():
    assert parse_retrieval("hybrid:rrf_k=60:assemble=off") == Retrieval("hybrid", assemble=False, rrf_k=60)
    assert parse_retrieval(None) == Retrieval()
    assert [r.label for r in split_retrievals("vector, hybrid:rrf_k=60")] == ["vector", "hybrid:rrf_k=60"]
    settings = {
        "k1": 1.2,
        "b": 0.75,
        "rrf_k": 10,
        "candidates": 50,
        "hits_per_passage": 4,
        "passage_chunks": 1.5,
        "postings_limit": 1000,
    }
    resolved = Retrieval("hybrid").resolved(settings)
    assert resolved.label == "hybrid" and resolved.rrf_k == 10
    with pytest.raises(InputError, match="assemble=on or assemble=off"):
        parse_retrieval("hybrid:assemble=maybe")
    with pytest.raises(InputError, match="candidates must be a whole number ≥ 1"):
        Retrieval("hybrid", candidates=0)
