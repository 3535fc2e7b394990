"""What a newcomer meets around the gate and the lifecycle commands: the gate refuses to pass on nothing (no
baseline and no floor, a query set too small to mean anything), status says when an evaluation went stale, an
ambiguous version is refused, cutover/rollback/retire speak JSON, and search says when access labels are not
applied."""

from __future__ import annotations

import json
import shutil
import uuid
from urllib.parse import urlsplit, urlunsplit

import pytest
from click.testing import CliRunner

from toolkit.cli import main
from toolkit.evaluation.queries import SAMPLE_DOCS, SAMPLE_QUERIES

CHAPTERS = ("indexes.md", "row-security.md")


def run(url: str, *args: str, code: int = 0):
    result = CliRunner().invoke(main, ["--database-url", url, *args])
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    return result


@pytest.fixture
def built(database_url, tmp_path):
    """Two chapters ingested for tenant acme and one hashing version built (not active); the sample's labelled
    queries about those chapters, and a one-query file."""
    docs = tmp_path / "docs"
    docs.mkdir()
    for name in CHAPTERS:
        shutil.copyfile(SAMPLE_DOCS / name, docs / name)
    lines = [
        line
        for line in SAMPLE_QUERIES.read_text(encoding="utf-8").splitlines()
        if all(a["doc_id"] in CHAPTERS for a in json.loads(line)["answers"])
    ]
    queries = tmp_path / "queries.jsonl"
    queries.write_text("\n".join(lines) + "\n")
    one = tmp_path / "one.jsonl"
    one.write_text(lines[0] + "\n")
    run(database_url, "model", "add", "h", "--provider", "hashing", "--name", "64")
    run(database_url, "ingest", str(docs), "--tenant", "acme")
    version = json.loads(
        run(database_url, "backfill", "--model", "h", "--chunker", "recursive:200:0", "--format", "json").stdout
    )["version"]
    return docs, queries, one, version, len(lines)


def test_with_nothing_active_the_gate_needs_a_floor(database_url, built):
    _, queries, _, _, count = built
    assert count >= 30
    refused = run(database_url, "verify", "--model", "h", "--queries", str(queries), "--min-queries", "30", code=1)
    assert "--min-recall" in refused.output and "No other version is active" in refused.output
    passed = run(
        database_url, "verify", "--model", "h", "--queries", str(queries), "--min-recall", "0.05", "--min-queries", "30"
    )
    assert "Gate PASSED" in passed.output


def test_a_query_set_too_small_to_mean_anything_is_refused_unless_accepted(database_url, built):
    _, _, one, _, _ = built
    refused = run(database_url, "verify", "--model", "h", "--queries", str(one), "--min-recall", "0.0", code=1)
    assert "holds 1 labelled question(s)" in refused.output and "--min-queries" in refused.output
    status = json.loads(run(database_url, "status", "--format", "json").stdout)["versions"]
    assert status[0]["state"] == "ready" and status[0]["last_evaluation_passed"] is None  # nothing recorded
    accepted = run(
        database_url, "verify", "--model", "h", "--queries", str(one), "--min-recall", "0.0", "--min-queries", "1"
    )
    assert "1 query," in accepted.output  # one query, not "1 queries"


def test_status_says_when_a_passing_evaluation_went_stale(database_url, built):
    docs, queries, _, version, _ = built
    run(
        database_url, "verify", "--model", "h", "--queries", str(queries), "--min-recall", "0.05", "--min-queries", "30"
    )
    row = json.loads(run(database_url, "status", "--format", "json").stdout)["versions"][0]
    assert (row["last_evaluation_passed"], row["evaluation_current"]) == (True, True)
    assert row["documents"] == 2 and row["tenants"] == 1 and row["last_recall"] > 0
    assert "current" in run(database_url, "status").output
    (docs / "extra.md").write_text("# Extra\n\nA new page about partial indexes.\n")
    run(database_url, "ingest", str(docs), "--tenant", "acme")
    row = json.loads(run(database_url, "status", "--format", "json").stdout)["versions"][0]
    assert (row["last_evaluation_passed"], row["evaluation_current"]) == (True, False)
    assert "stale" in run(database_url, "status").output
    refused = run(database_url, "cutover", "--version", str(version), code=1)
    assert "no passing verification newer than its last change" in refused.output


def test_naming_a_version_two_ways_is_refused(database_url, built):
    _, _, _, version, _ = built
    for command in ("cutover", "verify"):
        extra = ["--queries", str(built[1])] if command == "verify" else []
        refused = run(database_url, command, "--model", "h", "--version", str(version), *extra, code=1)
        assert "not both" in refused.output


def test_cutover_rollback_and_retire_speak_json(database_url, built):
    _, _, _, version, _ = built
    done = json.loads(run(database_url, "cutover", "--version", str(version), "--force", "--format", "json").stdout)
    assert done["active"] == version and done["standby"] is None and done["forced"] is True
    refused = run(database_url, "rollback", "--format", "json", code=1)
    assert "nothing to roll back" in refused.output or "no version that is still on standby" in refused.output
    planned = json.loads(run(database_url, "retire", "--older-than", "0", "--dry-run", "--format", "json").stdout)
    assert planned == {"retired": [], "would_retire": [], "kept": []}


def test_search_as_a_service_role_says_labels_are_not_applied_and_json_has_every_field(conn, database_url, built):
    _, _, _, version, _ = built
    run(database_url, "cutover", "--version", str(version), "--force")
    name = f"ingest_{uuid.uuid4().hex[:8]}"
    conn.execute(f"CREATE ROLE {name} LOGIN IN ROLE toolkit_writer")
    try:
        parts = urlsplit(database_url)
        writer = urlunsplit(parts._replace(netloc=f"{name}@{parts.netloc.split('@')[-1]}"))
        result = run(writer, "search", "partial index", "--tenant", "acme", "--hybrid", "--format", "json")
        assert "access labels are not applied" in result.stderr
        hits = json.loads(result.stdout)
        assert hits and all(h["version"] == version for h in hits)
        assert any(h["vector_rank"] is not None for h in hits) and any(h["text_rank"] is not None for h in hits)
        plain = json.loads(
            run(
                database_url, "search", "partial index", "--tenant", "acme", "--retrieval", "vector", "--format", "json"
            ).stdout
        )
        assert all(h["distance"] is not None for h in plain)
        # the default: passages, each with its chunks, their hit ranks and its tokens
        passages = json.loads(
            run(database_url, "search", "partial index", "--tenant", "acme", "--format", "json").stdout
        )
        assert passages and all(h["kind"] == "passage" and h["chunk_ids"] and h["tokens"] > 0 for h in passages)
        assert all(len(h["hit_ranks"]) == len(h["chunk_ids"]) for h in passages)
        assert "access labels are not applied" not in run(database_url, "search", "x", "--tenant", "acme").stderr
    finally:
        conn.execute(f"DROP OWNED BY {name}")
        conn.execute(f"DROP ROLE {name}")
