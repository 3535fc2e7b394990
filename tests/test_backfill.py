"""Backfill on a real database: kill -9 at random points then --resume gives exactly the uninterrupted result;
SIGINT stops cleanly; two backfills share the work; --max-cost stops; ingest during a backfill lands in both."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest
from conftest import _create_database, _drop_database, _with_database

from toolkit import backfill, versions
from toolkit.database import connect
from toolkit.ingest import ingest
from toolkit.models import Model, insert_model

CHUNKER = "markdown:40:0"


def write_corpus(root, documents: int = 12, paragraphs: int = 40) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for d in range(documents):
        body = "\n\n".join(
            f"## Section {p}\n\nDocument {d} paragraph {p} explains rule {p * 7 + d} in a few plain words."
            for p in range(paragraphs)
        )
        (root / f"doc{d:02d}.md").write_text(f"# Document {d}\n\n{body}\n")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("backfill") / "corpus"
    write_corpus(root)
    return root


def prepare(url: str, corpus, price: float = 0.0) -> None:
    """A database with the documents stored and a model registered, but no version yet."""
    with connect(url, autocommit=True) as conn:
        insert_model(
            conn,
            Model(
                alias="h",
                provider="hashing",
                model_name="32",
                dimensions=32,
                max_input_tokens=8192,
                price_per_million_tokens=price,
            ),
        )
        ingest(conn, [corpus], "acme")


def rows(url: str, version: int) -> set:
    with connect(url, autocommit=True) as conn:
        return {
            (r[0], r[1], r[2], r[3].tobytes())
            for r in conn.execute(f"SELECT tenant, chunk_id, content_hash, embedding FROM toolkit.chunks_v{version}")
        }


def wait_for_version(url: str, process: subprocess.Popen, timeout: float = 60.0, versions: int = 1) -> float:
    """Seconds until the backfill process has created its version (the process start-up is not interesting)."""
    started = time.monotonic()
    with connect(url, autocommit=True) as conn:
        while time.monotonic() - started < timeout and process.poll() is None:
            if conn.execute("SELECT count(*) FROM toolkit.versions").fetchone()[0] >= versions:
                break
            time.sleep(0.02)
    return time.monotonic() - started


def kill_after_rows(url: str, process: subprocess.Popen, target: int, timeout: float = 120.0) -> None:
    """Wait until the backfill's version holds at least ``target`` rows (or the process has ended)."""
    started = time.monotonic()
    with connect(url, autocommit=True) as conn:
        version = conn.execute("SELECT max(version) FROM toolkit.versions").fetchone()[0]
        while time.monotonic() - started < timeout and process.poll() is None:
            if conn.execute(f"SELECT count(*) FROM toolkit.chunks_v{version}").fetchone()[0] >= target:
                return
            time.sleep(0.005)


def cli(url: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "toolkit",
            "--database-url",
            url,
            "backfill",
            "--model",
            "h",
            "--chunker",
            CHUNKER,
            *args,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.fixture(scope="module")
def reference(pg_admin_url, migrated_template, corpus):
    """An uninterrupted backfill: the result every interrupted one must reach."""
    name = _create_database(pg_admin_url, migrated_template)
    url = _with_database(pg_admin_url, name)
    prepare(url, corpus)
    started = time.monotonic()
    process = cli(url, "--batch-size", "4", "--format", "json")
    out, err = process.communicate(timeout=300)
    seconds = time.monotonic() - started
    assert process.returncode == 0, err
    report = json.loads(out)
    assert report["state"] == "ready" and report["rows_embedded"] > 400
    yield rows(url, report["version"]), seconds
    _drop_database(pg_admin_url, name)


def test_kill_9_at_random_points_then_resume_matches_an_uninterrupted_run(
    pg_admin_url, migrated_template, corpus, reference
):
    expected, _seconds = reference
    rng = random.Random(20261129)
    killed_while_pending = 0
    for _trial in range(10):
        name = _create_database(pg_admin_url, migrated_template)
        url = _with_database(pg_admin_url, name)
        try:
            prepare(url, corpus)
            process = cli(url, "--resume", "--batch-size", "4")
            wait_for_version(url, process)
            # Anywhere in the run: once a random share of the rows is written (progress, not time, so a loaded
            # machine moves the kills no later), then a little further into the next batch.
            kill_after_rows(url, process, rng.randrange(0, len(expected) * 9 // 10))
            time.sleep(rng.uniform(0.0, 0.05))
            process.send_signal(signal.SIGKILL)
            process.wait()
            with connect(url, autocommit=True) as conn:
                status = versions.version_status(conn)
            if status and status[0].state == "building":
                killed_while_pending += 1
            report = backfill.backfill(url, "h", CHUNKER, resume=True)
            assert report.state == "ready"
            assert rows(url, report.version) == expected, "missing, duplicate or different rows after resume"
        finally:
            _drop_database(pg_admin_url, name)
    assert killed_while_pending >= 6, "most kills should land before the backfill finished"


def test_sigint_stops_after_the_current_batch_and_resume_finishes(database_url, corpus, reference):
    prepare(database_url, corpus)
    process = cli(database_url, "--batch-size", "2")
    with connect(database_url, autocommit=True) as conn:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            status = versions.version_status(conn)
            if status and status[0].total_rows and status[0].pending_rows < status[0].total_rows:
                break
            time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    _out, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    assert "stopping after the current batch" in err and "--resume" in err
    assert "Traceback" not in err
    with connect(database_url, autocommit=True) as conn:
        status = versions.version_status(conn)[0]
    assert status.state == "building" and 0 < status.pending_rows < status.total_rows
    report = backfill.backfill(database_url, "h", CHUNKER, resume=True)
    assert rows(database_url, report.version) == reference[0]


def test_a_building_version_needs_resume(database_url, corpus):
    prepare(database_url, corpus)
    process = cli(database_url, "--batch-size", "2")
    wait_for_version(database_url, process)
    process.send_signal(signal.SIGKILL)
    process.wait()
    again = cli(database_url)
    _out, err = again.communicate(timeout=60)
    assert again.returncode == 1
    assert "is already being built" in err and "--resume" in err


def test_two_backfills_at_once_never_embed_the_same_rows(database_url, corpus, reference):
    prepare(database_url, corpus)
    first = cli(database_url, "--resume", "--batch-size", "3", "--format", "json")
    second = cli(database_url, "--resume", "--batch-size", "3", "--format", "json")
    outputs = [p.communicate(timeout=120) for p in (first, second)]
    assert first.returncode == 0 and second.returncode == 0, [err for _, err in outputs]
    reports = [json.loads(out) for out, _ in outputs]
    assert {r["version"] for r in reports} == {reports[0]["version"]}
    total = len(reference[0])
    assert sum(r["rows_embedded"] for r in reports) == total, "every row embedded exactly once"
    assert rows(database_url, reports[0]["version"]) == reference[0]


def test_max_cost_stops_before_the_budget_is_passed(database_url, corpus):
    prepare(database_url, corpus, price=1000.0)  # $1000 per million tokens
    process = cli(database_url, "--max-cost", "1.00", "--batch-size", "8", "--format", "json")
    out, err = process.communicate(timeout=120)
    assert process.returncode == 3, err
    report = json.loads(out)
    assert report["stopped"] == "max-cost" and 0.5 < report["estimated_cost_usd"] <= 1.00
    assert "--max-cost" in err and "--resume" in err
    with connect(database_url, autocommit=True) as conn:
        status = versions.version_status(conn)[0]
    assert status.state == "building" and status.pending_rows > 0


def test_ingest_during_a_backfill_ends_up_embedded_in_both_versions(database_url, corpus, tmp_path):
    prepare(database_url, corpus)
    with connect(database_url, autocommit=True) as conn:
        insert_model(conn, Model(alias="live", provider="hashing", model_name="16", dimensions=16, max_input_tokens=99))
    first = backfill.backfill(database_url, "live", CHUNKER)
    process = cli(database_url, "--batch-size", "2")
    wait_for_version(database_url, process, versions=2)
    extra = tmp_path / "extra"
    write_corpus(extra, documents=1, paragraphs=3)
    os.rename(extra / "doc00.md", extra / "late.md")
    with connect(database_url, autocommit=True) as conn:
        report = ingest(conn, [extra], "acme")
    assert len(report.versions) == 2
    process.communicate(timeout=120)
    assert process.returncode == 0
    with connect(database_url, autocommit=True) as conn:
        for status in versions.version_status(conn):
            assert status.state == "ready" and status.pending_rows == 0
            late = conn.execute(
                f"SELECT count(*), count(embedding) FROM toolkit.chunks_v{status.version} WHERE doc_id = 'late.md'"
            ).fetchone()
            assert late[0] > 0 and late[0] == late[1], status.version
    assert first.version in report.versions
