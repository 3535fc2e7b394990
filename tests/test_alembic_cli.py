"""alembic's own command line speaks (upgrade, a second upgrade, current, downgrade each say what they did; base
removes the version table too), and a DBA migrating as a non-superuser is refused before any change with the
sentence that names what is missing."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from click.testing import CliRunner
from psycopg import sql

from toolkit.cli import main
from toolkit.db import migrate

ROOT = Path(__file__).resolve().parent.parent


def alembic(url: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "TOOLKIT_DATABASE_URL": url}
    return subprocess.run([sys.executable, "-m", "alembic", *args], cwd=ROOT, env=env, capture_output=True, text=True)


def test_alembic_says_what_it_did(empty_database_url):
    head, previous = migrate.head_revision(), migrate.revisions()[-2]
    first = alembic(empty_database_url, "upgrade", "head")
    print(first.stderr, alembic(empty_database_url, "upgrade", "head").stderr)
    assert first.returncode == 0, first.stderr
    assert f"Running upgrade {previous} -> {head}" in first.stderr and f"At {head} (head)" in first.stderr
    again = alembic(empty_database_url, "upgrade", "head")
    assert again.returncode == 0 and f"Already at {head} (head)" in again.stderr and "Running" not in again.stderr
    current = alembic(empty_database_url, "current")
    assert current.returncode == 0 and f"{head} (head)" in current.stdout
    down = alembic(empty_database_url, "downgrade", previous)
    assert down.returncode == 0 and f"Running downgrade {head} -> {previous}" in down.stderr
    assert f"At {previous}, below head" in down.stderr
    assert previous in alembic(empty_database_url, "current").stdout
    base = alembic(empty_database_url, "downgrade", "base")
    assert base.returncode == 0 and "public.toolkit_alembic_version removed" in base.stderr
    with psycopg.connect(empty_database_url) as conn:
        assert conn.execute(
            "SELECT to_regnamespace('toolkit'), to_regclass('public.toolkit_alembic_version')"
        ).fetchone() == (None, None)
    assert alembic(empty_database_url, "current").stdout.strip() == ""


def _as(url: str, user: str, database: str) -> str:
    parts = urlsplit(url)
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit(parts._replace(netloc=f"{user}@{host}", path="/" + database))


@pytest.fixture
def dba(pg_admin_url, migrated_template):
    """A login with CREATEROLE (not a superuser) owning a database of its own; the toolkit roles already exist
    in the cluster (the template's migration created them)."""
    name = f"dba_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN CREATEROLE").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE DATABASE {} OWNER {}").format(sql.Identifier(name), sql.Identifier(name)))
        version = int(conn.execute("SHOW server_version_num").fetchone()[0])
    yield name, _as(pg_admin_url, name, name), version
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(name)))


def test_a_non_superuser_dba_is_refused_before_any_change_naming_what_is_missing(pg_admin_url, dba):
    name, url, version = dba
    refused = CliRunner().invoke(main, ["--database-url", url, "migrate"])
    print(refused.output)
    assert refused.exit_code == 1 and "Traceback" not in refused.output
    assert f"the role {name} is not a superuser" in refused.output
    assert "only a superuser can create: CREATE EXTENSION vector" in refused.output
    if version >= 160000:
        assert f"GRANT toolkit_owner TO {name} WITH ADMIN OPTION" in refused.output
    assert "toolkit_writer for ingest" not in refused.output  # not the advice meant for the commands
    by_alembic = alembic(url, "upgrade", "head")
    assert by_alembic.returncode != 0 and "CREATE EXTENSION vector" in by_alembic.stderr
    assert "Traceback" not in by_alembic.stderr
    with psycopg.connect(url) as conn:  # nothing changed
        assert conn.execute(
            "SELECT to_regnamespace('toolkit'), to_regclass('public.toolkit_alembic_version'),"
            " (SELECT count(*) FROM pg_extension WHERE extname = 'vector')"
        ).fetchone() == (None, None, 0)
    # What the sentence says, done by a superuser, is all it takes.
    with psycopg.connect(_as(pg_admin_url, urlsplit(pg_admin_url).username or "postgres", name), autocommit=True) as c:
        c.execute("CREATE EXTENSION vector")
        c.execute(sql.SQL("GRANT toolkit_owner TO {} WITH ADMIN OPTION").format(sql.Identifier(name)))
    done = CliRunner().invoke(main, ["--database-url", url, "migrate"])
    assert done.exit_code == 0, done.output
    assert CliRunner().invoke(main, ["--database-url", url, "status"]).exit_code == 0
