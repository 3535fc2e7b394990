"""The query log (opt-in, sampled, tenant-scoped, pruned) and the shadow comparison that replays questions on the
active version and a candidate: overlap of the returned text by character spans, first results changed, latency."""

from __future__ import annotations

import json
import shutil
import uuid
from datetime import timedelta
from urllib.parse import urlsplit, urlunsplit

import pytest
from click.testing import CliRunner

from toolkit import cutover, search
from toolkit.backfill import backfill
from toolkit.cli import main
from toolkit.db.connection import connect
from toolkit.errors import InputError
from toolkit.evaluation.queries import SAMPLE_DOCS, SAMPLE_QUERIES
from toolkit.ingest import ingest
from toolkit.shadow import Question, questions_from_file, shadow, span_overlap
from toolkit.store.query_log import prune_query_log, query_log_status, set_query_log

CHAPTERS = ("row-security.md", "indexes.md")


def as_user(url: str, user: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=f"{user}@{parts.netloc.split('@')[-1]}"))


def sample_questions(limit: int) -> list[str]:
    found = []
    for line in SAMPLE_QUERIES.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        if all(a["doc_id"] in CHAPTERS for a in record["answers"]):
            found.append(record["query"])
    return found[:limit]


@pytest.fixture
def corpus(conn, tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    for name in CHAPTERS:
        shutil.copyfile(SAMPLE_DOCS / name, docs / name)
    ingest(conn, [docs], "acme")
    return docs


def test_span_overlap_counts_characters_both_returned():
    assert span_overlap([("a", 0, 10)], [("a", 0, 10)]) == 1.0
    assert span_overlap([("a", 0, 10)], [("a", 5, 15)]) == 5 / 15
    assert span_overlap([("a", 0, 10)], [("b", 0, 10)]) == 0.0
    assert span_overlap([("a", 0, 10), ("a", 5, 10)], [("a", 0, 5)]) == 0.5  # overlapping spans count once
    assert span_overlap([], []) == 1.0


def test_the_query_log_is_off_by_default_then_logs_a_sampled_tenant_scoped_share(
    conn, database_url, make_model, corpus
):
    make_model("h", 32, model_name="32")
    version = backfill(database_url, "h", "recursive:120:0").version
    cutover.activate_version(conn, version, force=True)
    name = f"app_{uuid.uuid4().hex[:8]}"
    conn.execute(f"CREATE ROLE {name} LOGIN IN ROLE toolkit_reader")
    try:
        with connect(as_user(database_url, name)) as app:
            search.search(app, "Which policies apply?", "acme", 3)
            assert query_log_status(conn).questions == 0  # off by default
            with pytest.raises(Exception, match="permission denied"):
                set_query_log(app, 1.0)  # not the application's decision
            set_query_log(conn, 1.0, timedelta(days=3))
            search._log_rate.clear()
            for question in ("Which policies apply?", "How is a partial index used?"):
                hits = search.search(app, question, "acme", 3, request_key="user-9")
                assert hits
            # the application may append, never read
            with pytest.raises(Exception, match="permission denied"):
                app.execute("SELECT * FROM toolkit.query_log").fetchall()
            app.rollback()
        rows = conn.execute(
            "SELECT tenant, question, version, k, request_key, jsonb_array_length(results) FROM toolkit.query_log"
            " ORDER BY logged_at"
        ).fetchall()
        assert rows == [
            ("acme", "Which policies apply?", version, 3, "user-9", 3),
            ("acme", "How is a partial index used?", version, 3, "user-9", 3),
        ]
        status = query_log_status(conn)
        assert (status.sample_rate, status.retention, status.questions) == (1.0, timedelta(days=3), 2)
        conn.execute("UPDATE toolkit.query_log SET logged_at = now() - interval '4 days' WHERE question LIKE 'Which%'")
        assert prune_query_log(conn) == 1
        set_query_log(conn, 0)
        search._log_rate.clear()
        with connect(as_user(database_url, name)) as app:
            search.search(app, "Which policies apply?", "acme", 3)
        assert query_log_status(conn).questions == 1
    finally:
        search._log_rate.clear()
        conn.execute(f"DROP OWNED BY {name}")
        conn.execute(f"DROP ROLE {name}")


def test_bad_query_log_settings_are_refused(conn):
    for rate in (-0.1, 1.5, float("nan"), float("inf")):
        with pytest.raises(InputError, match="from 0 to 1"):
            set_query_log(conn, rate)
    with pytest.raises(InputError, match="longer than zero"):
        set_query_log(conn, 0.5, timedelta(0))
    assert query_log_status(conn).sample_rate == 0


@pytest.mark.slow
def test_shadow_tells_a_good_candidate_from_a_lexical_one_and_a_nonsense_one(conn, database_url, corpus, tmp_path):
    """MiniLM live; as candidates e5 (another good model), hashing (bag of words, not semantic) and a nonsense
    model (e5's vectors shuffled between its chunks: any question ranks unrelated text), on the sample's
    questions."""
    from toolkit.store.models import register_model

    register_model(conn, "minilm", "sentence-transformers", "all-MiniLM-L6-v2")
    register_model(conn, "e5", "e5", "multilingual-e5-small")
    register_model(conn, "hash", "hashing", "384")
    # The chunker each model is recommended (the default): the chunks test_readme_lifecycle embeds with e5 (the
    # session's embedding cache holds them), and the same chunks for every candidate.
    built = {alias: backfill(database_url, alias).version for alias in ("minilm", "e5", "hash")}
    register_model(conn, "shuffled", "e5", "multilingual-e5-small")
    built["shuffled"] = backfill(database_url, "shuffled").version
    table = f"toolkit.chunks_v{built['shuffled']}"
    conn.execute(
        f"WITH s AS (SELECT chunk_id, lag(embedding, 7) OVER (ORDER BY md5(chunk_id)) AS other"
        f" FROM {table} WHERE NOT is_parent)"
        f" UPDATE {table} AS c SET embedding = s.other FROM s WHERE c.chunk_id = s.chunk_id AND s.other IS NOT NULL"
    )
    cutover.activate_version(conn, built["minilm"], force=True)
    questions = [Question("acme", q) for q in sample_questions(30)]
    assert len(questions) == 30
    good = shadow(conn, built["e5"], questions, k=5)
    lexical = shadow(conn, built["hash"], questions, k=5)
    nonsense = shadow(conn, built["shuffled"], questions, k=5)
    assert good.questions == lexical.questions == nonsense.questions == 30
    # Shadow compares what applications get (hybrid passages): the full-text half of a broken model's ranking still
    # finds part of the answers, so nonsense keeps some overlap; it stays far below a good model's.
    figures = (good.overlap_at_k, lexical.overlap_at_k, nonsense.overlap_at_k)
    assert nonsense.overlap_at_k < 0.5, figures
    assert good.overlap_at_k > lexical.overlap_at_k + 0.05, figures
    assert good.overlap_at_k > nonsense.overlap_at_k + 0.2, figures
    assert nonsense.top1_changed > good.top1_changed
    for report in (good, lexical, nonsense):
        assert set(report.latency_ms) == {str(built["minilm"]), str(report.candidate)}
        assert all(
            v["search_p50_ms"] > 0 and v["search_p95_ms"] >= v["search_p50_ms"] for v in report.latency_ms.values()
        )
        assert [c.overlap for c in report.changed_most] == sorted(c.overlap for c in report.changed_most)
    # the CLI, on a file of questions (labels ignored)
    path = tmp_path / "questions.txt"
    path.write_text("\n".join(q.text for q in questions[:5]) + "\n")
    assert [q.text for q in questions_from_file(path, "acme")] == [q.text for q in questions[:5]]
    result = CliRunner().invoke(
        main,
        [
            "--database-url",
            database_url,
            "shadow",
            "--model",
            "e5",
            "--queries",
            str(path),
            "--tenant",
            "acme",
            "--format",
            "json",
        ],
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["questions"] == 5 and report["candidate"] == built["e5"]


def test_shadow_from_the_log_replays_logged_questions(conn, database_url, make_model, corpus):
    make_model("one", 32, model_name="32", options={"seed": 1})
    make_model("two", 32, model_name="32", options={"seed": 2})
    first = backfill(database_url, "one", "recursive:120:0").version
    second = backfill(database_url, "two", "recursive:120:0").version
    cutover.activate_version(conn, first, force=True)
    set_query_log(conn, 1.0)
    search._log_rate.clear()
    try:
        for question in sample_questions(4):
            search.search(conn, question, "acme", 3)
    finally:
        search._log_rate.clear()
    result = CliRunner().invoke(
        main, ["--database-url", database_url, "shadow", "--version", str(second), "--from-log", "--since", "1h"]
    )
    assert result.exit_code == 0, result.output
    assert f"4 questions on active version {first} and candidate {second}" in result.output
    assert "Changed most:" in result.output
    empty = CliRunner().invoke(
        main, ["--database-url", database_url, "shadow", "--version", str(second), "--from-log", "--tenant", "nobody"]
    )
    assert empty.exit_code == 1 and "holds no questions" in empty.output
