"""Migrations against readers (issue 39, item 6): a reader cannot hold `toolkit migrate` out, the migration holds
readers up only as long as the operator allows, a downgrade keeps the served search working for readers of the
release being left, and `toolkit migrate base` does what it says."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import numpy as np
import psycopg
import pytest
from click.testing import CliRunner
from pgvector.psycopg import register_vector
from support import ready_version, wait_until

from toolkit import cutover
from toolkit.cli import main
from toolkit.db import migrate, migration_locks
from toolkit.errors import DatabaseError, InputError

ROOT = Path(__file__).resolve().parent.parent


def _as_user(url: str, login: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=f"{login}@{parts.netloc.split('@')[-1]}"))


@pytest.fixture
def readers(conn, database_url, make_model):
    """A live version with postings and statistics, and two reader logins: one bound to tenant ``a``, one unbound
    (it sets its tenant); yields their URLs."""
    make_model("m1", 8)
    version = ready_version(conn, "m1", 8, {"a": 30, "b": 10})
    cutover.activate_version(conn, version, force=True)
    suffix = uuid.uuid4().hex[:8]
    unbound, bound = f"app_{suffix}", f"bound_{suffix}"
    conn.execute(f"CREATE ROLE {unbound} LOGIN IN ROLE toolkit_reader")
    conn.execute(f"CREATE ROLE {bound} LOGIN IN ROLE toolkit_reader")
    conn.execute("SELECT toolkit.bind_tenants(%s, ARRAY['a'])", (bound,))
    yield {"unbound": _as_user(database_url, unbound), "bound": _as_user(database_url, bound)}
    conn.execute(f"DROP OWNED BY {unbound}, {bound}")
    conn.execute(f"DROP ROLE {unbound}, {bound}")


def _search(url: str, statement: str) -> list:
    with psycopg.connect(url, autocommit=True) as c:
        register_vector(c)
        with c.transaction():
            c.execute("SELECT toolkit.set_tenant('a')")  # the bound login may only name its own tenant
            return c.execute(statement, {"q": np.ones(8, dtype=np.float32)}).fetchall()


LEXICAL_PRIVILEGES = """
    SELECT r.role, t.tbl, p.privilege, has_table_privilege(r.role, t.tbl, p.privilege)
    FROM unnest(ARRAY['toolkit_reader', 'toolkit_writer', 'toolkit_deployer']) AS r (role)
    CROSS JOIN (SELECT toolkit._postings_table(version) FROM toolkit.versions
                UNION ALL SELECT toolkit._statistics_table(version) FROM toolkit.versions) AS t (tbl)
    CROSS JOIN unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE']) AS p (privilege)
    ORDER BY 1, 2, 3"""


def test_a_downgrade_to_0004_keeps_the_roles_privileges_on_the_versions_postings_and_statistics(
    conn, database_url, readers
):
    """0004 does not know terms_vN and term_stats_vN, and its grants file revokes every table's privileges first:
    this release's functions that the downgrade keeps for the applications still calling them (search_passages read
    term_stats_vN as the reader: "permission denied for table term_stats_v1") must find the privileges they had."""
    before = conn.execute(LEXICAL_PRIVILEGES).fetchall()
    assert before
    migrate.downgrade(database_url, "0004")
    assert conn.execute(LEXICAL_PRIVILEGES).fetchall() == before


PASSAGES = "SELECT doc_id, chunk_ids FROM toolkit.search_passages('text', %(q)s, 3)"


@pytest.mark.parametrize("login", ["bound", "unbound"])
def test_readers_of_a_database_downgraded_to_0004_search_with_its_release_and_are_told_what_search_passages_is(
    database_url, readers, login
):
    """0004's served search (hybrid_search_chunks, search_context) works for a bound and an unbound reader. This
    release's search_passages cannot (it needs this release's hybrid_search_chunks, which the downgrade replaces):
    an application still calling it is told so, with what to call, not "permission denied for table term_stats_v1";
    the upgrade gives it back."""
    before = _search(readers[login], PASSAGES)
    assert before
    migrate.downgrade(database_url, "0004")
    for statement in (
        "SELECT chunk_id FROM toolkit.hybrid_search_chunks('text', %(q)s, 3)",
        "SELECT chunk_ids FROM toolkit.search_context(%(q)s, 3, 'window:1', 'text')",
    ):
        assert len(_search(readers[login], statement)) == 3, statement
    with pytest.raises(psycopg.errors.FeatureNotSupported) as caught:
        _search(readers[login], PASSAGES)
    assert "revision 0004" in str(caught.value) and "downgraded" in str(caught.value)
    assert "toolkit.hybrid_search_chunks" in caught.value.diag.message_hint
    migrate.upgrade(database_url)
    assert _search(readers[login], PASSAGES) == before


# -- a reader cannot hold the migration out -------------------------------------------------------------------------


def _open_reader(url: str, application: str) -> psycopg.Connection:
    """A reader that read the served view inside a transaction and left it open (idle in transaction)."""
    reader = psycopg.connect(url, application_name=application)
    reader.execute("SELECT toolkit.set_tenant('a')")
    reader.execute("SELECT count(*) FROM toolkit.active_chunks").fetchone()
    return reader


def _fingerprint(conn) -> tuple:
    return conn.execute(
        "SELECT (SELECT version_num FROM public.toolkit_alembic_version),"
        " obj_description('toolkit'::regnamespace, 'pg_namespace')"
    ).fetchone()


def test_a_reader_idle_in_a_transaction_is_named_when_the_migration_gives_up_at_its_lock_timeout(
    conn, database_url, readers
):
    application = f"idle-reader-{uuid.uuid4().hex[:6]}"
    reader = _open_reader(readers["unbound"], application)
    before = _fingerprint(conn)
    try:
        with pytest.raises(DatabaseError) as caught:
            migrate.upgrade(database_url, reapply=True, locks=migration_locks.LockPolicy(timeout=2))
        message = str(caught.value)
        assert f"pid {reader.info.backend_pid} " in message and application in message, message
        assert "idle in transaction" in message and "--terminate-blockers-after" in message, message
        # nothing changed, and the reader's transaction goes on
        assert _fingerprint(conn) == before
        assert reader.execute("SELECT count(*) FROM toolkit.active_chunks").fetchone()[0] > 0
    finally:
        reader.close()


def test_alembic_s_own_command_line_takes_the_lock_timeout_and_names_the_idle_reader(conn, database_url, readers):
    application = f"idle-reader-{uuid.uuid4().hex[:6]}"
    reader = _open_reader(readers["unbound"], application)
    before = _fingerprint(conn)
    try:
        env = {**os.environ, "TOOLKIT_DATABASE_URL": database_url}
        command = [sys.executable, "-m", "alembic", "-x", "lock_timeout=2", "-x", "max_stall=0.5", "downgrade", "0004"]
        run = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
        assert run.returncode != 0
        assert f"pid {reader.info.backend_pid} " in run.stderr and application in run.stderr, run.stderr[-2000:]
        assert "in 2 s" in run.stderr, run.stderr[-2000:]
        assert _fingerprint(conn) == before
        bad = subprocess.run(
            [sys.executable, "-m", "alembic", "-x", "max_stall=nan", "upgrade", "head"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert bad.returncode != 0 and "--max-stall" in bad.stderr and "Traceback" not in bad.stderr, bad.stderr
    finally:
        reader.close()


def test_the_opt_in_ends_a_reader_idle_in_a_transaction_naming_it_and_the_migration_gets_in(
    conn, database_url, readers
):
    migrate.downgrade(database_url, "0004")  # so that `toolkit migrate` has an upgrade to do
    application = f"idle-reader-{uuid.uuid4().hex[:6]}"
    reader = _open_reader(readers["unbound"], application)
    pid = reader.info.backend_pid
    try:
        result = CliRunner().invoke(
            main,
            ["--database-url", database_url, "migrate", "--terminate-blockers-after", "1", "--lock-timeout", "30"],
        )
        assert result.exit_code == 0, result.output
        ended = [line for line in result.output.splitlines() if f"pid {pid} " in line]
        assert ended and "terminated" in ended[0] and application in ended[0], result.output
        assert "idle in transaction" in ended[0], result.output
        assert _fingerprint(conn)[0] == migrate.head_revision()
        with pytest.raises(psycopg.OperationalError):  # its session was ended, as the line said
            reader.execute("SELECT 1")
    finally:
        reader.close()


def test_two_readers_taking_turns_with_always_a_holder_let_the_migration_in(conn, database_url, readers):
    """Each reader holds the served view 1.2 s and starts its next turn halfway through the other's: there is always
    a holder, and the newest always has 0.6 s or more to go (longer than a fixed 0.5 s attempt). The migration queues
    holding nothing, for longer each attempt: it gets in once the turns it queued behind end, the readers' next
    turns waiting behind it."""
    stop = threading.Event()
    errors: list[BaseException] = []
    turns = [0, 0]

    def take_turns(number: int, halfway: threading.Event, other_halfway: threading.Event) -> None:
        try:
            with psycopg.connect(readers["unbound"], application_name=f"turns-{number}") as reader:
                if number == 1:
                    other_halfway.wait(30)
                while not stop.is_set():
                    with reader.transaction():
                        reader.execute("SELECT toolkit.set_tenant('a')")
                        reader.execute("SELECT count(*) FROM toolkit.active_chunks").fetchone()
                        turns[number] += 1
                        stop.wait(0.6)  # the reader's work: half a turn
                        halfway.set()
                        other_halfway.clear()
                        stop.wait(0.6)
                    if number == 0 or not stop.is_set():
                        other_halfway.wait(30)  # its next turn starts halfway through the other's
        except BaseException as error:  # reported by the test
            errors.append(error)

    halves = [threading.Event(), threading.Event()]
    threads = [threading.Thread(target=take_turns, args=(n, halves[n], halves[1 - n])) for n in (0, 1)]
    for thread in threads:
        thread.start()
    try:
        wait_until(lambda: all(turns), "both readers took a turn", errors)
        result = migrate.upgrade(database_url, reapply=True, locks=migration_locks.LockPolicy(max_stall=2, timeout=30))
        assert result.changed
        assert not stop.is_set() and not errors, errors
    finally:
        stop.set()
        for event in halves:
            event.set()
        for thread in threads:
            thread.join(timeout=30)
    assert not errors, errors


# -- `toolkit migrate base` ------------------------------------------------------------------------------------------


def test_migrate_base_without_downgrade_is_refused_naming_the_downgrade(conn, database_url):
    before = _fingerprint(conn)
    result = CliRunner().invoke(main, ["--database-url", database_url, "migrate", "base"])
    assert result.exit_code != 0, result.output
    assert "toolkit migrate base --downgrade" in result.output and "Already at" not in result.output, result.output
    older = CliRunner().invoke(main, ["--database-url", database_url, "migrate", "0004"])
    assert older.exit_code != 0 and "toolkit migrate 0004 --downgrade" in older.output, older.output
    assert _fingerprint(conn) == before
    with pytest.raises(InputError):
        migrate.upgrade(database_url, "base")
