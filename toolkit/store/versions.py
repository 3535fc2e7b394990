"""Versions of the chunk store (one chunk table each): creating and building them, and their status. Thin wrappers
over the SQL functions in sql/idempotent/, which hold the rules; the moves that change what is served (cutover,
rollback, retirement) are in toolkit.cutover."""

from __future__ import annotations

from dataclasses import dataclass

import psycopg

from toolkit.db.connection import translate_errors


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
    pending_documents: int | None  # documents a backfill has still to chunk and embed into this version

    @property
    def verification(self) -> str:
        """Whether its last verification lets a cutover through: "-" (never evaluated), "failed", "current" or
        "stale" (it passed, but the contents changed since)."""
        passed = self.last_evaluation_passed
        return "-" if passed is None else "failed" if not passed else "current" if self.evaluation_current else "stale"


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
            " WHERE v.model_alias = %s AND v.chunker_version = %s AND v.state = ANY (toolkit.version_states('live'))"
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


def active_version(conn: psycopg.Connection) -> int | None:
    return _scalar(conn, "SELECT toolkit.active_version()")


def version_status(conn: psycopg.Connection) -> list[VersionStatus]:
    with translate_errors(), conn.transaction():
        rows = conn.execute("SELECT * FROM toolkit.version_status()").fetchall()
    return [VersionStatus(*row) for row in rows]
