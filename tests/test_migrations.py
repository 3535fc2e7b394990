"""Migrations on a real database: fresh install equals upgrade from every revision, downgrade/upgrade
round-trips, and re-applying the idempotent files changes nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import numpy as np
import psycopg
import pytest
from click.testing import CliRunner
from support import ready_version, wait_until

from toolkit import cutover
from toolkit.cli import main
from toolkit.db import migrate, migration_locks, sql_files
from toolkit.db.connection import connect
from toolkit.errors import DatabaseError

ROOT = Path(__file__).resolve().parent.parent

SNAPSHOT_QUERIES = {
    "columns": """
        SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
               pg_get_expr(d.adbin, d.adrelid), a.attgenerated
        FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
        LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
        WHERE c.relnamespace = 'toolkit'::regnamespace AND a.attnum > 0 AND NOT a.attisdropped
        ORDER BY 1, 2""",
    "relations": """
        SELECT relname, relkind, relrowsecurity, relforcerowsecurity, coalesce(reloptions, '{}'),
               coalesce(relacl::text, ''), pg_get_userbyid(relowner), obj_description(oid, 'pg_class')
        FROM pg_class WHERE relnamespace = 'toolkit'::regnamespace ORDER BY 1""",
    "indexes": "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'toolkit' ORDER BY 1",
    "constraints": """
        SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) FROM pg_constraint
        WHERE connamespace = 'toolkit'::regnamespace ORDER BY 1, 2""",
    "functions": """
        SELECT proname, pg_get_function_identity_arguments(oid), pg_get_function_result(oid), md5(prosrc),
               prosecdef, provolatile, coalesce(proconfig, '{}'), coalesce(proacl::text, ''),
               pg_get_userbyid(proowner)
        FROM pg_proc WHERE pronamespace = 'toolkit'::regnamespace ORDER BY 1, 2""",
    "views": "SELECT viewname, definition FROM pg_views WHERE schemaname = 'toolkit' ORDER BY 1",
    "policies": """
        SELECT tablename, policyname, permissive, roles::text, cmd, qual, with_check
        FROM pg_policies WHERE schemaname = 'toolkit' ORDER BY 1, 2""",
    "transitions": "SELECT from_state, to_state FROM toolkit.version_transitions ORDER BY 1, 2",
    "schema": "SELECT nspname, pg_get_userbyid(nspowner), coalesce(nspacl::text, '') FROM pg_namespace"
    " WHERE nspname = 'toolkit'",
}


def snapshot(url: str) -> dict:
    with psycopg.connect(url) as conn:
        return {name: conn.execute(query).fetchall() for name, query in SNAPSHOT_QUERIES.items()}


def schema_exists(url: str) -> bool:
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT to_regnamespace('toolkit') IS NOT NULL").fetchone()[0]


def test_fresh_install_has_the_core_objects(database_url):
    snap = snapshot(database_url)
    relations = {row[0] for row in snap["relations"]}
    assert {"models", "documents", "versions", "evaluations", "cutovers", "active_chunks"} <= relations
    assert snap["relations"][[r[0] for r in snap["relations"]].index("active_chunks")][:5] == (
        "active_chunks",
        "v",
        False,
        False,
        ["security_invoker=true"],
    )


@pytest.mark.parametrize("start", migrate.revisions())
def test_upgrade_from_every_revision_equals_fresh_install(empty_database_url, database_url, start):
    migrate.upgrade(empty_database_url, start)
    migrate.upgrade(empty_database_url, "head")
    assert snapshot(empty_database_url) == snapshot(database_url)


def test_downgrade_base_then_upgrade_head_round_trips(database_url):
    before = snapshot(database_url)
    migrate.downgrade(database_url, "base")
    assert not schema_exists(database_url)
    migrate.upgrade(database_url, "head")
    assert snapshot(database_url) == before


def test_reapplying_idempotent_files_changes_nothing(conn, database_url, make_model):
    make_model("m1", 8)
    v = ready_version(conn, "m1", 8, {"a": 50})
    cutover.activate_version(conn, v, force=True)
    view_oid = conn.execute("SELECT 'toolkit.active_chunks'::regclass::oid").fetchone()[0]
    before = snapshot(database_url)
    assert migrate.upgrade(database_url).changed is False  # at head with this SQL: nothing to do, no lock taken
    migrate.upgrade(database_url, reapply=True)  # re-applies sql/idempotent/ anyway
    assert snapshot(database_url) == before
    assert conn.execute("SELECT 'toolkit.active_chunks'::regclass::oid").fetchone()[0] == view_oid
    # and the view still points at the active version's rows
    assert conn.execute(f"SELECT count(*) FROM toolkit.chunks_v{v}").fetchone()[0] == 50


def test_upgrade_records_the_sql_fingerprint(database_url):
    with connect(database_url, autocommit=True) as c:
        assert sql_files.installed_fingerprint(c) == sql_files.sql_fingerprint()
        assert migrate.current_revision(c) == migrate.head_revision()


def test_alembic_command_line_from_the_repository_root(empty_database_url):
    env = {**os.environ, "TOOLKIT_DATABASE_URL": empty_database_url}
    alembic = [sys.executable, "-m", "alembic"]
    subprocess.run([*alembic, "upgrade", "head"], cwd=ROOT, env=env, check=True, capture_output=True)
    assert schema_exists(empty_database_url)
    subprocess.run([*alembic, "downgrade", "base"], cwd=ROOT, env=env, check=True, capture_output=True)
    assert not schema_exists(empty_database_url)


def test_toolkit_migrate_wraps_alembic(empty_database_url):
    runner = CliRunner()
    result = runner.invoke(main, ["--database-url", empty_database_url, "migrate"])
    assert result.exit_code == 0, result.output
    assert schema_exists(empty_database_url)
    result = runner.invoke(main, ["--database-url", empty_database_url, "migrate", "base", "--downgrade"])
    assert result.exit_code == 0, result.output
    assert not schema_exists(empty_database_url)


def test_commands_refuse_a_database_without_the_schema(empty_database_url):
    result = CliRunner().invoke(main, ["--database-url", empty_database_url, "status"])
    assert result.exit_code == 1
    assert "no toolkit schema" in result.output and "toolkit migrate" in result.output


def test_downgrading_one_revision_restores_that_release_and_upgrading_round_trips(conn, database_url, make_model):
    make_model("m1", 8)
    v = ready_version(conn, "m1", 8, {"a": 20})
    cutover.activate_version(conn, v, force=True)
    before = snapshot(database_url)
    previous = migrate.revisions()[-2]
    migrate.downgrade(database_url, previous)
    with connect(database_url, autocommit=True) as c:
        assert migrate.current_revision(c) == previous
        # the release at that revision works: its search function, through its own view, as the reader
        with c.transaction():
            c.execute("SET LOCAL ROLE toolkit_reader")
            c.execute("SELECT toolkit.set_tenant('a')")
            rows = c.execute("SELECT chunk_id FROM toolkit.search_chunks(%s, 3)", (np.ones(8, dtype=np.float32),))
            assert len(rows.fetchall()) == 3
    migrate.upgrade(database_url)
    assert snapshot(database_url) == before


def test_a_downgrade_that_would_delete_data_is_refused_with_counts_unless_forced(conn, database_url, make_model):
    make_model("m1", 8)
    ready_version(conn, "m1", 8, {"a": 7, "b": 5})
    conn.execute(
        "INSERT INTO toolkit.documents (tenant, doc_id, source, raw_text, content_hash)"
        " VALUES ('a', 'd', 's', 't', 'h')"
    )
    with pytest.raises(DatabaseError) as caught:
        migrate.downgrade(database_url, "base")
    message = str(caught.value)
    assert "1 in toolkit.documents" in message and "12 in chunk rows" in message and "--force" in message
    assert schema_exists(database_url)
    assert conn.execute("SELECT count(*) FROM toolkit.documents").fetchone()[0] == 1
    refused = CliRunner().invoke(main, ["--database-url", database_url, "migrate", "base", "--downgrade"])
    assert refused.exit_code == 1 and "would delete data" in refused.output and "Traceback" not in refused.output
    # alembic's own command line honours the guard, and -x force=yes overrides it
    env = {**os.environ, "TOOLKIT_DATABASE_URL": database_url}
    alembic = [sys.executable, "-m", "alembic"]
    plain = subprocess.run([*alembic, "downgrade", "base"], cwd=ROOT, env=env, capture_output=True, text=True)
    assert plain.returncode != 0 and "would delete data" in plain.stdout + plain.stderr and schema_exists(database_url)
    subprocess.run(
        [*alembic, "-x", "force=yes", "downgrade", "base"], cwd=ROOT, env=env, check=True, capture_output=True
    )
    assert not schema_exists(database_url)


def test_a_second_migration_waits_for_the_first_and_says_so(conn, database_url):
    holder = psycopg.connect(database_url)
    holder.execute("LOCK TABLE toolkit.migration_lock IN EXCLUSIVE MODE")  # a migration in progress
    holder_pid = holder.info.backend_pid
    results: list = []

    def second() -> None:
        results.append(migrate.upgrade(database_url, reapply=True))

    thread = threading.Thread(target=second)
    thread.start()
    try:
        for _ in range(500):
            if conn.execute(
                # waiting longer than the first, short attempt: the second migration has said it waits
                "SELECT EXISTS (SELECT FROM pg_locks WHERE NOT granted"
                " AND relation = 'toolkit.migration_lock'::regclass"
                " AND clock_timestamp() - waitstart > interval '300 milliseconds')"
            ).fetchone()[0]:
                break
            time.sleep(0.02)
        else:
            pytest.fail("the second migration did not wait for the migration lock")
        assert not results
        holder.commit()
        thread.join(timeout=60)
    finally:
        holder.close()
        thread.join(timeout=60)
    assert len(results) == 1 and results[0].changed
    assert any(f"pid {holder_pid}" in n and "Another migration is running" in n for n in results[0].notices)


def _waits(conn: psycopg.Connection, pid: int) -> tuple[set[str], set[str]]:
    """The toolkit relations session ``pid`` holds a lock on, and those it waits for (not the migration's own lock)."""
    rows = conn.execute(
        "SELECT relation::regclass::text, granted FROM pg_locks WHERE pid = %s"
        " AND relation IN (SELECT oid FROM pg_class WHERE relnamespace = 'toolkit'::regnamespace)"
        " AND relation <> 'toolkit.migration_lock'::regclass",
        (pid,),
    ).fetchall()
    return {name for name, granted in rows if granted}, {name for name, granted in rows if not granted}


def test_the_migration_learns_the_order_readers_lock_in(conn, database_url):
    """A reader of an earlier release takes the tables before the tenant bindings (the reverse of this release's
    order): the migration's first attempt waits for the reader while holding the bindings the reader then asks
    for. Its next attempt waits for what the reader holds first, holding nothing the reader could wait for."""
    reader = psycopg.connect(database_url)
    migrating = psycopg.connect(database_url)
    reader.execute("LOCK TABLE toolkit.versions IN ACCESS SHARE MODE")
    notices: list[str] = []
    failures: list[BaseException] = []

    def migrate_locks() -> None:
        try:
            migration_locks.lock_for_migration(migrating, say=notices.append)
        except BaseException as error:  # reported by the test
            failures.append(error)

    thread = threading.Thread(target=migrate_locks)
    thread.start()
    pid = migrating.info.backend_pid
    try:
        wait_until(
            lambda: (
                _waits(conn, pid) == (_waits(conn, pid)[0], {"toolkit.versions"})
                and "toolkit.tenant_bindings" in _waits(conn, pid)[0]
            ),
            "the migration's first attempt did not hold the bindings and wait for the reader's table",
        )
        asks = threading.Thread(
            target=reader.execute, args=("LOCK TABLE toolkit.tenant_bindings IN ACCESS SHARE MODE",)
        )
        asks.start()  # the reader asks for the bindings: a deadlock that only the migration's attempt timeout breaks
        asks.join(timeout=60)
        assert not asks.is_alive() and not failures
        wait_until(
            lambda: _waits(conn, pid) == (set(), {"toolkit.versions"}),
            "the migration's next attempt did not wait for the reader's table first, holding nothing",
        )
        reader.commit()
        thread.join(timeout=60)
        assert not thread.is_alive() and not failures, failures
        assert notices == ["Waiting for open transactions on the toolkit's views and tables before migrating…"]
        held, waiting = _waits(conn, pid)
        assert {"toolkit.tenant_bindings", "toolkit.versions", "toolkit.active_chunks"} <= held and not waiting
    finally:
        reader.close()
        thread.join(timeout=60)
        migrating.close()


# One reader: its own process (as an application's readers are: a reader thread beside the migrating thread would
# share its GIL, and on a loaded machine hold its transaction open while waiting for it), reading until the stop file
# exists, then printing what it did as JSON.
READER = r"""
import json, os, sys
import numpy as np
import psycopg
from pgvector.psycopg import register_vector

url, number, stop = sys.argv[1], int(sys.argv[2]), sys.argv[3]
statements = [
    "SELECT chunk_id FROM toolkit.active_chunks ORDER BY embedding <=> %s LIMIT 5",
    "SELECT chunk_id FROM toolkit.search_chunks(%s, 5)",
]
prepared = number % 2 == 1  # psycopg prepares a statement server-side once asked to
done, errors = 0, []
with psycopg.connect(url, autocommit=True) as c:
    register_vector(c)
    vector = np.random.default_rng(number).standard_normal(8).astype(np.float32)
    print("ready", flush=True)
    while not os.path.exists(stop):
        try:
            with c.transaction():
                c.execute("SELECT toolkit.set_tenant('a')")
                rows = c.execute(statements[number % 4 // 2], (vector,), prepare=prepared).fetchall()
            assert len(rows) == 5, rows
            done += 1
        except Exception as error:  # counted: the test requires none
            errors.append(f"{type(error).__name__}: {str(error).strip()[:600]}")
print(json.dumps({"done": done, "errors": errors}), flush=True)
"""


@pytest.mark.slow  # a minute of readers beside every migration
def test_migrations_next_to_live_readers_cause_no_reader_error(conn, database_url, make_model, tmp_path):
    """8 readers (plain and prepared statements, each its own process) through 10 migrations that re-apply everything
    and a downgrade and upgrade of one revision: they wait for the migration, never fail (no deadlock, no error)."""
    make_model("m1", 8)
    v = ready_version(conn, "m1", 8, {"a": 200})
    cutover.activate_version(conn, v, force=True)
    reader = f"app_{uuid.uuid4().hex[:8]}"
    conn.execute(f"CREATE ROLE {reader} LOGIN IN ROLE toolkit_reader")
    parts = urlsplit(database_url)
    reader_url = urlunsplit(parts._replace(netloc=f"{reader}@{parts.netloc.split('@')[-1]}"))
    stop = tmp_path / "stop"
    readers = [
        subprocess.Popen(
            [sys.executable, "-c", READER, reader_url, str(number), str(stop)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for number in range(8)
    ]
    try:
        for process in readers:  # every reader connected and about to read: the migrations start beside them
            assert process.stdout.readline().strip() == "ready", process.communicate()
        for _ in range(10):
            assert migrate.upgrade(database_url, reapply=True).changed
        migrate.downgrade(database_url, migrate.revisions()[-2])
        migrate.upgrade(database_url)
    finally:
        stop.touch()
        outputs = [process.communicate(timeout=120) for process in readers]
        conn.execute(f"DROP OWNED BY {reader}")
        conn.execute(f"DROP ROLE {reader}")
    reports = []
    for process, (out, err) in zip(readers, outputs, strict=True):
        assert process.returncode == 0, err
        reports.append(json.loads(out.strip().splitlines()[-1]))
    errors = [error for report in reports for error in report["errors"]]
    assert errors == [], "\n".join(errors[:3])
    assert sum(report["done"] for report in reports) > 50


def test_the_upgrade_removes_secrets_an_earlier_release_stored_and_names_the_aliases(empty_database_url):
    migrate.upgrade(empty_database_url, "0002")
    with psycopg.connect(empty_database_url, autocommit=True) as c:
        c.execute(
            "INSERT INTO toolkit.models (alias, provider, model_name, dimensions, max_input_tokens, options, base_url)"
            " VALUES ('k1', 'openai', 'm', 16, 512, '{\"api_key\": \"sk-SECRET\", \"timeout\": 30}',"
            " 'http://user:pa55@127.0.0.1:9/v1'), ('clean', 'hashing', '8', 8, 10, '{}', NULL)"
        )
    result = migrate.upgrade(empty_database_url)
    assert any("model k1" in n and "api_key" in n and "api_key_env" in n for n in result.notices), result.notices
    assert not any("clean" in n for n in result.notices)
    with psycopg.connect(empty_database_url) as c:
        options, base_url = c.execute("SELECT options, base_url FROM toolkit.models WHERE alias = 'k1'").fetchone()
        stored = json.dumps(c.execute("SELECT to_jsonb(m) FROM toolkit.models AS m").fetchall())
    assert options == {"timeout": 30} and base_url == "http://127.0.0.1:9/v1"
    assert "sk-SECRET" not in stored and "pa55" not in stored


def test_a_downgrade_to_0006_and_back_moves_the_gin_index_and_the_postings_of_a_version_being_built(
    conn, database_url, make_model
):
    """At 0007 a version being built has no postings and no chunk table a GIN index; a downgrade to 0006 gives
    every version table its GIN index back and the building version its postings (0006 keeps them from creation on,
    so its writes keep them), and the upgrade drops both again. A ready version's hybrid search gives the same hits
    throughout."""
    from support import fill_version

    from toolkit.store import versions

    make_model("m1", 8)
    ready = ready_version(conn, "m1", 8, {"a": 20, "b": 5})
    cutover.activate_version(conn, ready, force=True)
    building = versions.create_version(conn, "m1", "fixed:10:0", "fixed:10:0@building")
    fill_version(conn, building, 8, {"a": 6})

    def hits():
        with conn.transaction():
            conn.execute("SELECT toolkit.set_tenant('a')")
            return conn.execute(
                "SELECT chunk_id, text_rank FROM toolkit.hybrid_search_chunks('text 3', NULL, 10)"
            ).fetchall()

    def state() -> tuple[int, bool, bool]:
        gin = conn.execute(
            "SELECT count(*) FROM pg_index AS i JOIN pg_class AS c ON c.oid = i.indexrelid JOIN pg_am AS a"
            " ON a.oid = c.relam WHERE a.amname = 'gin'"
            " AND i.indrelid = ANY (ARRAY[to_regclass(toolkit._chunk_table(%s)),"
            " to_regclass(toolkit._chunk_table(%s))])",
            (ready, building),
        ).fetchone()[0]
        postings = conn.execute(
            "SELECT to_regclass(toolkit._postings_table(%s)) IS NOT NULL, to_regclass(toolkit._postings_table(%s))"
            " IS NOT NULL",
            (ready, building),
        ).fetchone()
        return gin, postings[0], postings[1]

    at_head = hits()
    assert at_head and state() == (0, True, False)
    migrate.downgrade(database_url, "0006")
    assert state() == (2, True, True) and hits() == at_head
    terms = conn.execute("SELECT toolkit._postings_table(%s)", (building,)).fetchone()[0]
    assert conn.execute(f"SELECT count(DISTINCT chunk_id) FROM {terms}").fetchone()[0] == 6
    migrate.upgrade(database_url)
    assert state() == (0, True, False) and hits() == at_head
    versions.create_version_index(conn, building, maintenance_work_mem="64MB")
    versions.mark_version_ready(conn, building)
    assert conn.execute(f"SELECT count(DISTINCT chunk_id) FROM {terms}").fetchone()[0] == 6


def test_the_upgrade_builds_full_text_postings_for_versions_of_an_earlier_release(conn, database_url, make_model):
    """A version made before the postings existed (downgraded, its postings and triggers dropped, as 0004 made it)
    gets them, filled from its rows and kept by triggers, when the database is upgraded."""
    make_model("m1", 8)
    v = ready_version(conn, "m1", 8, {"a": 20, "b": 5})
    cutover.activate_version(conn, v, force=True)
    migrate.downgrade(database_url, migrate.revisions()[-2])
    for name in ("insert", "delete", "update"):
        conn.execute(f"DROP TRIGGER text_postings_{name} ON toolkit.chunks_v{v}")
    conn.execute("SELECT toolkit._drop_text_postings(%s)", (v,))
    migrate.upgrade(database_url)
    terms = conn.execute("SELECT toolkit._postings_table(%s)", (v,)).fetchone()[0]
    conn.execute(
        f"INSERT INTO toolkit.chunks_v{v} (tenant, chunk_id, doc_id, position, start_offset, end_offset, text,"
        " content_hash, token_count) VALUES ('a', 'new', 'd', 0, 0, 9, 'zymurgy', 'h', 1)"
    )
    held = conn.execute(
        f"SELECT c.tenant, l.lexeme, c.chunk_id FROM toolkit.chunks_v{v} AS c CROSS JOIN LATERAL unnest(c.fts) AS l"
        " ORDER BY 1, 2, 3"
    ).fetchall()
    assert len(held) > 25 and ("a", "zymurgi", "new") in held
    assert conn.execute(f"SELECT tenant, lexeme, chunk_id FROM {terms} ORDER BY 1, 2, 3").fetchall() == held
