"""Backfill on a real database: kill -9 at random points then --resume gives exactly the uninterrupted result;
SIGINT stops cleanly; two backfills share the work; --max-cost stops; ingest during a backfill lands in both and
is not written again; the queue (documents claimed FOR UPDATE SKIP LOCKED) gives two claimers disjoint work;
parents are written with their children; rows an older toolkit left without embeddings are finished."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest
from support import create_database, default_sigint, drop_database, with_database

from toolkit import backfill
from toolkit.db.connection import connect
from toolkit.ingest import ingest
from toolkit.store import versions
from toolkit.store.models import Model, insert_model

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
        preexec_fn=default_sigint,
    )


@pytest.fixture(scope="module")
def reference(pg_admin_url, migrated_template, corpus):
    """An uninterrupted backfill: the result every interrupted one must reach."""
    name = create_database(pg_admin_url, migrated_template)
    url = with_database(pg_admin_url, name)
    prepare(url, corpus)
    started = time.monotonic()
    process = cli(url, "--batch-size", "4", "--format", "json")
    out, err = process.communicate(timeout=300)
    seconds = time.monotonic() - started
    assert process.returncode == 0, err
    report = json.loads(out)
    assert report["state"] == "ready" and report["rows_embedded"] > 400
    yield rows(url, report["version"]), seconds
    drop_database(pg_admin_url, name)


def test_kill_9_at_random_points_then_resume_matches_an_uninterrupted_run(
    pg_admin_url, migrated_template, corpus, reference
):
    expected, _seconds = reference
    rng = random.Random(20261129)
    killed_while_pending = 0
    for _trial in range(10):
        name = create_database(pg_admin_url, migrated_template)
        url = with_database(pg_admin_url, name)
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
            drop_database(pg_admin_url, name)
    assert killed_while_pending >= 6, "most kills should land before the backfill finished"


def test_sigint_stops_after_the_batch_in_flight_and_resume_finishes(database_url, corpus, monkeypatch):
    # Synchronized on events only: the fault server holds the third embedding request until the test releases
    # it, Ctrl-C is sent while it is held, and the process must say it stops, finish that batch, and exit 130.
    from fault_server import FaultServer

    from toolkit.store.models import register_model

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    server = FaultServer(dims=16)
    try:
        prepare(database_url, corpus)
        with connect(database_url, autocommit=True) as conn:
            register_model(conn, "remote", "openai", "test-model", dimensions=16, base_url=server.url)
        server.reset()
        server.script({}, {}, {"hold": True})
        process = subprocess.Popen(
            [sys.executable, "-m", "toolkit", "--database-url", database_url, "backfill", "--model", "remote",
             "--chunker", CHUNKER, "--batch-size", "2", "--workers", "1"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        while server.stats()["held"] == 0:
            assert process.poll() is None, process.communicate()
        process.send_signal(signal.SIGINT)
        line = ""
        while not line.strip():  # the message starts on a new line
            line = process.stderr.readline()
        assert "stopping after the current batch" in line, line
        server.release()
        _out, rest = process.communicate(timeout=120)
        assert process.returncode == 130, rest
        assert "--resume" in rest and "Traceback" not in line + rest
        with connect(database_url, autocommit=True) as conn:
            done = conn.execute("SELECT count(DISTINCT doc_id) FROM toolkit.chunks_v1").fetchone()[0]
            left, _bytes = versions.pending_documents(conn, 1)
        assert done == 3 and left == 9, "the two answered batches and the held one are written, nothing after"
        assert server.requests == 3
        report = backfill.backfill(database_url, "remote", CHUNKER, resume=True)
        assert report.state == "ready" and report.documents_chunked == 9
        with connect(database_url, autocommit=True) as conn:
            stored = conn.execute(
                "SELECT count(*), count(embedding), count(DISTINCT chunk_id) FROM toolkit.chunks_v1"
            ).fetchone()
        assert stored[0] == stored[1] == stored[2] > 400
    finally:
        server.stop()


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
    # $1 a thousand tokens and $1.50 to spend: a document of this corpus is about 700 words (hashing tokens), so
    # whole documents are written until the next would pass the budget.
    prepare(database_url, corpus, price=1000.0)
    process = cli(database_url, "--max-cost", "1.50", "--batch-size", "8", "--format", "json")
    out, err = process.communicate(timeout=120)
    assert process.returncode == 3, err
    report = json.loads(out)
    assert report["stopped"] == "max-cost" and 0.5 < report["estimated_cost_usd"] <= 1.50
    assert "--max-cost" in err and "--resume" in err
    with connect(database_url, autocommit=True) as conn:
        left, _ = versions.pending_documents(conn, report["version"])
        status = versions.version_status(conn)[0]
    assert status.state == "building" and 0 < left < 12
    assert report["documents_chunked"] == 12 - left


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


def test_rows_dual_written_by_ingest_are_not_written_again(database_url, corpus, tmp_path):
    prepare(database_url, corpus)
    with connect(database_url, autocommit=True) as conn:
        version = versions.create_version(conn, "h", CHUNKER, CHUNKER + "@1")
        extra = tmp_path / "extra"
        write_corpus(extra, documents=1, paragraphs=3)
        os.rename(extra / "doc00.md", extra / "late.md")
        ingest(conn, [extra], "acme")  # written into the building version by ingest itself
        before = conn.execute(
            f"SELECT chunk_id, xmin::text FROM toolkit.chunks_v{version} WHERE doc_id = 'late.md' ORDER BY 1"
        ).fetchall()
    assert before
    report = backfill.backfill(database_url, "h", CHUNKER, resume=True)
    assert report.state == "ready" and report.documents_chunked == 12  # the corpus, not late.md
    with connect(database_url, autocommit=True) as conn:
        after = conn.execute(
            f"SELECT chunk_id, xmin::text FROM toolkit.chunks_v{version} WHERE doc_id = 'late.md' ORDER BY 1"
        ).fetchall()
    assert after == before, "the same row versions: ingest's rows were neither rewritten nor embedded again"


def test_two_claimers_get_disjoint_documents_and_a_finished_one_comes_back_without_text(database_url, corpus):
    prepare(database_url, corpus)
    with connect(database_url, autocommit=True) as conn:
        version = versions.create_version(conn, "h", CHUNKER, CHUNKER + "@1")
    first, second = connect(database_url), connect(database_url)
    try:
        claim = "SELECT doc_id, raw_text IS NOT NULL FROM toolkit.claim_pending_documents(%s, '', '', %s)"
        held = first.execute(claim, (version, 5)).fetchall()
        other = second.execute(claim, (version, 100)).fetchall()
        assert len(held) == 5 and len(other) == 7
        assert not {d for d, _ in held} & {d for d, _ in other}, "SKIP LOCKED: no document claimed twice"
        second.rollback()
        # A writer that finishes a document after another claimer's scan: the claim returns it without text.
        backfill.backfill(database_url, "h", CHUNKER, resume=True, workers=1, batch_size=1, stop=None)
    finally:
        first.rollback()
        first.close()
        second.close()


def test_small_to_big_parents_are_written_with_their_children(database_url, corpus):
    from toolkit.chunking import get_chunker

    spec = "sentence:30:0:parent=markdown,120,0"
    prepare(database_url, corpus)
    report = backfill.backfill(database_url, "h", spec, batch_size=3)
    assert report.state == "ready"
    with connect(database_url, autocommit=True) as conn:
        orphans, parents, children = conn.execute(
            f"SELECT count(*) FILTER (WHERE NOT c.is_parent AND p.chunk_id IS NULL),"
            f" count(*) FILTER (WHERE c.is_parent), count(*) FILTER (WHERE NOT c.is_parent)"
            f" FROM toolkit.chunks_v{report.version} AS c LEFT JOIN toolkit.chunks_v{report.version} AS p"
            f" ON p.tenant = c.tenant AND p.chunk_id = c.parent_id AND p.is_parent"
        ).fetchone()
        texts = dict(conn.execute("SELECT doc_id, raw_text FROM toolkit.documents").fetchall())
    chunker = get_chunker(spec)
    expected = sum(len(chunker.chunk(text, doc_id=doc_id)) for doc_id, text in texts.items())
    assert orphans == 0 and parents > 0 and children > parents
    assert parents + children == expected == report.rows_written


def test_rows_an_older_toolkit_left_without_embeddings_are_finished_reusing_their_vectors(database_url, corpus):
    # An older backfill wrote rows first and embedded them later: a version it left half done has rows without
    # embeddings. The documents holding them are rewritten whole; vectors already stored are reused.
    from toolkit.chunking import get_chunker
    from toolkit.embedding import get_embedder
    from toolkit.store.chunk_table import LiveVersion, chunk_row, copy_chunk_rows, live_versions

    prepare(database_url, corpus)
    with connect(database_url) as conn:
        version = versions.create_version(conn, "h", CHUNKER, get_chunker(CHUNKER).version)
        conn.commit()
        target = next(t for t in live_versions(conn) if t.version == version)
        assert isinstance(target, LiveVersion)
        text = conn.execute("SELECT raw_text FROM toolkit.documents WHERE doc_id = 'doc00.md'").fetchone()[0]
        chunks = get_chunker(CHUNKER).chunk(text, doc_id="doc00.md")
        vectors = get_embedder("hashing:32").embed_documents([c.embed_text for c in chunks])
        marker = vectors[0] * 0 + 1 / 32**0.5  # a stored vector the backfill could not have computed itself
        rows = [
            chunk_row("acme", "doc00.md", c, [], marker if i == 0 else (None if i % 2 else vectors[i]))
            for i, c in enumerate(chunks)
        ]
        copy_chunk_rows(conn, target, rows)
        conn.commit()
    report = backfill.backfill(database_url, "h", CHUNKER, resume=True)
    assert report.state == "ready"
    with connect(database_url, autocommit=True) as conn:
        count, embedded = conn.execute(
            f"SELECT count(*), count(embedding) FROM toolkit.chunks_v{version} WHERE doc_id = 'doc00.md'"
        ).fetchone()
        first = conn.execute(
            f"SELECT embedding FROM toolkit.chunks_v{version} WHERE chunk_id = %s", (chunks[0].chunk_id,)
        ).fetchone()[0]
    assert count == embedded == len(chunks)
    assert abs(first - marker).max() < 1e-6, "the stored vector was reused, not recomputed"


def test_documents_that_make_no_chunk_do_not_keep_the_version_from_ready(database_url, corpus):
    prepare(database_url, corpus)
    with connect(database_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO toolkit.documents (tenant, doc_id, source, raw_text, content_hash)"
            " VALUES ('acme', 'blank.md', 'blank.md', '   \n\n   ', 'x')"
        )
    report = backfill.backfill(database_url, "h", CHUNKER)
    assert report.state == "ready" and report.documents_without_chunks == 1


def test_deleting_a_document_waits_for_the_batch_that_claimed_it(database_url, corpus):
    # A batch has claimed doc01.md and written its rows but not committed; a prune deletes the document meanwhile.
    # The delete must wait for the batch, then remove the rows it wrote: no orphan rows without a document.
    import threading

    from toolkit.store.chunk_table import live_versions
    from toolkit.store.documents import delete_documents

    prepare(database_url, corpus)
    with connect(database_url, autocommit=True) as conn:
        version = versions.create_version(conn, "h", CHUNKER, CHUNKER + "@1")
    batch = connect(database_url)
    claimed = batch.execute(
        "SELECT doc_id FROM toolkit.claim_pending_documents(%s, 'acme', 'doc00.md', 1)", (version,)
    ).fetchall()
    assert claimed == [("doc01.md",)]
    target = next(t for t in live_versions(batch) if t.version == version)
    from toolkit.embedding import get_embedder
    from toolkit.store.chunk_table import chunk_row, copy_chunk_rows

    text = batch.execute("SELECT raw_text FROM toolkit.documents WHERE doc_id = 'doc01.md'").fetchone()[0]
    chunks = target.chunker.chunk(text, doc_id="doc01.md")
    vectors = get_embedder("hashing:32").embed_documents([c.embed_text for c in chunks])
    copy_chunk_rows(
        batch, target, [chunk_row("acme", "doc01.md", c, [], v) for c, v in zip(chunks, vectors, strict=True)]
    )
    deleted = []
    deleter = threading.Thread(
        target=lambda: deleted.append(_delete(database_url, delete_documents)), name="prune", daemon=True
    )
    deleter.start()
    with connect(database_url, autocommit=True) as watch:
        # The delete is waiting on the claimed row's lock (seen server-side), not finished before the commit.
        waiting = (
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE wait_event_type = 'Lock'"
            " AND (query LIKE 'DELETE FROM toolkit.documents%' OR query LIKE '%toolkit.lock_documents%'"
            "  OR query LIKE '%toolkit.delete_documents%')"
        )
        while not watch.execute(waiting).fetchone()[0]:
            assert deleter.is_alive()
    batch.commit()
    batch.close()
    deleter.join(60)
    assert deleted == [1]
    with connect(database_url, autocommit=True) as conn:
        left = conn.execute(f"SELECT count(*) FROM toolkit.chunks_v{version} WHERE doc_id = 'doc01.md'").fetchone()
    assert left[0] == 0


def _delete(url, delete_documents) -> int:
    with connect(url) as conn, conn.transaction():
        return delete_documents(conn, "acme", ["doc01.md"])
