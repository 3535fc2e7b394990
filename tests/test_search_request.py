"""One SQL search request (toolkit.search(toolkit.search_request(...))): its fields are the ones Python sends, the
earlier functions are wrappers returning what it returns, every hit carries the cosine similarity min_score filters
on, every search function refuses a query vector without a direction, and each chunk keeps the whitespace before it
(gap_before), written by ingest and filled by the upgrade for rows written before, equal to the document's own."""

from __future__ import annotations

import numpy as np
import psycopg
import pytest

from toolkit import cutover
from toolkit.chunking import get_chunker
from toolkit.db import migrate
from toolkit.db.connection import connect
from toolkit.embedding import get_embedder
from toolkit.ingest import ingest
from toolkit.store import versions
from toolkit.store.search import REQUEST_FIELDS

DIMS = 16
TENANT = "acme"
EMBEDDER = get_embedder(f"hashing:{DIMS}")
# Paragraphs apart by blank lines, a tab, trailing spaces and one gap longer than a chunk row keeps (4,096).
DOCUMENT = (
    "# Vacuum\n\nVACUUM reclaims storage occupied by dead tuples. \n\n\tIn normal operation, tuples that are deleted "
    "are not physically removed.\n\n"
    + " "
    * 5000
    + "Autovacuum runs VACUUM and ANALYZE automatically when enough rows changed.\r\n\r\n"
    "## Freezing\n\nTransaction ids wrap around; freezing old rows prevents data loss. " * 3
)
SEARCH_FUNCTIONS = {
    "search": "SELECT * FROM toolkit.search(toolkit.search_request(query_text => 'vacuum', query_embedding => %s))",
    "search_passages": "SELECT * FROM toolkit.search_passages('vacuum', %s)",
    "hybrid_search_chunks": "SELECT * FROM toolkit.hybrid_search_chunks('vacuum', %s)",
    "search_chunks": "SELECT * FROM toolkit.search_chunks(%s)",
    "search_context": "SELECT * FROM toolkit.search_context(%s)",
}


@pytest.fixture
def version(conn, make_model, tmp_path):
    make_model("h", DIMS)
    v = versions.create_version(conn, "h", "recursive:24:4", get_chunker("recursive:24:4").version)
    (tmp_path / "vacuum.md").write_text(DOCUMENT, encoding="utf-8")
    (tmp_path / "other.md").write_text("Indexes speed up reads.\n\n\n   Each index slows writes.\n", encoding="utf-8")
    ingest(conn, [tmp_path], TENANT)
    versions.create_version_index(conn, v)
    versions.mark_version_ready(conn, v)
    cutover.activate_version(conn, v, force=True)
    return v


def as_reader(conn, statement: str, params=()) -> list[dict]:
    with conn.transaction():
        conn.execute("SET LOCAL ROLE toolkit_reader")
        conn.execute("SELECT toolkit.set_tenant(%s)", (TENANT,))
        cur = conn.execute(statement, params)
        names = [c.name for c in cur.description]
        return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def gaps(conn, version: int) -> dict[str, str | None]:
    return dict(conn.execute(f"SELECT chunk_id, gap_before FROM toolkit.chunks_v{version}").fetchall())


def expected_gaps(conn, version: int) -> dict[str, str | None]:
    """Each chunk's gap as the document's text shows it (Python's str.rstrip over the text before the chunk)."""
    rows = conn.execute(
        f"SELECT c.chunk_id, d.raw_text, c.start_offset FROM toolkit.chunks_v{version} AS c"
        " JOIN toolkit.documents AS d USING (tenant, doc_id)"
    ).fetchall()
    result = {}
    for chunk_id, text, start in rows:
        before = text[:start]
        gap = before[len(before.rstrip(" \t\n\r\f\v")) :]
        result[chunk_id] = gap if len(gap) < 4096 else None
    return result


def test_the_request_names_the_fields_python_sends_and_the_constructor_builds_it(conn):
    attributes = [
        r[0]
        for r in conn.execute(
            "SELECT a.attname FROM pg_attribute AS a WHERE a.attrelid = 'toolkit.search_request_v1'::regclass"
            " AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum"
        ).fetchall()
    ]
    assert set(REQUEST_FIELDS) <= set(attributes), set(REQUEST_FIELDS) - set(attributes)
    arguments = conn.execute(
        "SELECT p.proargnames FROM pg_proc AS p WHERE p.oid = 'toolkit.search_request'::regproc"
    ).fetchone()[0]
    assert arguments == attributes  # one argument per field, in the type's order
    # Named arguments, the rest defaults.
    row = conn.execute("SELECT (toolkit.search_request(k => 7, retrieval => 'hybrid')).*").fetchone()
    assert dict(zip(attributes, row, strict=True)) == {
        **dict.fromkeys(attributes),
        "k": 7,
        "retrieval": "hybrid",
        "filters": {},
        "diversity": 0.0,
    }


def test_ingest_writes_each_chunks_gap_as_the_document_has_it(conn, version):
    found, expected = gaps(conn, version), expected_gaps(conn, version)
    assert found == expected
    assert None in found.values()  # the 5,000 spaces: longer than a row keeps
    assert {"\n\n", "\r\n\r\n"} <= set(found.values())


def test_the_upgrade_fills_the_gap_of_rows_written_before_it(conn, database_url, version):
    migrate.downgrade(database_url, "0005")
    with connect(database_url, autocommit=True) as c:
        # Rows as release 0005 writes them: no gap.
        c.execute(f"UPDATE toolkit.chunks_v{version} SET gap_before = NULL")
    migrate.upgrade(database_url)
    found = gaps(conn, version)
    assert found == expected_gaps(conn, version)
    assert sum(1 for g in found.values() if g) > 5


def test_the_earlier_functions_return_what_the_request_returns(conn, version):
    q = EMBEDDER.embed_query("how does vacuum reclaim storage")
    pairs = {
        "search_passages('vacuum storage', %(q)s, 3)": (
            "query_text => 'vacuum storage', query_embedding => %(q)s, k => 3"
        ),
        "hybrid_search_chunks('vacuum storage', %(q)s, 4, min_score => 0.0)": (
            "query_text => 'vacuum storage', query_embedding => %(q)s, k => 4, retrieval => 'hybrid', min_score => 0.0"
        ),
        "search_chunks(%(q)s, 4, diversity => 0.5)": (
            "query_embedding => %(q)s, k => 4, retrieval => 'vector', diversity => 0.5"
        ),
        "search_context(%(q)s, 2, 'window:1')": "query_embedding => %(q)s, k => 2, expand => 'window:1'",
    }
    for old, new in pairs.items():
        wrapped = as_reader(conn, f"SELECT * FROM toolkit.{old}", {"q": q})
        direct = as_reader(conn, f"SELECT * FROM toolkit.search(toolkit.search_request({new}))", {"q": q})
        assert wrapped, old
        assert [{key: row[key] for key in wrapped[0]} for row in direct] == wrapped, old


@pytest.mark.parametrize("retrieval", ["passages", "hybrid", "vector"])
def test_every_hit_carries_the_cosine_similarity_min_score_filters_on(conn, version, retrieval):
    q = EMBEDDER.embed_query("freezing old rows")
    vectors = {
        chunk_id: np.asarray(embedding, dtype=np.float64)
        for chunk_id, embedding in conn.execute(
            f"SELECT chunk_id, embedding FROM toolkit.chunks_v{version} WHERE embedding IS NOT NULL"
        ).fetchall()
    }

    def cosine(chunk_id: str) -> float:
        v = vectors[chunk_id]
        return float(v @ q / (np.linalg.norm(v) * np.linalg.norm(q)))

    statement = (
        "SELECT * FROM toolkit.search(toolkit.search_request(query_text => 'freezing old rows', query_embedding => %s,"
        " k => 5, retrieval => %s, min_score => %s))"
    )
    hits = as_reader(conn, statement, (q, retrieval, None))
    assert hits
    for hit in hits:
        # A passage's: the largest of its chunks'.
        assert hit["similarity"] == pytest.approx(max(cosine(c) for c in hit["chunk_ids"]), abs=1e-5)
    floor = sorted(h["similarity"] for h in hits)[len(hits) // 2]
    kept = as_reader(conn, statement, (q, retrieval, floor))
    assert kept
    assert all(cosine(c) >= floor - 1e-6 for h in kept for c in h["chunk_ids"])


@pytest.mark.parametrize("name", sorted(SEARCH_FUNCTIONS))
def test_every_search_function_refuses_a_vector_without_a_direction(conn, version, name):
    statement = SEARCH_FUNCTIONS[name]
    with pytest.raises(psycopg.Error) as zero:
        as_reader(conn, statement, (np.zeros(DIMS, dtype=np.float32),))
    assert zero.value.sqlstate == "22023" and "all zeros" in str(zero.value)
    for value in ("NaN", "Infinity"):
        vector = np.full(DIMS, 0.5, dtype=np.float32)
        vector[3] = float(value.lower() if value == "NaN" else "inf")
        with pytest.raises(psycopg.Error) as bad:
            as_reader(conn, statement, (vector,))
        # pgvector's own refusal, before any search runs.
        assert bad.value.sqlstate.startswith("22") and ("NaN" in str(bad.value) or "infinite" in str(bad.value))
