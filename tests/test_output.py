"""What commands print for people: counts agree with their number, and numbers carry no trailing zeros."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from toolkit.cli import main
from toolkit.cli._output import number, plural


@pytest.mark.parametrize(
    ("value", "shown"),
    [(286.7, "286.7"), (0.8333333, "0.8333"), (1.0, "1.0"), (12000.5, "12,000.5"), (0.0, "0.0"), (2.5e-05, "0.0")],
)
def test_a_float_is_shown_with_at_most_four_decimals_and_no_trailing_zeros(value, shown):
    assert number(value) == shown


def test_counts_agree_with_their_number():
    assert [plural(n, "query", "queries") for n in (0, 1, 2, 1200)] == [
        "0 queries",
        "1 query",
        "2 queries",
        "1,200 queries",
    ]
    assert plural(1, "document") == "1 document" and plural(3, "document") == "3 documents"


def test_chunk_statistics_print_the_mean_as_people_write_it(tmp_path):
    (tmp_path / "a.md").write_text("# A\n\n" + "One two three four five six seven. " * 40 + "\n")
    result = CliRunner().invoke(main, ["chunk", str(tmp_path / "a.md"), "--spec", "fixed:30:0", "--format", "stats"])
    assert result.exit_code == 0, result.output
    mean = next(line.split()[1] for line in result.output.splitlines() if line.startswith("tokens_mean"))
    assert not mean.endswith("0") or mean.endswith(".0"), mean
    assert len(mean.split(".")[1]) <= 4


def test_one_document_and_one_query_are_singular(database_url, tmp_path, make_model):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "faq.md").write_text("# FAQ\n\nA reset link stays valid for 15 minutes.\n")
    queries = tmp_path / "queries.jsonl"
    queries.write_text(json.dumps({"query": "reset link", "answers": [{"doc_id": "faq.md", "text": "15 minutes"}]}))
    make_model("h", 8)
    runner = CliRunner()
    base = ["--database-url", database_url]
    ingested = runner.invoke(main, [*base, "ingest", str(corpus), "--tenant", "acme"])
    assert ingested.exit_code == 0 and "1 document for tenant acme:" in ingested.output.splitlines()[0], ingested.output
    built = runner.invoke(main, [*base, "backfill", "--model", "h", "--chunker", "markdown:40:0"])
    assert built.exit_code == 0 and "1 document chunked, 1 row written (1 embedded)" in built.output, built.output
    verified = runner.invoke(
        main, [*base, "verify", "--model", "h", "--queries", str(queries), "--min-recall", "0", "--min-queries", "1"]
    )
    assert "1 query, tenant acme" in verified.output, verified.output
