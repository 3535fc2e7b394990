"""Verify: run labelled queries against a candidate version and the active one, side by side, and gate.

Queries go through the SQL applications use: as the reader role when the connection may take it, with the
tenant set, ``ORDER BY embedding <=> $1 LIMIT k`` — on ``active_chunks`` for the active version and on the
candidate's own table (identical SQL otherwise) for the candidate. The result is stored in
``toolkit.evaluations``; a passing one is what allows a cutover.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from toolkit import validation
from toolkit.database import translate_errors
from toolkit.errors import InputError
from toolkit.metrics import RetrievalMetrics, aggregate, score_query
from toolkit.models import embedder_for_model, get_model
from toolkit.queries import LabelledQuery, load_queries


@dataclass
class Side:
    version: int
    model_alias: str
    chunker_version: str
    metrics: RetrievalMetrics
    hits: list[bool]


@dataclass
class VerifyReport:
    candidate: Side
    baseline: Side | None
    tenant: str
    k: int
    passed: bool
    reasons: list[str]
    evaluation_id: int
    query_set_hash: str
    wins: list[str] = field(default_factory=list)
    losses: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        def side(s: Side | None):
            if s is None:
                return None
            return {
                "version": s.version,
                "model_alias": s.model_alias,
                "chunker_version": s.chunker_version,
                **s.metrics.to_dict(),
            }

        return {
            "passed": self.passed,
            "reasons": self.reasons,
            "tenant": self.tenant,
            "k": self.k,
            "evaluation_id": self.evaluation_id,
            "query_set_hash": self.query_set_hash,
            "candidate": side(self.candidate),
            "baseline": side(self.baseline),
            "wins": self.wins,
            "losses": self.losses,
        }


def pick_tenant(conn: psycopg.Connection, tenant: str | None) -> str:
    with conn.transaction():
        tenants = [r[0] for r in conn.execute("SELECT DISTINCT tenant FROM toolkit.documents ORDER BY 1")]
    if tenant is not None:
        if tenant not in tenants:
            raise InputError(f"The tenant {tenant!r} has no documents; the labelled queries cannot be answered.")
        return tenant
    if len(tenants) == 1:
        return tenants[0]
    if not tenants:
        raise InputError("There are no documents yet: ingest the corpus the queries are about first.")
    raise InputError(f"Several tenants have documents ({', '.join(tenants[:5])}…); name one with --tenant.")


def tenant_documents(conn: psycopg.Connection, tenant: str) -> dict[str, str]:
    with conn.transaction():
        return dict(conn.execute("SELECT doc_id, raw_text FROM toolkit.documents WHERE tenant = %s", (tenant,)))


def version_info(conn: psycopg.Connection, version: int) -> tuple[str, str, str, int]:
    with conn.transaction():
        row = conn.execute(
            "SELECT model_alias, chunker_version, state, dimensions FROM toolkit.versions WHERE version = %s",
            (version,),
        ).fetchone()
    if row is None or row[2] == "retired":
        raise InputError(f"Version {version} does not exist or is retired.")
    if row[2] == "building":
        raise InputError(f"Version {version} is still building; finish it with toolkit backfill --resume first.")
    return row


def can_be_reader(conn: psycopg.Connection) -> bool:
    with conn.transaction():
        return conn.execute("SELECT pg_has_role(current_user, 'toolkit_reader', 'MEMBER')").fetchone()[0]


DISTANCE_OPERATORS = {"cosine": "<=>", "l2": "<->", "inner_product": "<#>"}


def search_rows(
    conn,
    relation: sql.Composable,
    columns: sql.Composable,
    vector,
    tenant: str,
    k: int,
    as_reader: bool,
    distance: str = "cosine",
) -> list[tuple]:
    """Top-k rows (``columns``) for one query vector, as an application would run it: as the reader when the
    connection may be, the tenant set, iterative scans on, and the version's own distance operator so its HNSW
    index serves the query. No prepared statement: a cached plan would hide a change of plan."""
    query = sql.SQL("SELECT {} FROM {} WHERE tenant = %s AND NOT is_parent ORDER BY embedding {} %s LIMIT %s").format(
        columns, relation, sql.SQL(DISTANCE_OPERATORS[distance])
    )
    with conn.transaction(force_rollback=True):  # read only: the role and settings end with it (see search.py)
        if as_reader:
            conn.execute("SET LOCAL ROLE toolkit_reader")
        conn.execute("SELECT toolkit.set_tenant(%s)", (tenant,))
        conn.execute("SELECT set_config('hnsw.iterative_scan', 'relaxed_order', true)")
        return conn.execute(query, (tenant, vector, k), prepare=False).fetchall()


SPAN_COLUMNS = sql.SQL("doc_id, start_offset, end_offset")


def score_version(
    conn,
    version: int,
    relation,
    queries: list[LabelledQuery],
    tenant: str,
    k: int,
    as_reader: bool,
    query_embedder=None,
) -> Side:
    """Scores one version on the labelled queries; questions are embedded with the version's own model unless
    ``query_embedder`` is given (the demo uses that to show what another model's vectors do)."""
    alias, chunker_version, _, dims = version_info(conn, version)
    model = get_model(conn, alias)
    embedder = query_embedder or embedder_for_model(model, dims)
    scores, hits = [], []
    for q in queries:
        retrieved = search_rows(
            conn, relation, SPAN_COLUMNS, embedder.embed_query(q.query), tenant, k, as_reader, model.distance
        )
        s = score_query(retrieved, q.answers, k)
        scores.append(s)
        hits.append(s.recall > 0)
    return Side(version, alias, chunker_version, aggregate(scores, k), hits)


def _content_changed_at(conn: psycopg.Connection, version: int):
    with conn.transaction():
        return conn.execute(
            "SELECT content_changed_at FROM toolkit.versions WHERE version = %s", (version,)
        ).fetchone()[0]


def query_set_hash(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


def verify(
    conn: psycopg.Connection,
    candidate: int,
    queries_path: str | Path,
    *,
    k: int = 5,
    tenant: str | None = None,
    min_recall: float | None = None,
    max_drop: float = 0.0,
) -> VerifyReport:
    """Scores the candidate (and the active version, if another one is active), applies the gate, stores it."""
    validation.RESULTS.check(k)
    validation.RECALL.check_optional(min_recall)
    validation.RECALL_DROP.check(max_drop)
    tenant = pick_tenant(conn, tenant)
    queries = load_queries(queries_path, tenant_documents(conn, tenant))
    if not queries:
        raise InputError(f"{queries_path} holds no labelled queries.")
    as_reader = can_be_reader(conn)
    changed_at = _content_changed_at(conn, candidate)
    table = sql.Identifier("toolkit", f"chunks_v{int(candidate)}")
    cand = score_version(conn, candidate, table, queries, tenant, k, as_reader)
    with conn.transaction():
        active = conn.execute("SELECT toolkit.active_version()").fetchone()[0]
    base = None
    if active is not None and active != candidate:
        base = score_version(conn, active, sql.Identifier("toolkit", "active_chunks"), queries, tenant, k, as_reader)

    reasons = []
    if min_recall is not None and cand.metrics.recall < min_recall:
        reasons.append(f"recall@{k} {cand.metrics.recall:.3f} is below --min-recall {min_recall:.3f}")
    if base is not None and cand.metrics.recall < base.metrics.recall - max_drop:
        reasons.append(
            f"recall@{k} {cand.metrics.recall:.3f} dropped more than {max_drop:.3f} below the active version's "
            f"{base.metrics.recall:.3f}"
        )
    if _content_changed_at(conn, candidate) != changed_at:
        reasons.append("the version's contents changed while it was being verified; run toolkit verify again")
    passed = not reasons
    wins, losses = [], []
    if base is not None:
        for q, c_hit, b_hit in zip(queries, cand.hits, base.hits, strict=True):
            if c_hit and not b_hit:
                wins.append(q.query)
            elif b_hit and not c_hit:
                losses.append(q.query)
    digest = query_set_hash(queries_path)
    metrics = {
        "candidate": cand.metrics.to_dict(),
        "baseline": base.metrics.to_dict() if base else None,
        "tenant": tenant,
        "wins": len(wins),
        "losses": len(losses),
    }
    gate = {"min_recall": min_recall, "max_drop": max_drop, "reasons": reasons}
    with translate_errors(), conn.transaction():
        evaluation_id = conn.execute(
            "SELECT toolkit.record_evaluation(%s, %s, %s, %s, %s, %s, %s, %s)",
            (candidate, digest, len(queries), k, Jsonb(metrics), passed, base.version if base else None, Jsonb(gate)),
        ).fetchone()[0]
    return VerifyReport(cand, base, tenant, k, passed, reasons, evaluation_id, digest, wins, losses)
