"""Retrieval metrics against cases computed by hand; each expected number shows its arithmetic."""

from __future__ import annotations

import math

import pytest

from toolkit.evaluation.metrics import (
    Span,
    aggregate,
    cut_answers,
    evaluate_retrieval,
    first_hit_rank,
    ndcg_at_k,
    precision_omega,
    recall_at_k,
    reciprocal_rank,
    score_query,
    span_iou,
    span_precision,
    span_recall,
)


def test_overlapping_chunks_answer_found_at_rank_two():
    gold = [("d", 50, 70)]  # 20 characters
    # Chunk 1 stops at 60: half the answer. Chunk 2 (40–100) holds all of it. Chunk 3 is another document.
    retrieved = [("d", 0, 60), ("d", 40, 100), ("x", 0, 50)]
    assert first_hit_rank(retrieved, gold) == 2
    assert recall_at_k(retrieved, gold, 1) == 0.0
    assert recall_at_k(retrieved, gold, 2) == 1.0
    assert reciprocal_rank(retrieved, gold) == 0.5  # 1 / 2
    assert ndcg_at_k(retrieved, gold, 3) == pytest.approx(1 / math.log2(3))  # gain at rank 2; ideal at rank 1: 1/1
    # Gold characters covered: 50–60 (chunk 1) ∪ 50–70 (chunk 2) = 50–70 = 20 of 20, each counted once.
    assert span_recall(retrieved, gold) == 1.0
    # Retrieved characters, overlap counted each time: 60 + 60 + 50 = 170; 20 of them are gold.
    assert span_precision(retrieved, gold) == pytest.approx(20 / 170)
    # IoU: 20 / (170 retrieved + 20 gold − 20 shared) = 20 / 170.
    assert span_iou(retrieved, gold) == pytest.approx(20 / 170)


def test_answer_spanning_two_chunks_is_a_recall_miss_but_a_partial_span_recall():
    gold = [("d", 90, 120)]  # 30 characters across the boundary at 100
    both = [("d", 0, 100), ("d", 100, 200)]
    assert recall_at_k(both, gold, 5) == 0.0  # neither chunk holds the whole answer
    assert reciprocal_rank(both, gold) == 0.0
    assert ndcg_at_k(both, gold, 5) == 0.0
    assert span_recall(both, gold) == 1.0  # 10 + 20 = 30 of 30 characters
    assert span_precision(both, gold) == pytest.approx(30 / 200)
    assert span_iou(both, gold) == pytest.approx(30 / (200 + 30 - 30))
    first_only = both[:1]
    assert span_recall(first_only, gold) == pytest.approx(10 / 30)  # 90–100
    assert span_precision(first_only, gold) == pytest.approx(10 / 100)
    assert span_iou(first_only, gold) == pytest.approx(10 / (100 + 30 - 10))  # 10 / 120
    assert cut_answers(both, gold) == 1


def test_answer_in_another_document_scores_nothing():
    gold = [("b.md", 10, 20)]
    retrieved = [("a.md", 0, 100)]  # same offsets would overlap, but it is another document
    scores = score_query(retrieved, gold, k=5)
    assert (scores.recall, scores.reciprocal_rank, scores.ndcg) == (0.0, 0.0, 0.0)
    assert (scores.span_recall, scores.span_precision, scores.span_iou) == (0.0, 0.0, 0.0)
    assert scores.retrieved_chars == 100


def test_empty_retrieval_scores_zero_without_dividing_by_zero():
    scores = score_query([], [("d", 0, 10)], k=5)
    assert scores == type(scores)(
        recall=0.0,
        reciprocal_rank=0.0,
        ndcg=0.0,
        span_recall=0.0,
        span_precision=0.0,
        span_iou=0.0,
        retrieved_chars=0,
    )


def test_ndcg_credits_each_answer_once_and_ignores_duplicates():
    gold = [("d", 10, 20), ("d", 300, 320)]
    retrieved = [("d", 0, 50), ("d", 5, 60), ("d", 290, 400)]  # rank 2 repeats the answer rank 1 found
    # DCG = 1/log2(2) + 1/log2(4) = 1 + 0.5 = 1.5; ideal = 1/log2(2) + 1/log2(3) = 1 + 0.63093 = 1.63093.
    assert ndcg_at_k(retrieved, gold, 3) == pytest.approx(1.5 / (1 + 1 / math.log2(3)))
    # With k = 2 only the first answer is found: DCG = 1; ideal for 2 answers in 2 slots is still 1.63093.
    assert ndcg_at_k(retrieved, gold, 2) == pytest.approx(1 / (1 + 1 / math.log2(3)))
    assert recall_at_k(retrieved, gold, 1) == 1.0  # any one whole answer is a hit


def test_only_the_top_k_count_in_score_query():
    gold = [("d", 10, 20)]
    retrieved = [("d", 100, 200), ("d", 200, 300), ("d", 0, 50)]
    at_2 = score_query(retrieved, gold, k=2)
    assert at_2.recall == 0.0 and at_2.retrieved_chars == 200  # the hit at rank 3 is not looked at
    at_3 = score_query(retrieved, gold, k=3)
    assert at_3.recall == 1.0 and at_3.reciprocal_rank == pytest.approx(1 / 3)
    # 10 gold characters of 100 + 100 + 50 = 250 retrieved.
    assert at_3.span_precision == pytest.approx(10 / 250)


def test_precision_omega_uses_every_chunk_holding_gold_text():
    chunks = [("d", 0, 100), ("d", 80, 180), ("d", 160, 260), ("e", 0, 500)]
    gold = [("d", 90, 110)]  # 20 characters
    # Chunks holding gold text: 0–100 (90–100) and 80–180 (90–110); 20 gold characters of 100 + 100 = 200.
    assert precision_omega(chunks, gold) == pytest.approx(20 / 200)
    assert score_query([], gold, k=5, chunks=chunks).precision_omega == pytest.approx(0.1)


def test_aggregate_is_the_mean_over_queries_and_accepts_spans_or_tuples():
    hit = ([Span("d", 0, 100)], [Span("d", 10, 20)])  # recall 1, RR 1, precision 10/100
    miss = ([("d", 0, 100)], [("d", 200, 210)])  # recall 0, RR 0, precision 0
    metrics = evaluate_retrieval([hit, miss], k=5)
    assert metrics.queries == 2
    assert metrics.recall == 0.5  # (1 + 0) / 2
    assert metrics.mrr == 0.5
    assert metrics.span_precision == pytest.approx((0.1 + 0.0) / 2)
    assert metrics.retrieved_chars == 100
    assert metrics.precision_omega is None
    assert aggregate([], k=5).recall == 0.0
    assert metrics.to_dict()["recall"] == 0.5


def test_cut_answers_counts_gold_spans_no_chunk_holds_whole():
    chunks = [("d", 0, 100), ("d", 100, 200), ("e", 0, 50)]
    gold = [("d", 10, 20), ("d", 90, 120), ("e", 40, 60)]
    assert cut_answers(chunks, gold) == 2  # 90–120 crosses 100; 40–60 runs past the end of e's only chunk
