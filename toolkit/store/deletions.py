"""The statements of deletion: ``toolkit.delete_documents`` and ``toolkit.erase_tenant``, each one transaction in
SQL over the documents, their chunks in every live version and the query log, recorded in ``toolkit.deletions``."""

from __future__ import annotations

from dataclasses import dataclass

import psycopg
from psycopg.rows import class_row

from toolkit.db.connection import translate_errors


@dataclass(frozen=True)
class Removed:
    """The rows of one table removed (or, in a dry run, to remove): ``documents``, ``query_log``,
    ``tenant_bindings``, or a version's chunk table (``chunks_vN``, with ``version``)."""

    relation: str
    version: int | None
    rows: int


def _removed(conn: psycopg.Connection, statement: str, params: tuple) -> list[Removed]:
    with translate_errors(), conn.transaction():
        return conn.cursor(row_factory=class_row(Removed)).execute(statement, params).fetchall()


def run_delete_documents(
    conn: psycopg.Connection, tenant: str, doc_ids: list[str], dry_run: bool, reason: str | None
) -> list[Removed]:
    return _removed(
        conn,
        "SELECT relation, version, removed AS rows FROM toolkit.delete_documents(%s, %s, %s, %s)",
        (tenant, doc_ids, dry_run, reason),
    )


def run_erase_tenant(conn: psycopg.Connection, tenant: str, dry_run: bool, reason: str | None) -> list[Removed]:
    return _removed(
        conn,
        "SELECT relation, version, removed AS rows FROM toolkit.erase_tenant(%s, %s, %s)",
        (tenant, dry_run, reason),
    )


def embedded_texts(conn: psycopg.Connection, tenant: str, doc_ids: list[str] | None) -> list[str] | None:
    """What backfill gave the model for ``tenant``'s chunks (of ``doc_ids``, or all) in every live version
    (``compose_embed_text`` of each row): what the embedding cache keys their vectors by. Read as the tenant, with the
    caller's own rights (row-level security applies); None when the caller may not read them (a deployer erasing a
    tenant: the deletion itself still runs, or refuses, as the caller's rights say)."""
    from psycopg import sql

    from toolkit.chunking.document import compose_embed_text

    rows: list[tuple] = []
    try:
        with conn.transaction():  # a savepoint inside the caller's transaction: a refusal here leaves it usable
            conn.execute("SELECT toolkit.set_tenant(%s)", (tenant,))
            tables = [table for (table,) in conn.execute("SELECT chunk_table FROM toolkit.live_versions()")]
            for table in tables:  # qualified and quoted by SQL (toolkit._chunk_table)
                query = sql.SQL(
                    "SELECT heading_path, context, text FROM {} WHERE tenant = %(tenant)s"
                    " AND (%(ids)s::text[] IS NULL OR doc_id = ANY (%(ids)s::text[]))"
                ).format(sql.SQL(table))
                rows += conn.execute(query, {"tenant": tenant, "ids": doc_ids}).fetchall()
    except psycopg.errors.InsufficientPrivilege:
        return None
    return sorted({compose_embed_text(tuple(path or ()), context or "", text) for path, context, text in rows})
