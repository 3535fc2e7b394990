"""The search functions and `toolkit search`: filters, row-level security through every function, the model
guard, k rows for a small tenant (iterative scans), the HNSW index in the executed plan, small-to-big."""

from __future__ import annotations

import dataclasses
import itertools
import json
import re
from pathlib import Path

import numpy as np
import psycopg
import pytest
from click.testing import CliRunner
from psycopg import errors as pg_errors
from support import fill_version, insert_test_model, prepared_database

from toolkit import cutover, search
from toolkit.chunking import chunker_for_version, get_chunker
from toolkit.cli import main
from toolkit.embedding import get_embedder
from toolkit.errors import InputError, VersionUnavailableError
from toolkit.store import versions

SAMPLE = Path(__file__).resolve().parent.parent / "toolkit" / "data" / "sample" / "docs"
ROW_SECURITY = (SAMPLE / "row-security.md").read_text(encoding="utf-8")
INDEXES = (SAMPLE / "indexes.md").read_text(encoding="utf-8")
DIMS = 32
EMBEDDER = get_embedder(f"hashing:{DIMS}")
QUESTION = "Which policies apply when row security is enabled on a table?"


def recorded_chunker(conn, version) -> str:
    return conn.execute("SELECT chunker_version FROM toolkit.versions WHERE version = %s", (version,)).fetchone()[0]


def store_document(conn, version, tenant, doc_id, text, spec, *, labels=(), updated_at=None) -> list:
    """Chunks ``text`` with ``spec`` as the version records it (``…@1``: chunked as then, toolkit.chunking's
    chunker_for_version) and stores every chunk (parents without an embedding) for ``tenant``.

    Parent ids get a ``p-`` prefix: a section short enough to be one child has the child's id too."""
    chunks = [
        dataclasses.replace(c, chunk_id="p-" + c.chunk_id)
        if c.is_parent
        else dataclasses.replace(c, parent_id=c.parent_id and "p-" + c.parent_id)
        for c in chunker_for_version(spec, recorded_chunker(conn, version)).chunk(text, doc_id)
    ]
    children = [c for c in chunks if not c.is_parent]
    vectors = dict(
        zip((c.chunk_id for c in children), EMBEDDER.embed_documents([c.embed_text for c in children]), strict=True)
    )
    with conn.cursor() as cur:
        cur.executemany(
            f"INSERT INTO toolkit.chunks_v{int(version)} (tenant, chunk_id, doc_id, parent_id, is_parent, position,"
            " start_offset, end_offset, heading_path, text, content_hash, token_count, access_labels, updated_at,"
            " embedding) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, coalesce(%s, now()), %s)",
            [
                (
                    tenant,
                    c.chunk_id,
                    doc_id,
                    c.parent_id,
                    c.is_parent,
                    c.position,
                    c.start,
                    c.end,
                    list(c.heading_path),
                    c.text,
                    c.content_hash,
                    c.token_count,
                    list(labels),
                    updated_at,
                    vectors.get(c.chunk_id),
                )
                for c in chunks
            ],
        )
    return chunks


def activate(conn, version) -> None:
    conn.execute(f"ANALYZE toolkit.chunks_v{int(version)}")
    versions.create_version_index(conn, version, maintenance_work_mem="64MB")
    versions.mark_version_ready(conn, version)
    cutover.activate_version(conn, version, force=True)


def as_role(conn, query, params=(), *, tenant=None, principals=None, role="toolkit_reader"):
    with conn.transaction():
        conn.execute(f"SET LOCAL ROLE {role}")
        if tenant is not None:
            conn.execute("SELECT toolkit.set_tenant(%s)", (tenant,))
        if principals is not None:
            conn.execute("SELECT toolkit.set_principals(%s)", (principals,))
        return conn.execute(query, params, prepare=False).fetchall()


def build_store(conn) -> int:
    """Two tenants: a has a parent/child version of two documents (one labelled hr), b one of its own."""
    insert_test_model(conn, "h", DIMS, model_name=str(DIMS))
    v = versions.create_version(conn, "h", "sentence:60:0:parent=markdown,400,0", "s2b@1")
    store_document(
        conn,
        v,
        "a",
        "guide/row-security.md",
        ROW_SECURITY,
        "sentence:60:0:parent=markdown,400,0",
        updated_at="2026-01-10",
    )
    store_document(
        conn,
        v,
        "a",
        "hr/indexes.md",
        INDEXES,
        "sentence:60:0:parent=markdown,400,0",
        labels=["hr"],
        updated_at="2026-06-10",
    )
    store_document(conn, v, "b", "b/row-security.md", ROW_SECURITY, "sentence:60:0:parent=markdown,400,0")
    activate(conn, v)
    return v


def build_skewed(conn) -> int:
    """3,000 chunks of a large tenant and 30 (1%) of a small one, random 16-dimensional vectors."""
    insert_test_model(conn, "r", 16, model_name="16")
    v = versions.create_version(conn, "r", "fixed:10:0", "fixed:10:0@1")
    fill_version(conn, v, 16, {"big": 3000, "small": 30})
    activate(conn, v)
    return v


# Built once per module, copied for each test that asks (conftest's template_database).
PREPARED_DATABASES = {"store": "store_database", "skewed": "skewed_database"}


@pytest.fixture(scope="module")
def store_database(pg_admin_url, migrated_template):
    with prepared_database(pg_admin_url, migrated_template, build_store) as prepared:
        yield prepared


@pytest.fixture(scope="module")
def skewed_database(pg_admin_url, migrated_template):
    with prepared_database(pg_admin_url, migrated_template, build_skewed) as prepared:
        yield prepared


@pytest.fixture
def store(store_database, conn):
    """The version build_store made, in this test's copy of its database."""
    return store_database[1]


@pytest.fixture
def skewed(skewed_database, conn):
    """The version build_skewed made, in this test's copy of its database."""
    return skewed_database[1]


def question_vector(text: str = QUESTION) -> np.ndarray:
    return EMBEDDER.embed_query(text)


# -- vector search and filters -------------------------------------------------------------------------------


def test_vector_search_returns_the_exact_top_k_best_first(conn, store):
    hits = search.search(conn, QUESTION, "a", 8, principals=["hr"], retrieval="vector")
    assert [h.rank for h in hits] == list(range(1, 9))
    assert all(a.score >= b.score for a, b in itertools.pairwise(hits))
    assert {h.kind for h in hits} == {"chunk"} and all(h.model_alias == "h" for h in hits)
    # the same ranking computed without any index (other SQL text, no preparation)
    exact = as_role(
        conn,
        "SELECT chunk_id FROM toolkit.active_chunks WHERE NOT is_parent ORDER BY embedding <=> %s, chunk_id LIMIT 8",
        (question_vector(),),
        tenant="a",
        principals=["hr"],
    )
    assert [h.chunk_ids[0] for h in hits] == [r[0] for r in exact]


def test_search_inside_the_callers_transaction_leaves_its_role_and_settings_alone(conn, store):
    # The role, tenant and principals a search sets are local to it: the caller's own transaction goes on as
    # the caller, with no tenant set, after the search returns (a placeholder setting left empty reads as '').
    settings = (
        "SELECT current_user, coalesce(current_setting('toolkit.tenant', true), ''),"
        " coalesce(current_setting('toolkit.principals', true), '')"
    )
    with conn.transaction():
        baseline = conn.execute(settings).fetchone()
        assert baseline[1:] == ("", "")
        assert search.search(conn, QUESTION, "a", 3, principals=["hr"], role="toolkit_reader")
        assert conn.execute(settings).fetchone() == baseline
        # a question in a caller's transaction: the serving model is asked in a rolled-back transaction too
        assert search.search(conn, question_vector(), "a", 3, version=store, log=False)
        assert conn.execute(settings).fetchone() == baseline


@pytest.mark.parametrize(
    ("filters", "holds"),
    [
        ({"doc_id": "guide/row-security.md"}, lambda h: h.doc_id == "guide/row-security.md"),
        ({"doc_id": ["hr/indexes.md", "nope.md"]}, lambda h: h.doc_id == "hr/indexes.md"),
        ({"doc_id_prefix": "hr/"}, lambda h: h.doc_id.startswith("hr/")),
        ({"doc_id_prefix": ["guide/", "hr/"]}, lambda h: True),
        ({"heading_prefix": "5.8. Row Security Policies"}, lambda h: h.doc_id == "guide/row-security.md"),
        ({"heading_prefix": ["5.8. Row Security Policies", "nope"]}, None),
        ({"updated_after": "2026-03-01"}, lambda h: h.doc_id == "hr/indexes.md"),
        ({"updated_before": "2026-03-01T00:00:00Z"}, lambda h: h.doc_id == "guide/row-security.md"),
        ({"labels": ["hr"]}, lambda h: h.doc_id == "hr/indexes.md"),
    ],
)
def test_filters_apply_and_k_rows_still_come_back(conn, store, filters, holds):
    hits = search.search(conn, QUESTION, "a", 10, filters=filters, principals=["hr"])
    if holds is None:  # nothing matches
        assert hits == []
        return
    assert len(hits) == 10, filters
    assert all(holds(h) for h in hits), [(h.doc_id, h.heading_path) for h in hits]


def test_a_heading_prefix_on_a_version_without_heading_paths_is_refused_naming_its_chunker(conn, skewed, database_url):
    """Issue 23 item 7: `--filter heading_prefix=…` on a version whose chunker stores no heading paths returned
    nothing, silently. SQL now says so (asked only after a filtered search came back empty), on every retrieval."""
    v = skewed
    q = np.random.default_rng(5).standard_normal(16).astype(np.float32)
    for how in ({"retrieval": "vector"}, {"retrieval": "passages"}, {"retrieval": "hybrid"}, {"expand": "window:1"}):
        with pytest.raises(InputError) as refused:
            search.search(conn, q, "big", 5, filters={"heading_prefix": "Intro"}, log=False, query_text="text 3", **how)
        assert f"Version {v} (chunker fixed:10:0@1) stores no heading paths for tenant 'big'" in str(refused.value)
        assert "markdown, html, code" in str(refused.value), how
    # The other filters, and no filter, answer as before; a tenant with no rows is not told about headings either.
    assert len(search.search(conn, q, "big", 5, filters={"doc_id_prefix": "doc-"}, log=False)) == 5
    assert search.search(conn, q, "nobody", 5, filters={"doc_id_prefix": "doc-"}, log=False) == []
    # One chunk with a heading path: the filter can match, and a prefix that matches nothing is just no rows.
    conn.execute(f"UPDATE toolkit.chunks_v{v} SET heading_path = ARRAY['Intro', 'Setup'] WHERE chunk_id = 'v{v}-big-3'")
    assert [h.chunk_ids for h in search.search(conn, q, "big", 5, filters={"heading_prefix": "Intro"}, log=False,
                                               retrieval="vector")] == [[f"v{v}-big-3"]]  # fmt: skip
    assert search.search(conn, q, "big", 5, filters={"heading_prefix": "Nope"}, log=False, retrieval="vector") == []
    # The command line gives the sentence, exit 1, no traceback.
    result = CliRunner().invoke(
        main, ["--database-url", database_url, "search", "x", "--tenant", "big", "--filter", "heading_prefix=Nope"]
    )
    assert result.exit_code == 0, result.output  # this version has one heading path now: no rows, no error
    conn.execute(f"UPDATE toolkit.chunks_v{v} SET heading_path = '{{}}'")
    result = CliRunner().invoke(
        main, ["--database-url", database_url, "search", "x", "--tenant", "big", "--filter", "heading_prefix=Nope"]
    )
    assert result.exit_code == 1 and "stores no heading paths" in result.output and "Traceback" not in result.output


@pytest.mark.parametrize(
    ("filters", "message"),
    [
        ({"source": "x"}, "unknown search filter"),
        ({"doc_id": 3}, "must be a string or an array of strings"),
        ({"labels": [1, 2]}, "must be a string or an array of strings"),
        ({"updated_after": "yesterday-ish"}, "not a timestamp"),
    ],
)
def test_bad_filters_are_refused_with_the_reason(conn, store, filters, message):
    with pytest.raises(InputError, match=f"(?i){message}"):
        search.search(conn, question_vector(), "a", 3, filters=filters)


def test_unknown_filter_is_refused_by_sql_too(conn, store):
    with pytest.raises(pg_errors.InvalidParameterValue, match="unknown search filter 'source'"):
        as_role(
            conn, 'SELECT * FROM toolkit.search_chunks(%s, 3, \'{"source": "x"}\')', (question_vector(),), tenant="a"
        )


# -- the guard -----------------------------------------------------------------------------------------------


def test_an_unpinned_vector_of_other_dimensions_raises_model_mismatch(conn, store):
    with pytest.raises(search.ModelMismatchError, match=r"has 8 dimensions, but version \d+ \(model 'h'\) stores 32"):
        search.search(conn, np.ones(8, dtype=np.float32), "a", 3)


def test_a_query_pinned_to_a_model_with_no_servable_version_is_refused_with_a_retryable_error(conn, store, make_model):
    make_model("other", DIMS, model_name=str(DIMS))
    with pytest.raises(VersionUnavailableError, match=r"(?i)no version of model 'other' can be searched"):
        search.search(conn, question_vector(), "a", 3, query_model="other")
    with pytest.raises(VersionUnavailableError, match="serving_model"):
        search.search(conn, question_vector(), "a", 3, version=store + 100)
    # a question is embedded with the serving model: declaring another one is a mistake of the caller's
    with pytest.raises(search.ModelMismatchError):
        search.search(conn, "a question", "a", 3, query_model="other")
    # the declared serving model (or version) passes
    assert len(search.search(conn, question_vector(), "a", 3, query_model="h")) == 3
    assert len(search.search(conn, question_vector(), "a", 3, version=store)) == 3


@pytest.mark.parametrize(
    "statement",
    [
        "SELECT * FROM toolkit.search_chunks(%s, 3, '{}', 'other')",
        "SELECT * FROM toolkit.hybrid_search_chunks('row security', %s, 3, '{}', 'other')",
        "SELECT * FROM toolkit.search_context(%s, 3, 'parent', NULL, '{}', 'other')",
    ],
)
def test_every_function_refuses_a_vector_that_cannot_belong_to_the_version(conn, store, statement):
    # pinned to a model with no servable version: TK002 (retry with serving_model)
    with pytest.raises(psycopg.Error) as caught:
        as_role(conn, statement, (question_vector(),), tenant="a")
    assert caught.value.sqlstate == "TK002"
    # pinned to the right model, wrong dimensions: TK002 too
    with pytest.raises(psycopg.Error) as caught:
        as_role(conn, statement.replace("'other'", "'h'"), (np.ones(8, dtype=np.float32),), tenant="a")
    assert caught.value.sqlstate == "TK002"
    # unpinned, wrong dimensions: TK001
    with pytest.raises(psycopg.Error) as caught:
        as_role(conn, statement.replace("'other'", "NULL"), (np.ones(8, dtype=np.float32),), tenant="a")
    assert caught.value.sqlstate == "TK001"


# -- row-level security --------------------------------------------------------------------------------------

FUNCTIONS = [
    ("SELECT doc_id, text FROM toolkit.search_chunks(%(q)s, 50)", "search_chunks"),
    ("SELECT doc_id, text FROM toolkit.hybrid_search_chunks(%(t)s, %(q)s, 50)", "hybrid"),
    ("SELECT doc_id, text FROM toolkit.hybrid_search_chunks(%(t)s, NULL, 50)", "full text only"),
    ("SELECT doc_id, text FROM toolkit.search_context(%(q)s, 20, 'parent')", "parent"),
    ("SELECT doc_id, text FROM toolkit.search_context(%(q)s, 20, 'window:2', %(t)s)", "window, hybrid"),
]


@pytest.mark.parametrize(("statement", "name"), FUNCTIONS, ids=[f[1] for f in FUNCTIONS])
def test_row_level_security_holds_through_every_search_function(conn, store, statement, name):
    params = {"q": question_vector(), "t": "row security policy table"}
    docs = {
        ("a", None): {"guide/row-security.md"},
        ("a", ("hr",)): {"guide/row-security.md", "hr/indexes.md"},
        ("b", ("hr",)): {"b/row-security.md"},
    }
    for (tenant, principals), expected in docs.items():
        rows = as_role(conn, statement, params, tenant=tenant, principals=list(principals or []))
        assert rows, (name, tenant)
        assert {r[0] for r in rows} == expected, (name, tenant, principals)
    # no tenant: refused, not silently empty
    with pytest.raises(pg_errors.ObjectNotInPrerequisiteState, match="no tenant is set"):
        as_role(conn, statement, params)
    # a service role searches the transaction's tenant too
    rows = as_role(conn, statement, params, tenant="b", role="toolkit_writer")
    assert {r[0] for r in rows} == {"b/row-security.md"}


def test_a_role_without_grants_cannot_call_the_search_functions(conn, store):
    conn.execute("DROP ROLE IF EXISTS toolkit_test_nobody")
    conn.execute("CREATE ROLE toolkit_test_nobody NOLOGIN")
    try:
        with pytest.raises(pg_errors.InsufficientPrivilege):
            as_role(
                conn,
                "SELECT * FROM toolkit.search_chunks(%s, 3)",
                (question_vector(),),
                tenant="a",
                role="toolkit_test_nobody",
            )
    finally:
        conn.execute("DROP ROLE toolkit_test_nobody")


# -- small tenants, iterative scans and the HNSW index --------------------------------------------------------


def plans(conn):
    """Loads auto_explain so the plans of the statements run inside the functions come back as notices."""
    notices: list[str] = []
    conn.add_notice_handler(lambda diag: notices.append(diag.message_primary or ""))
    conn.execute("LOAD 'auto_explain'")
    conn.execute("SET auto_explain.log_min_duration = 0")
    conn.execute("SET auto_explain.log_nested_statements = on")
    conn.execute("SET auto_explain.log_level = notice")
    return notices


def chunk_plans(notices):
    # The statements the search functions run on the version's own table (a pinned search reads no view): those
    # whose plan scans it (the stages that write a statement's text name the table too, but scan nothing).
    return [n for n in notices if re.search(r"Scan.* on chunks_v\d+ c\b", n)]


def test_a_one_percent_tenant_gets_k_rows(conn, skewed):
    q = np.random.default_rng(7).standard_normal(16).astype(np.float32)
    assert len(search.search(conn, q, "small", 10)) == 10
    # Force the HNSW path (no exact sort) with a tiny candidate list: the iterative scan set inside the
    # function still finds 10 rows, where the plain view query, without it, comes back short.
    with conn.transaction():
        conn.execute("SET LOCAL enable_sort = off")
        conn.execute("SET LOCAL hnsw.ef_search = 10")
        conn.execute("SET LOCAL ROLE toolkit_reader")
        conn.execute("SELECT toolkit.set_tenant('small')")
        inside = conn.execute("SELECT chunk_id FROM toolkit.search_chunks(%s, 10)", (q,)).fetchall()
        plain = conn.execute(
            "SELECT chunk_id FROM toolkit.active_chunks ORDER BY embedding <=> %s LIMIT 10", (q,)
        ).fetchall()
        setting = conn.execute("SELECT current_setting('hnsw.iterative_scan')").fetchone()[0]
    assert len(inside) == 10
    assert len(plain) < 10
    assert setting == "off", "the function's iterative_scan must not leak into the caller's transaction"


@pytest.mark.parametrize("storage", ["vector", "halfvec"])
def test_the_executed_plan_uses_the_versions_hnsw_index(conn, make_model, storage):
    make_model("r", 16, model_name="16")
    v = versions.create_version(conn, "r", "fixed:10:0", "fixed:10:0@1", storage=storage)
    fill_version(conn, v, 16, {"big": 3000, "small": 30})
    activate(conn, v)
    notices = plans(conn)
    q = np.random.default_rng(3).standard_normal(16).astype(np.float32)
    hits = search.search(conn, q, "big", 10, retrieval="vector")
    hybrid = search.search(conn, q, "big", 10, hybrid=True, query_text="text")
    assert len(hits) == 10 and len(hybrid) == 10
    executed = chunk_plans(notices)
    assert len(executed) == 2, notices
    for plan in executed:
        assert f"Index Scan using chunks_v{v}_embedding_idx on chunks_v{v} c" in plan, plan
    if storage == "halfvec":
        assert "::public.halfvec" in executed[0]
    # the 1% tenant: the planner may prefer the exact path (its rows through the (tenant, doc_id) index,
    # sorted), which is exact; either way k rows come back
    notices.clear()
    assert len(search.search(conn, q, "small", 10, retrieval="vector")) == 10
    small_plan = chunk_plans(notices)[0]
    assert f"chunks_v{v}_embedding_idx" in small_plan or f"chunks_v{v}_doc_idx" in small_plan


# Each filter keeps every row (the index stays the best plan; a selective filter may rightly pick another path).
FILTER_VALUES = {
    "doc_id": [f"doc-{i}" for i in range(10)],
    "doc_id_prefix": ["doc-"],
    "heading_prefix": [],
    "updated_after": "2000-01-01",
    "updated_before": "2100-01-01",
    "labels": ["hr"],
}


def test_every_filter_combination_keeps_the_hnsw_index_scan(conn, make_model):
    """Each search writes its optional filters statically (`($5 IS NULL OR ...)`): for all 64 combinations of the
    six filters, in search_chunks and in the default search_passages, the statement is planned with its values, so
    an unset filter folds away (no `IS NULL` test and no condition of it is left in the plan) and the vector half
    reads the version's HNSW index. heading_prefix is the exception the planner makes on its own: it estimates an
    array-slice comparison as selective (0.5 % of rows) and takes the exact path instead, with or without the other
    filters, as it did when the conditions were spliced in."""
    make_model("r", 16, model_name="16")
    v = versions.create_version(conn, "r", "fixed:10:0", "fixed:10:0@1")
    fill_version(conn, v, 16, {"big": 3000}, labels=[["hr"]])
    activate(conn, v)
    notices = plans(conn)
    q = np.random.default_rng(5).standard_normal(16).astype(np.float32)
    names = sorted(FILTER_VALUES)
    conditions = {"doc_id": "doc_id = ANY", "doc_id_prefix": "starts_with(", "heading_prefix": "heading_path[1:"}
    checked = 0
    for n in range(64):
        filters = {name: FILTER_VALUES[name] for bit, name in enumerate(names) if n >> bit & 1}
        for retrieval in ("vector", "passages"):
            notices.clear()
            hits = search.search(conn, q, "big", 10, filters=filters, retrieval=retrieval, principals=["hr"], log=False)
            assert hits, filters
            # The vector statement: the one ordering the version's rows by distance (<=>).
            vector_plans = [plan for plan in chunk_plans(notices) if "<=>" in plan.split("Query Parameters")[0]]
            assert vector_plans, (filters, retrieval, notices)
            for plan in vector_plans:
                executed = plan.split("Query Parameters")[-1]
                assert "IS NULL" not in executed, (filters, retrieval, plan)
                for name, marker in conditions.items():
                    if name not in filters:
                        assert marker not in executed, (name, filters, retrieval, plan)
                if "heading_prefix" not in filters:
                    assert f"Index Scan using chunks_v{v}_embedding_idx" in plan, (filters, retrieval, plan)
                    checked += 1
    assert checked >= 64  # 32 combinations without heading_prefix, two retrievals


# -- small-to-big ------------------------------------------------------------------------------------------


def assert_distinct_contexts(hits, source):
    for h in hits:
        assert h.text == source[h.start : h.end], (h.rank, h.start, h.end)
    spans = sorted((h.start, h.end) for h in hits)
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans)), spans  # no text twice
    assert len({h.text for h in hits}) == len(hits)
    ids = [i for h in hits for i in h.chunk_ids]
    assert len(ids) == len(set(ids))
    assert [h.rank for h in hits] == list(range(1, len(hits) + 1))
    assert all(a.score >= b.score for a, b in itertools.pairwise(hits))


def test_parent_expansion_returns_parents_never_the_same_text_twice(conn, store):
    parents = {
        (c.start, c.end) for c in get_chunker("sentence:60:0:parent=markdown,400,0").chunk(ROW_SECURITY) if c.is_parent
    }
    hits = search.search(conn, QUESTION, "a", 5, expand="parent", filters={"doc_id": "guide/row-security.md"})
    assert len(hits) == 5
    assert {h.kind for h in hits} == {"parent"}
    assert {(h.start, h.end) for h in hits} <= parents
    assert_distinct_contexts(hits, ROW_SECURITY)
    # several hits collapse into one parent: more chunks matched than parents returned
    assert sum(len(h.chunk_ids) for h in hits) > len(hits)


def test_window_expansion_merges_overlapping_windows(conn, make_model):
    make_model("h", DIMS, model_name=str(DIMS))
    v = versions.create_version(conn, "h", "fixed:40:10", "fixed:40:10@1")
    store_document(conn, v, "a", "row-security.md", ROW_SECURITY, "fixed:40:10")
    activate(conn, v)
    hits = search.search(conn, QUESTION, "a", 6, expand="window:1")
    assert hits and {h.kind for h in hits} == {"window"}
    assert_distinct_contexts(hits, ROW_SECURITY)
    plain = search.search(conn, QUESTION, "a", 6)
    assert hits[0].chunk_ids[0] == plain[0].chunk_ids[0]
    assert hits[0].start <= plain[0].start and plain[0].end <= hits[0].end


def test_a_version_without_parents_returns_the_chunks_themselves(conn, make_model):
    make_model("h", DIMS, model_name=str(DIMS))
    v = versions.create_version(conn, "h", "fixed:40:0", "fixed:40:0@1")
    store_document(conn, v, "a", "row-security.md", ROW_SECURITY, "fixed:40:0")
    activate(conn, v)
    hits = search.search(conn, QUESTION, "a", 4, expand="parent", hybrid=True)
    assert len(hits) == 4 and {h.kind for h in hits} == {"chunk"}
    assert_distinct_contexts(hits, ROW_SECURITY)


# -- the command --------------------------------------------------------------------------------------------


def test_toolkit_search_prints_json_and_a_table(conn, database_url, store):
    runner = CliRunner()
    result = runner.invoke(
        main,
        [
            "--database-url",
            database_url,
            "search",
            QUESTION,
            "--tenant",
            "a",
            "-k",
            "3",
            "--hybrid",
            "--expand",
            "parent",
            "--principal",
            "hr",
            "--format",
            "json",
        ],
    )
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert [r["rank"] for r in rows] == [1, 2, 3]
    assert {"score", "similarity", "heading_path", "doc_id", "start", "end", "text"} <= set(rows[0])
    result = runner.invoke(
        main,
        [
            "--database-url",
            database_url,
            "search",
            QUESTION,
            "--tenant",
            "a",
            "--filter",
            "doc_id_prefix=guide/",
            "--filter",
            "updated_after=2026-01-01",
        ],
    )
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0].split() == [
        "rank",
        "score",
        "similarity",
        "heading_path",
        "doc_id",
        "span",
        "text",
    ]
    assert "guide/row-security.md" in result.output and "hr/" not in result.output


@pytest.mark.parametrize(
    ("args", "message", "code"),
    [
        (["--expand", "grandparent"], "--expand 'grandparent' is not understood", 1),
        (["--filter", "title=x"], "not KEY=VALUE with a known key", 2),
        (["--filter", "metadata.tags=[1, 2]"], "compares a top-level key with one value, not with a JSON list", 2),
        (["--filter", "metadata.=x"], "is not metadata.KEY=VALUE with a key", 2),
        (["--min-score", "abc"], "The score threshold (min_score) must be a number from -1 to 1, not 'abc'", 2),
        (["--diversity", "1.5"], "The diversity (MMR lambda) must be a number from 0 to 1, not '1.5'", 2),
        (["--diversity", "0.5", "--expand", "parent"], "use one or the other", 1),
        (
            ["--tenant", ""],
            "Invalid value for '--tenant': the value is empty",
            2,
        ),  # a usage error, like every empty value
    ],
)
def test_toolkit_search_refuses_bad_options_with_the_fix(conn, database_url, store, args, message, code):
    base = ["--database-url", database_url, "search", QUESTION]
    if "--tenant" not in args:
        base += ["--tenant", "a"]
    result = CliRunner().invoke(main, base + args)
    assert result.exit_code == code
    assert message in result.output


def test_a_cutover_is_seen_at_once_and_pinned_queries_keep_their_version_until_it_is_retired(conn, make_model):
    make_model("narrow", 8, model_name="8")
    make_model("wide", 16, model_name="16")
    v1 = versions.create_version(conn, "narrow", "fixed:10:0", "fixed:10:0@1")
    fill_version(conn, v1, 8, {"a": 50})
    activate(conn, v1)
    v2 = versions.create_version(conn, "wide", "fixed:10:0", "fixed:10:0@2")
    fill_version(conn, v2, 16, {"a": 50})
    activate(conn, v2)
    hits = search.search(conn, "any question", "a", 5)
    assert {h.version for h in hits} == {v2} and {h.model_alias for h in hits} == {"wide"}
    assert all(h.chunk_ids[0].startswith(f"v{v2}-") for h in hits)
    # an unpinned query embedded for the old version (other dimensions) is refused
    with pytest.raises(search.ModelMismatchError, match="has 8 dimensions"):
        search.search(conn, np.ones(8, dtype=np.float32), "a", 5)
    # pinned to the old version (now standby), by version or by model, it is served from that version's table
    for pinned in ({"version": v1}, {"query_model": "narrow"}):
        hits = search.search(conn, np.ones(8, dtype=np.float32), "a", 5, **pinned)
        assert len(hits) == 5 and {h.version for h in hits} == {v1}
        assert all(h.chunk_ids[0].startswith(f"v{v1}-") for h in hits)
    # once retired: the documented, retryable error, not an empty page
    cutover.retire_version(conn, v1)
    with pytest.raises(VersionUnavailableError, match=rf"(?i)version {v1} cannot be searched: it is retired"):
        search.search(conn, np.ones(8, dtype=np.float32), "a", 5, version=v1)


def test_the_librarys_largest_k_is_the_sqls(conn, store):
    assert conn.execute("SELECT toolkit.search_max_k()").fetchone()[0] == search.MAX_K
    assert len(search.search(conn, question_vector(), "a", search.MAX_K, principals=["hr"])) > 0
    with pytest.raises(InputError, match=f"from 1 to {search.MAX_K:,}"):
        search.search(conn, question_vector(), "a", search.MAX_K + 1)
    for statement in (
        "SELECT * FROM toolkit.search_chunks(%s, %s)",
        "SELECT * FROM toolkit.hybrid_search_chunks('row', %s, %s)",
        "SELECT * FROM toolkit.search_context(%s, %s)",
    ):
        with pytest.raises(pg_errors.InvalidParameterValue, match=f"between 1 and {search.MAX_K}"):
            as_role(conn, statement, (question_vector(), search.MAX_K + 1), tenant="a")
