"""Backup and restore as docs/operations.md writes them: `toolkit db dump FILE` with the pg_dump matching the server,
`toolkit --data-dir NEW db restore FILE` into a fresh embedded cluster, and the pinned search there returns the same
rows; a restore over data, or of a file that is not a dump, is refused with nothing changed."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from click.testing import CliRunner
from support import ready_version, scratch_directory

from toolkit import cutover
from toolkit.cli import main
from toolkit.db import server
from toolkit.db.connection import connect

# starts a PostgreSQL server of its own: not in `make check`
pytestmark = pytest.mark.database

QUERY = np.linspace(-1, 1, 8, dtype=np.float32)


def pinned_rows(url: str, version: int) -> list[tuple]:
    with connect(url) as conn, conn.transaction():
        conn.execute("SET LOCAL ROLE toolkit_reader")
        conn.execute("SELECT toolkit.set_tenant('a')")
        return conn.execute(
            "SELECT chunk_id, doc_id, distance FROM toolkit.search_chunks(%s, 5, '{}', 'm1', %s)", (QUERY, version)
        ).fetchall()


@pytest.fixture
def fresh_data_dir():
    directory = scratch_directory("toolkit-test-restore-")
    yield directory / "pg"
    server.stop_embedded(directory / "pg")
    shutil.rmtree(directory, ignore_errors=True)


def test_dump_then_restore_into_a_fresh_cluster_serves_the_same_rows(conn, database_url, make_model, fresh_data_dir):
    make_model("m1", 8)
    version = ready_version(conn, "m1", 8, {"a": 40, "b": 10})
    cutover.activate_version(conn, version, force=True)
    before = pinned_rows(database_url, version)
    assert len(before) == 5
    dump_file = fresh_data_dir.parent / "toolkit.dump"
    runner = CliRunner()
    dumped = runner.invoke(main, ["--database-url", database_url, "db", "dump", str(dump_file)])
    assert dumped.exit_code == 0, dumped.output
    assert "Dumped the toolkit schema at revision" in dumped.output and "pg_dumpall --roles-only" in dumped.output
    assert "pg_dump (PostgreSQL) 18" in dumped.output
    # a fresh cluster: started, migrated (an empty schema), then restored into
    assert runner.invoke(main, ["--data-dir", str(fresh_data_dir), "db", "start"]).exit_code == 0
    restored = runner.invoke(main, ["--data-dir", str(fresh_data_dir), "db", "restore", str(dump_file)])
    assert restored.exit_code == 0, restored.output
    assert f"version {version} active" in restored.output
    url = runner.invoke(main, ["--data-dir", str(fresh_data_dir), "db", "url"]).output.strip().splitlines()[-1]
    assert pinned_rows(url, version) == before
    status = runner.invoke(main, ["--data-dir", str(fresh_data_dir), "status", "--format", "json"])
    assert status.exit_code == 0 and '"state": "active"' in status.output
    # over data: refused, unchanged
    again = runner.invoke(main, ["--data-dir", str(fresh_data_dir), "db", "restore", str(dump_file)])
    assert again.exit_code == 1 and "already holds toolkit data" in again.output and "Traceback" not in again.output
    not_a_dump = fresh_data_dir.parent / "notes.txt"
    not_a_dump.write_text("hello")
    refused = runner.invoke(main, ["--data-dir", str(fresh_data_dir), "db", "restore", str(not_a_dump)])
    assert refused.exit_code == 1 and "Traceback" not in refused.output
    assert pinned_rows(url, version) == before
