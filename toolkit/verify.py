"""Verify: score a candidate version on labelled queries beside the active one, and gate it.

The questions are embedded here (with each version's model) and their answers resolved to character spans; the
rest happens in SQL, in ``toolkit.evaluate_version``: every question is searched with the pinned search
applications use, the metrics and the gate are computed there, and only that function records the result in
``toolkit.evaluations``. A passing evaluation is what allows a cutover or a canary, so no role can record one that
SQL did not compute from the version's own rows.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from toolkit import validation
from toolkit.db.connection import translate_errors
from toolkit.errors import InputError
from toolkit.evaluation.metrics import RetrievalMetrics
from toolkit.evaluation.queries import load_queries
from toolkit.progress import Progress
from toolkit.store.documents import document_tenants, tenant_documents
from toolkit.store.evaluations import record_verification
from toolkit.store.serving import READER_ROLE, may_take_role
from toolkit.store.versions import active_version, verify_target

# The chunking guide's advice: 50 to 200 labelled questions; two points on a hundred is noise. Fewer are refused
# unless the caller says so (min_queries).
MIN_QUERIES = 50


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
    # The vector of each question as the evaluation embedded it, per model alias: a caller that searches the same
    # questions again (the demo) need not embed them again. Not part of as_dict().
    question_vectors: dict[str, dict[str, list[float]]] = field(default_factory=dict, repr=False)

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

    def comparison(self) -> list[dict]:
        """One row per side (the candidate, then the active version if one was scored): its metrics side by side."""
        rows = []
        for label, side in (("candidate", self.candidate), ("active", self.baseline)):
            if side is None:
                continue
            m = side.metrics
            rows.append(
                {
                    "": label,
                    "version": side.version,
                    "model": side.model_alias,
                    f"recall@{self.k}": m.recall,
                    "MRR": m.mrr,
                    f"nDCG@{self.k}": m.ndcg,
                    "span_recall": m.span_recall,
                    "span_precision": m.span_precision,
                    "span_IoU": m.span_iou,
                }
            )
        return rows


def pick_tenant(conn: psycopg.Connection, tenant: str | None) -> str:
    with translate_errors():
        tenants = sorted(document_tenants(conn))
    if tenant is not None:
        if tenant not in tenants:
            raise InputError(f"The tenant {tenant!r} has no documents; the labelled queries cannot be answered.")
        return tenant
    if len(tenants) == 1:
        return tenants[0]
    if not tenants:
        raise InputError("There are no documents yet: ingest the corpus the queries are about first.")
    raise InputError(f"Several tenants have documents ({', '.join(tenants[:5])}…); name one with --tenant.")


def version_info(conn: psycopg.Connection, version: int) -> tuple[str, str, str, int]:
    """(model alias, chunker version, state, dimensions) of a version verify may score: one in a state
    ``toolkit.version_states('verify')`` accepts (SQL's rule, which ``toolkit.evaluate_version`` applies too)."""
    row = verify_target(conn, version)
    if row is None or row.state == "retired":
        raise InputError(f"Version {version} does not exist or is retired.")
    if row.state == "building":
        raise InputError(f"Version {version} is still building; finish it with toolkit backfill --resume first.")
    if not row.accepted:
        raise InputError(f"Version {version} is {row.state}; verify scores {', '.join(row.states)} versions.")
    return row.model_alias, row.chunker_version, row.state, row.dimensions


def can_be_reader(conn: psycopg.Connection) -> bool:
    with conn.transaction():
        return may_take_role(conn, READER_ROLE)


def query_set_hash(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


def _embeddings(
    conn: psycopg.Connection, version: int, questions: list[str], done: dict, progress=None
) -> list[list[float]]:
    """The questions' vectors with the version's model; ``done`` (by embedder) keeps a second version of the same
    model (a chunker change) from embedding every question again."""
    from toolkit.search import query_embedder, version_model

    embedder = query_embedder(conn, version_model(conn, version))
    if id(embedder) in done:
        if progress is not None:
            progress.advance(len(questions))
        return done[id(embedder)][1]
    labelled = getattr(embedder, "embed_labelled_queries", None)  # a cached local model: the labelled set's file
    if labelled is not None:
        vectors = [[float(x) for x in vector] for vector in labelled(questions)]
        if progress is not None:
            progress.advance(len(questions))
    else:
        vectors = []
        for question in questions:
            vectors.append([float(x) for x in embedder.embed_query(question)])
            if progress is not None:
                progress.advance(1)
    done[id(embedder)] = (embedder, vectors)
    return vectors


def _side(conn: psycopg.Connection, version: int, metrics: dict) -> Side:
    from toolkit.search import version_model

    model = version_model(conn, version)
    values = {name: metrics[name] for name in RetrievalMetrics.__dataclass_fields__}
    return Side(version, model.model_alias, model.chunker_version, RetrievalMetrics(**values), list(metrics["hits"]))


def verify(
    conn: psycopg.Connection,
    candidate: int,
    queries_path: str | Path,
    *,
    k: int = 5,
    tenant: str | None = None,
    min_recall: float | None = None,
    max_drop: float = 0.0,
    min_queries: int = MIN_QUERIES,
    progress: Progress | None = None,
) -> VerifyReport:
    """Scores the candidate (and the active version, if another one is active) in SQL, which applies the gate and
    stores the evaluation. With no other active version the gate needs ``min_recall``; a query set smaller than
    ``min_queries`` is refused."""
    validation.RESULTS.check(k)
    validation.RECALL.check_optional(min_recall)
    validation.RECALL_DROP.check(max_drop)
    validation.QUERY_SET_SIZE.check(min_queries)
    tenant = pick_tenant(conn, tenant)
    queries = load_queries(queries_path, tenant_documents(conn, tenant))
    active = active_version(conn)
    baseline = active if active is not None and active != candidate else None
    questions = [q.query for q in queries]
    payload = [
        {"query": q.query, "answers": [{"doc_id": a.doc_id, "start": a.start, "end": a.end} for a in q.answers]}
        for q in queries
    ]
    # Fail early on what SQL would refuse, before the questions are embedded.
    if len(payload) < min_queries:
        raise InputError(
            f"{queries_path} holds {len(payload)} labelled question(s); the gate needs at least {min_queries} to mean "
            "anything (50 to 200 is the usual advice). Label more, or accept a smaller set with --min-queries."
        )
    if baseline is None and min_recall is None:
        raise InputError(
            f"No other version is active to compare version {candidate} with, so the gate needs an absolute floor: "
            "give --min-recall (the recall@k it must reach, e.g. 0.8)."
        )
    # Progress in questions embedded (each version's model embeds every question), then SQL's scoring.
    progress = progress or Progress("verify", unit="questions", quiet=True)
    progress.set_total(len(questions) * (1 if baseline is None else 2))
    embedded: dict = {}
    for item, vector in zip(payload, _embeddings(conn, candidate, questions, embedded, progress), strict=True):
        item["embedding"] = vector
    if baseline is not None:
        for item, vector in zip(payload, _embeddings(conn, baseline, questions, embedded, progress), strict=True):
            item["baseline_embedding"] = vector
    progress.advance(0, now="searching and scoring in SQL")
    digest = query_set_hash(queries_path)
    evaluation_id, metrics, gate, passed = record_verification(
        conn, candidate, tenant, payload, k, min_recall, max_drop, min_queries, digest
    )
    progress.advance(0, now="scored")
    progress.finish()
    cand = _side(conn, candidate, metrics["candidate"])
    base = _side(conn, baseline, metrics["baseline"]) if baseline is not None else None
    wins, losses = [], []
    if base is not None:
        for q, c_hit, b_hit in zip(queries, cand.hits, base.hits, strict=True):
            if c_hit and not b_hit:
                wins.append(q.query)
            elif b_hit and not c_hit:
                losses.append(q.query)
    vectors = {
        side.model_alias: dict(zip(questions, [item[key] for item in payload], strict=True))
        for side, key in ((cand, "embedding"), (base, "baseline_embedding"))
        if side is not None
    }
    return VerifyReport(
        cand, base, tenant, k, passed, list(gate["reasons"]), evaluation_id, digest, wins, losses, vectors
    )


def verify_version(
    conn: psycopg.Connection,
    queries_path: str | Path,
    *,
    model_alias: str | None = None,
    chunker_spec: str | None = None,
    version: int | None = None,
    **options,
) -> VerifyReport:
    """``verify`` of the version named by its model (and chunker) or its number, in a state that may be verified
    (``toolkit.store.versions.resolve_version``); ``options`` are ``verify``'s (k, tenant, min_recall, max_drop,
    min_queries)."""
    from toolkit.store.versions import resolve_version

    candidate = resolve_version(conn, model_alias, chunker_spec, version, action="verify")
    return verify(conn, candidate, queries_path, **options)
