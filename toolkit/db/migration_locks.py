"""The locks a schema migration takes before any DDL, so that it runs next to live readers without deadlocking, without
holding them up for longer than the operator allows, and without a reader being able to hold it out.

One migration at a time: the second waits for the first (on a private table no reader may lock, or, before the
schema exists, on a transaction-level advisory lock) and says so. Then every view and table of the schema is
locked, one statement per relation, first in the order the current revision's readers take them:
``toolkit.tenant_bindings`` first (``toolkit.set_tenant``, a reader transaction's first statement, reads it), then
the views, then the tables.

An attempt queues for the first relation holding nothing, for a wait that grows from attempt to attempt
(0.25 s, 0.5 s, 1 s… up to ``LockPolicy.max_stall``): PostgreSQL's lock queue is first come, first served, so the
migration gets the relation as soon as the transactions holding it when it queued have ended, and readers that
arrive meanwhile wait behind it for at most that long. Readers taking turns (there is always a holder) therefore let
it in once one turn ends. Holding nothing, that wait cannot be part of a deadlock. Once it holds the first relation,
the rest must be locked within ``ATTEMPT_TIMEOUT_MS`` in all, less than PostgreSQL's one-second deadlock timeout, so a
reader is never chosen as a deadlock victim: the migration gives up its partial locks (a savepoint) and tries again.

The readers' order is the installed revision's, not this one's: readers of an earlier release (0004's
``set_tenant`` read nothing, its policies read the bindings last) take the views and tables first. Locking in an
order the readers do not follow makes each attempt a deadlock that only the timeout breaks. So an attempt that times
out moves the relation it waited on to the front of the order: the next attempt waits for it while holding nothing a
reader could be queued for. A few attempts learn the readers' order, whatever revision they run.

Between attempts the migration does not queue: it watches ``pg_locks`` until the transactions that blocked it have
ended (then tries at once) or a pause that grows from attempt to attempt has passed, so a transaction left open
(idle in transaction) costs the other readers a few short stalls, not one every second. After
``LockPolicy.timeout`` it fails, changing nothing, naming the sessions that held it out (pid, application, role,
state, how long their transaction has been open); with ``LockPolicy.terminate_after`` set, the operator's opt-in, the
sessions still blocking it after that long are ended instead, each named: a running statement is cancelled, a
transaction left idle is terminated.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass

import psycopg
from psycopg import errors as pg_errors
from psycopg import sql

from toolkit.errors import DatabaseError, InputError
from toolkit.validation import NumberRule

# Once an attempt holds its first relation, the rest within this in all: under PostgreSQL's one-second deadlock
# timeout (see the module docstring).
ATTEMPT_TIMEOUT_MS = 500
FIRST_WAIT_S = 0.25  # the first attempt's wait for its first relation; each next attempt's doubles, to max_stall
FIRST_PAUSE_S = 0.25  # the first pause between attempts; each next one's doubles, to MAX_PAUSE_S
MAX_PAUSE_S = 8.0
SERIAL_WAIT = "10min"
# Before the schema exists there is no private table to lock; a first installation serializes on this key.
BOOTSTRAP_KEY = "toolkit.migrate"
MAX_STALL = NumberRule("the longest the migration may hold readers up (--max-stall, seconds)", 0.1, 60, whole=False)
LOCK_TIMEOUT = NumberRule("how long the migration tries for its locks (--lock-timeout, seconds)", 1, 86400, whole=False)
TERMINATE_AFTER = NumberRule(
    "when the migration ends the sessions blocking it (--terminate-blockers-after, seconds)", 0, 86_400, whole=False
)


@dataclass(frozen=True)
class LockPolicy:
    """How a migration gets its locks next to live sessions (``toolkit migrate --max-stall, --lock-timeout,
    --terminate-blockers-after``). ``max_stall``: the longest one attempt queues for the locks, so the longest it
    holds a reader up; ``timeout``: how long it tries in all before failing, nothing changed; ``terminate_after``:
    when set, the sessions still blocking it after that long are ended (named), instead of failing."""

    max_stall: float = 1.0
    timeout: float = 60.0
    terminate_after: float | None = None

    def __post_init__(self) -> None:
        MAX_STALL.check(self.max_stall)
        LOCK_TIMEOUT.check(self.timeout)
        TERMINATE_AFTER.check_optional(self.terminate_after)
        if self.terminate_after is not None and self.terminate_after >= self.timeout:
            raise InputError(
                f"--terminate-blockers-after ({self.terminate_after:g} s) must be less than --lock-timeout "
                f"({self.timeout:g} s): at the lock timeout the migration has given up."
            )


@dataclass(frozen=True)
class Blocker:
    """A session holding a lock the migration waits for."""

    pid: int
    transaction: str  # pg_locks.virtualtransaction: the same pid in a later transaction is another blocker
    user: str | None
    application: str | None
    state: str | None
    open_for: float | None  # seconds since its transaction began
    relation: str

    def __str__(self) -> str:
        parts = [f"application {self.application!r}" if self.application else "no application_name"]
        parts.append(f"role {self.user or 'unknown'}")
        if self.state:
            parts.append(self.state)
        if self.open_for is not None:
            parts.append(f"transaction open {self.open_for:.0f} s")
        return f"pid {self.pid} ({', '.join(parts)}, on {self.relation})"


def _exists(conn: psycopg.Connection, name: str) -> bool:
    return conn.execute("SELECT to_regclass(%s) IS NOT NULL", (name,)).fetchone()[0]


def _blockers(conn: psycopg.Connection, relations: list[str]) -> list[Blocker]:
    """The other sessions holding a lock on any of ``relations`` (any mode conflicts with the migration's)."""
    # pg_stat_activity is a snapshot taken at its first read in this transaction (the wait for another migration may
    # have read it a minute ago): read it afresh.
    conn.execute("SELECT pg_catalog.pg_stat_clear_snapshot()")
    rows = conn.execute(
        "SELECT DISTINCT ON (l.pid, l.virtualtransaction) l.pid, l.virtualtransaction, a.usename,"
        " nullif(a.application_name, ''), a.state, extract(epoch FROM clock_timestamp() - a.xact_start)::float8,"
        " l.relation::regclass::text"
        " FROM pg_catalog.pg_locks AS l LEFT JOIN pg_catalog.pg_stat_activity AS a ON a.pid = l.pid"
        " WHERE l.granted AND l.pid <> pg_backend_pid() AND l.relation = ANY (%s::regclass[])"
        " ORDER BY l.pid, l.virtualtransaction, l.relation",
        (relations,),
    ).fetchall()
    return [Blocker(*row) for row in rows]


def _named(blockers: list[Blocker]) -> str:
    return "; ".join(str(blocker) for blocker in blockers) or "sessions that have just ended"


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
    holder = _named(_blockers(conn, relations)) if relations else "another session"
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


def _lock_in_order(conn: psycopg.Connection, names: list[str], first_wait_ms: float) -> str | None:
    """Locks ``names`` one by one: the first within ``first_wait_ms`` (holding nothing yet), the rest within
    ``ATTEMPT_TIMEOUT_MS`` in all from then on (and never past ``first_wait_ms`` from the start). None when every
    lock is held, else the name it was waiting for when its time ran out (and every lock this attempt took
    released: a savepoint)."""
    conn.execute("SAVEPOINT toolkit_migration_lock")
    started = time.monotonic()
    rest_started = None
    for name in names:
        elapsed_ms = (time.monotonic() - started) * 1000
        left_ms = int(first_wait_ms - elapsed_ms)
        if rest_started is not None:
            left_ms = min(left_ms, int(ATTEMPT_TIMEOUT_MS - (time.monotonic() - rest_started) * 1000))
        statement = sql.SQL("SET LOCAL lock_timeout = {}; LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(
            sql.Literal(f"{left_ms}ms"),
            sql.SQL(name),  # already quoted by format('%I')
        )
        try:
            if left_ms < 1:
                break
            conn.execute(statement)
        except (pg_errors.LockNotAvailable, pg_errors.DeadlockDetected):
            break  # a deadlock with another migration's reads or a cutover: this one gives way
        if rest_started is None:
            rest_started = time.monotonic()
    else:
        conn.execute("RELEASE SAVEPOINT toolkit_migration_lock")
        return None
    conn.execute("ROLLBACK TO SAVEPOINT toolkit_migration_lock")
    return name


def _pause(conn: psycopg.Connection, blockers: list[Blocker], until: float) -> None:
    """Waits, queued for nothing, until every transaction in ``blockers`` has ended or ``until`` (monotonic)."""
    held = {(b.pid, b.transaction) for b in blockers}
    relations = sorted({b.relation for b in blockers})
    while held and time.monotonic() < until:
        time.sleep(min(0.02, max(0.0, until - time.monotonic())))
        rows = conn.execute(
            "SELECT DISTINCT pid, virtualtransaction FROM pg_catalog.pg_locks"
            " WHERE granted AND relation = ANY (%s::regclass[])",
            (relations,),
        ).fetchall()
        held &= set(rows)


def _end_sessions(conn: psycopg.Connection, blockers: list[Blocker], after: float, say: Callable[[str], None]) -> None:
    """The operator's opt-in: ends each blocking session, naming it. A running statement is cancelled (its
    transaction, if it was inside one, then holds on idle and is terminated at the next round); a session idle in a
    transaction is terminated (cancelling would not end the transaction)."""
    for blocker in {b.pid: b for b in blockers}.values():
        cancel = blocker.state == "active"
        function = "pg_cancel_backend" if cancel else "pg_terminate_backend"
        conn.execute("SAVEPOINT toolkit_end_session")
        try:
            ended = conn.execute(
                sql.SQL("SELECT pg_catalog.{}(%s)").format(sql.Identifier(function)), (blocker.pid,)
            ).fetchone()[0]
        except psycopg.Error as error:  # e.g. not allowed to signal a superuser's session
            conn.execute("ROLLBACK TO SAVEPOINT toolkit_end_session")
            reason = (error.diag.message_primary or str(error)).strip().rstrip(".")
            say(f"After {after:g} s (--terminate-blockers-after) the migration could not end {blocker}: {reason}.")
            continue
        conn.execute("RELEASE SAVEPOINT toolkit_end_session")
        if ended:
            done = "cancelled the statement of" if cancel else "terminated"
            say(f"After {after:g} s (--terminate-blockers-after) the migration {done} {blocker}.")


def lock_for_migration(
    conn: psycopg.Connection, say: Callable[[str], None] = print, policy: LockPolicy | None = None
) -> None:
    """Takes the migration lock, then every lock the migration may need (see the module docstring)."""
    policy = policy or LockPolicy()
    _serialize(conn, say)
    order = _objects(conn)
    if not order:
        return
    started = time.monotonic()
    deadline = started + policy.timeout
    terminate_at = None if policy.terminate_after is None else started + policy.terminate_after
    wait, pause = min(FIRST_WAIT_S, policy.max_stall), FIRST_PAUSE_S
    attempt = 0
    while (waited_for := _lock_in_order(conn, order, wait * 1000)) is not None:
        attempt += 1
        blockers = _blockers(conn, [waited_for])
        now = time.monotonic()
        if terminate_at is not None and now >= terminate_at and blockers and now < deadline:
            _end_sessions(conn, blockers, policy.terminate_after, say)
            pause = FIRST_PAUSE_S
        elif now >= deadline:  # also when a session could not be ended (the role may not signal it)
            raise DatabaseError(
                f"The migration could not lock the toolkit's views and tables in {policy.timeout:g} s "
                f"({attempt} attempts): held by {_named(blockers)}. Nothing was changed; end those transactions "
                "(keep reader transactions short)"
                + (
                    ", or run it again with --terminate-blockers-after SECONDS to have the migration end them."
                    if policy.terminate_after is None
                    else " (the migration could not end them: it needs the right to signal them, see above)."
                )
            )
        if attempt == 1:
            say("Waiting for open transactions on the toolkit's views and tables before migrating…")
        order.remove(waited_for)  # the readers take it before what this attempt held: wait for it first next time
        order.insert(0, waited_for)
        limits = [now + pause * random.uniform(0.8, 1.2), deadline]
        if terminate_at is not None and now < terminate_at:
            limits.append(terminate_at)
        _pause(conn, blockers, min(limits))
        wait, pause = min(wait * 2, policy.max_stall), min(pause * 2, MAX_PAUSE_S)
    # Everything the migration alters is held now; nothing else it does should wait for long.
    conn.execute("SET LOCAL lock_timeout = '60s'")
