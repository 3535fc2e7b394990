"""`toolkit db …` on a throw-away embedded server, server version checks, and errors without tracebacks."""

from __future__ import annotations

import shutil

import psycopg
import pytest
from click.testing import CliRunner
from support import scratch_directory

from toolkit.cli import main
from toolkit.db import connection, migrate, server
from toolkit.errors import DatabaseError

# starts a PostgreSQL server of its own: not in `make check`
pytestmark = pytest.mark.database


@pytest.fixture
def data_dir():
    directory = scratch_directory("toolkit-test-cli-")
    yield directory / "pg"
    server.stop_embedded(directory / "pg")
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
    assert connection.check_server(conn)["pgvector_version"].startswith("0.")
    monkeypatch.setattr(connection, "MIN_PGVECTOR", (99, 0, 0))
    with pytest.raises(DatabaseError, match=r"pgvector 0\.\d+\.\d+ is too old.*ALTER EXTENSION vector UPDATE"):
        connection.check_server(conn)
    monkeypatch.setattr(connection, "MIN_SERVER_VERSION_NUM", 990000)
    with pytest.raises(DatabaseError, match=r"PostgreSQL 1\d\.\d+ is too old"):
        connection.check_server(conn)


# A process that is its children's subreaper and never reaps them: a postmaster killed with kill -9 stays a
# zombie (as it does under an init that reaps late), deterministically. The server, the kill and the restart all
# happen in it; it reports what each step saw as JSON.
CRASH_HELPER = r"""
import ctypes, json, os, signal, sys
from pathlib import Path

ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
from click.testing import CliRunner
from toolkit.cli import main
from toolkit.db.connection import connect, translate_errors
from toolkit.errors import DatabaseError

data_dir = sys.argv[1]
runner = CliRunner()
report = {}

def start(step):
    result = runner.invoke(main, ["--data-dir", data_dir, "db", "start"])
    report[step] = {"exit": result.exit_code, "output": result.output}
    return result.output.strip().splitlines()[-1]

def state(pid):
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return "gone"

def kill_postmaster():
    pid = int(Path(data_dir, "postmaster.pid").read_text().split()[0])
    os.kill(pid, signal.SIGKILL)
    while state(pid) not in ("Z", "gone"):  # the kernel's own word that it died
        pass
    return pid

url = start("first start")
session = connect(url, autocommit=True)
pid = kill_postmaster()
report["killed is a zombie"] = state(pid) == "Z"
status = runner.invoke(main, ["--data-dir", data_dir, "db", "status", "--format", "json"])
report["status next to the zombie"] = status.output
try:
    with translate_errors():
        session.execute("SELECT 1")
except DatabaseError as error:
    report["error after the crash"] = str(error)
start("start next to the zombie")
pid = kill_postmaster()
os.waitpid(pid, 0)  # reaped: the lock file now names a process that does not exist
report["killed is gone"] = state(pid) == "gone"
url = start("start over a stale lock file")
with connect(url, autocommit=True) as conn:
    report["answers"] = conn.execute("SELECT count(*) FROM toolkit.versions").fetchone()[0] == 0
status = runner.invoke(main, ["--data-dir", data_dir, "db", "stop"])
report["stopped"] = status.output
print(json.dumps(report))
"""


def test_db_start_right_after_kill_9_succeeds_the_first_time(data_dir):
    import json
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-c", CRASH_HELPER, str(data_dir)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert report["first start"]["exit"] == 0, report
    assert report["killed is a zombie"] and report["killed is gone"]
    assert json.loads(report["status next to the zombie"])["running"] is False
    for step in ("start next to the zombie", "start over a stale lock file"):
        assert report[step]["exit"] == 0, report[step]["output"]
        assert "Traceback" not in report[step]["output"]
    assert report["answers"] and "Stopped" in report["stopped"]
    # The session that was open when the server died gets one line, not libpq's several.
    message = report["error after the crash"]
    assert "\n" not in message and "\t" not in message
    assert message.startswith("The database server crashed (its main process died) and ended this session;")


def test_a_terminated_session_and_a_refused_connection_are_one_line(database_url):
    from toolkit.db.connection import connect, translate_errors

    session = connect(database_url, autocommit=True)
    with psycopg.connect(database_url, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (session.info.backend_pid,))
    with pytest.raises(DatabaseError) as caught, translate_errors():
        session.execute("SELECT 1")
    assert str(caught.value).startswith("The database server ended the session")
    assert "\n" not in str(caught.value)

    import socket

    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    result = CliRunner().invoke(main, ["--database-url", f"postgresql://nobody@127.0.0.1:{port}/db", "status"])
    assert result.exit_code == 1
    error = result.output.strip().splitlines()[-1]
    assert error == (
        f'Error: Could not connect to the database: nothing accepts connections at "127.0.0.1", port {port} (the '
        "server is not running, or was just stopped or crashed); start it (toolkit db start for the embedded "
        "server) or check --database-url / TOOLKIT_DATABASE_URL."
    )


def test_a_statement_timeout_is_a_cancelled_statement_not_a_failed_connection(database_url):
    # 57014 is in class 57 with the connection errors; it used to read "The database connection failed … toolkit db
    # start" although the server was up and only one statement had run too long.
    from toolkit.db.connection import connect, translate_errors

    with connect(database_url, autocommit=True) as session:
        session.execute("SET statement_timeout = '20ms'")
        with pytest.raises(DatabaseError) as caught, translate_errors():
            session.execute("SELECT pg_sleep(5)")
    assert str(caught.value).startswith("The database cancelled the statement: it ran past the statement_timeout")
    assert "connection failed" not in str(caught.value)


def test_migrate_says_where_it_started_and_that_head_is_already_there(database_url):
    from toolkit.db import migrate

    head, previous = migrate.head_revision(), migrate.revisions()[-2]
    runner = CliRunner()

    def run(*args):
        result = runner.invoke(main, ["--database-url", database_url, "migrate", *args])
        assert result.exit_code == 0, result.output
        return result.output.strip()

    assert run() == f"Already at {head} (head); nothing to do."
    assert run(previous, "--downgrade") == f"Downgraded from {head} to {previous}."
    assert run(previous, "--downgrade") == f"Already at {previous}; nothing was downgraded."
    assert run() == f"Upgraded from {previous} to {head} (head)."
