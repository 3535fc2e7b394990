"""Backfill: build a version for (model, chunker) from the stored documents, resumably, writing each row once.

The work queue is the database itself: a document with no rows in the version's table is pending
(``toolkit.claim_pending_documents`` owns the rule). A worker claims a batch of pending documents with
``FOR UPDATE SKIP LOCKED``, chunks them, embeds their chunks and COPYs the finished rows (small-to-big parents
beside their children) in one transaction. So a crash, Ctrl-C or reboot loses at most the batches in flight and
``--resume`` finds exactly those documents pending again; two backfills never take the same document; and a
document that ingest writes meanwhile (it writes every live version) is no longer pending. Several workers, each
on its own connection, keep the stages overlapping: while one waits for the model, another chunks or writes.
A batch holds about two seconds of the model's work, counted in tokens, within bounds of rows and bytes. The
HNSW index is built once, after the load.
"""

from __future__ import annotations

import math
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import psycopg

from toolkit import validation
from toolkit.chunking import recommended_spec
from toolkit.db.connection import connect, translate_errors
from toolkit.embedding import PROVIDERS
from toolkit.embedding.base import batches
from toolkit.errors import InputError, StateError
from toolkit.progress import Progress
from toolkit.store import versions
from toolkit.store.chunk_table import (
    LiveVersion,
    chunk_row,
    claim_pending_documents,
    copy_chunk_rows,
    delete_document_rows,
    known_embeddings,
    lock_version_writes,
)
from toolkit.store.models import embedder_for_model, get_model

# Workers (connections) by default: two keep a model call and the chunking or writing of another batch in
# flight at once, which is what keeps both cores busy; more only help a remote model with a long round trip.
DEFAULT_WORKERS = 2
# A batch (one transaction) aims at this many seconds of the model's own work, measured as it goes: long
# enough that a commit (a WAL flush) is a small part of it, short enough that Ctrl-C, a crash or a document
# lock held against ingest cost little.
TARGET_BATCH_SECONDS = 2.0
FIRST_BATCH_TOKENS = 4_096
MIN_BATCH_TOKENS = 1_024
MAX_BATCH_TOKENS = 262_144
MAX_BATCH_ROWS = 4_096
MAX_BATCH_BYTES = 16 * 1024 * 1024
FIRST_CLAIM_DOCUMENTS = 4
MAX_CLAIM_DOCUMENTS = 4_096
# The finalizing check re-chunks the pending documents it finds (to tell documents that make no chunk from work
# left); more than this many pending means another pass, without looking closer.
FINAL_CHECK_DOCUMENTS = 100
MAX_PASSES = 50
# The exit code of a backfill that stopped before the end, by BackfillReport.stopped: 3 when the next batch would
# pass the spending limit, 130 (128 + SIGINT) when it was interrupted.
STOP_EXIT_CODES = {"max-cost": 3, "interrupted": 130}


@dataclass
class BackfillReport:
    version: int
    model_alias: str
    chunker_version: str
    created: bool = False
    documents_chunked: int = 0
    rows_embedded: int = 0
    rows_written: int = 0
    tokens: int = 0
    estimated_cost_usd: float = 0.0
    seconds: float = 0.0
    index_seconds: float | None = None
    # Marking the version ready, which builds its full-text postings from the rows (after the HNSW index).
    ready_seconds: float | None = None
    state: str = "building"
    stopped: str | None = None
    documents_without_chunks: int = 0
    batches: int = 0
    workers: int = 1
    # Seconds spent in each stage, summed over the workers (they overlap, so the sum exceeds the wall time):
    # claim (the queue query), chunk, embed (the model call), write (COPY) and commit.
    stages: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict:
        data = dict(self.__dict__)
        data["stages"] = {k: round(v, 3) for k, v in self.stages.items()}
        data["seconds"] = round(self.seconds, 3)
        if self.index_seconds is not None:
            data["index_seconds"] = round(self.index_seconds, 3)
        if self.ready_seconds is not None:
            data["ready_seconds"] = round(self.ready_seconds, 3)
        data["estimated_cost_usd"] = round(self.estimated_cost_usd, 6)
        return data

    @property
    def exit_code(self) -> int:
        """0 when the run went to its end, else the code of ``STOP_EXIT_CODES`` for the reason it stopped."""
        return STOP_EXIT_CODES.get(self.stopped, 130) if self.stopped else 0


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
    state = versions.version_row(conn, existing).state
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


class _Sizer:
    """How many documents the next claim takes. With ``rows`` (``--batch-size``) it aims at that many rows;
    otherwise at ``TARGET_BATCH_SECONDS`` of the model's work, from the tokens per second it has measured, within
    ``MAX_BATCH_ROWS`` and ``MAX_BATCH_BYTES``. Shared by the workers."""

    def __init__(self, rows: int | None):
        self.rows = rows
        self.tokens_target = FIRST_BATCH_TOKENS
        self._documents = self._rows = self._tokens = self._bytes = 0
        self._rate: float | None = None  # tokens per second of the model, smoothed
        self._lock = threading.Lock()

    def documents(self) -> int:
        with self._lock:
            if not self._documents:
                return 1 if self.rows is not None else FIRST_CLAIM_DOCUMENTS
            per_document = [max(x / self._documents, 1e-9) for x in (self._rows, self._tokens, self._bytes)]
            rows, tokens, size = per_document
            if self.rows is not None:
                wanted = self.rows / rows
            else:
                wanted = min(self.tokens_target / tokens, MAX_BATCH_ROWS / rows, MAX_BATCH_BYTES / size)
            return max(1, min(MAX_CLAIM_DOCUMENTS, math.ceil(wanted) if self.rows is not None else int(wanted)))

    def observe(self, documents: int, rows: int, tokens: int, size: int, embed_seconds: float) -> None:
        with self._lock:
            self._documents += documents
            self._rows += rows
            self._tokens += tokens
            self._bytes += size
            if tokens and embed_seconds > 0:
                rate = tokens / embed_seconds
                self._rate = rate if self._rate is None else 0.7 * self._rate + 0.3 * rate
                wanted = self._rate * TARGET_BATCH_SECONDS
                self.tokens_target = int(min(MAX_BATCH_TOKENS, max(MIN_BATCH_TOKENS, wanted)))


@dataclass
class _Run:
    """What the workers of one pass share."""

    target: LiveVersion
    embedder: object
    budget: _Budget
    sizer: _Sizer
    stop: threading.Event
    limiter: object
    on_batch: Callable
    on_embedded: Callable
    outcome: str | None = None
    failures: list = field(default_factory=list)
    # The last key any worker of this pass claimed: every claim starts after it, so a document left pending in
    # this pass (it makes no chunk, or did not fit --max-cost) is not claimed again by another worker.
    after: tuple[str, str] = ("", "")
    lock: threading.Lock = field(default_factory=threading.Lock)

    def next_key(self) -> tuple[str, str]:
        with self.lock:
            return self.after

    def claimed_up_to(self, key: tuple[str, str]) -> None:
        with self.lock:
            self.after = max(self.after, key)


def _write_batch(conn, run: _Run) -> bool:
    """One transaction: claim, chunk, embed, COPY. Returns whether the queue had anything left to claim."""
    target, embedder, version = run.target, run.embedder, run.target.version
    stages: dict[str, float] = {}
    began = time.perf_counter()
    with translate_errors(), conn.transaction():
        lock_version_writes(conn, target)
        if versions.version_state(conn, version) != "building":
            run.outcome = run.outcome or "not building"
            return False
        claimed = claim_pending_documents(conn, version, run.next_key(), run.sizer.documents())
        if not claimed:
            return False
        run.claimed_up_to((claimed[-1][0], claimed[-1][1]))
        stages["claim"] = time.perf_counter() - began
        # Documents finished by someone else between the scan and the lock come back without their text.
        work = [row for row in claimed if row[2] is not None]
        mark = time.perf_counter()
        documents = []  # (tenant, doc_id, labels, rewrite, chunks, children, counts, bytes, pages)
        for tenant, doc_id, text, labels, rewrite, pages in work:
            chunks = target.chunker.chunk(text, doc_id=doc_id)
            children = [chunk for chunk in chunks if not chunk.is_parent]
            counts = embedder.count_chunk_tokens(children)
            # Bytes as toolkit.version_pending_documents counts them (octet_length): progress's share of the total.
            size = len(text.encode("utf-8"))
            documents.append((tenant, doc_id, list(labels), rewrite, chunks, children, counts, size, pages))
        stages["chunk"] = time.perf_counter() - mark
        # Whole documents within --max-cost: the rest stay pending (their locks go with this transaction).
        taken, tokens = [], 0
        for document in documents:
            cost = sum(document[6])
            if not run.budget.reserve(cost):
                run.outcome = "max-cost"
                break
            taken.append(document)
            tokens += cost
        if not taken:
            return True
        try:
            mark = time.perf_counter()
            known = _known_for_rewrite(conn, target, taken)
            texts, counts, hashes, seen = [], [], [], set(known)
            for _tenant, _doc, _labels, _rewrite, _chunks, children, child_counts, _size, _pages in taken:
                for chunk, count in zip(children, child_counts, strict=True):
                    if chunk.content_hash not in seen:  # one request per distinct text
                        seen.add(chunk.content_hash)
                        texts.append(chunk.embed_text)
                        counts.append(count)
                        hashes.append(chunk.content_hash)
            stages["claim"] += time.perf_counter() - mark
            mark = time.perf_counter()
            if texts:
                if run.limiter is not None:
                    run.limiter.acquire(sum(counts))
                vectors = _embed_in_blocks(run, texts, counts, sum(d[7] for d in taken))
                known.update(zip(hashes, vectors, strict=True))
            stages["embed"] = time.perf_counter() - mark
        except BaseException:
            run.budget.release(tokens)
            raise
        mark = time.perf_counter()
        rows = [
            chunk_row(tenant, doc_id, chunk, labels, None if chunk.is_parent else known[chunk.content_hash], pages)
            for tenant, doc_id, labels, _rewrite, chunks, _children, _counts, _size, pages in taken
            for chunk in chunks
        ]
        copy_chunk_rows(conn, target, rows)
        stages["write"] = time.perf_counter() - mark
        mark = time.perf_counter()
    stages["commit"] = time.perf_counter() - mark
    run.sizer.observe(len(taken), len(rows), tokens, sum(d[7] for d in taken), stages.get("embed", 0.0))
    run.on_batch(
        documents=len(taken),
        empty=sum(1 for d in taken if not d[4]),
        rows=len(rows),
        embedded=sum(len(d[5]) for d in taken),
        size=sum(d[7] for d in taken) if not texts else 0,  # with texts, their blocks reported the bytes
        stages=stages,
    )
    return True


def _embed_in_blocks(run: _Run, texts: list[str], counts: list[int], size: int):
    """The batch's texts embedded in blocks of about one batch's worth of the model's work (a claim of whole
    documents can be far more: four long documents first), each block reported to ``run.on_embedded`` with its
    share of the batch's bytes, so progress moves while a big batch is embedded."""
    import numpy as np

    total = sum(counts) or 1
    blocks, done, reported = [], 0, 0
    for start, stop in batches(counts, MAX_BATCH_ROWS, max(MIN_BATCH_TOKENS, run.sizer.tokens_target)):
        blocks.append(run.embedder.embed_documents(texts[start:stop], token_counts=counts[start:stop]))
        done += sum(counts[start:stop])
        weight = size * done // total
        run.on_embedded(chunks=stop - start, weight=weight - reported)
        reported = weight
    return np.concatenate(blocks) if len(blocks) > 1 else blocks[0]


def _known_for_rewrite(conn, target: LiveVersion, documents) -> dict:
    """Vectors already stored for documents an older toolkit left half-embedded (rows without embeddings):
    their rows are deleted and written again whole, reusing every vector they had."""
    known: dict = {}
    rewrite = [(tenant, doc_id) for tenant, doc_id, _labels, flag, *_ in documents if flag]
    for tenant in sorted({t for t, _ in rewrite}):
        doc_ids = [d for t, d in rewrite if t == tenant]
        known.update(known_embeddings(conn, target, tenant, doc_ids))
        delete_document_rows(conn, target, tenant, doc_ids)
    return known


def _worker(database_url: str, run: _Run) -> None:
    # Ctrl-C is for the main thread (it sets the stop, or aborts): never delivered to a worker.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        with connect(database_url) as conn:
            while not run.stop.is_set() and run.outcome is None and _write_batch(conn, run):
                pass
    except BaseException as error:  # reported by the main thread; the other workers stop too
        run.failures.append(error)
        run.stop.set()


def _run_pass(database_url: str, run: _Run, workers: int) -> None:
    """The workers walk the queue once together, in key order; returns when all are done."""
    threads = [
        threading.Thread(target=_worker, args=(database_url, run), name=f"backfill-{i}", daemon=True)
        for i in range(workers)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if run.failures:
        raise run.failures[0]


def _work_left(conn, target: LiveVersion) -> int:
    """Pending documents that make at least one chunk, once no batch of any backfill is in flight (under the
    exclusive write lock). Documents that make no chunk stay pending and count as done."""
    with translate_errors(), conn.transaction():
        lock_version_writes(conn, target, exclusive=True)
        count, _ = versions.pending_documents(conn, target.version)
        if count > FINAL_CHECK_DOCUMENTS:
            return count
        left = 0
        for _tenant, doc_id, text, *_ in claim_pending_documents(conn, target.version, ("", ""), count + 1):
            if text is not None and target.chunker.chunk(text, doc_id=doc_id):
                left += 1
        return left


@dataclass(frozen=True)
class Finalized:
    """What ``finalize_version`` did: ``outcome`` is "ready" (the index was built and the version moved to ready;
    ``index_seconds`` is the build's time, ``ready_seconds`` the move's, which builds the full-text postings),
    "pending" (rows still wait for an embedding: nothing was done) or "not building" (another backfill finished the
    version first)."""

    outcome: str
    index_seconds: float | None = None
    ready_seconds: float | None = None


def finalize_version(conn: psycopg.Connection, version: int, *, maintenance_work_mem: str = "512MB") -> Finalized:
    """Builds the HNSW index after the load and moves the version to ready, which builds its full-text postings
    (see ``Finalized``)."""
    # Two backfills finishing together: create_version_index builds the index once (it locks the table against a
    # second build), and marking a version ready twice is a no-op.
    row = versions.version_row(conn, version)
    if row.state != "building":
        return Finalized("not building")
    with conn.transaction():
        if versions.version_pending_rows(conn, version) > 0:
            return Finalized("pending")
    # ANALYZE after the load, so the planner knows the table. No VACUUM: rows are written once, so there are no
    # dead tuples to remove (the index build's scan sets the hint bits), and it was a full extra pass.
    versions.analyze_version(conn, row.chunk_table)
    started = time.perf_counter()
    versions.create_version_index(conn, version, maintenance_work_mem=maintenance_work_mem)
    seconds = time.perf_counter() - started
    if not versions.version_index_valid(conn, version):
        raise StateError(
            f"The HNSW index of version {version} is not valid; drop it and run toolkit backfill --resume."
        )
    started = time.perf_counter()
    try:
        versions.mark_version_ready(conn, version, maintenance_work_mem=maintenance_work_mem)
    except StateError:
        return Finalized("pending")
    return Finalized("ready", seconds, time.perf_counter() - started)


def backfill(
    database_url: str,
    model_alias: str,
    chunker_spec: str | None = None,
    *,
    resume: bool = False,
    batch_size: int | None = None,
    requests_per_minute: float | None = None,
    tokens_per_minute: float | None = None,
    max_cost: float | None = None,
    workers: int | None = None,
    storage: str = "vector",
    dimensions: int | None = None,
    stop: threading.Event | None = None,
    progress: Progress | None = None,
    embedder=None,
) -> BackfillReport:
    """Creates or resumes the version for (model, chunker), writes every pending document, then builds the index
    and marks the version ready. ``stop`` (set by Ctrl-C) ends it after the batches in flight.

    Without ``chunker_spec``, the spec recommended for the model's input limit (``toolkit.chunking.recommended_spec``).
    ``batch_size`` aims each transaction at about that many rows (whole documents); by default a batch is about
    ``TARGET_BATCH_SECONDS`` of the model's work. ``workers`` connections write at once (default 2)."""
    # Every value is checked before the version is created: a refusal leaves nothing behind (0 is refused for the
    # rates, not read as "no limit").
    validation.BATCH_ROWS.check_optional(batch_size)
    validation.WORKERS.check_optional(workers)
    validation.REQUESTS_PER_MINUTE.check_optional(requests_per_minute)
    validation.TOKENS_PER_MINUTE.check_optional(tokens_per_minute)
    validation.COST_LIMIT.check_optional(max_cost)
    validation.DIMENSIONS.check_optional(dimensions)
    workers = DEFAULT_WORKERS if workers is None else workers
    limiter = None
    if requests_per_minute is not None or tokens_per_minute is not None:
        from toolkit.embedding.ratelimit import RateLimiter

        limiter = RateLimiter(requests_per_minute, tokens_per_minute)
    stop = stop or threading.Event()
    started = time.perf_counter()
    with connect(database_url) as conn:
        model = get_model(conn, model_alias)
        chunker_spec = chunker_spec or recommended_spec(model.max_input_tokens)
        if embedder is None:
            extra = {"rate_limiter": limiter} if PROVIDERS[model.provider].remote and limiter else {}
            embedder = embedder_for_model(model, dimensions, **extra)
            if extra:
                limiter = None  # the OpenAI client path applies it per request, with Retry-After
        version, created = prepare_version(
            conn, model_alias, chunker_spec, resume=resume, storage=storage, dimensions=dimensions
        )
        row = versions.version_row(conn, version)
        alias, spec, chunker_version, storage_, dims, state = (
            row.model_alias,
            row.chunker_spec,
            row.chunker_version,
            row.storage,
            row.dimensions,
            row.state,
        )
        report = BackfillReport(
            version=version,
            model_alias=alias,
            chunker_version=chunker_version,
            created=created,
            state=state,
            workers=workers,
        )
        if state != "building":
            report.seconds = time.perf_counter() - started
            return report
        target = LiveVersion(version, model, spec, chunker_version, storage_, dims, chunk_table=row.chunk_table)
        target._embedder = embedder
        target.chunker  # noqa: B018 - refuse a mismatched chunker before any work
        progress = progress or Progress("backfill", unit="chunks", quiet=True)
        budget = _Budget(model.price_per_million_tokens, max_cost)
        lock = threading.Lock()

        def on_batch(*, documents, empty, rows, embedded, size, stages) -> None:
            with lock:
                report.documents_chunked += documents
                report.documents_without_chunks += empty
                report.rows_written += rows
                report.rows_embedded += embedded
                report.batches += 1
                for name, seconds in stages.items():
                    report.stages[name] = report.stages.get(name, 0.0) + seconds
                progress.advance(
                    0,
                    weight=size,
                    documents=f"{report.documents_chunked:,}/{documents_total[0]:,}",
                    rows=f"{report.rows_written:,}",
                    tokens=f"{budget.tokens:,}",
                    cost=f"${budget.cost:.4f}",
                )

        def on_embedded(*, chunks, weight) -> None:
            # Progress is counted in the chunks embedded (the model's work), its share and ETA in bytes of text.
            with lock:
                progress.advance(chunks, weight=weight, tokens=f"{budget.tokens:,}")

        sizer = _Sizer(batch_size)
        documents_total = [0]
        for _pass in range(MAX_PASSES):
            documents, size = versions.pending_documents(conn, version)
            documents_total[0] = report.documents_chunked + documents
            progress.set_total(None, weight=progress.weight_done + size)
            run = _Run(target, embedder, budget, sizer, stop, limiter, on_batch, on_embedded)
            _run_pass(database_url, run, workers)
            if run.outcome == "max-cost" or stop.is_set():
                report.stopped = run.outcome if run.outcome == "max-cost" else "interrupted"
                break
            if run.outcome == "not building":
                break
            if _work_left(conn, target):
                continue  # skipped by every worker (held by another writer then): another pass
            finished = finalize_version(conn, version)
            if finished.outcome == "pending":
                continue
            report.index_seconds = finished.index_seconds
            report.ready_seconds = finished.ready_seconds
            break
        else:
            raise StateError(
                f"Version {version} still has pending documents after {MAX_PASSES} passes; another writer keeps "
                "them locked. Run toolkit backfill --resume again when it has finished."
            )
        progress.finish()
        report.tokens = budget.tokens
        report.estimated_cost_usd = round(budget.cost, 6)
        report.state = versions.version_row(conn, version).state
        report.seconds = time.perf_counter() - started
        return report


def backfill_interruptible(
    database_url: str,
    model_alias: str,
    chunker_spec: str | None = None,
    *,
    on_stop: Callable[[], None] | None = None,
    **options,
) -> BackfillReport:
    """``backfill`` with Ctrl-C handled (from the main thread): the first SIGINT sets the stop event, so the run ends
    after the batches in flight (``report.stopped == "interrupted"``), and calls ``on_stop``; a second raises
    KeyboardInterrupt, which abandons the batches in flight (their transactions roll back with their connections).
    The previous SIGINT handler is restored when it returns or raises. ``options`` are ``backfill``'s."""
    stop = threading.Event()

    def interrupt(signum, frame):
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()
        if on_stop is not None:
            on_stop()

    previous = signal.signal(signal.SIGINT, interrupt)
    try:
        return backfill(database_url, model_alias, chunker_spec, stop=stop, **options)
    finally:
        signal.signal(signal.SIGINT, previous)
