"""The statements that change what is served, each one transaction in SQL (``toolkit.activate_version``,
``rollback_version``, ``retire_version``) sent with a short lock timeout and retries so a swap never queues readers
for long; the rollback window and the standby it protects; and what SQL says about retiring (``retire_refusal``,
``retire_candidates``) and about standby servers' replay (``standby_replay``)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timedelta

import psycopg
from psycopg import errors as pg_errors
from psycopg.rows import class_row

from toolkit.db.connection import translate_errors
from toolkit.errors import InputError, StateError
from toolkit.store.chunk_table import chunk_table_name

# What a cutover, rollback or retirement must lock besides the toolkit's own (private) lock tables.
_SWAPPED = ("toolkit.active_chunks", "toolkit.live_chunks")


def _swap(
    conn: psycopg.Connection,
    query: str,
    params: tuple,
    lock_timeout_ms: int,
    attempts: int,
    tables: tuple[str, ...] = _SWAPPED,
):
    # The view swap needs an exclusive lock on the views (a retirement also on the version's table); waiting for it
    # would queue every new reader behind the swap, so wait briefly and retry instead.
    for attempt in range(attempts):
        try:
            with translate_errors(retry_locks=True), conn.transaction():
                conn.execute("SELECT set_config('lock_timeout', %s, true)", (f"{lock_timeout_ms}ms",))
                return conn.execute(query, params).fetchone()[0]
        except pg_errors.LockNotAvailable:
            time.sleep(min(0.05 * 2**attempt, 1.0))
    raise StateError(
        f"The change could not take its lock in {attempts} attempts of {lock_timeout_ms} ms: "
        f"{_holders(conn, tables)}. Retry when that has finished (keep reader transactions short)."
    )


def _holders(conn: psycopg.Connection, tables: tuple[str, ...]) -> str:
    """Who holds the relations a swap waited for, as ``toolkit._lock_holders`` describes them."""
    described = []
    with conn.transaction():
        for table in tables:
            row = conn.execute(
                "SELECT CASE WHEN to_regclass(%s) IS NULL THEN NULL ELSE toolkit._lock_holders(to_regclass(%s)) END",
                (table, table),
            ).fetchone()
            if row[0] and row[0] != "a session that has just ended":
                described.append(f"{table} is held by {row[0]}")
    return "; ".join(described) or "the sessions that held the views have just ended"


def activate_version(
    conn: psycopg.Connection,
    version: int,
    *,
    force: bool = False,
    reason: str | None = None,
    lock_timeout_ms: int = 200,
    attempts: int = 20,
) -> int:
    """Swaps active_chunks to ``version``; the previous active version becomes standby."""
    return _swap(
        conn,
        "SELECT toolkit.activate_version(%s, %s, %s)",
        (version, force, reason),
        lock_timeout_ms,
        attempts,
    )


def rollback_version(
    conn: psycopg.Connection, *, reason: str | None = None, lock_timeout_ms: int = 200, attempts: int = 20
) -> int:
    """Swaps active_chunks back to the standby version the active one replaced."""
    return _swap(conn, "SELECT toolkit.rollback_version(%s)", (reason,), lock_timeout_ms, attempts)


def retire_version(conn: psycopg.Connection, version: int, *, reason: str | None = None, force: bool = False) -> int:
    """Drops a non-active version's table; its registry row and audit trail stay. The rollback target inside the
    rollback window needs ``force`` (SQL refuses it otherwise). A version in a state SQL does not retire from
    (``toolkit.version_states('retire')``: already retired, say) is refused, not audited again."""
    check_retirable(conn, version)
    table = chunk_table_name(conn, version).as_string(conn)
    return _swap(
        conn, "SELECT toolkit.retire_version(%s, %s, %s)", (version, reason, force), 1000, 5, (*_SWAPPED, table)
    )


def retire_refusal(conn: psycopg.Connection, version: int, *, force: bool = False) -> str | None:
    """Why ``retire_version`` would refuse ``version`` now (SQL's own rule, ``toolkit.retire_refusal``), or None."""
    with conn.transaction():
        row = conn.execute("SELECT message, hint FROM toolkit.retire_refusal(%s, %s)", (version, force)).fetchone()
    if row is None:
        return None
    return f"{row[0][0].upper()}{row[0][1:]}. {row[1]}"


def rollback_window(conn: psycopg.Connection) -> timedelta:
    """The rollback window (``toolkit.settings``): how long the version a cutover replaced is kept from retire."""
    with conn.transaction():
        return conn.execute("SELECT toolkit.rollback_window()").fetchone()[0]


def set_rollback_window(conn: psycopg.Connection, window: timedelta) -> timedelta:
    """Sets the rollback window; only the owner role (the DBA) may."""
    with translate_errors(), conn.transaction():
        return conn.execute("SELECT toolkit.set_rollback_window(%s)", (window,)).fetchone()[0]


@dataclass(frozen=True)
class ProtectedStandby:
    """The rollback target that retire keeps (unless forced) until the rollback window ends for it."""

    version: int
    standby_since: datetime
    protected_until: datetime


def protected_standby(conn: psycopg.Connection) -> ProtectedStandby | None:
    with conn.transaction():
        return (
            conn.cursor(row_factory=class_row(ProtectedStandby))
            .execute("SELECT * FROM toolkit.protected_standby()")
            .fetchone()
        )


@dataclass(frozen=True)
class LaggingStandby:
    """A standby streaming from this server that had not replayed, when retire looked, what was written before."""

    standby: str
    client: str
    state: str | None
    replay_lag: timedelta | None
    known: bool  # False: the owner role may not read the replay position (no pg_read_all_stats)

    def describe(self) -> str:
        lag = f", replay lag {self.replay_lag}" if self.replay_lag else ""
        seen = "" if self.known else " (its replay position cannot be read: grant pg_read_all_stats to toolkit_owner)"
        return f"standby {self.standby or '(unnamed)'} at {self.client} ({self.state or 'state unknown'}{lag}){seen}"


def check_retirable(conn: psycopg.Connection, version: int) -> None:
    """Refuses (``InputError``) a version that does not exist or is in a state SQL does not retire from; the active
    version is left to SQL's own refusal."""
    with conn.transaction():
        state, retirable = conn.execute(
            "SELECT v.state, v.state = ANY (toolkit.version_states('retire')) FROM toolkit.versions AS v"
            " WHERE v.version = %s",
            (version,),
        ).fetchone() or (None, None)
    if state is None:
        raise InputError(f"There is no version {version}. Run toolkit status to list them.")
    if not retirable and state != "active":  # SQL words the active version's refusal itself
        raise InputError(f"Version {version} is {state}; there is nothing to retire.")


def retire_candidates(conn: psycopg.Connection, older_than: timedelta) -> list[tuple[int, str]]:
    """Standby and abandoned building versions whose state is older than the window, as SQL decides
    (``toolkit.retire_candidates``): a building version whose rows were written within the window is a backfill
    still running, a canary candidate is serving, the rollback target inside the rollback window is kept, and
    ready/verified versions (awaiting verification or cutover) are never chosen by age."""
    with translate_errors(), conn.transaction():
        return [tuple(r) for r in conn.execute("SELECT * FROM toolkit.retire_candidates(%s)", (older_than,))]


def wal_position(conn: psycopg.Connection) -> str:
    """This server's current write-ahead log position (what a standby must have replayed to have seen it all)."""
    with conn.transaction():
        return conn.execute("SELECT pg_current_wal_lsn()").fetchone()[0]


def standby_replay(conn: psycopg.Connection, position: str) -> list[LaggingStandby]:
    """The standbys streaming from this server that have not replayed up to ``position`` (toolkit.standby_replay)."""
    with conn.transaction():
        rows = conn.execute(
            "SELECT standby, client, state, replay_lag, caught_up FROM toolkit.standby_replay(%s)", (position,)
        ).fetchall()
    return [LaggingStandby(r[0], r[1], r[2], r[3], r[4] is not None) for r in rows if not r[4]]


def version_lag(conn: psycopg.Connection) -> list[dict]:
    """``toolkit.version_lag()``: per live version, the documents its backfill has still to write, the chunks without
    an embedding, since when the oldest waited, and whether it is caught up (docs/operations.md#version-lag)."""
    from psycopg.rows import dict_row

    with translate_errors(), conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
        return cur.execute("SELECT * FROM toolkit.version_lag() ORDER BY version").fetchall()
