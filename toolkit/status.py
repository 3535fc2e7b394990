"""What ``toolkit status`` reports: every version with its state, rows, index and evaluation, the canary and the
query log, as SQL's status functions return them."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import psycopg

from toolkit.serving import Canary, canary_status


@dataclass
class Overview:
    """What ``toolkit status`` reports: every version (``toolkit.version_status()``: state, what it serves, rows,
    index, last evaluation), the canary if one runs, and the query log."""

    versions: list  # toolkit.store.versions.VersionStatus
    canary: Canary | None
    query_log: object  # toolkit.store.query_log.QueryLogStatus

    def as_dict(self) -> dict:
        return {
            "versions": [asdict(v) for v in self.versions],
            "canary": self.canary.as_dict() if self.canary else None,
            "query_log": self.query_log.as_dict(),
        }

    def version_rows(self) -> list[dict]:
        """One dict per version, with its ``verification`` (current, stale, failed or -)."""
        return [{**asdict(v), "verification": v.verification} for v in self.versions]


def overview(conn: psycopg.Connection) -> Overview:
    """The versions, the canary and the query log, read in one call each (``evaluation_current`` is SQL's rule,
    ``toolkit.version_evaluation_current``, the one cutover applies). Expired or over-cap logged questions are pruned
    first when the role may: pruning does not depend on logging being on."""
    from toolkit.store.query_log import prune_if_permitted, query_log_status
    from toolkit.store.versions import version_status

    prune_if_permitted(conn)
    return Overview(version_status(conn), canary_status(conn), query_log_status(conn))
