"""Backfill: build a version for (model, chunker) from the stored documents, resumably.

The work queue is the database itself: documents with no rows in the version's table still need chunking,
and rows whose embedding is NULL still need embedding. A batch is claimed with ``FOR UPDATE SKIP LOCKED``,
embedded, and committed whole, so a crash, Ctrl-C or reboot loses at most the batch in flight, and two
backfills of the same version never embed the same rows. The HNSW index is built once, after the load.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import psycopg
from psycopg import sql

from toolkit import validation, versions
from toolkit.chunking import recommended_spec
from toolkit.database import connect, translate_errors
from toolkit.errors import InputError, StateError
from toolkit.ingest import LiveVersion, _lock_documents, chunk_row, copy_chunk_rows, vector_schema
from toolkit.models import embedder_for_model, get_model
from toolkit.progress import Progress


@dataclass
class BackfillReport:
    version: int
    model_alias: str
    chunker_version: str
    created: bool = False
    documents_chunked: int = 0
    rows_embedded: int = 0
    tokens: int = 0
    estimated_cost_usd: float = 0.0
    seconds: float = 0.0
    index_seconds: float | None = None
    state: str = "building"
    stopped: str | None = None
    errors: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def _version_row(conn, version: int):
    with conn.transaction():
        return conn.execute(
            "SELECT version, model_alias, chunker_spec, chunker_version, storage, dimensions, state"
            " FROM toolkit.versions WHERE version = %s",
            (version,),
        ).fetchone()


def prepare_version(
    conn: psycopg.Connection,
    model_alias: str,
    chunker_spec: str,
    *,
    resume: bool,
    storage: str = "vector",
    dimensions: int | None = None,
    hnsw_m: int = 16,
    hnsw_ef_construction: int = 64,
) -> tuple[int, bool]:
    """Finds the live version for (model, chunker) or creates it; returns (version, created)."""
    from toolkit.chunking import get_chunker

    get_model(conn, model_alias)  # a clear error for an unknown alias
    chunker = get_chunker(chunker_spec)
    existing = versions.find_version(conn, model_alias, chunker.version, storage, dimensions)
    if existing is None:
        try:
            created = versions.create_version(
                conn,
                model_alias,
                chunker_spec,
                chunker.version,
                storage=storage,
                dimensions=dimensions,
                hnsw_m=hnsw_m,
                hnsw_ef_construction=hnsw_ef_construction,
            )
            return created, True
        except InputError as error:
            # Two backfills started at once: the other one created the version first; join it.
            if not isinstance(error.__cause__, psycopg.errors.UniqueViolation):
                raise
            existing = versions.find_version(conn, model_alias, chunker.version, storage, dimensions)
    state = _version_row(conn, existing)[6]
    if state == "building" and not resume:
        raise StateError(
            f"Version {existing} ({model_alias}, {chunker.version}) is already being built. "
            "Continue it with --resume (two backfills of one version share the work safely)."
        )
    return existing, False


class _Budget:
    """Tokens and estimated spend so far, shared by the workers; refuses a batch that would pass --max-cost."""

    def __init__(self, price_per_million: float, max_cost: float | None):
        self.price = price_per_million
        self.max_cost = max_cost
        self.tokens = 0
        self._lock = threading.Lock()

    @property
    def cost(self) -> float:
        return self.tokens * self.price / 1e6

    def reserve(self, tokens: int) -> bool:
        with self._lock:
            if self.max_cost is not None and (self.tokens + tokens) * self.price / 1e6 > self.max_cost:
                return False
            self.tokens += tokens
            return True

    def release(self, tokens: int) -> None:
        with self._lock:
            self.tokens -= tokens


def chunk_pending_documents(
    conn: psycopg.Connection,
    target: LiveVersion,
    *,
    batch_documents: int = 32,
    stop: threading.Event | None = None,
    on_batch: Callable[[int], None] | None = None,
) -> int:
    """Chunks every document that has no rows in the version yet; rows are written without embeddings."""
    done = 0
    missing = sql.SQL(
        "SELECT d.tenant, d.doc_id FROM toolkit.documents AS d WHERE NOT EXISTS"
        " (SELECT 1 FROM {} AS c WHERE c.tenant = d.tenant AND c.doc_id = d.doc_id)"
        " ORDER BY d.tenant, d.doc_id"
    ).format(target.table)
    with conn.transaction():
        pending = conn.execute(missing).fetchall()
    for start in range(0, len(pending), batch_documents):
        if stop is not None and stop.is_set():
            break
        batch = pending[start : start + batch_documents]
        with translate_errors(), conn.transaction():
            # mark_version_ready locks the table in SHARE mode (waiting for this batch's rows to commit), so no row
            # without an embedding lands in a ready version.
            state = conn.execute("SELECT state FROM toolkit.versions WHERE version = %s", (target.version,)).fetchone()
            if state is None or state[0] != "building":
                break
            for tenant in sorted({t for t, _ in batch}):
                _lock_documents(conn, tenant, [d for t, d in batch if t == tenant])
            rows = []
            for tenant, doc_id in batch:
                row = conn.execute(
                    sql.SQL(
                        "SELECT d.raw_text, d.access_labels, d.metadata->'pages' FROM toolkit.documents AS d"
                        " WHERE d.tenant = %s AND d.doc_id = %s"
                        " AND NOT EXISTS (SELECT 1 FROM {} AS c WHERE c.tenant = d.tenant AND c.doc_id = d.doc_id)"
                    ).format(target.table),
                    (tenant, doc_id),
                ).fetchone()
                if row is None:  # deleted, or written by a concurrent ingest
                    continue
                text, labels, pages = row
                rows += [
                    chunk_row(tenant, doc_id, chunk, list(labels), None, pages)
                    for chunk in target.chunker.chunk(text, doc_id=doc_id)
                ]
            copy_chunk_rows(conn, target, rows)
        done += len(batch)
        if on_batch:
            on_batch(len(batch))
    return done


def _embed_text(heading_path, context, text) -> str:
    from toolkit.chunking.base import compose_embed_text

    return compose_embed_text(tuple(heading_path), context, text)


def embed_pending_rows(
    conn: psycopg.Connection,
    target: LiveVersion,
    embedder,
    budget: _Budget,
    *,
    batch_size: int,
    stop: threading.Event,
    limiter=None,
    on_batch: Callable[[int, int], None] | None = None,
) -> str | None:
    """Claims batches of rows without embeddings (SKIP LOCKED), embeds them, commits each batch whole.

    Returns why it stopped early ("max-cost", "interrupted") or None when the queue is empty."""
    claim = sql.SQL(
        "SELECT tenant, chunk_id, heading_path, context, text FROM {}"
        " WHERE embedding IS NULL AND NOT is_parent ORDER BY token_count, tenant, chunk_id LIMIT %s"
        " FOR UPDATE SKIP LOCKED"
    ).format(target.table)
    with conn.transaction():
        schema = sql.Identifier(vector_schema(conn))
        # Embeddings go to a temporary table by binary COPY, then into the version with one UPDATE.
        conn.execute(
            sql.SQL(
                "CREATE TEMP TABLE IF NOT EXISTS toolkit_backfill (tenant text, chunk_id text, embedding {}.vector)"
                " ON COMMIT DELETE ROWS"
            ).format(schema)
        )
    update = sql.SQL(
        "UPDATE {} AS c SET embedding = e.embedding::{}.{}, updated_at = now() FROM pg_temp.toolkit_backfill AS e"
        " WHERE c.tenant = e.tenant AND c.chunk_id = e.chunk_id"
    ).format(target.table, schema, sql.SQL(target.storage))
    while not stop.is_set():
        with translate_errors(), conn.transaction():
            rows = conn.execute(claim, (batch_size,)).fetchall()
            if not rows:
                return None
            texts = [_embed_text(h, c, t) for _, _, h, c, t in rows]
            tokens = sum(embedder.count_tokens(t) for t in texts)
            if not budget.reserve(tokens):
                return "max-cost"
            try:
                if limiter is not None:
                    limiter.acquire(tokens)
                vectors = np.asarray(embedder.embed_documents(texts), dtype=np.float32)
            except BaseException:
                budget.release(tokens)
                raise
            with conn.cursor().copy(
                "COPY pg_temp.toolkit_backfill (tenant, chunk_id, embedding) FROM STDIN (FORMAT BINARY)"
            ) as copy:
                copy.set_types(["text", "text", "vector"])
                for (tenant, chunk_id, *_), vector in zip(rows, vectors, strict=True):
                    copy.write_row((tenant, chunk_id, vector))
            conn.execute(update)
        if on_batch:
            on_batch(len(rows), tokens)
    return "interrupted"


def finalize_version(conn: psycopg.Connection, version: int, *, maintenance_work_mem: str = "512MB"):
    """Builds the HNSW index after the load and moves the version to ready; returns the index build seconds.

    Returns "pending" when rows still wait for an embedding (claimed by a concurrent backfill: run another
    pass), and None when the version is no longer building (a concurrent backfill finished it)."""
    # Two backfills finishing together: create_version_index builds the index once (it locks the table against
    # a second build), and marking a version ready twice is a no-op.
    if _version_row(conn, version)[6] != "building":
        return None
    with conn.transaction():
        if versions.version_pending_rows(conn, version) > 0:
            return "pending"
    # VACUUM ANALYZE after the load: the planner learns the table and the UPDATEs' dead tuples go.
    autocommit = conn.autocommit
    conn.autocommit = True
    try:
        conn.execute(sql.SQL("VACUUM (ANALYZE) {}").format(sql.Identifier("toolkit", f"chunks_v{version}")))
    finally:
        conn.autocommit = autocommit
    started = time.perf_counter()
    versions.create_version_index(conn, version, maintenance_work_mem=maintenance_work_mem)
    seconds = time.perf_counter() - started
    if not _index_valid(conn, version):
        raise StateError(
            f"The HNSW index of version {version} is not valid; drop it and run toolkit backfill --resume."
        )
    try:
        versions.mark_version_ready(conn, version)
    except StateError:
        return "pending"  # rows arrived after the count (a concurrent chunk batch): another pass
    return seconds


def _index_valid(conn, version: int) -> bool:
    with conn.transaction():
        return conn.execute("SELECT toolkit.version_index_valid(%s)", (version,)).fetchone()[0]


def _embed_all(database_url, conn, target, embedder, budget, batch_size, workers, stop, limiter, on_batch):
    """Runs the embedding loop on this connection, or on ``workers`` connections in threads; returns why it
    stopped early, or None when the queue is empty."""
    if workers == 1:
        return embed_pending_rows(
            conn, target, embedder, budget, batch_size=batch_size, stop=stop, limiter=limiter, on_batch=on_batch
        )
    outcomes: list[str | None] = []
    failures: list[BaseException] = []

    def worker() -> None:
        try:
            with connect(database_url) as wconn:
                outcomes.append(
                    embed_pending_rows(
                        wconn,
                        target,
                        embedder,
                        budget,
                        batch_size=batch_size,
                        stop=stop,
                        limiter=limiter,
                        on_batch=on_batch,
                    )
                )
        except BaseException as error:  # reported below; the other workers stop too
            failures.append(error)
            stop.set()

    threads = [threading.Thread(target=worker, name=f"backfill-{i}") for i in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]
    reasons = [o for o in outcomes if o]
    return reasons[0] if reasons else None


def backfill(
    database_url: str,
    model_alias: str,
    chunker_spec: str | None = None,
    *,
    resume: bool = False,
    batch_size: int = 64,
    requests_per_minute: float | None = None,
    tokens_per_minute: float | None = None,
    max_cost: float | None = None,
    workers: int = 1,
    storage: str = "vector",
    dimensions: int | None = None,
    stop: threading.Event | None = None,
    progress: Progress | None = None,
    embedder=None,
) -> BackfillReport:
    """Creates or resumes the version for (model, chunker), chunks and embeds everything pending, then
    builds the index and marks the version ready. Without ``chunker_spec``, the spec recommended for the model's
    input limit (``toolkit.chunking.recommended_spec``). ``stop`` (set by Ctrl-C) ends it after the current batch."""
    # Every value is checked before the version is created: a refusal leaves nothing behind.
    validation.BATCH_ROWS.check(batch_size)
    validation.WORKERS.check(workers)
    validation.REQUESTS_PER_MINUTE.check_optional(requests_per_minute)
    validation.TOKENS_PER_MINUTE.check_optional(tokens_per_minute)
    validation.COST_LIMIT.check_optional(max_cost)
    validation.DIMENSIONS.check_optional(dimensions)
    stop = stop or threading.Event()
    started = time.perf_counter()
    with connect(database_url) as conn:
        chunker_spec = chunker_spec or recommended_spec(get_model(conn, model_alias).max_input_tokens)
        version, created = prepare_version(
            conn, model_alias, chunker_spec, resume=resume, storage=storage, dimensions=dimensions
        )
        _, alias, spec, chunker_version, storage_, dims, state = _version_row(conn, version)
        model = get_model(conn, alias)
        report = BackfillReport(
            version=version, model_alias=alias, chunker_version=chunker_version, created=created, state=state
        )
        if state != "building":
            report.seconds = time.perf_counter() - started
            return report
        target = LiveVersion(version, model, spec, chunker_version, storage_, dims)
        limiter = None
        if requests_per_minute or tokens_per_minute:
            from toolkit.embedding.ratelimit import RateLimiter

            limiter = RateLimiter(requests_per_minute, tokens_per_minute)
        if embedder is None:
            extra = {"rate_limiter": limiter} if model.provider == "openai" and limiter else {}
            embedder = embedder_for_model(model, dims, **extra)
            if extra:
                limiter = None  # the OpenAI client path applies it, with Retry-After
        target._embedder = embedder
        progress = progress or Progress("backfill", unit="rows", quiet=True)

        budget = _Budget(model.price_per_million_tokens, max_cost)
        lock = threading.Lock()

        def on_batch(rows: int, tokens: int) -> None:
            with lock:
                report.rows_embedded += rows
                progress.advance(rows, tokens=f"{budget.tokens:,}", cost=f"${budget.cost:.4f}")

        # Chunk what is missing, embed what is pending, then finalize; another pass when a concurrent
        # backfill still holds rows of this version (it commits them, and one of us builds the index).
        while True:
            chunked = chunk_pending_documents(conn, target, stop=stop)
            report.documents_chunked += chunked
            if chunked:
                # Statistics for the work-queue query: without them it sorts every pending row per batch.
                with conn.transaction():
                    conn.execute(sql.SQL("ANALYZE {}").format(target.table))
            with conn.transaction():
                progress.total = report.rows_embedded + versions.version_pending_rows(conn, version)
            outcome = _embed_all(
                database_url, conn, target, embedder, budget, batch_size, workers, stop, limiter, on_batch
            )
            if outcome or stop.is_set():
                report.stopped = outcome or "interrupted"
                break
            finished = finalize_version(conn, version)
            if finished == "pending":
                time.sleep(0.2)
                continue
            if isinstance(finished, float):
                report.index_seconds = finished
            break
        progress.finish()
        report.tokens = budget.tokens
        report.estimated_cost_usd = round(budget.cost, 6)
        report.state = _version_row(conn, version)[6]
        report.seconds = time.perf_counter() - started
        return report
