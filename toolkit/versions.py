"""Versions of the chunk store (one chunks_vN table each) and the cutover between them.

Thin wrappers over the SQL functions in sql/idempotent/, which hold the rules: these add clear errors
and, for the view swap, a short lock timeout with retries so a swap never queues readers for long.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import psycopg
from psycopg import errors as pg_errors

from toolkit.database import translate_errors
from toolkit.errors import StateError


@dataclass(frozen=True)
class VersionStatus:
    """One row of ``toolkit.version_status()``; ``evaluation_current`` is whether its last passing evaluation is
    newer than its last change of contents (what a cutover requires), ``serving`` what it serves now."""

    version: int
    model_alias: str
    chunker_version: str
    storage: str
    dimensions: int
    state: str
    total_rows: int | None
    pending_rows: int | None
    index_valid: bool | None
    last_evaluation_passed: bool | None
    last_evaluated_at: object
    created_at: object
    state_changed_at: object
    serving: str
    documents: int | None
    tenants: int | None
    last_recall: float | None
    evaluation_current: bool
    rollback_target: bool


def _scalar(conn: psycopg.Connection, query: str, params: tuple = ()):
    with translate_errors(), conn.transaction():
        return conn.execute(query, params).fetchone()[0]


def create_version(
    conn: psycopg.Connection,
    model_alias: str,
    chunker_spec: str,
    chunker_version: str,
    *,
    storage: str = "vector",
    dimensions: int | None = None,
    hnsw_m: int = 16,
    hnsw_ef_construction: int = 64,
) -> int:
    """Creates a version and its chunks_vN table (state ``building``); returns its number."""
    return _scalar(
        conn,
        "SELECT toolkit.create_version(%s, %s, %s, %s, %s, %s, %s)",
        (model_alias, chunker_spec, chunker_version, storage, dimensions, hnsw_m, hnsw_ef_construction),
    )


def find_version(
    conn: psycopg.Connection,
    model_alias: str,
    chunker_version: str,
    storage: str | None = None,
    dimensions: int | None = None,
) -> int | None:
    """The live (not retired) version for a model and chunker (and storage and dimensions, when given)."""
    with conn.transaction():
        row = conn.execute(
            "SELECT v.version FROM toolkit.versions AS v JOIN toolkit.models AS m ON m.alias = v.model_alias"
            " WHERE v.model_alias = %s AND v.chunker_version = %s AND v.state <> 'retired'"
            " AND (%s::text IS NULL OR v.storage = %s) AND v.dimensions = coalesce(%s, m.dimensions)"
            " ORDER BY v.version DESC LIMIT 1",
            (model_alias, chunker_version, storage, storage, dimensions),
        ).fetchone()
    return row[0] if row else None


def create_version_index(conn: psycopg.Connection, version: int, maintenance_work_mem: str = "512MB") -> str:
    """Builds the version's HNSW index (after the bulk load: building it then is fastest)."""
    with translate_errors(), conn.transaction():
        conn.execute("SELECT set_config('maintenance_work_mem', %s, true)", (maintenance_work_mem,))
        return conn.execute("SELECT toolkit.create_version_index(%s)", (version,)).fetchone()[0]


def version_pending_rows(conn: psycopg.Connection, version: int) -> int:
    """Rows of the version still waiting for an embedding (the backfill work queue)."""
    return _scalar(conn, "SELECT toolkit.version_pending_rows(%s)", (version,))


def mark_version_ready(conn: psycopg.Connection, version: int) -> None:
    _scalar(conn, "SELECT toolkit.mark_version_ready(%s)::text", (version,))


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


def retire_version(conn: psycopg.Connection, version: int, *, reason: str | None = None) -> int:
    """Drops a non-active version's table; its registry row and audit trail stay."""
    table = _scalar(conn, "SELECT format('toolkit.%%I', toolkit._version_table(%s))", (version,))
    return _swap(conn, "SELECT toolkit.retire_version(%s, %s)", (version, reason), 1000, 5, (*_SWAPPED, table))


def active_version(conn: psycopg.Connection) -> int | None:
    return _scalar(conn, "SELECT toolkit.active_version()")


def version_status(conn: psycopg.Connection) -> list[VersionStatus]:
    with translate_errors(), conn.transaction():
        rows = conn.execute("SELECT * FROM toolkit.version_status()").fetchall()
    return [VersionStatus(*row) for row in rows]
