"""Versions of the chunk store (one chunk table each): creating and building them, and their status. Thin wrappers
over the SQL functions in sql/idempotent/, which hold the rules; the moves that change what is served (cutover,
rollback, retirement) are in toolkit.cutover."""

from __future__ import annotations

from dataclasses import dataclass

import psycopg
from psycopg.rows import class_row

from toolkit.db.connection import translate_errors
from toolkit.errors import InputError


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
    # Whether its last verification lets a cutover through, in SQL's word (toolkit.version_verification): "-" (never
    # evaluated), "failed", "current", "rolled back" (it passed, then a rollback took the version off the air: a
    # roll forward needs a new verification or force) or "stale" (it passed, but the contents changed since).
    verification: str


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


def _with_build_memory(conn: psycopg.Connection, query: str, version: int, maintenance_work_mem: str):
    """Runs a bulk build (``query`` of one version) in a transaction of its own with ``maintenance_work_mem``."""
    with translate_errors(), conn.transaction():
        conn.execute("SELECT set_config('maintenance_work_mem', %s, true)", (maintenance_work_mem,))
        return conn.execute(query, (version,)).fetchone()[0]


def create_version_index(conn: psycopg.Connection, version: int, maintenance_work_mem: str = "512MB") -> str:
    """Builds the version's HNSW index (after the bulk load: building it then is fastest)."""
    return _with_build_memory(conn, "SELECT toolkit.create_version_index(%s)", version, maintenance_work_mem)


def version_pending_rows(conn: psycopg.Connection, version: int) -> int:
    """Rows of the version still waiting for an embedding (the backfill work queue)."""
    return _scalar(conn, "SELECT toolkit.version_pending_rows(%s)", (version,))


def mark_version_ready(conn: psycopg.Connection, version: int, maintenance_work_mem: str = "512MB") -> None:
    """Moves a version to ready, which builds its full-text postings from its rows: a sort and an aggregation over
    every (chunk, lexeme), given ``maintenance_work_mem`` (as the HNSW build is) so neither spills to disk."""
    _with_build_memory(conn, "SELECT toolkit.mark_version_ready(%s)::text", version, maintenance_work_mem)


def active_version(conn: psycopg.Connection) -> int | None:
    return _scalar(conn, "SELECT toolkit.active_version()")


def version_status(conn: psycopg.Connection) -> list[VersionStatus]:
    with translate_errors(), conn.transaction():
        rows = conn.execute("SELECT * FROM toolkit.version_status()").fetchall()
    return [VersionStatus(*row) for row in rows]


def resolve_version(
    conn: psycopg.Connection,
    model_alias: str | None = None,
    chunker_spec: str | None = None,
    version: int | None = None,
    *,
    action: str,
) -> int:
    """The one version for a model (and chunker) in a state SQL accepts for the action
    (``toolkit.version_states(action)``: activate, canary, shadow, verify, retire), or the version given by number."""
    if version is not None and (model_alias or chunker_spec):
        raise InputError(
            f"Name the version one way: --version {version}, or --model (and --chunker), not both; they could "
            "name different versions."
        )
    if version is not None:
        with conn.transaction():
            row = conn.execute("SELECT state FROM toolkit.versions WHERE version = %s", (version,)).fetchone()
        if row is None:
            raise InputError(f"There is no version {version}. Run toolkit status to list them.")
        return version
    if not model_alias:
        raise InputError("Name the version: --model ALIAS (and --chunker SPEC if it has several), or --version N.")
    query = (
        "SELECT version, chunker_spec FROM toolkit.versions"
        " WHERE model_alias = %s AND state = ANY (toolkit.version_states(%s))"
    )
    params: list = [model_alias, action]
    if chunker_spec:
        from toolkit.chunking import get_chunker

        query += " AND chunker_version = %s"
        params.append(get_chunker(chunker_spec).version)
    with conn.transaction():
        rows = conn.execute(query + " ORDER BY version", params).fetchall()
    if not rows:
        with conn.transaction():  # only to say which states were looked for
            states = conn.execute("SELECT toolkit.version_states(%s)", (action,)).fetchone()[0]
            known = conn.execute("SELECT 1 FROM toolkit.models WHERE alias = %s", (model_alias,)).fetchone()
            others = conn.execute(
                "SELECT version, state FROM toolkit.versions WHERE model_alias = %s AND state <> 'retired'"
                " ORDER BY version",
                (model_alias,),
            ).fetchall()
        if known is None:
            raise InputError(
                f"There is no model {model_alias!r} (no such model alias): toolkit model list shows the registered "
                "ones."
            )
        has = f" (it has {', '.join(f'version {v} {state}' for v, state in others)})" if others else ""
        building = any(state == "building" for _, state in others)
        raise InputError(
            f"No {'/'.join(states)} version uses the model {model_alias!r}"
            + (f" with chunker {chunker_spec}" if chunker_spec else "")
            + has
            + (
                ". A building version is not complete: finish it with toolkit backfill (it resumes)."
                if building
                else ". Build one with toolkit backfill, or check toolkit status."
            )
        )
    if len(rows) > 1:
        listing = ", ".join(f"{v} ({spec})" for v, spec in rows)
        raise InputError(
            f"The model {model_alias!r} has several versions: {listing}. Pick one with --chunker or --version."
        )
    return rows[0][0]


@dataclass(frozen=True)
class VersionRow:
    """What a backfill reads of a version's registry row, and its chunk table as SQL names it
    (``toolkit._chunk_table``: qualified and quoted)."""

    version: int
    model_alias: str
    chunker_spec: str
    chunker_version: str
    storage: str
    dimensions: int
    state: str
    chunk_table: str


def version_row(conn: psycopg.Connection, version: int) -> VersionRow | None:
    with conn.transaction():
        return (
            conn.cursor(row_factory=class_row(VersionRow))
            .execute(
                "SELECT version, model_alias, chunker_spec, chunker_version, storage, dimensions, state,"
                " toolkit._chunk_table(version) AS chunk_table FROM toolkit.versions WHERE version = %s",
                (version,),
            )
            .fetchone()
        )


def version_state(conn: psycopg.Connection, version: int) -> str | None:
    """The version's state, None when there is no such version (in the caller's transaction, if any)."""
    row = conn.execute("SELECT state FROM toolkit.versions WHERE version = %s", (version,)).fetchone()
    return None if row is None else row[0]


def pending_documents(conn: psycopg.Connection, version: int) -> tuple[int, int]:
    """(documents, bytes of raw text) a backfill of the version still has to write
    (``toolkit.version_pending_documents``)."""
    with translate_errors(), conn.transaction():
        return tuple(conn.execute("SELECT * FROM toolkit.version_pending_documents(%s)", (version,)).fetchone())


def analyze_version(conn: psycopg.Connection, chunk_table: str) -> None:
    """ANALYZE a version's table (``VersionRow.chunk_table``), after a load, so the planner knows it."""
    with conn.transaction():
        conn.execute(psycopg.sql.SQL("ANALYZE {}").format(psycopg.sql.SQL(chunk_table)))


def version_index_valid(conn: psycopg.Connection, version: int) -> bool:
    with conn.transaction():
        return conn.execute("SELECT toolkit.version_index_valid(%s)", (version,)).fetchone()[0]


@dataclass(frozen=True)
class VerifyTarget:
    """A version as verify sees it: its model, chunker and state, and whether SQL's verify rule accepts the state
    (``toolkit.version_states('verify')``, listed in ``states``)."""

    model_alias: str
    chunker_version: str
    state: str
    dimensions: int
    accepted: bool
    states: list[str]


def verify_target(conn: psycopg.Connection, version: int) -> VerifyTarget | None:
    with conn.transaction():
        return (
            conn.cursor(row_factory=class_row(VerifyTarget))
            .execute(
                "SELECT v.model_alias, v.chunker_version, v.state, v.dimensions,"
                " v.state = ANY (toolkit.version_states('verify')) AS accepted,"
                " toolkit.version_states('verify') AS states"
                " FROM toolkit.versions AS v WHERE v.version = %s",
                (version,),
            )
            .fetchone()
        )
