"""Labelled-query loading: answers by text or offsets, and clear errors naming the line."""

from __future__ import annotations

import json

import pytest

from toolkit.errors import InputError
from toolkit.evaluation.metrics import Span
from toolkit.evaluation.queries import load_queries, occurrences, parse_queries

DOCUMENTS = {
    "returns.md": "Orders can be returned within 30 days. Refunds take 5 days. Refunds take 5 days.",
    "faq.md": "A reset link stays valid for 15 minutes.",
}


def _line(query: str, *answers: dict) -> str:
    return json.dumps({"query": query, "answers": list(answers)})


def test_text_answers_resolve_to_their_unique_span(tmp_path):
    path = tmp_path / "queries.jsonl"
    path.write_text(
        _line("how long to return", {"doc_id": "returns.md", "text": "within 30 days"})
        + "\n\n"  # blank lines are skipped but still counted
        + _line("link validity", {"doc_id": "faq.md", "text": "15 minutes"})
        + "\n",
        encoding="utf-8",
    )
    first, second = load_queries(path, DOCUMENTS)
    assert first.answers == (Span("returns.md", 23, 37),)
    assert DOCUMENTS["returns.md"][23:37] == "within 30 days"
    assert second.line == 3 and second.answers == (Span("faq.md", 29, 39),)


def test_offsets_alone_or_with_text():
    lines = [
        _line("offsets", {"doc_id": "faq.md", "start": 0, "end": 12}),
        _line("both agree", {"doc_id": "faq.md", "text": "A reset link", "start": 0, "end": 12}),
    ]
    a, b = parse_queries(lines, DOCUMENTS)
    assert a.answers == b.answers == (Span("faq.md", 0, 12),)


def test_start_disambiguates_a_repeated_text():
    # "Refunds take 5 days." occurs at 39 and at 60 (39 + 21).
    assert occurrences(DOCUMENTS["returns.md"], "Refunds take 5 days.") == [39, 60]
    (query,) = parse_queries(
        [_line("q", {"doc_id": "returns.md", "text": "Refunds take 5 days.", "start": 60})], DOCUMENTS
    )
    assert query.answers == (Span("returns.md", 60, 80),)


def test_repeated_text_without_offsets_is_an_error_naming_the_line():
    lines = ["", _line("q", {"doc_id": "returns.md", "text": "Refunds take 5 days."})]
    with pytest.raises(InputError, match=r"queries line 2: .* occurs 2 times .*at offsets 39, 60.*add \"start\""):
        parse_queries(lines, DOCUMENTS)


def test_missing_text_is_an_error_naming_the_line(tmp_path):
    path = tmp_path / "q.jsonl"
    path.write_text(_line("q", {"doc_id": "faq.md", "text": "valid for 16 minutes"}) + "\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"q\.jsonl line 1: the answer text 'valid for 16 minutes' is not in 'faq.md'"):
        load_queries(path, DOCUMENTS)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "one JSON object"),
        (json.dumps({"answers": [{"doc_id": "faq.md", "text": "A"}]}), '"query" must be'),
        (json.dumps({"query": "q", "answers": []}), '"answers" must be a non-empty list'),
        (_line("q", {"doc_id": "nope.md", "text": "A"}), "document 'nope.md' is not in the corpus"),
        (_line("q", {"doc_id": "faq.md", "start": 5}), 'needs "text", or both "start" and "end"'),
        (_line("q", {"doc_id": "faq.md", "start": 5, "end": 500}), "are not a span of 'faq.md'"),
        (_line("q", {"doc_id": "faq.md", "start": "5", "end": 9}), "must be a character offset"),
        (
            _line("q", {"doc_id": "faq.md", "text": "reset", "start": 0}),
            "not at offset 0 .*it occurs at offsets 2",
        ),
        (
            _line("q", {"doc_id": "faq.md", "text": "reset", "start": 2, "end": 9}),
            '"end" \\(9\\) does not match',
        ),
    ],
)
def test_malformed_lines_are_clear_errors(line, message):
    with pytest.raises(InputError, match=r"line 1: .*" + message):
        parse_queries([line], DOCUMENTS)


def test_an_empty_file_and_an_unreadable_path_are_errors(tmp_path):
    with pytest.raises(InputError, match="holds no queries"):
        parse_queries(["", "  "], DOCUMENTS)
    with pytest.raises(InputError, match=r"The query file .* cannot be read"):
        load_queries(tmp_path / "missing.jsonl", DOCUMENTS)
