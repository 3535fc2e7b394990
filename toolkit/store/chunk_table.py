"""The chunk tables (one ``chunks_vN`` per version), as Python writes them: the live versions with their chunker and
embedder, a chunk as a row, binary COPY into a version (through row-level security for roles it applies to), and the
vectors a version already stores. SQL owns the tables' names (``toolkit._chunk_table``) and columns
(``toolkit.create_version``'s CREATE TABLE; tests/test_single_source.py keeps CHUNK_COLUMNS and the COPY types
equal to a created table's, in both storages)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import psycopg
from psycopg import sql

from toolkit.errors import StateError
from toolkit.store.models import Model, embedder_for_model, get_model

CHUNK_COLUMNS = (
    "tenant",
    "chunk_id",
    "doc_id",
    "parent_id",
    "is_parent",
    "position",
    "start_offset",
    "end_offset",
    "heading_path",
    "context",
    "text",
    "content_hash",
    "token_count",
    "access_labels",
    "pages",
    "gap_before",
    "embedding",
)
_COPY_TYPES = [
    "text",
    "text",
    "text",
    "text",
    "bool",
    "int4",
    "int4",
    "int4",
    "text[]",
    "text",
    "text",
    "text",
    "int4",
    "text[]",
    "int4[]",
    "text",
]


def chunk_table_name(conn: psycopg.Connection, version: int) -> sql.Composable:
    """A version's chunk table, schema-qualified and quoted, as SQL names it (``toolkit._chunk_table``), for a
    caller that has only the version's number: one statement. A row that describes a version carries it already
    (``LiveVersion.chunk_table``, ``store.versions.VersionRow.chunk_table``): a loop reads it once, from the row."""
    with conn.transaction():
        return sql.SQL(conn.execute("SELECT toolkit._chunk_table(%s)", (int(version),)).fetchone()[0])


@dataclass
class LiveVersion:
    """A version that receives writes (building through standby), with its chunker and embedder."""

    version: int
    model: Model
    chunker_spec: str
    chunker_version: str
    storage: str
    dimensions: int
    _chunker: object = None
    _embedder: object = None

    chunk_table: str = ""  # the version's table, qualified and quoted, as SQL names it (toolkit._chunk_table)
    # Ingest writes this version's new rows without embeddings, for its backfill (toolkit.embedding_deferred).
    embedding_deferred: bool = False
    # Still being built: ingest defers to its backfill what it cannot embed into it (a model that fails here).
    building: bool = False

    @property
    def table(self) -> sql.Composable:
        if not self.chunk_table:
            raise StateError(f"Version {self.version}'s table was not read from the database (toolkit._chunk_table).")
        return sql.SQL(self.chunk_table)

    @property
    def chunker(self):
        if self._chunker is None:
            from toolkit.chunking import chunker_for_version

            # The embedder bounds chunks by the model's own input limit, counted with its own tokenizer. A version
            # built by an earlier algorithm this toolkit still has is chunked as it was built.
            chunker = chunker_for_version(self.chunker_spec, self.chunker_version, embedder=self.embedder)
            if chunker.version != self.chunker_version:
                raise StateError(
                    f"Version {self.version} was chunked with {self.chunker_version}, but this toolkit's "
                    f"{self.chunker_spec} chunker is {chunker.version}; mixing them would make the version "
                    "inconsistent. Backfill a new version with this toolkit, then cut over and retire the old one."
                )
            self._chunker = chunker
        return self._chunker

    @property
    def embedder(self):
        if self._embedder is None:
            self._embedder = embedder_for_model(self.model, self.dimensions)
        return self._embedder


def lock_live_version_ids(conn: psycopg.Connection) -> list[int]:
    """Takes the shared version-set lock (create_version and retire_version take it exclusively) for the rest of
    the transaction and returns the live versions as they are now: a write never misses a new version."""
    conn.execute("SELECT toolkit.lock_version_set(false)")
    return [r[0] for r in conn.execute("SELECT version FROM toolkit.live_versions()").fetchall()]


def live_versions(conn: psycopg.Connection) -> list[LiveVersion]:
    """Every version that receives writes (``toolkit.live_versions()``: every state but retired), oldest first."""
    with conn.transaction():
        rows = conn.execute(
            "SELECT l.version, l.model_alias, l.chunker_spec, l.chunker_version, l.storage, l.dimensions,"
            " l.chunk_table,"
            " toolkit.embedding_deferred(l.version),"
            " (SELECT v.state = 'building' FROM toolkit.versions AS v WHERE v.version = l.version)"
            " FROM toolkit.live_versions() AS l"
        ).fetchall()
    return [
        LiveVersion(
            v,
            get_model(conn, alias),
            spec,
            cv,
            storage,
            dims,
            chunk_table=table,
            embedding_deferred=deferred,
            building=bool(building),
        )
        for v, alias, spec, cv, storage, dims, table, deferred, building in rows
    ]


def _stored_vector(value) -> np.ndarray:
    return (
        value
        if isinstance(value, np.ndarray)
        else np.asarray(value.to_numpy() if hasattr(value, "to_numpy") else value, dtype=np.float32)
    )


def chunk_row(tenant: str, doc_id: str, chunk, labels: list[str], vector, pages=None) -> tuple:
    """One chunk as a row of CHUNK_COLUMNS (``vector`` is None for parents and rows still to embed; ``pages`` is
    where each page starts in the document's text, for a PDF)."""
    from toolkit.text.pdf import pages_of_span

    return (
        tenant,
        chunk.chunk_id,
        doc_id,
        chunk.parent_id,
        chunk.is_parent,
        chunk.position,
        chunk.start,
        chunk.end,
        list(chunk.heading_path),
        chunk.context,
        chunk.text,
        chunk.content_hash,
        chunk.token_count,
        labels,
        pages_of_span(pages, chunk.start, chunk.end),
        chunk.gap_before,
        vector,
    )


def bypasses_row_security(conn: psycopg.Connection) -> bool:
    """PostgreSQL refuses COPY FROM into a table with row-level security unless the role bypasses it."""
    return conn.execute(
        "SELECT rolsuper OR rolbypassrls FROM pg_catalog.pg_roles WHERE rolname = current_user"
    ).fetchone()[0]


def copy_chunk_rows(conn: psycopg.Connection, target: LiveVersion, rows: Sequence[tuple]) -> None:
    """Writes rows with binary COPY, the fastest path into PostgreSQL: straight into the version's table for
    a role that bypasses row-level security, else through a temporary table and one INSERT … SELECT (which
    the policies check). Runs in the caller's transaction."""
    if not rows:
        return
    columns = sql.SQL(", ").join(map(sql.Identifier, CHUNK_COLUMNS))
    if bypasses_row_security(conn):
        _copy(conn, target.table, columns, target.storage, rows)
        return
    # The staging table is the version's table's shape (LIKE it: no column list re-typed here), one per version.
    staging = sql.Identifier("pg_temp", f"staging_{target.version}")
    conn.execute(
        sql.SQL("CREATE TEMP TABLE IF NOT EXISTS {} (LIKE {} INCLUDING DEFAULTS) ON COMMIT DELETE ROWS").format(
            staging, target.table
        )
    )
    _copy(conn, staging, columns, target.storage, rows)
    conn.execute(sql.SQL("INSERT INTO {0} ({1}) SELECT {1} FROM {2}").format(target.table, columns, staging))
    conn.execute(sql.SQL("DELETE FROM {}").format(staging))


def known_embeddings(conn: psycopg.Connection, target: LiveVersion, tenant: str, doc_ids: list[str]) -> dict:
    """Stored vectors of these documents' chunks, by content hash: edited documents reuse them."""
    rows = conn.execute(
        sql.SQL(
            "SELECT DISTINCT ON (content_hash) content_hash, embedding FROM {}"
            " WHERE tenant = %s AND doc_id = ANY(%s) AND embedding IS NOT NULL"
        ).format(target.table),
        (tenant, doc_ids),
    ).fetchall()
    return {h: _stored_vector(v) for h, v in rows}


def _copy(conn: psycopg.Connection, table: sql.Composable, columns: sql.Composable, storage: str, rows) -> None:
    """Binary COPY of CHUNK_COLUMNS rows into ``table`` (its embedding of type ``storage``)."""
    from pgvector.utils import HalfVector

    half = storage == "halfvec"
    with conn.cursor().copy(sql.SQL("COPY {} ({}) FROM STDIN (FORMAT BINARY)").format(table, columns)) as copy:
        copy.set_types([*_COPY_TYPES, storage])
        for row in rows:
            vector = row[-1]
            copy.write_row((*row[:-1], HalfVector(vector) if vector is not None and half else vector))


def replace_document_rows(
    conn: psycopg.Connection, target: LiveVersion, tenant: str, doc_ids: list[str], rows: Sequence[tuple]
) -> None:
    """A version's rows of ``doc_ids`` replaced by ``rows`` (deleted, then copied in), and the version's change
    recorded (``toolkit.touch_version``), in the caller's transaction."""
    delete_document_rows(conn, target, tenant, doc_ids)
    copy_chunk_rows(conn, target, rows)
    conn.execute("SELECT toolkit.touch_version(%s)", (target.version,))


def lock_version_writes(conn: psycopg.Connection, target: LiveVersion, *, exclusive: bool = False) -> None:
    """The version's table lock for the rest of the transaction. A batch takes ROW EXCLUSIVE before it claims
    (writers do not block each other); ``mark_version_ready`` and the final check of a backfill take SHARE, which
    waits for every batch in flight, claimed documents included, and keeps new ones out. A reader holds SELECT
    only, so it can take neither."""
    mode = sql.SQL("SHARE" if exclusive else "ROW EXCLUSIVE")
    conn.execute(sql.SQL("LOCK TABLE {} IN {} MODE").format(target.table, mode))


def claim_pending_documents(
    conn: psycopg.Connection, version: int, after: tuple[str, str], documents: int
) -> list[tuple]:
    """Up to ``documents`` pending documents of the version after the (tenant, doc id) key ``after``, locked for this
    transaction (``toolkit.claim_pending_documents`` owns the rule): tenant, doc id, raw text, access labels, whether
    its rows are rewritten, pages."""
    return conn.execute(
        "SELECT tenant, doc_id, raw_text, access_labels, rewrite, pages"
        " FROM toolkit.claim_pending_documents(%s, %s, %s, %s)",
        (version, after[0], after[1], documents),
    ).fetchall()


def delete_document_rows(conn: psycopg.Connection, target: LiveVersion, tenant: str, doc_ids: list[str]) -> None:
    """A version's rows of ``doc_ids`` deleted, in the caller's transaction (before they are written again)."""
    conn.execute(
        sql.SQL("DELETE FROM {} WHERE tenant = %s AND doc_id = ANY(%s)").format(target.table), (tenant, doc_ids)
    )
