"""The DBA's day (issue 37, item 4): `toolkit db url` prints the URL at any schema revision (a schema below head is a
warning on stderr, not a refusal: it is when `alembic upgrade head` needs the URL), and the embedded PostgreSQL 18's
own client tools are at hand: `toolkit db psql` runs its psql (which has `\\bind`, unlike a system psql 15) on the
database, `toolkit db bin` prints their directory."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from toolkit.cli import main
from toolkit.db import migrate


def toolkit(*args: str, url: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    """The real command in a process of its own (psql runs on its stdin/stdout, which CliRunner does not capture)."""
    env = {**os.environ, "TOOLKIT_DATABASE_URL": url}
    return subprocess.run(
        [sys.executable, "-m", "toolkit", *args], capture_output=True, text=True, env=env, input=stdin, timeout=60
    )


def test_db_url_prints_the_url_below_head_with_a_warning(database_url):
    previous = migrate.revisions()[-2]
    runner = CliRunner()
    done = runner.invoke(main, ["--database-url", database_url, "migrate", previous, "--downgrade", "--force"])
    assert done.exit_code == 0, done.output
    result = toolkit("db", "url", url=database_url)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == database_url
    assert f"at revision {previous}" in result.stderr and "printed anyway" in result.stderr
    assert "Traceback" not in result.stderr
    # The idiom docs/operations.md gives works then: alembic upgrades the schema at the URL, and the warning is gone.
    printed = result.stdout.strip().splitlines()[-1]
    upgraded = subprocess.run(
        [sys.executable, "-m", "alembic", "upgrade", "head"],
        cwd=Path(__file__).resolve().parent.parent,
        env={**os.environ, "TOOLKIT_DATABASE_URL": printed},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert upgraded.returncode == 0, upgraded.stderr
    again = toolkit("db", "url", url=database_url)
    assert again.returncode == 0 and again.stderr == "" and again.stdout.strip() == database_url


def test_db_url_of_a_database_it_cannot_reach_is_still_an_error():
    result = toolkit("db", "url", url="postgresql://nobody@127.0.0.1:1/nothing?connect_timeout=2")
    assert result.returncode == 1 and result.stdout == ""
    assert "Could not connect" in result.stderr and "Traceback" not in result.stderr


def test_db_psql_runs_a_bind_query_with_psql_18(database_url):
    # \bind is psql 16+: the system's psql 15 reports "invalid command \bind"; the wheel's psql 18 sends $1 and $2 as
    # parameters of an extended-protocol query.
    query = "SELECT $1::text || '/' || ($2::int + 1) AS answer, current_setting('server_version_num')"
    script = f"{query} \\bind acme 41 \\g\n"
    result = toolkit("db", "psql", "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", url=database_url, stdin=script)
    assert result.returncode == 0, result.stderr
    answer, server = result.stdout.strip().split("|")
    assert answer == "acme/42" and int(server) >= 180000
    version = toolkit("db", "psql", "--version", url=database_url)
    assert version.stdout.startswith("psql (PostgreSQL) 18"), version.stdout


def test_db_psql_reports_psqls_failure_in_one_sentence(database_url):
    result = toolkit("db", "psql", "-X", "-v", "ON_ERROR_STOP=1", "-c", "SELECT no_such_column", url=database_url)
    assert result.returncode == 1
    assert 'column "no_such_column" does not exist' in result.stderr  # psql's own message
    assert result.stderr.strip().splitlines()[-1] == "Error: psql exited with status 1 (its own message is above)."


def test_db_bin_names_the_directory_of_the_bundled_client_tools():
    result = CliRunner().invoke(main, ["db", "bin"], env={"TOOLKIT_DATA_DIR": "/nonexistent/no-server-here"})
    assert result.exit_code == 0, result.output
    directory = result.output.strip()
    for tool in ("psql", "pg_dump", "pg_dumpall", "pg_restore"):
        version = subprocess.run([os.path.join(directory, tool), "--version"], capture_output=True, text=True)
        assert version.returncode == 0 and " 18." in version.stdout, (tool, version.stdout)
    assert not os.path.exists("/nonexistent/no-server-here")  # nothing was started
