"""The recommended chunker configuration: one library function of the model's input limit, used by backfill and
eval when no spec is given, and always within the limit it is recommended for."""

from __future__ import annotations

import json

from click.testing import CliRunner

from toolkit import backfill
from toolkit.chunking import RECOMMENDED_RETRIEVAL, get_chunker, recommended_spec
from toolkit.cli import main
from toolkit.embedding import get_embedder
from toolkit.evaluation.retrieval import parse_retrieval


def test_the_recommendation_follows_the_input_limit():
    assert recommended_spec(256) == recommended_spec(512) == recommended_spec(8192) == "recursive:128:64"
    assert recommended_spec(None) == "recursive:128:64"
    assert recommended_spec(128) == "recursive:64:32"  # the measured shape, scaled to a smaller limit
    for limit in (16, 100, 128, 255, 256, 512, None):
        chunker = get_chunker(recommended_spec(limit))  # every recommendation is a valid spec
        if limit is not None:
            # size + a heading path or title must fit the model's own count: cl100k needs fewer tokens than
            # word pieces, so half the limit leaves room
            assert chunker.spec.size <= max(8, limit // 2)
    assert parse_retrieval(RECOMMENDED_RETRIEVAL).mode == "hybrid"


def test_backfill_without_a_chunker_builds_the_recommended_one(database_url, make_model):
    make_model("small", 16, max_input_tokens=256)
    report = backfill.backfill(database_url, "small")
    assert report.chunker_version == get_chunker(recommended_spec(256)).version


def test_eval_without_configs_evaluates_the_recommended_one(tmp_path):
    (tmp_path / "corpus").mkdir()
    text = "Refunds are issued within 14 days. Shipping takes a week."
    (tmp_path / "corpus" / "a.txt").write_text(text, encoding="utf-8")
    queries = tmp_path / "q.jsonl"
    queries.write_text('{"query": "refund time", "answers": [{"doc_id": "a.txt", "text": "within 14 days"}]}\n')
    result = CliRunner().invoke(
        main,
        ["eval", "--corpus", str(tmp_path / "corpus"), "--queries", str(queries), "--model", "hashing:16",
         "--retrieval", "vector:assemble=off", "--no-cache", "--format", "json"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.stdout)["configs"]
    assert row["spec"] == recommended_spec(get_embedder("hashing:16").max_input_tokens)
