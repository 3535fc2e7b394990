"""Metadata given at ingest (``toolkit ingest --metadata KEY=VALUE``, ``ingest(metadata=…)``) is stored in
``documents.metadata`` and found by the search filters ``metadata.KEY=VALUE``; an unchanged document ingested again
with other metadata gets it without being chunked or embedded again; bad metadata is refused before anything is
read or written."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from toolkit.backfill import finalize_version
from toolkit.cli import main
from toolkit.errors import InputError
from toolkit.ingest import ingest
from toolkit.search import search
from toolkit.store import versions
from toolkit.validation import parse_metadata


@pytest.fixture
def corpus(tmp_path):
    folder = tmp_path / "corpus"
    (folder / "en").mkdir(parents=True)
    (folder / "de").mkdir()
    (folder / "en" / "a.md").write_text("# Alpha\n\nThe alpha document talks about retention windows.\n")
    (folder / "de" / "b.md").write_text("# Beta\n\nThe beta document talks about retention windows too.\n")
    return folder


def building_version(conn, make_model) -> int:
    make_model("m", 8)
    return versions.create_version(conn, "m", "markdown:60:0", "markdown:60:0@1")


def found(conn, version, metadata) -> set[str]:
    """The documents a vector search of the (finalized) version finds with the metadata filter."""
    hits = search(conn, [1.0] * 8, "acme", 10, version=version, filters={"metadata": metadata}, retrieval="vector")
    return {hit.doc_id for hit in hits}


def stored_metadata(conn, tenant="acme"):
    rows = conn.execute(
        "SELECT doc_id, metadata FROM toolkit.documents WHERE tenant = %s ORDER BY doc_id", (tenant,)
    ).fetchall()
    return {doc_id: meta for doc_id, meta in rows}


def test_metadata_is_stored_beside_ingests_own_keys_and_filters_find_it(conn, make_model, corpus):
    version = building_version(conn, make_model)
    ingest(conn, [corpus / "en"], "acme", metadata={"lang": "en", "year": 2024})
    ingest(conn, [corpus / "de"], "acme", metadata={"lang": "de"})
    assert finalize_version(conn, version).outcome == "ready"
    meta = stored_metadata(conn)
    assert set(meta) == {"a.md", "b.md"}, meta
    assert {k: v for k, v in meta["a.md"].items() if k != "root"} == {"lang": "en", "year": 2024}
    assert meta["a.md"]["root"] and meta["b.md"]["lang"] == "de" and "year" not in meta["b.md"]
    assert found(conn, version, {"lang": "de"}) == {"b.md"}
    assert found(conn, version, {"year": 2024}) == {"a.md"}
    assert found(conn, version, {"lang": "en", "year": 2023}) == set()


def test_new_metadata_reaches_an_unchanged_document_without_rewriting_its_chunks(conn, make_model, corpus):
    version = building_version(conn, make_model)
    ingest(conn, [corpus], "acme", metadata={"lang": "en"})
    assert finalize_version(conn, version).outcome == "ready"
    before = conn.execute(f"SELECT chunk_id, xmin::text FROM toolkit.chunks_v{version} ORDER BY chunk_id").fetchall()
    report = ingest(conn, [corpus], "acme", metadata={"lang": "fr", "team": "ops"})
    assert report.unchanged == 2 and report.new == 0 and report.changed == 0 and report.embedded == 0
    assert {doc: (m["lang"], m["team"]) for doc, m in stored_metadata(conn).items()} == {
        "en/a.md": ("fr", "ops"),
        "de/b.md": ("fr", "ops"),
    }
    after = conn.execute(f"SELECT chunk_id, xmin::text FROM toolkit.chunks_v{version} ORDER BY chunk_id").fetchall()
    assert after == before  # the same rows, not rewritten
    assert found(conn, version, {"team": "ops"}) == {"en/a.md", "de/b.md"}
    assert found(conn, version, {"lang": "en"}) == set()


def test_the_command_line_reads_json_or_text_and_refuses_before_reading(database_url, conn, make_model, corpus):
    building_version(conn, make_model)
    conn.commit()
    ok = CliRunner().invoke(
        main,
        ["--database-url", database_url, "ingest", str(corpus), "--tenant", "acme", "--metadata", "lang=en",
         "--metadata", "year=2024", "--metadata", "draft=false"],
    )  # fmt: skip
    assert ok.exit_code == 0, ok.output
    meta = stored_metadata(conn)["en/a.md"]
    assert (meta["lang"], meta["year"], meta["draft"]) == ("en", 2024, False)
    for bad, words in (
        ("lang", "KEY=VALUE"),
        ("root=/tmp", "ingest's own"),
        ('tags=["a"]', "one value"),
        ("x={", "starts like JSON"),
    ):
        refused = CliRunner().invoke(
            main, ["--database-url", database_url, "ingest", str(corpus), "--tenant", "other", "--metadata", bad]
        )
        assert refused.exit_code == 2 and words in refused.output, (bad, refused.output)
    assert conn.execute("SELECT count(*) FROM toolkit.documents WHERE tenant = 'other'").fetchone()[0] == 0


@pytest.mark.parametrize(
    ("given", "words"),
    [
        ({"pages": 1}, "ingest's own"),
        ({"": 1}, "not usable"),
        ({"k": [1, 2]}, "one string, number"),
        ({"k": {"a": 1}}, "one string, number"),
        ({"k": float("nan")}, "finite"),
        ({"k": "a\x00b"}, "NUL"),
        ("lang=en", "mapping"),
    ],
)
def test_the_library_refuses_metadata_search_could_not_compare(conn, corpus, given, words):
    with pytest.raises(InputError, match=words):
        ingest(conn, [corpus], "acme", metadata=given)
    assert conn.execute("SELECT count(*) FROM toolkit.documents").fetchone()[0] == 0


def test_parse_metadata_reads_json_values_and_text():
    assert parse_metadata(["lang=en", "year=2024", "ok=true", "none=null", 'quoted="2024"']) == {
        "lang": "en",
        "year": 2024,
        "ok": True,
        "none": None,
        "quoted": "2024",
    }
    with pytest.raises(InputError, match="given twice"):
        parse_metadata(["a=1", "a=2"])
