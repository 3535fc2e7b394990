"""Migrations on a real database: fresh install equals upgrade from every revision, downgrade/upgrade
round-trips, and re-applying the idempotent files changes nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner
from support import ready_version

from toolkit import migrate, schema, versions
from toolkit.cli import main
from toolkit.database import connect

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
    versions.activate_version(conn, v, force=True)
    view_oid = conn.execute("SELECT 'toolkit.active_chunks'::regclass::oid").fetchone()[0]
    before = snapshot(database_url)
    migrate.upgrade(database_url)  # at head already: re-applies sql/idempotent/
    assert snapshot(database_url) == before
    assert conn.execute("SELECT 'toolkit.active_chunks'::regclass::oid").fetchone()[0] == view_oid
    # and the view still points at the active version's rows
    assert conn.execute(f"SELECT count(*) FROM toolkit.chunks_v{v}").fetchone()[0] == 50


def test_upgrade_records_the_sql_fingerprint(database_url):
    with connect(database_url, autocommit=True) as c:
        assert schema.installed_fingerprint(c) == schema.sql_fingerprint()
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
