"""A read replica: `toolkit db start --standby-of URL` makes a hot standby of an embedded primary; readers following
the pinned pattern on the standby, with the query log on, go through cutovers and rollbacks on the primary with no
error, no empty page and no row of another version; the questions they cannot log there are counted, never an
error; and retire waits for the standby to replay, refusing while it lags.

Synchronisation is on the standby's WAL replay position and on the readers' own counts, never on sleeps."""

from __future__ import annotations

import shutil
import threading
import time

import pytest
from click.testing import CliRunner
from support import ready_version, scratch_directory

from toolkit import cutover
from toolkit.cli import main
from toolkit.db import server
from toolkit.db.connection import connect
from toolkit.errors import StateError, VersionUnavailableError
from toolkit.search import search
from toolkit.serving import serving_model
from toolkit.store.models import Model, insert_model
from toolkit.store.query_log import set_query_log, skipped_on_standby

# starts a PostgreSQL server of its own: not in `make check`
pytestmark = pytest.mark.database

READERS = 3
TENANTS = ("a", "b")


@pytest.fixture
def cluster_dirs():
    directory = scratch_directory("toolkit-test-standby-")
    primary, standby = directory / "primary", directory / "standby"
    yield primary, standby
    server.stop_embedded(standby)
    server.stop_embedded(primary)
    shutil.rmtree(directory, ignore_errors=True)


def start(*args: str) -> str:
    result = CliRunner().invoke(main, [*args])
    assert result.exit_code == 0, result.output
    return result.output.strip().splitlines()[-1]


def wait_for_replay(primary, standby, timeout: float = 60.0) -> None:
    """Until the standby has replayed everything the primary has written so far."""
    position = primary.execute("SELECT pg_current_wal_lsn()").fetchone()[0]
    deadline = time.monotonic() + timeout
    while not standby.execute("SELECT pg_last_wal_replay_lsn() >= %s", (position,)).fetchone()[0]:
        assert time.monotonic() < deadline, "the standby did not replay"
        time.sleep(0.02)  # polling the replay position, which nothing notifies


class Readers:
    """Threads searching on the standby: serving model, then a search pinned to its version, query log on."""

    def __init__(self, url: str):
        self.url = url
        self.stop = threading.Event()
        self.changed = threading.Condition()
        self.reads = self.errors = self.empty = self.foreign = self.retried = self.skipped = 0
        self.failures: list[str] = []
        self.threads = [threading.Thread(target=self.run, args=(i,), daemon=True) for i in range(READERS)]

    def run(self, index: int) -> None:
        conn = connect(self.url, autocommit=True)
        n = 0
        try:
            while not self.stop.is_set():
                n += 1
                tenant = TENANTS[(index + n) % 2]
                try:
                    served = serving_model(conn, tenant, request_key=f"r{index}-{n}")
                    hits = search(conn, f"question {n}", tenant, 5, version=served.version)
                except VersionUnavailableError:
                    with self.changed:
                        self.retried += 1  # retired meanwhile: read the serving model again (the documented retry)
                    continue
                except Exception as error:  # any other error is a failure of the test
                    with self.changed:
                        self.errors += 1
                        self.failures.append(repr(error))
                    continue
                with self.changed:
                    self.reads += 1
                    self.empty += not hits
                    self.foreign += sum(h.version != served.version for h in hits)
                    self.changed.notify_all()
            with self.changed:
                self.skipped += skipped_on_standby(conn)
        finally:
            conn.close()

    def wait_for_more(self, count: int, timeout: float = 60.0) -> None:
        with self.changed:
            target = self.reads + count
            assert self.changed.wait_for(lambda: self.reads >= target or self.errors, timeout), "readers stalled"


def test_readers_on_a_standby_through_cutovers_and_a_retire(cluster_dirs, monkeypatch):
    primary_dir, standby_dir = cluster_dirs
    primary_url = start("--data-dir", str(primary_dir), "db", "start")
    primary = connect(primary_url, autocommit=True)
    insert_model(primary, Model(alias="m1", provider="hashing", model_name="8", dimensions=8, max_input_tokens=512))
    v1 = ready_version(primary, "m1", 8, {"a": 30, "b": 30}, chunker="fixed:10:0")
    v2 = ready_version(primary, "m1", 8, {"a": 30, "b": 30}, chunker="fixed:20:0", seed=1)
    cutover.activate_version(primary, v1, force=True)
    set_query_log(primary, 1.0)  # every question sampled: on the standby each is skipped and counted

    standby_url = start("--data-dir", str(standby_dir), "db", "start", "--standby-of", primary_url)
    standby = connect(standby_url, autocommit=True)
    assert standby.execute("SELECT pg_is_in_recovery(), current_setting('hot_standby_feedback')").fetchone() == (
        True,
        "on",
    )
    wait_for_replay(primary, standby)
    readers = Readers(standby_url)
    for thread in readers.threads:
        thread.start()
    try:
        readers.wait_for_more(10)
        for step in range(6):  # cutover, rollback, cutover, rollback…
            if step % 2 == 0:
                cutover.activate_version(primary, v2, force=True)
            else:
                cutover.rollback_version(primary)
            wait_for_replay(primary, standby)
            expected = v2 if step % 2 == 0 else v1
            assert standby.execute("SELECT toolkit.active_version()").fetchone()[0] == expected
            readers.wait_for_more(10)
        cutover.activate_version(primary, v2, force=True)  # v1: standby, the rollback target
        primary.execute("SELECT toolkit.set_rollback_window('0')")
        # a standby that has not replayed: retire waits for it, then refuses, naming it; nothing is retired
        standby.execute("SELECT pg_wal_replay_pause()")
        primary.execute("SELECT toolkit.set_rollback_window('0')")  # WAL the paused standby has not replayed
        monkeypatch.setattr(cutover, "STANDBY_WAIT_SECONDS", 0.5)
        with pytest.raises(StateError, match=r"standby walreceiver .* has not replayed the last changes"):
            cutover.retire_versions(primary, act=True)
        assert primary.execute("SELECT to_regclass(%s) IS NOT NULL", (f"toolkit.chunks_v{v1}",)).fetchone()[0]
        standby.execute("SELECT pg_wal_replay_resume()")
        monkeypatch.setattr(cutover, "STANDBY_WAIT_SECONDS", 60.0)
        done = cutover.retire_versions(primary, act=True)  # waits for the standby, then retires
        assert done.versions == [v1] and done.acted
        wait_for_replay(primary, standby)
        readers.wait_for_more(10)
    finally:
        readers.stop.set()
        for thread in readers.threads:
            thread.join(60)
    print(
        f"standby: {readers.reads} reads, {readers.errors} errors, {readers.empty} empty, {readers.foreign} foreign"
        f" rows, {readers.retried} retried after the retire, {readers.skipped} questions not logged (read-only)"
    )
    assert readers.errors == 0, readers.failures[:3]
    assert readers.reads >= 80 and readers.empty == 0 and readers.foreign == 0
    assert readers.skipped >= readers.reads  # every question was sampled, none could be written, none failed
    assert primary.execute("SELECT count(*) FROM toolkit.query_log").fetchone()[0] == 0
    standby.close()
    primary.close()
