"""The migration lifecycle through the CLI with a real model: verify gates a worse candidate, cutover needs a
passing verification, rollback restores the previous version, retire never drops the active one."""

from __future__ import annotations

import json
import shutil

import pytest
from click.testing import CliRunner

from toolkit.cli import main
from toolkit.db.connection import connect
from toolkit.evaluation.queries import SAMPLE_DOCS, SAMPLE_QUERIES

DOCS = ("row-security.md", "indexes.md")


@pytest.fixture
def sample(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    for name in DOCS:
        shutil.copy(SAMPLE_DOCS / name, docs / name)
    queries = tmp_path / "queries.jsonl"
    lines = [
        line for line in SAMPLE_QUERIES.read_text().splitlines() if json.loads(line)["answers"][0]["doc_id"] in DOCS
    ]
    queries.write_text("\n".join(lines) + "\n")
    return docs, queries, len(lines)


def run(url: str, *args: str, code: int = 0):
    result = CliRunner().invoke(main, ["--database-url", url, *args])
    assert result.exit_code == code, result.output
    return result


def state(url: str, version: int) -> str:
    with connect(url, autocommit=True) as conn:
        return conn.execute("SELECT state FROM toolkit.versions WHERE version = %s", (version,)).fetchone()[0]


def count_documents(docs) -> int:
    return sum(1 for _ in docs.glob("*.md"))


@pytest.mark.slow  # two real models
def test_the_gate_keeps_a_worse_candidate_out_and_rollback_restores_the_previous_version(database_url, sample):
    docs, queries, count = sample
    assert count >= 30
    # MiniLM: a real model (the README's lifecycle, test_readme_lifecycle, runs e5 through the same commands).
    run(database_url, "model", "add", "real", "--provider", "sentence-transformers", "--name", "all-MiniLM-L6-v2")
    run(database_url, "model", "add", "toy", "--provider", "hashing", "--name", "64")
    run(database_url, "ingest", str(docs), "--tenant", "acme")

    built = json.loads(run(database_url, "backfill", "--model", "real", "--format", "json").stdout)
    real = built["version"]
    assert built["state"] == "ready" and built["rows_embedded"] > 20

    refused = run(database_url, "cutover", "--model", "real", code=1)
    assert "no passing verification" in refused.output and "--force" in refused.output
    first = json.loads(
        run(
            database_url,
            "verify",
            "--model",
            "real",
            "--queries",
            str(queries),
            "--min-recall",
            "0.5",
            "--min-queries",
            "30",
            "--format",
            "json",
        ).stdout
    )
    assert first["passed"] and first["baseline"] is None and first["candidate"]["recall"] >= 0.5
    run(database_url, "cutover", "--model", "real")
    assert state(database_url, real) == "active"

    toy = json.loads(run(database_url, "backfill", "--model", "toy", "--format", "json").stdout)["version"]
    gate = run(
        database_url,
        "verify",
        "--model",
        "toy",
        "--queries",
        str(queries),
        "--min-queries",
        "30",
        "--format",
        "json",
        code=1,
    )
    report = json.loads(gate.stdout)
    assert not report["passed"] and report["baseline"]["version"] == real
    assert report["candidate"]["recall"] < report["baseline"]["recall"]
    assert "below the active version" in report["reasons"][0]
    assert len(report["losses"]) > len(report["wins"])
    refused = run(database_url, "cutover", "--model", "toy", code=1)
    assert "no passing verification" in refused.output
    assert state(database_url, real) == "active" and state(database_url, toy) == "ready"

    run(database_url, "cutover", "--model", "toy", "--force", "--reason", "test")
    assert (state(database_url, real), state(database_url, toy)) == ("standby", "active")
    run(database_url, "rollback")
    assert (state(database_url, real), state(database_url, toy)) == ("active", "ready")
    with connect(database_url, autocommit=True) as conn:
        audit = conn.execute("SELECT action, to_version, forced FROM toolkit.cutovers ORDER BY cutover_id").fetchall()
        evaluations = conn.execute("SELECT version, passed FROM toolkit.evaluations ORDER BY evaluation_id").fetchall()
    assert audit == [("activate", real, False), ("activate", toy, True), ("rollback", real, False)]
    assert evaluations == [(real, True), (toy, False)]

    # the rolled-back version is ready (awaiting a new verification): never retired by age, only by name
    assert "Nothing to retire." in run(database_url, "retire", "--older-than", "0", "--yes").output
    retired = run(database_url, "retire", "--version", str(toy), "--yes")
    assert f"Retired: {toy}." in retired.output
    assert state(database_url, real) == "active" and state(database_url, toy) == "retired"
    refused = run(database_url, "retire", "--version", str(real), code=1)
    assert "is active and cannot be retired" in refused.output

    status = json.loads(run(database_url, "status", "--format", "json").stdout)["versions"]
    assert [(s["version"], s["state"]) for s in status] == [(real, "active"), (toy, "retired")]
    assert status[0]["last_evaluation_passed"] is True and status[0]["pending_rows"] == 0
    assert status[0]["evaluation_current"] is True and status[0]["serving"] == "active"
    assert status[0]["documents"] == count_documents(docs) and status[0]["tenants"] == 1
