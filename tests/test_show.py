"""`toolkit show` and `toolkit diff` (issue 26, item 5): a version's documents and one document's chunks, read from
the version's own table as the caller, and how two chunkers cut one document."""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
from click.testing import CliRunner

from toolkit import cutover
from toolkit.backfill import backfill
from toolkit.cli import main
from toolkit.contents import diff_document, version_chunks, version_documents
from toolkit.db.connection import connect
from toolkit.errors import InputError
from toolkit.ingest import ingest

SAMPLE = Path(__file__).resolve().parent.parent / "toolkit" / "data" / "sample" / "docs"
NAMES = ("row-security.md", "indexes.md")


@pytest.fixture
def versions(conn, database_url, make_model, tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    for name in NAMES:
        shutil.copyfile(SAMPLE / name, docs / name)
    make_model("one", 16, options={"seed": 1})
    make_model("two", 16, options={"seed": 2})
    ingest(conn, [docs], "acme")
    other = tmp_path / "other"
    other.mkdir()
    shutil.copyfile(SAMPLE / NAMES[0], other / NAMES[0])
    ingest(conn, [other], "globex")
    first = backfill(database_url, "one", "markdown:120:0").version
    second = backfill(database_url, "two", "fixed:64:0").version
    cutover.activate_version(conn, first, force=True)
    return first, second


def cli(url: str, *args: str, code: int = 0):
    result = CliRunner().invoke(main, ["--database-url", url, *args])
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    return result


def test_show_lists_documents_and_chunks_as_stored(conn, versions):
    first, _ = versions
    documents = version_documents(conn, first)
    assert [(d.tenant, d.doc_id) for d in documents] == [("acme", NAMES[1]), ("acme", NAMES[0]), ("globex", NAMES[0])]
    for d in documents:
        stored = conn.execute(
            f"SELECT count(*), sum(token_count) FROM toolkit.chunks_v{first}"
            " WHERE tenant = %s AND doc_id = %s AND NOT is_parent",
            (d.tenant, d.doc_id),
        ).fetchone()
        assert (d.chunks, d.tokens) == tuple(stored) and d.chunks > 1
    assert [d.doc_id for d in version_documents(conn, first, "globex")] == [NAMES[0]]

    chunks = version_chunks(conn, first, NAMES[1])
    text = conn.execute("SELECT raw_text FROM toolkit.documents WHERE tenant = 'acme' AND doc_id = %s", (NAMES[1],))
    raw = text.fetchone()[0]
    plain = [c for c in chunks if not c.is_parent]
    assert [c.start for c in plain] == sorted(c.start for c in plain)
    assert all(raw[c.start : c.end].strip() and c.token_count > 0 for c in plain)
    assert any(c.heading_path for c in plain)
    with pytest.raises(InputError, match="pass --tenant"):
        version_chunks(conn, first, NAMES[0])  # acme and globex both have it
    assert {c.tenant for c in version_chunks(conn, first, NAMES[0], "globex")} == {"globex"}
    with pytest.raises(InputError, match=r"holds no document 'nope\.md'"):
        version_chunks(conn, first, "nope.md")


def test_diff_shows_how_two_chunkers_cut_one_document(conn, versions):
    first, second = versions
    found = diff_document(conn, first, second, NAMES[1])
    assert found.a.chunker_version.startswith("markdown:120:0") and found.b.chunker_version.startswith("fixed:64:0")
    cuts_a = {c.start for c in found.a.chunks}
    cuts_b = {c.start for c in found.b.chunks}
    assert set(found.common_cuts) == cuts_a & cuts_b
    assert set(found.only_a) == cuts_a - cuts_b and set(found.only_b) == cuts_b - cuts_a
    assert len(found.b.chunks) > len(found.a.chunks)  # 64-token pieces against 120-token ones
    assert [r["offset"] for r in found.rows()] == sorted(cuts_a | cuts_b)


def test_show_and_diff_from_the_command_line(database_url, versions):
    first, second = versions
    listed = json.loads(cli(database_url, "show", "--version", str(first), "--format", "json").stdout)
    assert {d["doc_id"] for d in listed} == set(NAMES)
    table = cli(database_url, "show", "--version", str(first), "--doc", NAMES[1]).stdout
    assert "heading_path" in table and "span" in table
    compared = cli(database_url, "diff", "--version", str(first), "--version", str(second), "--doc", NAMES[1])
    assert "in common" in compared.stdout and f"A: version {first}" in compared.stdout
    as_json = json.loads(
        cli(
            database_url,
            "diff",
            "--version",
            str(first),
            "--version",
            str(second),
            "--doc",
            NAMES[1],
            "--format",
            "json",
        ).stdout
    )
    assert as_json["a"]["version"] == first and as_json["b"]["version"] == second

    assert "exactly two versions" in cli(database_url, "diff", "--version", "1", "--doc", "x", code=2).output
    assert "holds no document" in cli(database_url, "show", "--version", str(first), "--doc", "nope", code=1).output
    assert "retired or does not exist" in cli(database_url, "show", "--version", "99", code=1).output


def test_a_reader_sees_its_tenant_only(conn, database_url, versions):
    name = f"app_{uuid.uuid4().hex[:8]}"
    conn.execute(f"CREATE ROLE {name} LOGIN IN ROLE toolkit_reader")
    parts = urlsplit(database_url)
    url = urlunsplit(parts._replace(netloc=f"{name}@{parts.netloc.split('@')[-1]}"))
    try:
        with connect(url) as app:
            assert version_documents(app, versions[0]) == []  # no tenant set: no rows
            with app.transaction():
                app.execute("SELECT toolkit.set_tenant('globex')")
                assert [d.doc_id for d in version_documents(app, versions[0])] == [NAMES[0]]
    finally:
        conn.execute(f"DROP OWNED BY {name}")
        conn.execute(f"DROP ROLE {name}")
