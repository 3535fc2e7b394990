"""Row-level security as the reader role: tenants are isolated through the view, the tables and the
functions; labelled rows need a matching principal; no tenant means no rows; the reader cannot write."""

from __future__ import annotations

import numpy as np
import psycopg
import pytest
from psycopg import errors as pg_errors
from support import ready_version

from toolkit import cutover

LABELS = [[], ["hr"], ["eng"], ["hr", "finance"]]


@pytest.fixture
def live(conn, make_model):
    make_model("m1", 8)
    v = ready_version(conn, "m1", 8, {"a": 40, "b": 40}, labels=LABELS)
    candidate = ready_version(conn, "m1", 8, {"a": 5, "b": 5}, chunker="fixed:20:0")
    cutover.activate_version(conn, v, force=True)
    conn.execute(
        "INSERT INTO toolkit.documents (tenant, doc_id, source, raw_text, content_hash)"
        " VALUES ('a', 'd1', 'a.md', 'secret a', 'h'), ('b', 'd1', 'b.md', 'secret b', 'h')"
    )
    return v, candidate


def as_reader(conn, query: str, params=(), *, tenant: str | None = None, principals=None):
    with conn.transaction():
        conn.execute("SET LOCAL ROLE toolkit_reader")
        if tenant is not None:
            conn.execute("SELECT toolkit.set_tenant(%s)", (tenant,))
        if principals is not None:
            conn.execute("SELECT toolkit.set_principals(%s)", (principals,))
        return conn.execute(query, params).fetchall()


def test_no_tenant_set_means_no_rows(conn, live):
    v, candidate = live
    assert as_reader(conn, "SELECT count(*) FROM toolkit.active_chunks") == [(0,)]
    assert as_reader(conn, f"SELECT count(*) FROM toolkit.chunks_v{v}") == [(0,)]
    assert as_reader(conn, f"SELECT count(*) FROM toolkit.chunks_v{candidate}") == [(0,)]


def test_tenants_never_see_each_other(conn, live):
    v, candidate = live
    for tenant in ("a", "b"):
        for table in ("toolkit.active_chunks", f"toolkit.chunks_v{v}", f"toolkit.chunks_v{candidate}"):
            rows = as_reader(conn, f"SELECT DISTINCT tenant FROM {table}", tenant=tenant, principals=["hr", "eng"])
            assert rows == [(tenant,)], table
    # the vector search path applications use
    rows = as_reader(
        conn,
        "SELECT tenant FROM toolkit.active_chunks ORDER BY embedding <=> %s LIMIT 40",
        (np.ones(8, dtype=np.float32),),
        tenant="a",
        principals=["hr", "eng", "finance"],
    )
    assert rows and {r[0] for r in rows} == {"a"}


def test_session_level_tenant_also_works_and_other_tenants_stay_hidden(conn, live):
    with conn.transaction():
        conn.execute("SET LOCAL ROLE toolkit_reader")
        conn.execute("SET LOCAL toolkit.tenant = 'b'")
        assert conn.execute("SELECT DISTINCT tenant FROM toolkit.active_chunks").fetchall() == [("b",)]


@pytest.mark.parametrize(
    ("principals", "visible"),
    [
        (None, [[]]),
        ([], [[]]),
        (["hr"], [[], ["hr"], ["hr", "finance"]]),
        (["eng"], [[], ["eng"]]),
        (["finance"], [[], ["hr", "finance"]]),
        (["nobody"], [[]]),
    ],
)
def test_access_labels_need_a_matching_principal(conn, live, principals, visible):
    rows = as_reader(
        conn, "SELECT DISTINCT access_labels FROM toolkit.active_chunks", tenant="a", principals=principals
    )
    assert sorted(r[0] for r in rows) == sorted(visible)


def test_reader_cannot_write_or_reach_private_tables_and_functions(conn, live):
    v, _ = live
    forbidden = [
        (
            f"INSERT INTO toolkit.chunks_v{v} (tenant, chunk_id, doc_id, position, start_offset, end_offset, text,"
            " content_hash, token_count) VALUES ('a', 'x', 'd', 0, 0, 1, 't', 'h', 1)"
        ),
        f"UPDATE toolkit.chunks_v{v} SET text = 'x'",
        f"DELETE FROM toolkit.chunks_v{v}",
        "DELETE FROM toolkit.active_chunks",
        "SELECT * FROM toolkit.documents",
        "SELECT * FROM toolkit.versions",
        "SELECT * FROM toolkit.evaluations",
        "SELECT * FROM toolkit.version_status()",
        f"SELECT toolkit.activate_version({v}, true)",
        "SELECT toolkit.rollback_version()",
        f"SELECT toolkit.retire_version({v})",
        "SELECT toolkit.create_version('m1', 'x', 'x@1')",
        f"SELECT toolkit.touch_version({v})",
        "CREATE TABLE toolkit.mine (x int)",
    ]
    for statement in forbidden:
        with pytest.raises(pg_errors.InsufficientPrivilege):
            as_reader(conn, statement, tenant="a")


def test_a_role_without_grants_sees_nothing(conn, live):
    conn.execute("DROP ROLE IF EXISTS toolkit_test_stranger")
    conn.execute("CREATE ROLE toolkit_test_stranger NOLOGIN")
    try:
        with pytest.raises(pg_errors.InsufficientPrivilege), conn.transaction():
            conn.execute("SET LOCAL ROLE toolkit_test_stranger")
            conn.execute("SELECT * FROM toolkit.active_chunks").fetchall()
    finally:
        conn.execute("DROP ROLE toolkit_test_stranger")


def test_writer_works_across_tenants_and_only_through_definer_functions(conn, live):
    v, _ = live
    with conn.transaction():
        conn.execute("SET LOCAL ROLE toolkit_writer")
        assert conn.execute(f"SELECT count(DISTINCT tenant) FROM toolkit.chunks_v{v}").fetchone()[0] == 2
        assert conn.execute("SELECT count(*) FROM toolkit.documents").fetchone()[0] == 2
        with pytest.raises(pg_errors.InsufficientPrivilege):
            conn.execute(f"DROP TABLE toolkit.chunks_v{v}")


def test_the_view_keeps_security_invoker_through_every_swap(conn, live, make_model):
    _, candidate = live
    cutover.activate_version(conn, candidate, force=True)
    cutover.rollback_version(conn)
    options = conn.execute("SELECT reloptions FROM pg_class WHERE oid = 'toolkit.active_chunks'::regclass")
    assert options.fetchone()[0] == ["security_invoker=true"]
    assert as_reader(conn, "SELECT count(*) FROM toolkit.active_chunks") == [(0,)]


def test_a_login_role_granted_reader_is_isolated(conn, database_url, live):
    conn.execute("DROP ROLE IF EXISTS toolkit_test_app")
    conn.execute("CREATE ROLE toolkit_test_app LOGIN IN ROLE toolkit_reader")
    try:
        info = psycopg.conninfo.conninfo_to_dict(database_url)
        info["user"] = "toolkit_test_app"
        with psycopg.connect(**info) as app:
            app.execute("SELECT toolkit.set_tenant('a')")
            assert app.execute("SELECT DISTINCT tenant FROM toolkit.active_chunks").fetchall() == [("a",)]
    finally:
        conn.execute("DROP ROLE toolkit_test_app")


def test_full_text_postings_and_statistics_keep_tenants_and_labels_apart(conn, live):
    """The postings and statistics the full-text search reads (terms_vN, term_stats_vN) are the chunk table's rows:
    a reader cannot query them (issue 39), and reads through the search's definer functions only its tenant's rows
    with labels it holds; df and N count only those rows, so a hidden chunk's words leave no trace."""
    v, _ = live
    terms, stats = conn.execute(
        "SELECT toolkit._postings_table(%s), toolkit._statistics_table(%s)",
        (v, v),
    ).fetchone()
    for table in (terms, stats):
        with pytest.raises(pg_errors.InsufficientPrivilege):
            as_reader(conn, f"SELECT count(*) FROM {table}", tenant="a")
    postings = "SELECT chunk_id FROM toolkit._read_postings(%s, ARRAY['text'])"
    statistics = "SELECT lexeme, df FROM toolkit._read_term_stats(%s, ARRAY['', 'text', '1'])"
    assert as_reader(conn, postings, (v,)) == []  # no tenant, no rows
    assert as_reader(conn, statistics, (v,)) == []
    for tenant in ("a", "b"):
        for principals in (["eng"], [], ["hr"]):
            chunks = {
                r[0]
                for r in as_reader(
                    conn, f"SELECT chunk_id FROM toolkit.chunks_v{v}", tenant=tenant, principals=principals
                )
            }
            # Every chunk holds the word 'text': the postings of it are the chunks the reader may read.
            seen = as_reader(conn, postings, (v,), tenant=tenant, principals=principals)
            assert sorted(r[0] for r in seen) == sorted(chunks)
            counts = as_reader(conn, statistics, (v,), tenant=tenant, principals=principals)
            expected = [("", len(chunks)), ("text", len(chunks))] + ([("1", 1)] if f"v{v}-{tenant}-1" in chunks else [])
            assert sorted((r[0], int(r[1])) for r in counts) == sorted(expected)
            found = as_reader(
                conn,
                "SELECT chunk_id, text_rank FROM toolkit.hybrid_search_chunks('text 1', NULL, 50)",
                tenant=tenant,
                principals=principals,
            )
            assert found and {r[0] for r in found} <= chunks
            # Chunk 1 is labelled hr: only a reader holding hr finds it first (its rare word '1').
            assert (found[0][0] == f"v{v}-{tenant}-1") == ("hr" in principals)
    with pytest.raises(pg_errors.InsufficientPrivilege):
        as_reader(
            conn,
            f"INSERT INTO {terms} (tenant, lexeme, chunk_id, tf, token_count) VALUES ('a', 'x', 'x', 1, 1)",
            tenant="a",
        )
    with pytest.raises(pg_errors.InsufficientPrivilege):
        as_reader(conn, f"DELETE FROM {stats}", tenant="a")
