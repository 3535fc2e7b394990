"""What ``toolkit status`` reports: every version with its state, rows, index and evaluation, how far each is behind
(``toolkit.version_lag()``), the canary and the query log, as SQL's status functions return them."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import psycopg

from toolkit.serving import Canary, canary_status
from toolkit.store.documents import document_tenants


@dataclass
class Overview:
    """What ``toolkit status`` reports: every version (``toolkit.version_status()``: state, what it serves, rows,
    index, last evaluation), the canary if one runs, and the query log."""

    versions: list  # toolkit.store.versions.VersionStatus
    canary: Canary | None
    query_log: object  # toolkit.store.query_log.QueryLogStatus
    documents: dict | None = None  # {"documents": N, "tenants": N}; None when the role may not count them
    lag: list | None = None  # toolkit.version_lag() rows; None when the role may not read them

    def as_dict(self) -> dict:
        """For JSON: durations in ISO 8601 ("P30D"), and null (never "") where there is nothing."""
        versions = [{**asdict(v), "serving": v.serving or None} for v in self.versions]
        log = self.query_log.as_dict()
        return {
            "versions": versions,
            "lag": self.lag,
            "canary": self.canary.as_dict() if self.canary else None,
            "query_log": log,
            "documents": self.documents,
        }

    def version_rows(self) -> list[dict]:
        """One dict per version, with its ``verification`` (current, stale, rolled back, failed or -: SQL's
        toolkit.version_verification)."""
        return [{**asdict(v), "verification": v.verification} for v in self.versions]


def overview(conn: psycopg.Connection) -> Overview:
    """The versions, the canary and the query log, read in one call each (``evaluation_current`` is SQL's rule,
    ``toolkit.version_evaluation_current``, the one cutover applies). Expired or over-cap logged questions are pruned
    first when the role may: pruning does not depend on logging being on."""
    from toolkit.store.query_log import prune_if_permitted, query_log_status
    from toolkit.store.versions import version_status

    prune_if_permitted(conn)
    return Overview(
        version_status(conn), canary_status(conn), query_log_status(conn), document_counts(conn), version_lag(conn)
    )


def version_lag(conn: psycopg.Connection) -> list[dict] | None:
    """``toolkit.version_lag()``: per live version, the documents its backfill has still to write, the chunks without
    an embedding, since when the oldest waited, and whether it is caught up. None for a role that may not read it."""
    from toolkit.store.lifecycle import version_lag as read_lag

    try:
        return read_lag(conn)
    except psycopg.errors.InsufficientPrivilege:
        return None


def document_counts(conn: psycopg.Connection) -> dict | None:
    """Documents and tenants (``toolkit.document_tenants()``); None for a role that may not count them."""
    try:
        counts = document_tenants(conn)
    except psycopg.errors.InsufficientPrivilege:
        return None
    return {"documents": sum(counts.values()), "tenants": len(counts)}


def tenants_without_documents(conn: psycopg.Connection, tenants) -> list[str]:
    """Those of ``tenants`` that have no document (``toolkit.document_tenants()``): binding a login to one is most
    often a typo, and the login would then see nothing, silently."""
    having = document_tenants(conn)
    return [tenant for tenant in dict.fromkeys(tenants) if tenant not in having]
