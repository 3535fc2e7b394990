"""The statement of a verification: ``toolkit.evaluate_version`` scores the candidate (and the active version) in
SQL with the served retrieval, applies the gate and records the evaluation; its metrics and gate are read back."""

from __future__ import annotations

import psycopg
from psycopg.types.json import Jsonb

from toolkit.db.connection import translate_errors


def record_verification(
    conn: psycopg.Connection,
    candidate: int,
    tenant: str,
    payload: list[dict],
    k: int,
    min_recall: float | None,
    max_drop: float,
    min_queries: int,
    digest: str,
) -> tuple[int, dict, dict, bool]:
    """(evaluation id, metrics, gate, passed) of the evaluation SQL recorded."""
    with translate_errors(), conn.transaction():
        evaluation_id = conn.execute(
            "SELECT toolkit.evaluate_version(%s, %s, %s, %s, %s, %s, %s, %s)",
            (candidate, tenant, Jsonb(payload), k, min_recall, max_drop, min_queries, digest),
        ).fetchone()[0]
        metrics, gate, passed = conn.execute(
            "SELECT metrics, gate, passed FROM toolkit.evaluations WHERE evaluation_id = %s", (evaluation_id,)
        ).fetchone()
    return evaluation_id, metrics, gate, passed
