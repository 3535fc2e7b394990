"""The statements of ``toolkit show`` and ``toolkit diff``: a version's documents and one document's chunks, read
from the version's own table through ``toolkit.version_documents`` / ``toolkit.version_chunks`` as the caller
(row-level security applies)."""

from __future__ import annotations

from dataclasses import dataclass

import psycopg
from psycopg.rows import class_row

from toolkit.db.connection import translate_errors


@dataclass(frozen=True)
class VersionDocument:
    tenant: str
    doc_id: str
    chunks: int
    parents: int
    tokens: int
    first_offset: int
    last_offset: int


@dataclass(frozen=True)
class VersionChunk:
    tenant: str
    chunk_id: str
    parent_id: str | None
    is_parent: bool
    position: int
    start: int
    end: int
    token_count: int
    heading_path: list[str]
    pages: list[int] | None
    text: str


def select_version_documents(conn: psycopg.Connection, version: int, tenant: str | None) -> list[VersionDocument]:
    with translate_errors(), conn.transaction():
        cursor = conn.cursor(row_factory=class_row(VersionDocument))
        return cursor.execute("SELECT * FROM toolkit.version_documents(%s, %s)", (version, tenant)).fetchall()


def select_version_chunks(
    conn: psycopg.Connection, version: int, doc_id: str, tenant: str | None
) -> list[VersionChunk]:
    with translate_errors(), conn.transaction():
        cursor = conn.cursor(row_factory=class_row(VersionChunk))
        return cursor.execute(
            "SELECT tenant, chunk_id, parent_id, is_parent, chunk_position AS position, start_offset AS start,"
            " end_offset AS end, token_count, coalesce(heading_path, '{}') AS heading_path, pages,"
            " chunk_text AS text FROM toolkit.version_chunks(%s, %s, %s)",
            (version, doc_id, tenant),
        ).fetchall()


@dataclass(frozen=True)
class StoredChunk:
    """A chunk row of a version's table, with what scoring needs."""

    chunk_id: str
    doc_id: str
    parent_id: str | None
    is_parent: bool
    start: int
    end: int
    heading_path: tuple[str, ...]
    text: str
    token_count: int


def stored_chunks(conn: psycopg.Connection, version: int, tenant: str) -> tuple[list[StoredChunk], int]:
    """A tenant's rows of a version, in reading order (row-level security: the tenant's own rows), and how many of its
    chunks (parents aside) still wait for an embedding."""
    with conn.transaction(force_rollback=True):
        # The table's name in the statement that sets the tenant: no round trip of its own.
        table = psycopg.sql.SQL(
            conn.execute("SELECT toolkit._chunk_table(%s), toolkit.set_tenant(%s)", (version, tenant)).fetchone()[0]
        )
        rows = conn.execute(
            psycopg.sql.SQL(
                "SELECT chunk_id, doc_id, parent_id, is_parent, start_offset, end_offset, heading_path, text,"
                " token_count, embedding IS NULL AND NOT is_parent FROM {} WHERE tenant = %s ORDER BY doc_id, position"
            ).format(table),
            (tenant,),
        ).fetchall()
    missing = sum(1 for row in rows if row[9])
    return [StoredChunk(*row[:6], tuple(row[6] or ()), *row[7:9]) for row in rows], missing
