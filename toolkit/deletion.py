"""Deleting what a user asks to delete: documents of a tenant (``toolkit delete``) and a whole tenant (``toolkit
tenant erase``). SQL does the work (``toolkit.delete_documents``, ``toolkit.erase_tenant``): one transaction over the
documents, their chunks in every live version (building, ready, verified, active, standby) and the query log,
recorded in ``toolkit.deletions``. A dry run (the CLI's default) returns the same counts and changes nothing. The
vectors of the removed chunks are then forgotten by this user's embedding cache, when there is one
(``toolkit.embedding.cache.forget_texts``); caches of other users and hosts are the operator's (docs/deleting.md)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import psycopg

from toolkit.errors import InputError
from toolkit.store.deletions import Removed, embedded_texts, run_delete_documents, run_erase_tenant

__all__ = ["DeletionReport", "Removed", "delete_documents", "erase_tenant"]


@dataclass(frozen=True)
class DeletionReport:
    action: str  # delete or erase
    tenant: str
    dry_run: bool
    doc_ids: list[str] = field(default_factory=list)
    removed: list[Removed] = field(default_factory=list)
    # Vectors forgotten in this user's embedding cache (TOOLKIT_EMBEDDING_CACHE), when it has one; None when the
    # caller may not read the chunks to tell which (docs/deleting.md: toolkit cache purge).
    cached_vectors_forgotten: int | None = 0

    @property
    def rows(self) -> int:
        return sum(r.rows for r in self.removed)

    def as_dict(self) -> dict:
        return {**asdict(self), "rows": self.rows}


def delete_documents(
    conn: psycopg.Connection,
    tenant: str,
    doc_ids: Sequence[str],
    *,
    dry_run: bool = False,
    reason: str | None = None,
) -> DeletionReport:
    """Deletes ``doc_ids`` of ``tenant``: the documents, their chunks in every live version and the logged questions
    whose results cite them, in one transaction (the writer's right). An id the tenant does not have is refused and
    nothing is deleted. With ``dry_run`` nothing changes and the counts say what would go."""
    if isinstance(doc_ids, str):
        raise InputError("Pass the document ids as a list, not one string.")
    ids = sorted(set(doc_ids))
    if not ids:
        raise InputError("Name one or more documents to delete (their doc ids, as toolkit show lists them).")
    embedded = [] if dry_run else _embedded_chunks(conn, tenant, ids)
    removed = run_delete_documents(conn, tenant, ids, dry_run, reason)
    return DeletionReport("delete", tenant, dry_run, ids, removed, _forget(embedded))


def erase_tenant(
    conn: psycopg.Connection, tenant: str, *, dry_run: bool = False, reason: str | None = None
) -> DeletionReport:
    """Erases ``tenant``: its documents, its rows in every live version, its logged questions and the logins'
    bindings to it, in one transaction (the deployer's or the owner's right). A tenant of which nothing is stored is
    refused. With ``dry_run`` nothing changes and the counts say what would go."""
    embedded = [] if dry_run else _embedded_chunks(conn, tenant, None)
    removed = run_erase_tenant(conn, tenant, dry_run, reason)
    return DeletionReport("erase", tenant, dry_run, [], removed, _forget(embedded))


def _embedded_chunks(conn: psycopg.Connection, tenant: str, doc_ids: list[str] | None) -> list[str] | None:
    """What the embedding cache knows the chunks to be deleted by (their embedded texts) in every live version, read
    before the delete: [] when this user has no cache (nothing to forget), None when the caller may not read them."""
    from toolkit.embedding.cache import cache_exists

    if not cache_exists():
        return []
    return embedded_texts(conn, tenant, doc_ids)


def _forget(embedded: list[str] | None) -> int | None:
    from toolkit.embedding.cache import forget_texts

    if embedded is None:
        return None
    return forget_texts(embedded) if embedded else 0
