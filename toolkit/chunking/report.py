"""Chunking files for a report (what ``toolkit chunk`` prints): each chunk as a plain record, the files that could
not be read, and the statistics of ``--format stats``."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from toolkit.chunking.files import ChunkStats, chunk_paths


@dataclass
class ChunkReport:
    """What ``chunk_files`` did: files skipped (unreadable), chunks made, and the statistics when asked for."""

    failed: int = 0
    chunks: int = 0
    stats: ChunkStats | None = None


def chunk_record(source: str, c, pages=None) -> dict:
    """A chunk as a JSON-ready record: its span, heading path, tokens, ids and the PDF pages it spans (or None)."""
    from toolkit.text.pdf import pages_of_span

    return {
        "doc_id": c.doc_id,
        "source": source,
        "start": c.start,
        "end": c.end,
        "heading_path": list(c.heading_path),
        "token_count": c.token_count,
        "text": c.text,
        "chunk_id": c.chunk_id,
        "position": c.position,
        "total": c.total,
        "content_hash": c.content_hash,
        "chunker_version": c.chunker_version,
        "parent_id": c.parent_id,
        "is_parent": c.is_parent,
        "context": c.context,
        "atomic": c.atomic,
        "pages": pages_of_span(pages, c.start, c.end),
    }


def chunk_files(
    paths: Iterable[str],
    *,
    embedder=None,
    stats: bool = False,
    on_record: Callable[[dict], None] | None = None,
    on_skipped: Callable[[object], None] | None = None,
    progress=None,
    **options,
) -> ChunkReport:
    """Chunks the files and directories of ``paths`` (``toolkit.chunking.files.chunk_paths``, whose ``options`` these
    are: spec, strategy, size, overlap, clean_pdf_text, clean_pdf) as they are read, in walk order: ``on_record``
    receives each chunk's ``chunk_record``, ``on_skipped`` each unreadable file's ``SourceError``; ``stats`` gathers
    ``ChunkStats``. ``embedder`` (an ``Embedder``) is for the semantic and cluster strategies;
    ``progress`` (a ``toolkit.progress.Progress``) counts files."""
    from toolkit.text.sources import SourceError

    report = ChunkReport(stats=ChunkStats() if stats else None)
    for document, chunks in chunk_paths(paths, embedder=embedder, **options):
        report.chunks += len(chunks)
        if progress is not None:
            progress.advance(chunks=report.chunks, skipped=report.failed)
        if isinstance(document, SourceError):
            report.failed += 1
            if on_skipped is not None:
                on_skipped(document)
            continue
        if report.stats is not None:
            report.stats.add(document.text, chunks)
        if on_record is not None:
            for c in chunks:
                on_record(chunk_record(document.source, c, document.pages))
    if progress is not None:
        progress.finish()
    if report.stats is not None:
        report.stats.failed = report.failed
    return report
