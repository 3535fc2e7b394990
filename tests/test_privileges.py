"""Least privilege that holds against each role itself, checked as login roles on the real database.

The matrix below is the specification: for every table, view and function of schema toolkit, what each role may
do. It is checked against the catalog (has_*_privilege) and by trying, both ways, so a grant that drifts from it
in either direction fails. Then the four breakages of issue 14, each as the role that would exploit it: a stored
API key, a reader holding the toolkit's locks, a writer forging a passing evaluation or re-pointing an alias, and
a bound login reading another tenant.
"""

from __future__ import annotations

import json
import threading
import uuid
from urllib.parse import urlsplit, urlunsplit

import numpy as np
import psycopg
import pytest
from click.testing import CliRunner
from psycopg import errors as pg_errors
from psycopg.types.json import Jsonb
from support import ready_version

from toolkit import cutover
from toolkit.cli import main
from toolkit.db.connection import connect
from toolkit.errors import InputError
from toolkit.store.models import Model, insert_model

ROLES = ("reader", "bound", "writer", "deployer", "owner")
CHUNK_TABLE = "<chunk table>"
# A version's full-text postings and statistics (terms_vN, term_stats_vN): no role below the owner may query them (an
# EXPLAIN would count rows the policies remove); searches read them through toolkit._read_term_stats and
# _read_postings; the chunk table's triggers write them.
TERMS_TABLE = "<postings table>"
TERM_STATS_TABLE = "<postings statistics table>"
VERSION_TABLES = {CHUNK_TABLE: "chunks_v", TERMS_TABLE: "terms_v", TERM_STATS_TABLE: "term_stats_v"}

# Tables and views: the privileges each role holds (anything not listed is denied). The owner holds every one.
TABLES = {
    "documents": {"writer": {"SELECT", "INSERT", "UPDATE", "DELETE"}, "deployer": {"SELECT"}},
    # The metadata filters' keys, written by the documents' trigger only.
    "document_metadata_keys": {
        "reader": {"SELECT"},
        "bound": {"SELECT"},
        "writer": {"SELECT"},
        "deployer": {"SELECT"},
    },
    "models": {"writer": {"SELECT"}, "deployer": {"SELECT"}},
    "versions": {"writer": {"SELECT"}, "deployer": {"SELECT"}},
    "version_transitions": {"writer": {"SELECT"}, "deployer": {"SELECT"}},
    "evaluations": {"deployer": {"SELECT"}},
    "cutovers": {"deployer": {"SELECT"}},
    "deletions": {"deployer": {"SELECT"}},
    "traffic_split": {},
    "query_log": {},
    "query_log_settings": {},
    "settings": {},
    "tenant_bindings": {},
    "version_set_lock": {},
    "cutover_lock": {},
    "migration_lock": {},
    "active_chunks": {"reader": {"SELECT"}, "bound": {"SELECT"}, "writer": {"SELECT"}, "deployer": {"SELECT"}},
    "live_chunks": {"reader": {"SELECT"}, "bound": {"SELECT"}, "writer": {"SELECT"}, "deployer": {"SELECT"}},
    CHUNK_TABLE: {
        "reader": {"SELECT"},
        "bound": {"SELECT"},
        "writer": {"SELECT", "INSERT", "UPDATE", "DELETE"},
        "deployer": {"SELECT"},
    },
    TERMS_TABLE: {},
    TERM_STATS_TABLE: {},
}
# Columns of toolkit.models an application may read (to embed questions like the chunks): not the price.
READER_MODEL_COLUMNS = {
    "alias",
    "provider",
    "model_name",
    "revision",
    "dimensions",
    "distance",
    "max_input_tokens",
    "query_prefix",
    "document_prefix",
    "supports_shortening",
    "base_url",
    "options",
}
PRIVILEGES = ("SELECT", "INSERT", "UPDATE", "DELETE", "TRUNCATE", "REFERENCES", "TRIGGER")

# Functions each role may execute; every other function of the schema is denied to all but the owner.
EVERYONE = {
    "current_tenant",
    "current_principals",
    "set_tenant",
    "bound_tenants",
    "set_principals",
    "_is_service_role",
    "active_version",
    "active_model",
    "serving_model",
    "version_model",
    "traffic_bucket",
    "search_max_k",
    "search_chunks",
    "hybrid_search_chunks",
    "search_context",
    "search_passages",
    "search",
    "search_request",
    "_search_stage_filters",
    "_search_stage_vector_hits",
    "_search_stage_text_hits",
    "_search_stage_fusion",
    "_search_stage_rows",
    "_search_stage_mmr",
    "_search_stage_chunks",
    "_search_stage_contexts",
    "_search_stage_passages",
    "_spans_touch",
    "_passage_tokens",
    "_search_target",
    "_search_tenant",
    "_search_filter_texts",
    "_search_filters",
    "_search_filter_values",
    "_heading_filter_unmatchable",
    "_search_filter_condition",
    "_search_cosine_sql",
    "_check_search_options",
    "_mmr_candidates",
    "_mmr_order",
    "_metadata_key_value",
    "_check_k",
    "_version_gone",
    "lexical_settings",
    "retrieval_settings",
    "served_retrieval",
    "chunk_search_text",
    "query_lexemes",
    "_any_lexeme",
    "_terms_table",
    "_term_stats_table",
    "_postings_table",
    "_statistics_table",
    "_read_term_stats",
    "_read_postings",
    "_read_term_stats_function",
    "_read_postings_function",
    "log_query",
    "query_log_sample_rate",
    "model_secrets",
    # What a version holds (toolkit show, diff), read as the caller.
    "_version_table",
    "_chunk_table",
    "_live_version_table",
    "version_documents",
    "version_chunks",
    "model_destination",
    "model_destination_refused",
}
WRITER = EVERYONE | {
    # A service role's full-text reads (every label set of the tenant, as the policies show the writer).
    "_read_term_stats_service",
    "_read_postings_service",
    "delete_documents",
    "create_version",
    "create_version_index",
    "version_index_valid",
    "version_pending_rows",
    "version_pending_documents",
    "claim_pending_documents",
    "_pending_document_condition",
    "mark_version_ready",
    "mark_version_building",
    "touch_version",
    "live_versions",
    "version_states",
    "lock_version_set",
    "lock_documents",
    "_lock_holders",
    "_version_table",
    "_chunk_table",
    "register_model",
    "version_status",
    "version_lag",
    "version_evaluation_current",
    "canary_status",
    "query_log_status",
    "prune_query_log",
    "embedding_deferred",
    "_service_access",
}
DEPLOYER = EVERYONE | {
    "erase_tenant",
    "evaluate_version",
    "activate_version",
    "rollback_version",
    "retire_version",
    "retire_candidates",
    "rollback_window",
    "protected_standby",
    "retire_refusal",
    "standby_replay",
    "set_canary",
    "canary_status",
    "version_status",
    "version_lag",
    "version_evaluation_current",
    "version_index_valid",
    "document_tenants",
    "logged_questions",
    "query_log_status",
    "prune_query_log",
    "register_model",
    "_lock_holders",
    "_version_table",
    "_chunk_table",
    "version_states",
}
FUNCTIONS = {"reader": EVERYONE, "bound": EVERYONE, "writer": WRITER, "deployer": DEPLOYER}


def as_user(url: str, user: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=f"{user}@{parts.netloc.split('@')[-1]}"))


@pytest.fixture
def logins(conn, database_url):
    """One login role per role under test; the bound reader is bound to tenant a."""
    suffix = uuid.uuid4().hex[:8]
    names = {role: f"{role}_{suffix}" for role in ROLES}
    membership = {
        "reader": "toolkit_reader",
        "bound": "toolkit_reader",
        "writer": "toolkit_writer",
        "deployer": "toolkit_deployer",
        "owner": "toolkit_owner",
    }
    for role, name in names.items():
        conn.execute(f"CREATE ROLE {name} LOGIN IN ROLE {membership[role]}")
    conn.execute("SELECT toolkit.bind_tenants(%s, ARRAY['a'])", (names["bound"],))
    yield {role: as_user(database_url, name) for role, name in names.items()}, names
    for name in names.values():
        conn.execute(f"DROP OWNED BY {name}")
        conn.execute(f"DROP ROLE {name}")


@pytest.fixture
def lived(conn, make_model):
    make_model("m1", 8)
    v = ready_version(conn, "m1", 8, {"a": 20, "b": 20}, labels=[[], ["hr"]])
    cutover.activate_version(conn, v, force=True)
    conn.execute(
        "INSERT INTO toolkit.documents (tenant, doc_id, source, raw_text, content_hash)"
        " VALUES ('a', 'd1', 'a.md', 'secret a', 'h'), ('b', 'd1', 'b.md', 'secret b', 'h')"
    )
    return v


def _table_name(name: str, version: int) -> str:
    return f"toolkit.{VERSION_TABLES[name]}{version}" if name in VERSION_TABLES else f"toolkit.{name}"


def test_every_table_and_view_grants_exactly_what_the_matrix_says(conn, logins, lived):
    _, names = logins
    existing = {
        r[0]
        for r in conn.execute(
            "SELECT relname FROM pg_class WHERE relnamespace = 'toolkit'::regnamespace AND relkind IN ('r', 'v')"
            " AND relname !~ '^(chunks|terms|term_stats)_v[0-9]+$'"
        )
    }
    assert existing == set(TABLES) - set(VERSION_TABLES), "a table or view is missing from the matrix (or gone)"
    for role in ROLES:
        for table, allowed in TABLES.items():
            name = _table_name(table, lived)
            for privilege in PRIVILEGES:
                held = conn.execute(
                    "SELECT has_table_privilege(%s, %s, %s)", (names[role], name, privilege)
                ).fetchone()[0]
                expected = role == "owner" or privilege in allowed.get(role, set())
                assert held == expected, f"{role} {privilege} on {name}: {held}, expected {expected}"
    # column privileges: the reader reads the models it embeds with, without the price
    for role in ("reader", "bound"):
        readable = {
            r[0]
            for r in conn.execute(
                "SELECT attname FROM pg_attribute WHERE attrelid = 'toolkit.models'::regclass AND attnum > 0"
                " AND NOT attisdropped AND has_column_privilege(%s, attrelid, attnum, 'SELECT')",
                (names[role],),
            )
        }
        assert readable == READER_MODEL_COLUMNS


def test_every_function_grants_execute_exactly_as_the_matrix_says(conn, logins):
    _, names = logins
    functions = {r[0] for r in conn.execute("SELECT proname FROM pg_proc WHERE pronamespace = 'toolkit'::regnamespace")}
    for role in ROLES:
        for function in sorted(functions):
            held = conn.execute(
                "SELECT bool_and(has_function_privilege(%s, p.oid, 'EXECUTE')) FROM pg_proc AS p"
                " WHERE p.pronamespace = 'toolkit'::regnamespace AND p.proname = %s",
                (names[role], function),
            ).fetchone()[0]
            expected = role == "owner" or function in FUNCTIONS[role]
            assert held == expected, f"{role} EXECUTE {function}: {held}, expected {expected}"
    assert set().union(*FUNCTIONS.values()) <= functions, "the matrix names a function that does not exist"


def _try(url: str, statement: str, params=()) -> str:
    """'ok' or the SQLSTATE class of what the role got, trying the statement in a rolled-back transaction."""
    with psycopg.connect(url) as c:
        try:
            with c.transaction(force_rollback=True):
                c.execute("SELECT toolkit.set_tenant('a')")
                c.execute(statement, params)
            return "ok"
        except pg_errors.InsufficientPrivilege:
            return "denied"


@pytest.mark.parametrize("table", sorted(t for t in TABLES if t not in {"active_chunks", "live_chunks"}))
def test_trying_each_table_agrees_with_the_matrix(conn, logins, lived, table):
    urls, _ = logins
    name = _table_name(table, lived)
    statements = {
        "SELECT": f"SELECT * FROM {name} LIMIT 1",
        "DELETE": f"DELETE FROM {name} WHERE false",
        "UPDATE": f"UPDATE {name} SET {_some_column(conn, name)} = {_some_column(conn, name)} WHERE false",
    }
    for role in ROLES:
        allowed = TABLES[table].get(role, set())
        for privilege, statement in statements.items():
            if privilege == "UPDATE" and not _some_column(conn, name).strip('"'):
                continue
            outcome = _try(urls[role], statement)
            expected = "ok" if role == "owner" or privilege in allowed else "denied"
            if table == "models" and role in ("reader", "bound") and privilege == "SELECT":
                expected = "denied"  # SELECT * includes the price; the allowed columns are checked above
            assert outcome == expected, f"{role} {privilege} {name}: {outcome}"


def _some_column(conn, name: str) -> str:
    row = conn.execute(
        "SELECT quote_ident(attname) FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0"
        " AND NOT attisdropped AND attgenerated = '' AND attidentity = '' ORDER BY attnum LIMIT 1",
        (name,),
    ).fetchone()
    return row[0] if row else '""'


# -- 1. no secret ever stored or printed -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "base_url"),
    [
        ({"api_key": "sk-SECRET"}, None),
        ({"openai_api_key": "sk-SECRET"}, None),
        ({"password": "sk-SECRET"}, None),
        ({"Auth_Token": "sk-SECRET"}, None),  # ("Auth-Token" is not an option name: refused before SQL sees it)
        ({}, "http://user:sk-SECRET@127.0.0.1:9/v1"),
        ({}, "http://127.0.0.1:9/v1?api_key=sk-SECRET"),
    ],
)
def test_a_secret_is_refused_before_anything_is_stored_even_by_the_owner(conn, logins, options, base_url):
    urls, _ = logins
    model = Model("k1", "openai", "m", 16, 512, options=options, base_url=base_url)
    with pytest.raises(InputError, match="secret"):
        insert_model(conn, model)
    with connect(urls["writer"]) as writer, pytest.raises(InputError, match="secret"):
        insert_model(writer, model)
    # the trigger refuses it too, whoever writes the table
    with pytest.raises(pg_errors.CheckViolation), conn.transaction():
        conn.execute(
            "INSERT INTO toolkit.models (alias, provider, model_name, dimensions, max_input_tokens, options, base_url)"
            " VALUES ('k2', 'openai', 'm', 16, 512, %s, %s)",
            (Jsonb(options), base_url),
        )
    assert conn.execute("SELECT count(*) FROM toolkit.models").fetchone()[0] == 0


def test_the_cli_refuses_a_key_and_says_to_use_the_environment(database_url):
    result = CliRunner().invoke(
        main,
        [
            "--database-url",
            database_url,
            "model",
            "add",
            "k1",
            "--provider",
            "openai",
            "--name",
            "m",
            "--dims",
            "16",
            "--base-url",
            "http://127.0.0.1:9/v1",
            "--option",
            "api_key=sk-SECRET",
        ],
    )
    assert result.exit_code == 1
    assert "api_key_env" in result.output and "Traceback" not in result.output
    assert "sk-SECRET" not in result.output


def test_a_key_named_by_api_key_env_is_read_from_the_environment_and_never_stored(conn, monkeypatch):
    from toolkit.store.models import embedder_for_model, get_model

    insert_model(conn, Model("k1", "openai", "m", 16, 512, options={"api_key_env": "ACME_KEY"}))
    monkeypatch.setenv("ACME_KEY", "sk-FROM-ENV")
    embedder = embedder_for_model(get_model(conn, "k1"))
    assert embedder is not None
    stored = json.dumps(conn.execute("SELECT to_jsonb(m) FROM toolkit.models AS m").fetchall(), default=str)
    assert "sk-FROM-ENV" not in stored
    monkeypatch.delenv("ACME_KEY")
    with pytest.raises(InputError, match="ACME_KEY"):
        embedder_for_model(get_model(conn, "k1"))


# -- 2. locks no reader can take or hold ---------------------------------------------------------------------------


def test_a_reader_cannot_take_the_toolkits_locks_and_its_advisory_locks_delay_nothing(
    conn, database_url, logins, tmp_path, make_model
):
    from toolkit.backfill import backfill
    from toolkit.ingest import ingest

    urls, _ = logins
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "guide.md").write_text("# Guide\n\nRow security policies filter rows per tenant.\n")
    make_model("h1", 16, model_name="16")
    make_model("h2", 16, model_name="16", options={"seed": 5})
    ingest(conn, [docs], "a")
    first = backfill(database_url, "h1", "recursive:100:0").version
    second = backfill(database_url, "h2", "recursive:100:0").version
    cutover.activate_version(conn, first, force=True)
    reader = psycopg.connect(urls["reader"], autocommit=True)
    # every advisory key earlier releases used, taken and held by the reader
    for key in ("toolkit.cutover", "toolkit.version-set", "toolkit.migrate", f"toolkit.version-rows:{second}"):
        reader.execute("SELECT pg_advisory_lock(hashtext(%s))", (key,))
    reader.execute("SELECT pg_advisory_lock(hashtextextended(%s, 0))", ("toolkit.doc\x1fa\x1fnote.md",))
    # the toolkit's own locks are out of its reach
    for statement in (
        "LOCK TABLE toolkit.version_set_lock IN SHARE MODE",
        "LOCK TABLE toolkit.cutover_lock IN ACCESS SHARE MODE",
        "LOCK TABLE toolkit.migration_lock IN ACCESS SHARE MODE",
        "SELECT toolkit.lock_version_set(true)",
        "SELECT FROM toolkit.documents FOR SHARE",
    ):
        with pytest.raises(pg_errors.InsufficientPrivilege), reader.transaction():
            reader.execute(statement)
    try:
        finished: list[str] = []
        failures: list[BaseException] = []

        def cut_over() -> None:
            with connect(urls["deployer"]) as deployer:
                cutover.activate_version(deployer, second, force=True)
            finished.append("cutover")

        def ingest_a_document() -> None:
            (docs / "note.md").write_text("# Note\n\nA short note about locks.\n")
            with connect(urls["writer"]) as writer:
                ingest(writer, [docs], "a")
            finished.append("ingest")

        for work in (cut_over, ingest_a_document):

            def run(work=work) -> None:
                try:
                    work()
                except BaseException as error:  # reported below
                    failures.append(error)

            thread = threading.Thread(target=run)
            thread.start()
            thread.join(timeout=60)
            assert not thread.is_alive(), f"{work.__name__} waited for a lock the reader holds"
        assert failures == [] and finished == ["cutover", "ingest"]
        assert conn.execute(f"SELECT count(*) FROM toolkit.chunks_v{second} WHERE doc_id = 'note.md'").fetchone()[0]
    finally:
        reader.close()


def test_a_transaction_left_open_on_the_view_is_named_when_a_cutover_gives_up(conn, logins, lived):
    urls, names = logins
    other = ready_version(conn, "m1", 8, {"a": 5}, chunker="fixed:20:0")
    reader = psycopg.connect(urls["reader"])
    reader.execute("SELECT 1 FROM toolkit.active_chunks LIMIT 0")  # left open
    try:
        with connect(urls["deployer"]) as deployer, pytest.raises(Exception) as caught:
            cutover.activate_version(deployer, other, force=True, lock_timeout_ms=50, attempts=3)
        message = str(caught.value)
        assert f"pid {reader.info.backend_pid}" in message and names["reader"] in message
        assert "transaction open since" in message
    finally:
        reader.close()


# -- 3. separation of duties: no forged evaluation, no re-pointed alias -------------------------------------------


def test_the_writer_cannot_forge_an_evaluation_or_repoint_an_alias(conn, logins, lived):
    urls, _ = logins
    candidate = ready_version(conn, "m1", 8, {"a": 5}, chunker="fixed:20:0")
    attempts = [
        ("SELECT toolkit._record_evaluation(%s, 'fake', 1, 1, '{}', true)", (candidate,)),
        ("SELECT toolkit.evaluate_version(%s, 'a', '[]', 5, 0.0, 0, 1)", (candidate,)),
        (
            "INSERT INTO toolkit.evaluations (version, query_set_hash, query_count, k, metrics, passed)"
            " VALUES (%s, 'fake', 1, 1, '{}', true)",
            (candidate,),
        ),
        (f"SELECT toolkit.activate_version({candidate}, true)", ()),
        (f"SELECT toolkit.set_canary({candidate}, 10, '{{}}', true)", ()),
        ("UPDATE toolkit.models SET model_name = 'other', dimensions = 16 WHERE alias = 'm1'", ()),
        ("DELETE FROM toolkit.models WHERE alias = 'm1'", ()),
        (
            "INSERT INTO toolkit.models (alias, provider, model_name, dimensions, max_input_tokens)"
            " VALUES ('m9', 'hashing', '8', 8, 10)",
            (),
        ),
    ]
    for statement, params in attempts:
        assert _try(urls["writer"], statement, params) == "denied", statement
    assert _try(urls["deployer"], "UPDATE toolkit.models SET model_name = 'other' WHERE alias = 'm1'") == "denied"
    assert _try(urls["deployer"], "SELECT toolkit._record_evaluation(1, 'fake', 1, 1, '{}', true)") == "denied"
    # re-registering an alias through the function is refused, and even the owner cannot re-point one
    with connect(urls["writer"]) as writer, pytest.raises(InputError, match="already registered"):
        insert_model(writer, Model("m1", "hashing", "16", 16, 10))
    with pytest.raises(pg_errors.CheckViolation, match="re-pointed"), conn.transaction():
        conn.execute("UPDATE toolkit.models SET model_name = '16', dimensions = 16 WHERE alias = 'm1'")
    assert conn.execute("SELECT state FROM toolkit.versions WHERE version = %s", (candidate,)).fetchone()[0] == "ready"
    assert conn.execute("SELECT count(*) FROM toolkit.evaluations").fetchone()[0] == 0


def test_an_evaluation_is_computed_by_sql_from_the_versions_rows_not_taken_from_the_caller(conn, logins, lived):
    """The deployer supplies questions and answers; SQL searches and scores. Answers nothing retrieves fail."""
    urls, _ = logins
    candidate = ready_version(conn, "m1", 8, {"a": 30}, chunker="fixed:20:0")
    vector = [float(x) for x in np.ones(8)]
    queries = [
        {
            "query": f"q{i}",
            "answers": [{"doc_id": "nowhere", "start": 0, "end": 5}],
            "embedding": vector,
            "baseline_embedding": vector,
        }
        for i in range(3)
    ]
    with connect(urls["deployer"]) as deployer:
        evaluation = deployer.execute(
            "SELECT toolkit.evaluate_version(%s, 'a', %s, 5, 0.5, 0, 1)", (candidate, Jsonb(queries))
        ).fetchone()[0]
        deployer.commit()
    passed, metrics = conn.execute(
        "SELECT passed, metrics FROM toolkit.evaluations WHERE evaluation_id = %s", (evaluation,)
    ).fetchone()
    assert passed is False and metrics["candidate"]["recall"] == 0
    assert conn.execute("SELECT state FROM toolkit.versions WHERE version = %s", (candidate,)).fetchone()[0] == "ready"


# -- 4. tenants bound to logins ------------------------------------------------------------------------------------


def test_a_bound_login_that_sets_another_tenant_sees_nothing_through_any_read_path(conn, logins, lived):
    urls, _ = logins
    q = np.ones(8, dtype=np.float32)
    paths = [
        ("SELECT tenant FROM toolkit.active_chunks", ()),
        ("SELECT tenant FROM toolkit.live_chunks", ()),
        (f"SELECT tenant FROM toolkit.chunks_v{lived}", ()),
        ("SELECT doc_id FROM toolkit.search_chunks(%s, 50)", (q,)),
        (f"SELECT doc_id FROM toolkit.search_chunks(%s, 50, query_version => {lived})", (q,)),
        ("SELECT doc_id FROM toolkit.hybrid_search_chunks('text', %s, 50)", (q,)),
        ("SELECT doc_id FROM toolkit.hybrid_search_chunks('text', NULL, 50)", ()),
        ("SELECT doc_id FROM toolkit.search_context(%s, 20, 'window:1')", (q,)),
        ("SELECT doc_id FROM toolkit.search_context(%s, 20, 'parent', 'text')", (q,)),
    ]
    for url, tenant, expected in ((urls["bound"], "b", 0), (urls["bound"], "a", None), (urls["reader"], "b", None)):
        with psycopg.connect(url) as c:
            from pgvector.psycopg import register_vector

            register_vector(c)
            for statement, params in paths:
                with c.transaction(force_rollback=True):
                    # set_tenant refuses another tenant (test below): the setting by hand must still show nothing
                    c.execute("SELECT set_config('toolkit.tenant', %s, true)", (tenant,))
                    c.execute("SELECT toolkit.set_principals(ARRAY['hr'])")
                    rows = c.execute(statement, params).fetchall()
                if expected == 0:
                    assert rows == [], f"bound login read tenant b through {statement}"
                else:
                    assert rows, f"{tenant} should see its rows through {statement}"
            with c.transaction(force_rollback=True):
                # the setting itself, not the helper: a bound login cannot get around set_tenant either
                c.execute("SELECT set_config('toolkit.tenant', %s, true)", (tenant,))
                assert c.execute("SELECT toolkit.current_tenant()").fetchone()[0] == (None if expected == 0 else tenant)


def test_a_bound_login_naming_another_tenant_is_refused_with_its_binding(conn, logins, lived):
    """Issue 23 item 7: a bound login's set_tenant('b') was accepted and every search then returned 0 rows; now it is
    refused, naming the login's own binding (never which other tenants exist), and a tenant it holds still works."""
    urls, names = logins
    with psycopg.connect(urls["bound"]) as c:
        with pytest.raises(pg_errors.InvalidParameterValue) as refused:
            c.execute("SELECT toolkit.set_tenant('b')")
        message = refused.value.diag.message_primary
        assert (
            message
            == f"login {names['bound']} is bound to tenant a (toolkit tenant grant), so it cannot set tenant 'b'"
        )
        assert "toolkit tenant grant LOGIN TENANT" in refused.value.diag.message_hint
        c.rollback()
        assert c.execute("SELECT toolkit.bound_tenants()").fetchone()[0] == ["a"]
        assert c.execute("SELECT toolkit.set_tenant('a')").fetchone()[0] == "a"
        assert c.execute("SELECT count(*) FROM toolkit.active_chunks").fetchone()[0] > 0
    conn.execute("SELECT toolkit.bind_tenants(%s, ARRAY['c'])", (names["bound"],))
    with psycopg.connect(urls["bound"]) as c, pytest.raises(pg_errors.InvalidParameterValue, match="tenant a, c"):
        c.execute("SELECT toolkit.set_tenant('b')")
    # The application's way in: toolkit search as the bound login says so, instead of "no results".
    from click.testing import CliRunner

    from toolkit.cli import main

    searched = CliRunner().invoke(main, ["--database-url", urls["bound"], "search", "secret", "--tenant", "b"])
    assert searched.exit_code == 1 and "Traceback" not in searched.output, searched.output
    assert f"Login {names['bound']} is bound to tenant a, c (toolkit tenant grant), so it cannot set" in searched.output
    for role in ("reader", "writer", "deployer"):  # unbound logins choose their tenant, as before
        with psycopg.connect(urls[role]) as c:
            assert c.execute("SELECT toolkit.bound_tenants()").fetchone()[0] is None
            assert c.execute("SELECT toolkit.set_tenant('b')").fetchone()[0] == "b"


def test_binding_refuses_roles_that_bypass_tenants_and_unbinding_restores_the_choice(conn, logins, lived):
    urls, names = logins
    for role in ("writer", "owner"):
        with pytest.raises(pg_errors.InvalidParameterValue, match="bypasses tenants"):
            conn.execute("SELECT toolkit.bind_tenants(%s, ARRAY['a'])", (names[role],))
    assert _try(urls["bound"], "SELECT toolkit.bind_tenants(current_user, ARRAY['b'])") == "denied"
    conn.execute("SELECT toolkit.unbind_tenants(%s)", (names["bound"],))
    with psycopg.connect(urls["bound"]) as c:
        c.execute("SELECT toolkit.set_tenant('b')")
        assert c.execute("SELECT count(*) FROM toolkit.active_chunks").fetchone()[0] > 0


def test_the_binding_lookup_runs_once_per_statement(conn, logins, lived):
    urls, _ = logins
    with psycopg.connect(urls["bound"]) as c:
        c.execute("SELECT toolkit.set_tenant('a')")
        plan = "\n".join(
            r[0] for r in c.execute(f"EXPLAIN (ANALYZE, COSTS OFF) SELECT * FROM toolkit.chunks_v{lived}").fetchall()
        )
    # current_tenant() (which reads the bindings) is an InitPlan of the policy: evaluated once, not per row
    assert "tenant = (InitPlan" in plan, plan
    lines = plan.splitlines()
    headers = [i for i, line in enumerate(lines) if line.strip().startswith("InitPlan")]
    assert headers and all("loops=1" in lines[i + 1] for i in headers), plan


def test_a_lock_wait_is_bounded_and_names_the_holder(conn, database_url, logins):
    urls, names = logins
    holder = psycopg.connect(urls["writer"])
    holder.execute("SELECT toolkit.lock_version_set(true)")  # as create_version holds it, left open
    try:
        with psycopg.connect(urls["writer"]) as writer, pytest.raises(pg_errors.LockNotAvailable) as caught:
            writer.execute("SELECT toolkit.lock_version_set(false, '200ms')")
        message = caught.value.diag.message_primary
        assert "waited 200ms" in message and f"pid {holder.info.backend_pid}" in message
        assert names["writer"] in message and "transaction open since" in message
    finally:
        holder.close()
