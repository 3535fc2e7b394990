"""Documents as the chunk writers see them: a tenant's and labels' rules, a document's content hash, locking
documents' rows while their chunks are rewritten, and deleting documents with their chunks from every live version."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

import psycopg

from toolkit.errors import InputError


def validate_tenant(tenant: str) -> str:
    if not isinstance(tenant, str) or not tenant.strip() or len(tenant) > 200 or not tenant.isprintable():
        raise InputError(
            f"The tenant {tenant!r} is not usable: give a non-empty name of at most 200 printable characters."
        )
    return tenant


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
