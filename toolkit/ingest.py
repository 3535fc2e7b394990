"""Ingest: documents become chunks in every live version, embedded with each version's model.

An unchanged document does nothing; a changed one is re-chunked, and only chunks whose embedded text is new
are sent to the model (the others reuse their stored vector). Rows are written with binary COPY, one
transaction per batch of documents, so a failure leaves the previous state of that batch intact.
"""

from __future__ import annotations

import contextlib
import queue
import signal
import threading
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import Future, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import psycopg

from toolkit import validation
from toolkit.db.connection import translate_errors
from toolkit.errors import EmbeddingError, InputError
from toolkit.progress import Progress
from toolkit.store.chunk_table import (
    LiveVersion,
    chunk_row,
    known_embeddings,
    live_versions,
    lock_live_version_ids,
    replace_document_rows,
)
from toolkit.store.documents import (
    delete_documents,
    document_hash,
    documents_under_root,
    lock_documents,
    move_documents,
    stored_documents,
    upsert_documents,
    validate_labels,
)


class _VersionsChanged(Exception):
    """A version was created or retired between preparing a batch and writing it: prepare it again."""


@dataclass
class FileFailure:
    source: str
    reason: str


@dataclass
class IngestReport:
    tenant: str
    documents: int = 0
    new: int = 0
    changed: int = 0
    unchanged: int = 0
    deleted: int = 0
    failed: list[FileFailure] = field(default_factory=list)
    chunks_written: dict[int, int] = field(default_factory=dict)
    embedded: int = 0
    # Wall time by stage: reading files, chunking + embedding, writing (documents, deletes, COPY).
    seconds: dict[str, float] = field(default_factory=lambda: {"read": 0.0, "prepare": 0.0, "write": 0.0})
    reused: int = 0
    versions: list[int] = field(default_factory=list)
    # Building versions whose model failed here (version → why): their rows were left to their backfill.
    deferred: dict[int, str] = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {
            "tenant": self.tenant,
            "documents": self.documents,
            "new": self.new,
            "changed": self.changed,
            "unchanged": self.unchanged,
            "deleted": self.deleted,
            "failed": [{"source": f.source, "reason": f.reason} for f in self.failed],
            "chunks_written": {str(k): v for k, v in self.chunks_written.items()},
            "embedded": self.embedded,
            "reused_embeddings": self.reused,
            "versions": self.versions,
            "deferred_versions": {str(k): v for k, v in self.deferred.items()},
            "seconds": {k: round(v, 3) for k, v in self.seconds.items()},
        }


def ingest(
    conn: psycopg.Connection,
    paths: Sequence[str | Path],
    tenant: str,
    *,
    acl: Iterable[str] = (),
    prune: bool = False,
    batch_documents: int = 32,
    progress: Progress | None = None,
    overlap: bool = True,
    limits=None,
    metadata: dict | None = None,
) -> IngestReport:
    """Ingests files and directories for a tenant into every live version; see the module docstring. ``limits``
    (a ``toolkit.text.sources.ReadLimits``) bounds what each file may cost to read: a file over a limit is
    reported in ``failed`` and the others are stored. ``metadata`` (top-level keys with a string, number, boolean
    or null value) is merged into every document's ``documents.metadata``, where search filters find it
    (``metadata.KEY=VALUE``); an unchanged document gets it without being chunked or embedded again."""
    from toolkit.text.sources import SourceError, read_documents

    validation.BATCH_DOCUMENTS.check(batch_documents)
    validation.check_tenant(tenant)
    labels = validate_labels(acl)
    metadata = validation.document_metadata(metadata)
    roots = []
    for path in paths:
        root = Path(path)
        if not root.exists() and not root.is_symlink():
            raise InputError(f"{path} does not exist; nothing was ingested. Check the path.")
        roots.append(str(root.resolve()))
    report = IngestReport(tenant=tenant)
    targets = live_versions(conn)
    report.versions = [t.version for t in targets]
    for target in targets:
        _usable(target, targets, report)  # refuse a mismatched chunker before any work

    began = time.perf_counter()
    documents, seen_by_root, first_source = [], {root: set() for root in roots}, {}
    for path, root in zip(paths, roots, strict=True):
        for item in read_documents([path], limits=limits):
            if isinstance(item, SourceError):
                report.failed.append(FileFailure(str(item.source), item.reason))
                if getattr(item, "doc_id", None):
                    seen_by_root[root].add(item.doc_id)
                continue
            if item.doc_id in first_source:
                raise InputError(
                    f"Two files would be stored as the same document {item.doc_id!r}: {first_source[item.doc_id]} "
                    f"and {item.source}. Ingest the directories separately, or under different tenants."
                )
            first_source[item.doc_id] = item.source
            documents.append((root, item))
            seen_by_root[root].add(item.doc_id)
    report.documents = len(documents)
    report.seconds["read"] = time.perf_counter() - began
    progress = progress or Progress("ingest", unit="documents", quiet=True)
    # Counted in documents; the share and the ETA in bytes of text (a long document is most of the work).
    progress.set_total(len(documents), weight=sum(len(item.text) for _, item in documents))

    _run_batches(conn, targets, tenant, labels, metadata, documents, batch_documents, report, progress, overlap)

    if prune:
        with translate_errors(), conn.transaction():
            stale = []
            for root, seen in seen_by_root.items():
                if validation.text_problem(root):
                    continue  # a path that is not UTF-8 was never stored, so nothing under it can be stale
                stale += [doc_id for doc_id in documents_under_root(conn, tenant, root) if doc_id not in seen]
            # As toolkit delete does (audited, the logged questions citing them too), in this transaction.
            report.deleted = delete_documents(conn, tenant, sorted(stale), reason="toolkit ingest --prune")
    progress.finish()
    return report


# Counted when a batch is planned (undone if it must be planned again); embedded and reused are counted when a
# batch is written.
_COUNTERS = ("new", "changed", "unchanged")


@dataclass
class _Batch:
    """One batch in flight: planned (documents to write, known vectors), then prepared in the worker thread."""

    index: int
    documents: list
    targets: list[LiveVersion]
    saved: list[int]  # the report's counters before this batch was planned
    work: list = field(default_factory=list)
    moved: list = field(default_factory=list)  # unchanged documents read from another root or path
    known: dict[int, dict] = field(default_factory=dict)  # version → stored vectors by content hash
    prepared: Future | None = None

    def result(self) -> _Prepared:
        """Waits for the worker; raises what its prepare raised."""
        return self.prepared.result() if self.prepared is not None else _Prepared({}, 0, 0, 0.0)


class _Prepared(NamedTuple):
    """A batch chunked and embedded; the counts go into the report once the batch is written."""

    rows_by_version: dict[int, list]
    embedded: int
    reused: int
    seconds: float
    deferred: dict[int, str] = {}  # noqa: RUF012 - never mutated: building versions left to their backfill


def _deferrable(target: LiveVersion, targets: Sequence[LiveVersion]) -> bool:
    """Whether a failure of the version's model here may leave its rows to its backfill instead of stopping ingest:
    when it is still building and another version is served (a version being built, perhaps with a model the writer
    registered without the probe, must not stop every tenant's ingest into what is served). A served version's
    failure, and any failure when nothing is served, is raised."""
    return target.building and any(not t.building for t in targets)


def _usable(target: LiveVersion, targets: Sequence[LiveVersion], report: IngestReport) -> bool:
    """Whether ingest can chunk for the version here (its model usable in this process); a deferrable failure is
    recorded in the report instead of raised."""
    try:
        target.chunker  # noqa: B018 - builds the embedder and the chunker, refusing a mismatched chunker
        return True
    except (InputError, EmbeddingError) as error:
        if not _deferrable(target, targets):
            raise
        report.deferred[target.version] = str(error)
        return False


class _Worker:
    """One daemon thread that runs submitted calls in order. Daemon, so that an interrupted ingest exits at once
    instead of waiting for a model call in flight (the worker never touches the database: nothing is left half
    written)."""

    def __init__(self):
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="toolkit-ingest-prepare", daemon=True)
        self._thread.start()

    def submit(self, function, *args) -> Future:
        future: Future = Future()
        self._queue.put((future, function, args))
        return future

    def close(self) -> None:
        self._queue.put(None)

    def _run(self) -> None:
        # Ctrl-C belongs to the main thread: with SIGINT blocked here the kernel never hands it to this thread,
        # where it would only wake a network call, and the main thread's wait ends at once.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        while (item := self._queue.get()) is not None:
            future, function, args = item
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(function(*args))
                except BaseException as error:  # handed to the caller, which raises it
                    future.set_exception(error)


def _run_batches(
    conn, targets, tenant, labels, metadata, documents, batch_documents, report, progress, overlap
) -> None:
    """Plan, prepare and write the batches; with ``overlap``, the next batch is prepared while one is written.

    Chunking and embedding (the prepare stage) run in one worker thread; everything that touches the
    connection stays in this thread. While the server is busy with one batch's COPY (or a model computes), the
    worker prepares the next, so the two stages overlap instead of adding up. The next batch's prepare starts
    only after the current one's has succeeded, and a batch is written only after its own prepare succeeded:
    when one fails, the batches before it are committed and nothing after it was started, as without the
    overlap. Counts of embedded and reused chunks are added when their batch is written. ``overlap=False``
    prepares each batch only after the one before it is written (the stages' times then add up, which is how
    ``bench/ingest.py`` times the write stage alone).
    """
    batches = [documents[i : i + batch_documents] for i in range(0, len(documents), batch_documents)]
    worker = _Worker()

    def start(index: int) -> _Batch:
        planned = _plan_batch(conn, targets, tenant, labels, metadata, index, batches[index], report)
        if planned.work:
            planned.prepared = worker.submit(
                _prepare_batch, planned.targets, tenant, labels, planned.work, planned.known
            )
        return planned

    def write(batch: _Batch, prepared: _Prepared) -> None:
        if batch.work:
            _write_batch(conn, batch.targets, tenant, labels, metadata, batch.work, prepared.rows_by_version, report)
        if batch.moved:
            _write_moved(conn, tenant, metadata, batch.moved)
        report.embedded += prepared.embedded
        report.reused += prepared.reused
        report.deferred.update(prepared.deferred)
        report.seconds["prepare"] += prepared.seconds

    try:
        index, pending = 0, None
        while pending is not None or index < len(batches):
            if pending is None:
                pending, index = start(index), index + 1
            prepared = pending.result()
            following = None
            if overlap and index < len(batches):
                try:
                    following, index = start(index), index + 1
                except Exception:
                    with contextlib.suppress(_VersionsChanged):
                        write(pending, prepared)  # commit what is ready, as without the overlap
                    raise
            try:
                write(pending, prepared)
            except _VersionsChanged:
                # A backfill created (or retire dropped) a version meanwhile: undo the counts of this batch and
                # the next, then plan both again for the new set of versions.
                if following is not None and following.prepared is not None:
                    wait([following.prepared])
                for name, value in zip(_COUNTERS, pending.saved, strict=True):
                    setattr(report, name, value)
                known = {t.version: t for t in targets}
                targets = [known.get(t.version, t) for t in live_versions(conn)]
                report.versions = [t.version for t in targets]
                index, pending = pending.index, None
                continue
            progress.advance(
                len(pending.documents),
                weight=sum(len(item.text) for _, item in pending.documents),
                chunks=f"{sum(report.chunks_written.values()):,}",
            )
            pending = following
    finally:
        worker.close()


def _plan_batch(conn, targets, tenant, labels, metadata, index, batch, report: IngestReport) -> _Batch:
    """Which documents of the batch changed, and the stored vectors each version can reuse for them."""
    planned = _Batch(index, batch, list(targets), [getattr(report, name) for name in _COUNTERS])
    doc_ids = [doc.doc_id for _, doc in batch]
    stored = stored_documents(conn, tenant, doc_ids, metadata)
    for root, doc in batch:
        digest = document_hash(doc.text)
        if doc.doc_id in stored and stored[doc.doc_id][:2] == (digest, labels):
            # Same document, content and labels: nothing to chunk or embed, even if it is read from a folder of
            # another name (only the stored source and root, which --prune goes by, are updated).
            report.unchanged += 1
            _, _, stored_root, stored_source, has_metadata = stored[doc.doc_id]
            if stored_root != root or stored_source != str(doc.source) or not has_metadata:
                planned.moved.append((root, doc))
            continue
        if doc.doc_id in stored:
            report.changed += 1
        else:
            report.new += 1
        planned.work.append((root, doc, digest))
    if planned.work:
        changed_ids = [doc.doc_id for _, doc, _ in planned.work]
        with conn.transaction():
            planned.known = {t.version: known_embeddings(conn, t, tenant, changed_ids) for t in planned.targets}
    return planned


def _prepare_batch(targets, tenant, labels, work, known_by_version) -> _Prepared:
    """Chunk and embed (no database access: this runs in the worker thread). Each version's new chunk texts of the
    whole batch go to its model in one call (which a remote model splits into requests of its batch size), not
    one call per document."""
    began = time.perf_counter()
    embedded = reused = 0
    rows_by_version = {}
    deferred: dict[int, str] = {}
    for target in targets:
        known = known_by_version[target.version]
        try:
            chunked = [(doc, target.chunker.chunk(doc.text, doc_id=doc.doc_id)) for _, doc, _ in work]
        except (InputError, EmbeddingError) as error:
            if not _deferrable(target, targets):
                raise
            # Its model cannot be used here: the documents' old rows go, the backfill writes them again.
            deferred[target.version] = str(error)
            rows_by_version[target.version] = []
            continue
        missing: dict[str, object] = {}
        children = 0
        for _doc, chunks in chunked:
            for chunk in chunks:
                if not chunk.is_parent:
                    children += 1
                    if chunk.content_hash not in known:
                        missing.setdefault(chunk.content_hash, chunk)
        if target.embedding_deferred:  # rows left without embeddings for its backfill (toolkit.embedding_deferred)
            children -= sum(
                1 for _doc, chunks in chunked for c in chunks if not c.is_parent and c.content_hash in missing
            )
            missing = {}
        if missing:
            chunks = list(missing.values())
            try:
                counts = target.embedder.count_chunk_tokens(chunks)
                vectors = target.embedder.embed_documents([c.embed_text for c in chunks], token_counts=counts)
            except (InputError, EmbeddingError) as error:
                if not _deferrable(target, targets):
                    raise
                # Its model failed: the rows are written without embeddings, for the version's backfill.
                deferred[target.version] = str(error)
                children -= sum(
                    1 for _doc, chunks in chunked for c in chunks if not c.is_parent and c.content_hash in missing
                )
                missing = {}
                vectors = []
            known.update(zip(missing, vectors, strict=True))
            embedded += len(missing)
        reused += children - len(missing)  # every other child takes a stored vector or one of this batch
        rows_by_version[target.version] = [
            chunk_row(
                tenant, doc.doc_id, chunk, labels, None if chunk.is_parent else known.get(chunk.content_hash), doc.pages
            )
            for doc, chunks in chunked
            for chunk in chunks
        ]
    return _Prepared(rows_by_version, embedded, reused, time.perf_counter() - began, deferred)


def _write_moved(conn, tenant, metadata, moved) -> None:
    """Updates the source path, root and given metadata of unchanged documents (read from another place, or given
    other metadata); no chunk is touched."""
    move_documents(conn, tenant, [(doc.doc_id, str(doc.source), root) for root, doc in moved], metadata)


def _write_batch(conn, targets, tenant, labels, metadata, work, rows_by_version, report: IngestReport) -> None:
    changed_ids = [doc.doc_id for _, doc, _ in work]
    began = time.perf_counter()
    with translate_errors(), conn.transaction():
        if lock_live_version_ids(conn) != [t.version for t in targets]:
            raise _VersionsChanged
        lock_documents(conn, tenant, changed_ids)
        upsert_documents(
            conn,
            tenant,
            labels,
            metadata,
            [
                (doc.doc_id, str(doc.source), doc.title or "", doc.format, doc.text, digest, root, doc.pages)
                for root, doc, digest in work
            ],
        )
        for target in targets:
            replace_document_rows(conn, target, tenant, changed_ids, rows_by_version[target.version])
            report.chunks_written[target.version] = report.chunks_written.get(target.version, 0) + len(
                rows_by_version[target.version]
            )
    report.seconds["write"] += time.perf_counter() - began
