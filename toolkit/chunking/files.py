"""Chunking files and directories (what ``toolkit chunk`` does), and the statistics it reports."""

from __future__ import annotations

import statistics
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from toolkit.chunking.document import Chunk
from toolkit.errors import InputError

DEFAULT_SIZE = 400
DEFAULT_OVERLAP = 40
# Without --spec or --strategy, the strategy follows the file's format.
STRATEGY_FOR_FORMAT = {"markdown": "markdown", "html": "html", "code": "code", "text": "recursive", "pdf": "recursive"}


def resolve_spec(
    spec: str | None, strategy: str | None, size: int | None, overlap: int | None, file_format: str
) -> str:
    """The spec to use for one file: ``spec`` as given, or built from strategy/size/overlap."""
    if spec and (strategy or size is not None or overlap is not None):
        raise InputError("Give either --spec or --strategy/--size/--overlap, not both; e.g. --spec markdown:400:40.")
    if spec:
        return spec
    chosen = strategy or STRATEGY_FOR_FORMAT.get(file_format, "recursive")
    if size is None:
        size = DEFAULT_SIZE
    if overlap is None:  # one sentence, or a tenth of the size (at most the default) in tokens; cluster takes none
        overlap = (
            1 if chosen in ("sentence", "semantic") else 0 if chosen == "cluster" else min(DEFAULT_OVERLAP, size // 10)
        )
    return f"{chosen}:{size}:{overlap}"


def chunk_paths(
    paths: Iterable[str],
    *,
    spec: str | None = None,
    strategy: str | None = None,
    size: int | None = None,
    overlap: int | None = None,
    embedder=None,
    clean_pdf_text: bool = False,
    clean_pdf: bool = True,
    limits=None,
) -> Iterator[tuple]:
    """(document, chunks) for each readable file and (error, []) for each unreadable one, in walk order;
    ``limits`` (a ``toolkit.text.sources.ReadLimits``) bounds what each file may cost to read."""
    from toolkit.chunking import get_chunker
    from toolkit.text.sources import SourceError, read_documents

    chunkers: dict[str, object] = {}
    resolve_spec(spec, strategy, size, overlap, "text")  # refuse a bad combination before reading files
    for result in read_documents(paths, clean_pdf_text=clean_pdf_text, clean_pdf=clean_pdf, limits=limits):
        if isinstance(result, SourceError):
            yield result, []
            continue
        chosen = resolve_spec(spec, strategy, size, overlap, result.format)
        if chosen not in chunkers:
            chunkers[chosen] = get_chunker(chosen, embedder=embedder)
        yield result, chunkers[chosen].chunk(result.text, result.doc_id)


@dataclass
class ChunkStats:
    """What ``--format stats`` prints."""

    documents: int = 0
    failed: int = 0
    chunks: int = 0
    parents: int = 0
    token_counts: list[int] = field(default_factory=list)
    over_budget_atomic: int = 0
    sentences: int = 0
    sentences_cut: int = 0

    def add(self, text: str, chunks: list[Chunk]) -> None:
        self.documents += 1
        searched = [c for c in chunks if not c.is_parent]
        self.parents += len(chunks) - len(searched)
        self.chunks += len(searched)
        self.token_counts.extend(c.token_count for c in searched)
        self.over_budget_atomic += sum(1 for c in searched if c.atomic)
        total, cut = sentences_cut(text, searched)
        self.sentences += total
        self.sentences_cut += cut

    def as_dict(self) -> dict:
        counts = sorted(self.token_counts)

        def percentile(p: float) -> int | None:
            return counts[min(len(counts) - 1, int(p * len(counts)))] if counts else None

        return {
            "documents": self.documents,
            "failed": self.failed,
            "chunks": self.chunks,
            "parents": self.parents,
            "tokens_min": counts[0] if counts else None,
            "tokens_p50": percentile(0.5),
            "tokens_p90": percentile(0.9),
            "tokens_max": counts[-1] if counts else None,
            "tokens_mean": round(statistics.fmean(counts), 1) if counts else None,
            "tokens_total": sum(counts),
            "atomic_over_budget": self.over_budget_atomic,
            "sentences": self.sentences,
            "sentences_cut": self.sentences_cut,
        }


def sentences_cut(text: str, chunks: list[Chunk]) -> tuple[int, int]:
    """(sentences, sentences cut): a sentence is cut when chunks cover part of it but no one chunk holds
    all of it. Text no chunk touches (a Markdown heading line, kept in heading paths) is not counted."""
    from toolkit.chunking.sentence import sentence_spans

    sentences = sentence_spans(text)
    spans = sorted((c.start, c.end) for c in chunks)
    starts = [s for s, _ in spans]
    reach = []  # the furthest end among chunks starting at or before each start
    furthest = -1
    for _, end in spans:
        furthest = max(furthest, end)
        reach.append(furthest)
    cut = counted = 0
    for start, end in sentences:
        touching = bisect_left(starts, end) - 1  # the last chunk starting before the sentence ends
        if touching < 0 or reach[touching] <= start:
            continue
        counted += 1
        i = bisect_right(starts, start) - 1
        if i < 0 or reach[i] < end:
            cut += 1
    return counted, cut
