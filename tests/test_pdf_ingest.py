"""PDFs on a real database: ingest stores the cleaned text and its page map, every chunk row records its pages
(ingest and backfill alike), bad PDFs are reported one sentence each while the rest of the batch is stored, and
the upgrade adds the pages column to chunk tables made without it; a downgrade keeps it."""

from __future__ import annotations

import pdfs
import pytest

from toolkit import backfill, cutover
from toolkit.db import migrate
from toolkit.db.connection import connect
from toolkit.ingest import ingest
from toolkit.store import versions


@pytest.fixture
def batch(tmp_path):
    folder = tmp_path / "manuals"
    folder.mkdir()
    pdfs.write_manual(folder / "manual.pdf")
    pdfs.write_encrypted(folder / "locked.pdf")
    pdfs.write_image_only(folder / "scan.pdf")
    pdfs.write_damaged(folder / "damaged.pdf", folder / "manual.pdf")
    (folder / "notes.md").write_text("# Notes\n\n" + "Plain notes about the widget. " * 40 + "\n")
    return folder


def expected_pages(text: str, start: int, end: int) -> list[int]:
    """The pages a span covers, from where the builder's page contents start in the stored text."""
    starts = [0, text.index("Installation starts"), text.index("Plan | Price"), text.index("bour for two years")]
    bounds = [*starts, len(text)]
    return [p + 1 for p in range(4) if start < bounds[p + 1] and end > bounds[p]]


def stored_chunks(conn, version: int, doc_id: str) -> list[tuple]:
    return conn.execute(
        f"SELECT start_offset, end_offset, text, pages FROM toolkit.chunks_v{int(version)}"
        " WHERE doc_id = %s ORDER BY position",
        (doc_id,),
    ).fetchall()


def test_ingest_stores_pages_and_reports_each_bad_pdf(conn, batch, make_model):
    make_model("h1", 16)
    v1 = versions.create_version(conn, "h1", "recursive:30:0", "recursive:30:0@2")
    report = ingest(conn, [batch], "acme")

    failed = {f.source.rsplit("/", 1)[-1]: f.reason for f in report.failed}
    assert set(failed) == {"locked.pdf", "scan.pdf", "damaged.pdf"}
    assert failed["locked.pdf"].startswith("is encrypted and needs a password")
    assert failed["scan.pdf"].startswith("has no text layer")
    assert failed["damaged.pdf"].startswith("is damaged or not a valid PDF")
    assert report.new == 2  # the manual and the notes were stored

    text, format_, title, metadata = conn.execute(
        "SELECT raw_text, format, title, metadata FROM toolkit.documents WHERE doc_id = 'manual.pdf'"
    ).fetchone()
    assert (format_, title) == ("pdf", "ACME Widget Manual")
    assert pdfs.HEADER not in text
    assert metadata["pages"] == [
        0,
        text.index("Installation starts"),
        text.index("Plan | Price"),
        text.index("bour for two years"),
    ]
    chunks = stored_chunks(conn, v1, "manual.pdf")
    assert len(chunks) > 6
    for start, end, body, pages in chunks:
        assert text[start:end] == body
        assert pages == expected_pages(text, start, end)
    assert [3, 4] in [pages for *_, pages in chunks]
    assert all(pages is None for *_, pages in stored_chunks(conn, v1, "notes.md"))
    notes_metadata = conn.execute("SELECT metadata FROM toolkit.documents WHERE doc_id = 'notes.md'").fetchone()[0]
    assert "pages" not in notes_metadata


def test_backfill_records_the_same_pages_from_the_stored_documents(database_url, batch):
    with connect(database_url, autocommit=True) as conn:
        from toolkit.store.models import Model, insert_model

        insert_model(conn, Model(alias="h", provider="hashing", model_name="16", dimensions=16, max_input_tokens=8192))
        ingest(conn, [batch], "acme")  # no version yet: only the documents are stored
    report = backfill.backfill(database_url, "h", "recursive:30:0")
    with connect(database_url, autocommit=True) as conn:
        text = conn.execute("SELECT raw_text FROM toolkit.documents WHERE doc_id = 'manual.pdf'").fetchone()[0]
        chunks = stored_chunks(conn, report.version, "manual.pdf")
        assert len(chunks) > 6
        for start, end, _, pages in chunks:
            assert pages == expected_pages(text, start, end)
        assert all(pages is None for *_, pages in stored_chunks(conn, report.version, "notes.md"))
        # the search returns them, for citations: chunks, parents' and windows' pages alike
        from toolkit.search import search

        cutover.activate_version(conn, report.version, force=True)
        for expand in (None, "window:1"):
            hits = search(conn, "two years warranty", "acme", 10, expand=expand, log=False)
            on_pdf = [h for h in hits if h.doc_id == "manual.pdf"]
            assert on_pdf and all(h.pages == expected_pages(text, h.start, h.end) for h in on_pdf)
            assert all(h.pages is None for h in hits if h.doc_id == "notes.md")


PAGES_TYPE = (
    "SELECT format_type(atttypid, atttypmod) FROM pg_catalog.pg_attribute"
    " WHERE attrelid = %s::regclass AND attname = 'pages' AND NOT attisdropped"
)


def test_a_downgrade_keeps_pages_and_the_upgrade_adds_it_to_tables_made_without_it(database_url, make_model, conn):
    make_model("h", 8)
    old = versions.create_version(conn, "h", "fixed:10:0", "fixed:10:0@1")
    table = f"toolkit.chunks_v{int(old)}"
    conn.execute(
        f"INSERT INTO {table} (tenant, chunk_id, doc_id, position, start_offset, end_offset, text, content_hash,"
        " token_count, pages) VALUES ('acme', 'c1', 'd1', 0, 0, 4, 'text', 'h', 1, '{2,3}')"
    )
    assert conn.execute(PAGES_TYPE, (table,)).fetchone() == ("integer[]",)
    # Back to the release before pages: the column stays (a reader inside a search when the downgrade commits
    # still finds it), the older release simply does not use it, and makes new tables without it.
    migrate.downgrade(database_url, "0003")
    assert conn.execute(PAGES_TYPE, (table,)).fetchone() == ("integer[]",)
    assert conn.execute(f"SELECT chunk_id, pages FROM {table}").fetchall() == [("c1", [2, 3])]
    made_before = conn.execute("SELECT toolkit.create_version('h', 'fixed:20:0', 'fixed:20:0@1')").fetchone()[0]
    newer = f"toolkit.chunks_v{int(made_before)}"
    assert conn.execute(PAGES_TYPE, (newer,)).fetchone() is None
    migrate.upgrade(database_url, "head")  # 005-chunk-pages.sql: the table made without it gets the column
    assert conn.execute(PAGES_TYPE, (newer,)).fetchone() == ("integer[]",)
    assert conn.execute(f"SELECT pages FROM {table}").fetchall() == [([2, 3],)]
