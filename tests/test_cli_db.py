"""`toolkit db …` on a throw-away embedded server, server version checks, and errors without tracebacks."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner

from toolkit import database, migrate
from toolkit.cli import main
from toolkit.errors import DatabaseError


@pytest.fixture
def data_dir():
    directory = Path(tempfile.mkdtemp(prefix="toolkit-test-cli-"))
    directory.chmod(0o755)
    yield directory / "pg"
    database.stop_embedded(directory / "pg")
    shutil.rmtree(directory, ignore_errors=True)


def test_db_start_url_status_stop(data_dir):
    runner = CliRunner()
    started = runner.invoke(main, ["--data-dir", str(data_dir), "db", "start"])
    assert started.exit_code == 0, started.output
    assert str(data_dir) in started.output
    url = runner.invoke(main, ["--data-dir", str(data_dir), "db", "url"]).output.strip().splitlines()[-1]
    with psycopg.connect(url) as conn:
        assert conn.execute(
            "SELECT current_database(), to_regclass('toolkit.active_chunks') IS NOT NULL"
        ).fetchone() == (
            "toolkit",
            True,
        )
    status = runner.invoke(main, ["--data-dir", str(data_dir), "db", "status", "--format", "json"])
    assert '"running": true' in status.output
    assert f'"schema_revision": "{migrate.head_revision()}"' in status.output
    stopped = runner.invoke(main, ["--data-dir", str(data_dir), "db", "stop"])
    assert stopped.exit_code == 0 and "Stopped" in stopped.output
    status = runner.invoke(main, ["--data-dir", str(data_dir), "db", "status", "--format", "json"])
    assert '"running": false' in status.output


def test_an_unreachable_database_is_a_clear_error():
    result = CliRunner().invoke(main, ["--database-url", "postgresql://nobody@/nodb?host=/nonexistent-dir", "status"])
    assert result.exit_code == 1
    assert "Could not connect to the database" in result.output and "--database-url" in result.output
    assert "Traceback" not in result.output


def test_servers_below_the_minimum_are_refused_with_the_fix(conn, monkeypatch):
    assert database.check_server(conn)["pgvector_version"].startswith("0.")
    monkeypatch.setattr(database, "MIN_PGVECTOR", (99, 0, 0))
    with pytest.raises(DatabaseError, match=r"pgvector 0\.\d+\.\d+ is too old.*ALTER EXTENSION vector UPDATE"):
        database.check_server(conn)
    monkeypatch.setattr(database, "MIN_SERVER_VERSION_NUM", 990000)
    with pytest.raises(DatabaseError, match=r"PostgreSQL 1\d\.\d+ is too old"):
        database.check_server(conn)
