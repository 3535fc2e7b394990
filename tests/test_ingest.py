"""Ingest on a real database: dual-write to live versions, zero requests for an unchanged corpus, only changed
chunks re-embedded (counted at a real HTTP server), prune, bad files, and a version being built."""

from __future__ import annotations

import hashlib
import json

import pytest
from click.testing import CliRunner
from fault_server import FaultServer
from support import default_sigint

from toolkit import cutover
from toolkit.cli import main
from toolkit.errors import InputError
from toolkit.ingest import ingest
from toolkit.store import versions
from toolkit.store.models import register_model

SECTIONS = {
    "refunds.md": "# Returns\n\n## Refunds\n\n"
    + " ".join(f"Refund rule {i} applies to parcels." for i in range(60))
    + "\n\n## Shipping\n\n"
    + " ".join(f"Shipping fact {i} about carriers." for i in range(60))
    + "\n",
    "support.md": "# Support\n\n" + "\n\n".join(f"Paragraph {i}: chat support is open on weekdays." for i in range(30)),
    "sub/passwords.md": "# Passwords\n\nA reset link is emailed to you and stays valid for 15 minutes.\n",
}


@pytest.fixture(scope="module")
def server():
    process = FaultServer(dims=16)
    yield process
    process.stop()


@pytest.fixture
def corpus(tmp_path):
    root = tmp_path / "corpus"
    for name, text in SECTIONS.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


@pytest.fixture
def remote(conn, server, monkeypatch):
    """A model served over HTTP by the test suite's OpenAI-compatible server, which counts requests."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    server.reset()
    register_model(conn, "remote", "openai", "test-model", dimensions=16, base_url=server.url)
    server.reset()
    return server


def chunk_count(conn, version: int, doc_id: str | None = None) -> int:
    query = f"SELECT count(*) FROM toolkit.chunks_v{version}"
    if doc_id:
        return conn.execute(query + " WHERE doc_id = %s", (doc_id,)).fetchone()[0]
    return conn.execute(query).fetchone()[0]


def test_chunks_are_exact_spans_of_the_stored_text_in_every_live_version(conn, corpus, make_model):
    make_model("h1", 16)
    make_model("h2", 32)
    v1 = versions.create_version(conn, "h1", "markdown:60:6", "markdown:60:6@1")
    v2 = versions.create_version(conn, "h2", "sentence:40:1", "sentence:40:1@2")
    report = ingest(conn, [corpus], "acme")
    assert (report.new, report.failed, report.versions) == (3, [], [v1, v2])
    for v in (v1, v2):
        assert chunk_count(conn, v) > 3
        mismatched = conn.execute(
            f"SELECT count(*) FROM toolkit.chunks_v{v} c JOIN toolkit.documents d USING (tenant, doc_id)"
            " WHERE substr(d.raw_text, c.start_offset + 1, c.end_offset - c.start_offset) <> c.text"
            " OR c.embedding IS NULL"
        ).fetchone()[0]
        assert mismatched == 0
    assert {r[0] for r in conn.execute(f"SELECT doc_id FROM toolkit.chunks_v{v1}")} == set(SECTIONS)


def test_unchanged_corpus_sends_zero_requests_and_an_edit_reembeds_only_changed_chunks(conn, corpus, remote):
    v = versions.create_version(conn, "remote", "markdown:60:0", "markdown:60:0@1")
    first = ingest(conn, [corpus], "acme")
    assert remote.requests > 0 and first.embedded == chunk_count(conn, v)
    remote.reset()
    again = ingest(conn, [corpus], "acme")
    assert (again.unchanged, again.embedded, remote.requests) == (3, 0, 0)

    before = {r[0]: r[1] for r in conn.execute(f"SELECT chunk_id, content_hash FROM toolkit.chunks_v{v}")}
    path = corpus / "refunds.md"
    path.write_text(path.read_text().replace("Shipping fact 59 about carriers.", "Shipping fact 59 was edited."))
    remote.reset()
    edited = ingest(conn, [corpus], "acme")
    after = {r[0]: r[1] for r in conn.execute(f"SELECT chunk_id, content_hash FROM toolkit.chunks_v{v}")}
    new_texts = set(after.values()) - set(before.values())
    assert edited.changed == 1 and edited.unchanged == 2
    assert len(new_texts) == 1, "only the chunk holding the edited sentence has new text"
    assert edited.embedded == 1 and edited.reused == chunk_count(conn, v, "refunds.md") - 1
    log = remote.stats()["log"]
    assert len(log) == 1 and log[0]["inputs"] == 1, "one request carrying the one changed chunk"


def test_prune_removes_deleted_files_from_every_version(conn, corpus, make_model):
    make_model("h1", 16)
    make_model("h2", 16)
    v1 = versions.create_version(conn, "h1", "markdown:60:0", "markdown:60:0@1")
    v2 = versions.create_version(conn, "h2", "markdown:60:0", "markdown:60:0@1")
    ingest(conn, [corpus], "acme")
    ingest(conn, [corpus], "other")
    # Logged questions of both tenants citing support.md, and one of acme citing another document.
    versions.create_version_index(conn, v1)
    versions.mark_version_ready(conn, v1)
    cutover.activate_version(conn, v1, force=True)
    conn.execute("SELECT toolkit.set_query_log(1.0)")
    for tenant, cited in (("acme", "support.md"), ("acme", "refunds.md"), ("other", "support.md")):
        with conn.transaction():
            conn.execute("SELECT toolkit.set_tenant(%s)", (tenant,))
            results = [{"doc_id": cited, "start": 0, "end": 10, "rank": 1, "score": 0.5}]
            conn.execute("SELECT toolkit.log_query(%s, %s, 5, %s)", (f"about {cited}", v1, json.dumps(results)))
    (corpus / "support.md").unlink()
    without_prune = ingest(conn, [corpus], "acme")
    assert without_prune.deleted == 0 and chunk_count(conn, v1, "support.md") > 0
    report = ingest(conn, [corpus], "acme", prune=True)
    assert report.deleted == 1
    # Pruned as toolkit delete deletes: audited (the id as its SHA-256), the logged questions citing it gone.
    audit = conn.execute(
        "SELECT action, tenant, doc_id_sha256, reason, counts -> 'documents' FROM toolkit.deletions"
    ).fetchall()
    assert audit == [("delete", "acme", [hashlib.sha256(b"support.md").hexdigest()], "toolkit ingest --prune", 1)], (
        audit
    )
    logged = conn.execute("SELECT tenant, results -> 0 ->> 'doc_id' FROM toolkit.query_log ORDER BY 1, 2").fetchall()
    assert logged == [("acme", "refunds.md"), ("other", "support.md")]
    for v in (v1, v2):
        assert (
            conn.execute(
                f"SELECT count(*) FROM toolkit.chunks_v{v} WHERE tenant = 'acme' AND doc_id = 'support.md'"
            ).fetchone()[0]
            == 0
        )
        assert (
            conn.execute(
                f"SELECT count(*) FROM toolkit.chunks_v{v} WHERE tenant = 'other' AND doc_id = 'support.md'"
            ).fetchone()[0]
            > 0
        )
    assert conn.execute("SELECT count(*) FROM toolkit.documents WHERE tenant = 'acme'").fetchone()[0] == 2


def test_bad_files_are_reported_and_leave_nothing_behind(conn, corpus, make_model, database_url):
    make_model("h1", 16)
    v = versions.create_version(conn, "h1", "markdown:60:0", "markdown:60:0@1")
    (corpus / "binary.md").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)))
    (corpus / "latin1.md").write_bytes("caf\xe9 cr\xe8me".encode("latin-1"))
    (corpus / "nul.txt").write_bytes(b"text with a \x00 NUL byte")
    (corpus / "empty.md").write_text("")
    result = CliRunner().invoke(
        main, ["--database-url", database_url, "ingest", str(corpus), "--tenant", "acme", "--format", "json"]
    )
    assert result.exit_code == 1, result.output
    report = json.loads(result.stdout)
    failed = {f["source"].rsplit("/", 1)[-1]: f["reason"] for f in report["failed"]}
    assert set(failed) == {"binary.md", "latin1.md", "nul.txt", "empty.md"}
    assert all(reason for reason in failed.values())
    assert report["new"] == 3
    stored = {r[0] for r in conn.execute("SELECT doc_id FROM toolkit.documents")}
    assert stored == set(SECTIONS)
    assert {r[0] for r in conn.execute(f"SELECT DISTINCT doc_id FROM toolkit.chunks_v{v}")} == set(SECTIONS)


def test_ingest_while_a_version_is_building_lands_in_both(conn, corpus, make_model):
    make_model("h1", 16)
    make_model("h2", 16)
    live = versions.create_version(conn, "h1", "markdown:60:0", "markdown:60:0@1")
    ingest(conn, [corpus], "acme")
    versions.create_version_index(conn, live)
    versions.mark_version_ready(conn, live)
    cutover.activate_version(conn, live, force=True)
    building = versions.create_version(conn, "h2", "markdown:60:0", "markdown:60:0@1")
    (corpus / "new.md").write_text("# New\n\nA document written during the backfill of the next version.\n")
    report = ingest(conn, [corpus], "acme")
    assert report.new == 1 and report.versions == [live, building]
    for v in (live, building):
        assert chunk_count(conn, v, "new.md") == 1
    assert (
        conn.execute("SELECT state FROM toolkit.versions WHERE version = %s", (building,)).fetchone()[0] == "building"
    )


def test_a_version_created_between_batches_gets_every_later_batch(conn, database_url, corpus, make_model):
    # Batches are prepared one ahead of the write: the batch already chunked and embedded for the old set of
    # versions must be planned again for the new set, and its counts must not be taken twice.
    from toolkit.db.connection import connect
    from toolkit.progress import Progress

    make_model("h1", 16)
    make_model("h2", 16)
    live = versions.create_version(conn, "h1", "markdown:60:0", "markdown:60:0@1")
    created = []

    class CreateAfterFirstBatch(Progress):
        def advance(self, count=1, **extra):
            super().advance(count, **extra)
            if not created:
                with connect(database_url, autocommit=True) as other:
                    created.append(versions.create_version(other, "h2", "markdown:60:0", "markdown:60:0@1"))

    report = ingest(conn, [corpus], "acme", batch_documents=1, progress=CreateAfterFirstBatch("t", quiet=True))
    assert report.versions == [live, created[0]]
    assert (report.new, report.changed, report.unchanged) == (3, 0, 0)
    later = [r[0] for r in conn.execute(f"SELECT DISTINCT doc_id FROM toolkit.chunks_v{created[0]}")]
    assert len(later) == 2  # the first batch was committed before the version existed: backfill's job
    for doc_id in SECTIONS:
        assert chunk_count(conn, live, doc_id) > 0
    assert report.chunks_written[live] == sum(chunk_count(conn, live, d) for d in SECTIONS)
    assert report.chunks_written[created[0]] == sum(chunk_count(conn, created[0], d) for d in later)
    # Every chunk written was embedded once or reused once: no batch's counts lost or taken twice by the retry.
    assert report.embedded + report.reused == report.chunks_written[live] + report.chunks_written[created[0]]


def test_a_failed_embedding_keeps_the_batches_before_and_starts_none_after(conn, corpus, remote):
    # Batches overlap (the next is embedded while one is written), but a batch whose embedding fails is never
    # written, the ones before it are committed, and no later batch is sent to the model.
    from toolkit.errors import EmbeddingError

    v = versions.create_version(conn, "remote", "markdown:60:0", "markdown:60:0@1")
    remote.script({}, {"status": 400})  # the first request is answered, the second refused (not retried)
    with pytest.raises(EmbeddingError):
        ingest(conn, [corpus], "acme", batch_documents=1)
    assert remote.requests == 2, "the third document was never sent"
    stored = [r[0] for r in conn.execute("SELECT doc_id FROM toolkit.documents ORDER BY doc_id")]
    assert len(stored) == 1
    assert {r[0] for r in conn.execute(f"SELECT DISTINCT doc_id FROM toolkit.chunks_v{v}")} == set(stored)


def test_an_interrupted_ingest_exits_at_once_and_keeps_the_batches_written(conn, database_url, corpus, remote):
    # Ctrl-C while the next batch's embedding hangs: the process exits without waiting for the model call in
    # flight, the batch already written stays, and nothing of the interrupted one is written. Synchronized on
    # events: the server holds the second request until released (never, before the process is gone) and says
    # when it holds it; no sleep decides anything. (The old version slept 0.3 s and waited 10 s.)
    import signal
    import subprocess
    import sys

    versions.create_version(conn, "remote", "markdown:60:0", "markdown:60:0@1")
    remote.script({}, {"hold": True})  # the first document is answered; the second is held
    args = ["--database-url", database_url, "ingest", str(corpus), "--tenant", "acme", "--batch-size", "1"]
    process = subprocess.Popen(
        [sys.executable, "-m", "toolkit", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_sigint,
    )
    try:
        # The second batch's request is sent while the first is written (overlap): wait for both events.
        while remote.stats()["held"] == 0 or conn.execute("SELECT count(*) FROM toolkit.documents").fetchone()[0] == 0:
            assert process.poll() is None, process.communicate()
        process.send_signal(signal.SIGINT)
        # The held request is never answered before the process has exited: exiting cannot have waited for it.
        _out, err = process.communicate(timeout=120)
        assert remote.stats()["answered"] == 1
    finally:
        remote.release()
    assert process.returncode == 130 and "Traceback" not in err and "Run the same command again" in err
    assert conn.execute("SELECT count(*) FROM toolkit.documents").fetchone()[0] == 1
    assert remote.requests == 2


def test_the_same_documents_from_a_folder_of_another_name_are_unchanged(conn, corpus, remote, tmp_path):
    import shutil

    v = versions.create_version(conn, "remote", "markdown:60:0", "markdown:60:0@1")
    ingest(conn, [corpus], "acme")
    before = conn.execute(f"SELECT chunk_id, xmin::text FROM toolkit.chunks_v{v} ORDER BY 1").fetchall()
    moved = tmp_path / "renamed"
    shutil.copytree(corpus, moved)
    remote.reset()
    report = ingest(conn, [moved], "acme")
    assert (report.unchanged, report.changed, report.embedded, remote.requests) == (3, 0, 0, 0)
    after = conn.execute(f"SELECT chunk_id, xmin::text FROM toolkit.chunks_v{v} ORDER BY 1").fetchall()
    assert after == before, "no chunk row was rewritten"
    roots = {r[0] for r in conn.execute("SELECT metadata->>'root' FROM toolkit.documents")}
    assert roots == {str(moved.resolve())}, "the stored root follows the documents (what --prune goes by)"
    # --prune now goes by the new folder: a file removed from it is pruned, the old folder's copy is not needed.
    (moved / "support.md").unlink()
    assert ingest(conn, [moved], "acme", prune=True).deleted == 1


@pytest.mark.parametrize("tenant", ["", "   ", "bad\nname", "x" * 300])
def test_unusable_tenants_are_refused_before_anything_is_written(conn, corpus, tenant):
    with pytest.raises(InputError, match="tenant"):
        ingest(conn, [corpus], tenant)
    assert conn.execute("SELECT count(*) FROM toolkit.documents").fetchone()[0] == 0


def test_a_missing_path_is_an_error_and_prune_deletes_nothing(conn, corpus, make_model, tmp_path):
    make_model("h1", 16)
    versions.create_version(conn, "h1", "markdown:60:0", "markdown:60:0@1")
    ingest(conn, [corpus], "acme")
    with pytest.raises(InputError, match="does not exist"):
        ingest(conn, [tmp_path / "nope"], "acme", prune=True)
    assert conn.execute("SELECT count(*) FROM toolkit.documents").fetchone()[0] == 3


def test_access_labels_are_written_to_the_chunks(conn, corpus, make_model):
    make_model("h1", 16)
    v = versions.create_version(conn, "h1", "markdown:60:0", "markdown:60:0@1")
    ingest(conn, [corpus], "acme", acl=["hr", "finance"])
    labels = {tuple(r[0]) for r in conn.execute(f"SELECT DISTINCT access_labels FROM toolkit.chunks_v{v}")}
    assert labels == {("finance", "hr")}
    relabel = ingest(conn, [corpus], "acme", acl=["hr"])
    assert relabel.changed == 3 and relabel.embedded == 0
    labels = {tuple(r[0]) for r in conn.execute(f"SELECT DISTINCT access_labels FROM toolkit.chunks_v{v}")}
    assert labels == {("hr",)}


def test_small_to_big_parents_are_stored_beside_their_children_and_never_embedded(conn, corpus, make_model):
    """A parent with one child has the child's span and text; both rows must still fit in one table."""
    make_model("h1", 16)
    spec = "sentence:60:0:parent=markdown,400,0"
    from toolkit.chunking import get_chunker

    v = versions.create_version(conn, "h1", spec, get_chunker(spec).version)
    report = ingest(conn, [corpus], "acme")
    assert report.failed == []
    rows = conn.execute(
        f"SELECT is_parent, count(*), count(embedding) FROM toolkit.chunks_v{v} GROUP BY is_parent ORDER BY 1"
    ).fetchall()
    (children, child_count, embedded_children), (parents, parent_count, embedded_parents) = rows
    assert (children, parents) == (False, True)
    assert child_count > parent_count > 0 and embedded_children == child_count and embedded_parents == 0
    orphans = conn.execute(
        f"SELECT count(*) FROM toolkit.chunks_v{v} c WHERE NOT c.is_parent AND NOT EXISTS"
        f" (SELECT 1 FROM toolkit.chunks_v{v} p WHERE p.is_parent AND p.chunk_id = c.parent_id)"
    ).fetchone()[0]
    assert orphans == 0
    single = conn.execute(
        f"SELECT count(*) FROM toolkit.chunks_v{v} WHERE doc_id = 'sub/passwords.md' GROUP BY start_offset, end_offset"
    ).fetchall()
    assert (2,) in single, "the one-sentence document is stored as a parent and a child with the same span"


def test_the_same_document_id_from_two_paths_is_refused(conn, tmp_path, make_model):
    make_model("h1", 16)
    versions.create_version(conn, "h1", "markdown:60:0", "markdown:60:0@1")
    for root, text in (("ra", "alpha text from root a only."), ("rb", "beta text from root b only.")):
        (tmp_path / root).mkdir()
        (tmp_path / root / "same.md").write_text(text)
    with pytest.raises(InputError, match=r"same document 'same\.md'"):
        ingest(conn, [tmp_path / "ra", tmp_path / "rb"], "acme")
    assert conn.execute("SELECT count(*) FROM toolkit.documents").fetchone()[0] == 0
