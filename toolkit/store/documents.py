"""Documents as the chunk writers see them: a tenant's and labels' rules, a document's content hash, locking
documents' rows while their chunks are rewritten, and deleting documents with their chunks from every live version."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

import psycopg
from psycopg.types.json import Jsonb

from toolkit.db.connection import translate_errors
from toolkit.errors import InputError


def document_tenants(conn: psycopg.Connection) -> dict[str, int]:
    """Each tenant that has documents → how many (``toolkit.document_tenants()``, for the roles that may count them)."""
    with conn.transaction():
        return dict(conn.execute("SELECT tenant, documents FROM toolkit.document_tenants()").fetchall())


def validate_labels(labels: Iterable[str]) -> list[str]:
    labels = sorted(set(labels))
    for label in labels:
        if not label or not label.isprintable() or len(label) > 200:
            raise InputError(f"The access label {label!r} is not usable: use non-empty printable names.")
    return labels


def document_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def lock_documents(conn: psycopg.Connection, tenant: str, doc_ids: Iterable[str]) -> None:
    # Ingest and backfill both write a document's rows; the document's row, locked FOR UPDATE in a fixed order
    # (toolkit.lock_documents), keeps them from interleaving without blocking work on other documents. A new
    # document has no row yet: inserting it locks it.
    ids = sorted(set(doc_ids))
    if ids:
        conn.execute("SELECT toolkit.lock_documents(%s, %s)", (tenant, ids))


def delete_documents(conn: psycopg.Connection, tenant: str, doc_ids: list[str], *, reason: str | None = None) -> int:
    """Deletes documents as ``toolkit delete`` does (SQL's ``toolkit.delete_documents``): the documents, their
    chunks in every live version and the logged questions citing them, recorded in ``toolkit.deletions`` with
    ``reason``; in the caller's transaction. Returns the documents deleted."""
    if not doc_ids:
        return 0
    from toolkit.store.deletions import run_delete_documents

    removed = run_delete_documents(conn, tenant, sorted(set(doc_ids)), False, reason)
    return next(r.rows for r in removed if r.relation == "documents")


def documents_under_root(conn: psycopg.Connection, tenant: str, root: str) -> list[str]:
    """The doc ids of ``tenant`` read from under the folder or file ``root`` (what ``ingest --prune`` compares)."""
    rows = conn.execute(
        "SELECT doc_id FROM toolkit.documents WHERE tenant = %s AND metadata->>'root' = %s", (tenant, root)
    ).fetchall()
    return [row[0] for row in rows]


def stored_documents(
    conn: psycopg.Connection, tenant: str, doc_ids: list[str], metadata: dict | None = None
) -> dict[str, tuple]:
    """doc id → (content hash, access labels, root, source, whether its metadata already holds ``metadata``) of those
    of ``doc_ids`` that ``tenant`` has (the comparison is SQL's: a PDF's page offsets never leave the server)."""
    with conn.transaction():
        rows = conn.execute(
            "SELECT doc_id, content_hash, access_labels, metadata->>'root', source, metadata @> %s::jsonb"
            " FROM toolkit.documents WHERE tenant = %s AND doc_id = ANY(%s)",
            (Jsonb(metadata or {}), tenant, doc_ids),
        ).fetchall()
    return {r[0]: (r[1], list(r[2]), r[3], r[4], r[5]) for r in rows}


def move_documents(
    conn: psycopg.Connection, tenant: str, moved: list[tuple[str, str, str]], metadata: dict | None = None
) -> None:
    """Records a new source path and root, and merges ``metadata``, for unchanged documents: (doc id, source,
    root)."""
    with translate_errors(), conn.transaction():
        conn.cursor().executemany(
            "UPDATE toolkit.documents SET source = %s,"
            " metadata = metadata || %s::jsonb || jsonb_build_object('root', %s::text)"
            " WHERE tenant = %s AND doc_id = %s",
            [(source, Jsonb(metadata or {}), root, tenant, doc_id) for doc_id, source, root in moved],
        )


def upsert_documents(
    conn: psycopg.Connection, tenant: str, labels: list[str], metadata: dict, documents: list[tuple]
) -> None:
    """Inserts or updates documents, in the caller's transaction, one statement for the batch (psycopg pipelines
    executemany): (doc id, source, title, format, raw text, content hash, root, pages or None). ``metadata`` is merged
    into each document's (ingest's own keys, root and pages, win)."""
    conn.cursor().executemany(
        "INSERT INTO toolkit.documents AS d (tenant, doc_id, source, title, format, raw_text, content_hash,"
        " access_labels, metadata)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s, %s,"
        " %s::jsonb || jsonb_strip_nulls(jsonb_build_object('root', %s::text, 'pages', %s::jsonb)))"
        " ON CONFLICT (tenant, doc_id) DO UPDATE SET source = EXCLUDED.source, title = EXCLUDED.title,"
        " format = EXCLUDED.format, raw_text = EXCLUDED.raw_text, content_hash = EXCLUDED.content_hash,"
        " access_labels = EXCLUDED.access_labels, metadata = (d.metadata - 'pages') || EXCLUDED.metadata,"
        " updated_at = now()",
        [
            (tenant, doc_id, source, title, fmt, text, digest, labels, Jsonb(metadata), root, _pages(pages))
            for doc_id, source, title, fmt, text, digest, root, pages in documents
        ],
    )


def tenant_documents(conn: psycopg.Connection, tenant: str) -> dict[str, str]:
    """The tenant's documents (doc id → stored raw text), read under row-level security with the tenant set."""
    with translate_errors(), conn.transaction(force_rollback=True):
        conn.execute("SELECT toolkit.set_tenant(%s)", (tenant,))
        return dict(conn.execute("SELECT doc_id, raw_text FROM toolkit.documents WHERE tenant = %s", (tenant,)))


def _pages(pages) -> Jsonb | None:
    return None if pages is None else Jsonb(list(pages))
