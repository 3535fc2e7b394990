"""Issue 39, item 3 (the lexical part) and item 8's EXPLAIN finding: after `toolkit delete` and `toolkit tenant erase`
no version's full-text statistics keep the deleted words (they stayed as +1/-1 rows, an e-mail address among them,
readable by any reader setting that tenant); and no login below the owner can query a version's postings or
statistics (an EXPLAIN ANALYZE of a lexeme lookup told whether another tenant's chunks hold a guessed word). Searches
read them through definer functions that return the caller's own rows, with the same hits as the reference BM25."""

from __future__ import annotations

import itertools
import math
import shutil
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from psycopg import errors as pg_errors

from toolkit import cutover
from toolkit.backfill import backfill
from toolkit.deletion import delete_documents, erase_tenant
from toolkit.ingest import ingest
from toolkit.store.lexical import query_lexemes, retrieval_settings

SAMPLE = Path(__file__).resolve().parent.parent / "toolkit" / "data" / "sample" / "docs"
SHARED = ("row-security.md", "indexes.md")
# Words only one document holds: the deleted document's (an e-mail address among them), a labelled document's and
# the other tenant's.
SECRET = "Write to mallory.quartermain@example.org about the quuxotic merger before Friday."
PAYROLL = "The zanzibarian bonus pool is confidential to human resources."
RIVAL = "Globex plans a xylophonic launch of its vector database in spring."
QUESTION = "row level security policy for a table"


def as_user(url: str, user: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=f"{user}@{parts.netloc.split('@')[-1]}"))


@pytest.fixture
def store(conn, database_url, make_model, tmp_path):
    """Tenant acme: two sample documents, a secret one and one labelled hr; tenant globex: the same two and its own.
    Two live versions (the first on standby, the second active)."""
    for tenant, extra in (("acme", {"secret.md": SECRET}), ("globex", {"rival.md": RIVAL})):
        docs = tmp_path / tenant
        docs.mkdir()
        for name in SHARED:
            shutil.copyfile(SAMPLE / name, docs / name)
        for name, text in extra.items():
            (docs / name).write_text(f"# {name}\n\n{text}\n")
        ingest(conn, [docs], tenant)
    labelled = tmp_path / "labelled"
    labelled.mkdir()
    (labelled / "payroll.md").write_text(f"# Payroll\n\n{PAYROLL}\n")
    ingest(conn, [labelled], "acme", acl=["hr"])
    make_model("one", 16, options={"seed": 1})
    make_model("two", 24, options={"seed": 2})
    first = backfill(database_url, "one", "recursive:120:0").version
    second = backfill(database_url, "two", "fixed:64:0").version
    cutover.activate_version(conn, first, force=True)
    cutover.activate_version(conn, second, force=True)
    return first, second


@pytest.fixture
def logins(conn, database_url):
    """Login roles: an unbound reader, a reader bound to acme, a writer and a deployer."""
    suffix = uuid.uuid4().hex[:8]
    membership = {
        "reader": "toolkit_reader",
        "bound": "toolkit_reader",
        "writer": "toolkit_writer",
        "deployer": "toolkit_deployer",
    }
    names = {role: f"erase_{role}_{suffix}" for role in membership}
    for role, name in names.items():
        conn.execute(f"CREATE ROLE {name} LOGIN IN ROLE {membership[role]}")
    conn.execute("SELECT toolkit.bind_tenants(%s, ARRAY['acme'])", (names["bound"],))
    yield {role: as_user(database_url, name) for role, name in names.items()}
    for name in names.values():
        conn.execute(f"DROP OWNED BY {name}")
        conn.execute(f"DROP ROLE {name}")


def lexical_tables(conn, version: int) -> tuple[str, str]:
    return conn.execute(
        "SELECT toolkit._postings_table(%s), toolkit._statistics_table(%s)", (version, version)
    ).fetchone()


def lexemes_of(conn, text: str) -> list[str]:
    return query_lexemes(conn, [text])[0]


def next_transaction_does_not_fold(conn) -> None:
    """A write transaction whose id is a multiple of eight also folds the statistics keys it touched (the chunk
    tables' trigger): burn ids until the next transaction is not one, so a test sees what the deletion itself
    leaves, not what that chance does."""
    while conn.execute("SELECT txid_current() % 8").fetchone()[0] != 0:
        pass


def statistics_keys_without_a_chunk(conn, version: int, tenant: str) -> list[tuple]:
    """Rows of the tenant's statistics (as the superuser sees the table) whose key (label set, lexeme) no chunk of
    the tenant holds now: rows that exist only because of chunks that are gone."""
    chunks = conn.execute("SELECT toolkit._chunk_table(%s)", (version,)).fetchone()[0]
    _, stats = lexical_tables(conn, version)
    return conn.execute(
        f"WITH held AS (SELECT c.access_labels, l.lexeme FROM {chunks} AS c CROSS JOIN LATERAL unnest(c.fts) AS l"
        "  WHERE c.tenant = %(t)s AND NOT c.is_parent"
        f"  UNION SELECT c.access_labels, '' FROM {chunks} AS c WHERE c.tenant = %(t)s AND NOT c.is_parent)"
        f" SELECT s.access_labels, s.lexeme, s.df, s.tokens FROM {stats} AS s WHERE s.tenant = %(t)s"
        "  AND NOT EXISTS (SELECT FROM held AS h WHERE h.access_labels = s.access_labels AND h.lexeme = s.lexeme)"
        " ORDER BY 1, 2",
        {"t": tenant},
    ).fetchall()


def reference_ranking(conn, version: int, tenant: str, question: str, principals: list[str]) -> dict[str, float]:
    """BM25 over the chunk rows a reader of the tenant holding the principals may read, computed here from the chunk
    table (tf from each chunk's tsvector, dl its token count; N and the mean length over those chunks) with the
    settings SQL serves: the ranking the full-text list must give."""
    settings = retrieval_settings(conn)
    chunks = conn.execute("SELECT toolkit._chunk_table(%s)", (version,)).fetchone()[0]
    rows = conn.execute(
        f"SELECT c.chunk_id, c.token_count, c.fts FROM {chunks} AS c WHERE c.tenant = %s AND NOT c.is_parent"
        " AND (cardinality(c.access_labels) = 0 OR c.access_labels && %s::text[])",
        (tenant, principals),
    ).fetchall()
    tf = {
        chunk_id: dict(
            conn.execute("SELECT l.lexeme, cardinality(l.positions) FROM unnest(%s::tsvector) AS l", (fts,)).fetchall()
        )
        for chunk_id, _, fts in rows
    }
    n = len(rows)
    mean = sum(r[1] for r in rows) / n
    terms = lexemes_of(conn, question)
    df = {t: sum(1 for c in tf.values() if t in c) for t in terms}
    k1, b = settings["k1"], settings["b"]
    weights = {}
    for chunk_id, length, _ in rows:
        held = [t for t in terms if t in tf[chunk_id]]
        if held:
            weights[chunk_id] = sum(
                math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5))
                * tf[chunk_id][t]
                * (k1 + 1)
                / (tf[chunk_id][t] + k1 * (1 - b + b * length / mean))
                for t in sorted(held)
            )
    return weights


def text_hits(url: str, tenant: str, question: str, version: int, principals=(), *, by_hand=False) -> list[str]:
    """The full-text list of hybrid_search_chunks (no query embedding) for a login, in rank order."""
    with psycopg.connect(url) as c, c.transaction():
        if by_hand:
            c.execute("SELECT set_config('toolkit.tenant', %s, true)", (tenant,))
        else:
            c.execute("SELECT toolkit.set_tenant(%s)", (tenant,))
        c.execute("SELECT toolkit.set_principals(%s)", (list(principals),))
        rows = c.execute(
            "SELECT chunk_id, text_rank FROM toolkit.hybrid_search_chunks(%s, NULL, 10, query_version => %s)"
            " ORDER BY rank",
            (question, version),
        ).fetchall()
    assert all(r[1] is not None for r in rows)
    return [r[0] for r in rows]


def assert_ranks_as_reference(hits: list[str], reference: dict[str, float], k: int = 10) -> None:
    best = sorted(reference.items(), key=lambda item: (-item[1], item[0]))[:k]
    assert hits, "the search found nothing"
    assert set(hits) == {chunk_id for chunk_id, _ in best}
    scores = [reference[h] for h in hits]
    assert all(a >= b - 1e-9 for a, b in itertools.pairwise(scores)), scores


def test_delete_leaves_no_statistics_row_of_the_deleted_documents_words(conn, database_url, store):
    """`toolkit delete` of the secret document: no version's postings or statistics keep any of its words (the
    e-mail address, the rare word) — no +1/-1 rows, no key that only it held — and the tenant's full-text ranking
    is BM25 over the chunks that remain."""
    secret_words = lexemes_of(conn, "mallory.quartermain@example.org quuxotic")
    assert "mallory.quartermain@example.org" in secret_words
    for v in store:
        terms, stats = lexical_tables(conn, v)
        held = conn.execute(f"SELECT count(*) FROM {stats} WHERE lexeme = ANY (%s)", (secret_words,)).fetchone()[0]
        assert held >= len(secret_words)  # the words were counted before

    next_transaction_does_not_fold(conn)
    report = delete_documents(conn, "acme", ["secret.md"])
    assert {r.relation for r in report.removed if r.rows} >= {"documents"}

    for v in store:
        terms, stats = lexical_tables(conn, v)
        for table in (terms, stats):
            left = conn.execute(
                f"SELECT tenant, lexeme FROM {table} WHERE lexeme = ANY (%s)", (secret_words,)
            ).fetchall()
            assert left == [], f"{table} keeps the deleted document's words: {left}"
        assert statistics_keys_without_a_chunk(conn, v, "acme") == []
        assert statistics_keys_without_a_chunk(conn, v, "globex") == []
        # Every key is one row after the delete's fold of the keys it touched (no +1/-1 pairs of those words).
        pairs = conn.execute(
            f"SELECT count(*) FROM {stats} AS s WHERE s.tenant = 'acme' AND s.df < 0",
        ).fetchone()[0]
        assert pairs == 0
        hits = text_hits(database_url, "acme", QUESTION, v)
        assert_ranks_as_reference(hits, reference_ranking(conn, v, "acme", QUESTION, []))


def test_tenant_erase_leaves_no_row_of_the_tenant_in_any_lexical_table(conn, database_url, store):
    """`toolkit tenant erase acme`: no row of acme in any version's postings or statistics; globex's statistics are
    what they were, and its ranking is still BM25 over its chunks."""
    before = {}
    for v in store:
        _, stats = lexical_tables(conn, v)
        before[v] = conn.execute(
            f"SELECT access_labels, lexeme, sum(df), sum(tokens) FROM {stats} WHERE tenant = 'globex'"
            " GROUP BY 1, 2 HAVING sum(df) <> 0 OR sum(tokens) <> 0 ORDER BY 1, 2"
        ).fetchall()
        assert conn.execute(f"SELECT count(*) FROM {stats} WHERE tenant = 'acme'").fetchone()[0] > 0

    next_transaction_does_not_fold(conn)
    erase_tenant(conn, "acme")

    for v in store:
        terms, stats = lexical_tables(conn, v)
        for table in (terms, stats):
            left = conn.execute(f"SELECT count(*) FROM {table} WHERE tenant = 'acme'").fetchone()[0]
            assert left == 0, f"{table} keeps {left} rows of the erased tenant"
        after = conn.execute(
            f"SELECT access_labels, lexeme, sum(df), sum(tokens) FROM {stats} WHERE tenant = 'globex'"
            " GROUP BY 1, 2 HAVING sum(df) <> 0 OR sum(tokens) <> 0 ORDER BY 1, 2"
        ).fetchall()
        assert after == before[v]
        hits = text_hits(database_url, "globex", QUESTION, v)
        assert_ranks_as_reference(hits, reference_ranking(conn, v, "globex", QUESTION, []))


def test_no_login_below_the_owner_can_select_or_explain_the_postings(conn, store, logins):
    """The reader (bound or not), the writer and the deployer get permission denied for a SELECT, an EXPLAIN and an
    EXPLAIN ANALYZE of a lexeme lookup on a version's postings and statistics: nothing to count rows removed by a
    policy filter with."""
    guess = lexemes_of(conn, "xylophonic")[0]
    for v in store:
        for table in lexical_tables(conn, v):
            for url in logins.values():
                for prefix in ("", "EXPLAIN ", "EXPLAIN (ANALYZE, COSTS OFF) "):
                    with psycopg.connect(url) as c:
                        c.execute("SELECT toolkit.set_tenant('acme')")
                        with pytest.raises(pg_errors.InsufficientPrivilege):
                            c.execute(f"{prefix}SELECT * FROM {table} WHERE lexeme = %s", (guess,))
    # The every-label-set reads are the service roles' (the writer's, the owner's): a reader or a deployer that called
    # them would read the labelled rows of its tenant.
    for role in ("reader", "bound", "deployer"):
        for function in ("_read_term_stats_service", "_read_postings_service"):
            with psycopg.connect(logins[role]) as c:
                c.execute("SELECT toolkit.set_tenant('acme')")
                with pytest.raises(pg_errors.InsufficientPrivilege):
                    c.execute(f"SELECT * FROM toolkit.{function}(%s::integer, %s::text[])", (store[1], [guess]))


def test_readers_search_the_postings_through_their_own_rows_only(conn, store, logins):
    """Through the definer functions the search uses, a reader gets its own tenant's statistics and postings with the
    labels it holds (the rival's word, a labelled word without the label: nothing), a bound login nothing of a tenant
    it set by hand; and its full-text hits are BM25 over the chunks it may read."""
    v = store[1]
    rival = lexemes_of(conn, "xylophonic")
    payroll = lexemes_of(conn, "zanzibarian")

    def read(url, tenant, principals, statement, params, by_hand=False):
        with psycopg.connect(url) as c, c.transaction():
            if by_hand:
                c.execute("SELECT set_config('toolkit.tenant', %s, true)", (tenant,))
            else:
                c.execute("SELECT toolkit.set_tenant(%s)", (tenant,))
            c.execute("SELECT toolkit.set_principals(%s)", (principals,))
            return c.execute(statement, params).fetchall()

    stats_sql = "SELECT lexeme, df FROM toolkit._read_term_stats(%s::integer, %s::text[])"
    postings_sql = "SELECT lexeme, chunk_id FROM toolkit._read_postings(%s::integer, %s::text[])"
    for role in ("reader", "bound"):
        url = logins[role]
        assert read(url, "acme", [], stats_sql, (v, rival)) == []
        assert read(url, "acme", [], postings_sql, (v, rival)) == []
        assert read(url, "acme", [], stats_sql, (v, payroll)) == []
        assert [r[0] for r in read(url, "acme", ["hr"], stats_sql, (v, payroll))] == payroll
        assert len(read(url, "acme", ["hr"], postings_sql, (v, payroll))) == 1
        assert text_hits(url, "acme", "zanzibarian", v) == []
        assert len(text_hits(url, "acme", "zanzibarian", v, ["hr"])) == 1
        for principals in ([], ["hr"]):
            hits = text_hits(url, "acme", QUESTION, v, principals)
            assert_ranks_as_reference(hits, reference_ranking(conn, v, "acme", QUESTION, principals))
    # The unbound reader reads globex when it sets globex; the login bound to acme gets nothing of it.
    assert [r[0] for r in read(logins["reader"], "globex", [], stats_sql, (v, rival))] == rival
    assert read(logins["bound"], "globex", [], stats_sql, (v, rival), by_hand=True) == []
    assert read(logins["bound"], "globex", [], postings_sql, (v, rival), by_hand=True) == []
    assert text_hits(logins["bound"], "globex", "xylophonic", v, by_hand=True) == []
