"""The locks a schema migration takes before any DDL, so that it runs next to live readers without deadlocking.

One migration at a time: the second waits for the first (on a private table no reader may lock, or, before the
schema exists, on a transaction-level advisory lock) and says so. Then every view and table of the schema is
locked, one statement per relation, first in the order the current revision's readers take them:
``toolkit.tenant_bindings`` first (``toolkit.set_tenant``, a reader transaction's first statement, reads it), then
the views, then the tables. Each attempt waits at most ``ATTEMPT_TIMEOUT_MS`` in all, less than PostgreSQL's
one-second deadlock timeout, so a reader is never chosen as a deadlock victim: the migration gives up its partial
locks (a savepoint), waits a little and tries again, and after ``TOTAL_WAIT_S`` fails with a message naming who
holds the locks.

The readers' order is the installed revision's, not this one's: readers of an earlier release (0004's
``set_tenant`` read nothing, its policies read the bindings last) take the views and tables first. Locking in an
order the readers do not follow makes each attempt a deadlock that only the timeout breaks, and with busy readers
nearly every attempt fails. So an attempt that times out moves the relation it waited on to the front of the order:
the next attempt waits for it while holding nothing a reader could be queued for. A few attempts learn the readers'
order, whatever revision they run.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable

import psycopg
from psycopg import errors as pg_errors
from psycopg import sql

from toolkit.errors import DatabaseError

ATTEMPT_TIMEOUT_MS = 500
TOTAL_WAIT_S = 60.0
SERIAL_WAIT = "10min"
# Before the schema exists there is no private table to lock; a first installation serializes on this key.
BOOTSTRAP_KEY = "toolkit.migrate"


def _exists(conn: psycopg.Connection, name: str) -> bool:
    return conn.execute("SELECT to_regclass(%s) IS NOT NULL", (name,)).fetchone()[0]


def _holders(conn: psycopg.Connection, relations: list[str]) -> str:
    # pg_stat_activity is a snapshot taken at its first read in this transaction (the wait for another migration may
    # have read it a minute ago): read it afresh.
    conn.execute("SELECT pg_catalog.pg_stat_clear_snapshot()")
    rows = conn.execute(
        "SELECT DISTINCT l.pid, a.usename, a.xact_start, l.relation::regclass::text"
        " FROM pg_catalog.pg_locks AS l LEFT JOIN pg_catalog.pg_stat_activity AS a ON a.pid = l.pid"
        " WHERE l.granted AND l.pid <> pg_backend_pid() AND l.relation = ANY (%s::regclass[])"
        " ORDER BY 1",
        (relations,),
    ).fetchall()
    if not rows:
        return "sessions that have just ended"
    return "; ".join(
        f"pid {pid} (role {user or 'unknown'}, on {relation}"
        + (f", transaction open since {since:%H:%M:%S}" if since else "")
        + ")"
        for pid, user, since, relation in rows
    )


def _try(conn: psycopg.Connection, statement: sql.Composable | str, timeout: str) -> bool:
    """Runs ``statement`` under a savepoint with a lock timeout; False (and its partial locks released) on timeout."""
    conn.execute("SAVEPOINT toolkit_migration_lock")
    try:
        conn.execute(sql.SQL("SET LOCAL lock_timeout = {}").format(sql.Literal(timeout)))
        conn.execute(statement)
    except pg_errors.LockNotAvailable:
        conn.execute("ROLLBACK TO SAVEPOINT toolkit_migration_lock")
        return False
    conn.execute("RELEASE SAVEPOINT toolkit_migration_lock")
    return True


def _serialize(conn: psycopg.Connection, say: Callable[[str], None]) -> None:
    if _exists(conn, "toolkit.migration_lock"):
        statement = "LOCK TABLE toolkit.migration_lock IN EXCLUSIVE MODE"
        relations = ["toolkit.migration_lock"]
    else:
        statement = sql.SQL("SELECT pg_advisory_xact_lock(hashtext({}))").format(sql.Literal(BOOTSTRAP_KEY))
        relations = []
    if _try(conn, statement, "100ms"):
        return
    holder = _holders(conn, relations) if relations else "another session"
    say(f"Another migration is running ({holder}); waiting for it to finish (up to {SERIAL_WAIT}).")
    if not _try(conn, statement, SERIAL_WAIT):
        raise DatabaseError(
            f"Another migration held the migration lock for more than {SERIAL_WAIT} ({holder}). "
            "Let it finish (or end it), then run toolkit migrate again."
        )


def _objects(conn: psycopg.Connection) -> list[str]:
    """Every view and table of the toolkit schema: the tenant bindings (which set_tenant reads before anything
    else), the views, then the tables in the order they were created (registry tables, documents, then the chunk
    tables): everything a migration may alter, so nothing it does after taking these waits for a reader."""
    rows = conn.execute(
        "SELECT c.oid::regclass::text FROM pg_catalog.pg_class AS c"
        " WHERE c.relnamespace = to_regnamespace('toolkit') AND c.relkind IN ('v', 'r', 'p')"
        " ORDER BY c.oid = to_regclass('toolkit.tenant_bindings') DESC, c.relkind = 'v' DESC, c.oid"
    ).fetchall()
    return [name for (name,) in rows]


def _lock_in_order(conn: psycopg.Connection, names: list[str], budget_ms: float) -> str | None:
    """Locks ``names`` one by one, within ``budget_ms`` for all of them: None when every lock is held, else the name
    it was waiting for when the budget ran out (and every lock this attempt took released: a savepoint)."""
    conn.execute("SAVEPOINT toolkit_migration_lock")
    started = time.monotonic()
    for name in names:
        left_ms = int(budget_ms - (time.monotonic() - started) * 1000)
        statement = sql.SQL("SET LOCAL lock_timeout = {}; LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(
            sql.Literal(f"{left_ms}ms"),
            sql.SQL(name),  # already quoted by format('%I')
        )
        try:
            if left_ms < 1:
                break
            conn.execute(statement)
        except pg_errors.LockNotAvailable:
            break
    else:
        conn.execute("RELEASE SAVEPOINT toolkit_migration_lock")
        return None
    conn.execute("ROLLBACK TO SAVEPOINT toolkit_migration_lock")
    return name


def lock_for_migration(conn: psycopg.Connection, say: Callable[[str], None] = print) -> None:
    """Takes the migration lock, then every lock the migration may need (see the module docstring)."""
    _serialize(conn, say)
    order = _objects(conn)
    if not order:
        return
    deadline = time.monotonic() + TOTAL_WAIT_S
    attempt = 0
    while (waited_for := _lock_in_order(conn, order, ATTEMPT_TIMEOUT_MS)) is not None:
        attempt += 1
        if time.monotonic() >= deadline:
            raise DatabaseError(
                f"The migration could not lock the toolkit's views and tables in {TOTAL_WAIT_S:.0f} s "
                f"({attempt} attempts): held by {_holders(conn, order)}. Nothing was changed; run it again when "
                "those transactions have finished (keep reader transactions short)."
            )
        if attempt == 1:
            say("Waiting for open transactions on the toolkit's views and tables before migrating…")
        order.remove(waited_for)  # the readers take it before what this attempt held: wait for it first next time
        order.insert(0, waited_for)
        time.sleep(random.uniform(0.05, min(0.1 * 2**attempt, 1.0)))
    # Everything the migration alters is held now; nothing else it does should wait for long.
    conn.execute("SET LOCAL lock_timeout = '60s'")
