"""The arithmetic of a chunking choice: chunks, embedding cost, raw vector bytes and prompt cost per query.

Formulas (docs/estimate.md explains them against the source documents' worked numbers (docs/sources.md)):
chunks = ceil(tokens / (chunk - overlap)); embedded tokens = tokens + (chunks - 1) * overlap;
raw vector bytes = chunks * bytes per vector; context per query = k * chunk tokens;
HNSW index bytes = chunks * (vector + graph bytes per element), see ``hnsw_index_bytes``; with a memory size, whether
that index fits one server or how many tenant-sharded nodes it needs (docs/scaling.md).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field

from toolkit.errors import InputError

# Vector storage types; vector_bytes() gives their raw size (before pgvector's 8-byte header, the HNSW graph, replicas).
STORAGE_TYPES = ("float32", "halfvec", "int8", "binary")

_SUFFIXES = {"": 1, "k": 1_000, "m": 1_000_000, "b": 1_000_000_000, "g": 1_000_000_000}
_SIZE_PATTERN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgtp]?)(i?)b?\s*$", re.I)
_SIZE_POWERS = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4, "p": 5}
# The share of a server's memory the HNSW index may take and still be searched at index speed: the rest is for
# shared_buffers' other pages, the heap rows fetched per query, connections and work_mem.
INDEX_MEMORY_SHARE = 0.75
# pgvector 0.8's HNSW pages: each element tuple holds the vector (with its 8-byte header), 10 heap TIDs and a
# little bookkeeping (about 80 bytes); its neighbour tuple holds (level + 2) * m TIDs of 6 bytes, (2 + 1/(m - 1)) * m
# on average; 1.05 for the space a page cannot fill. Within 9 % of the three builds measured here (200k × 384:
# vector 391 MB, halfvec 223 MB, binary quantization 67 MB).
_HNSW_ELEMENT_BYTES = 80 + 8
_HNSW_PAGE_FILL = 1.05
_COUNT_PATTERN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kKmMbBgG]?)\s*$")

RAW_VECTORS_NOTE = (
    "Raw vectors only: the HNSW graph, per-row headers, metadata, text and replicas add to this "
    "(plan for a multiple of it)."
)


def parse_count(value: str | int | float, what: str = "count") -> int:
    """Read a count written as `10M`, `65k`, `1.5M`, `10,000,000` or a plain integer."""
    if isinstance(value, bool):
        raise InputError(f"The {what} must be a number such as 65000, 65k or 10M, not {value!r}.")
    if isinstance(value, int | float):
        number = float(value)
    else:
        text = value.replace(",", "").replace("_", "")
        match = _COUNT_PATTERN.match(text)
        if not match:
            raise InputError(f"The {what} {value!r} is not a count: write a number such as 65000, 65k, 1.5M or 10M.")
        number = float(match.group(1)) * _SUFFIXES[match.group(2).lower()]
    if number < 0 or not math.isfinite(number):
        raise InputError(f"The {what} must be zero or more, not {value!r}.")
    return round(number)


def parse_overlap(value: str | int, chunk: int) -> int:
    """Read an overlap in tokens (`40`) or as a share of the chunk (`10%` of 400 is 40)."""
    text = str(value).strip()
    if text.endswith("%"):
        try:
            percent = float(text[:-1])
        except ValueError:
            raise InputError(f"The overlap {value!r} is not a percentage: write it like 10% or 40.") from None
        return round(chunk * percent / 100)
    return parse_count(text, "overlap")


def parse_size(value: str | int | float, what: str = "memory size") -> int:
    """Read a size in bytes written as `64GB`, `64G`, `512MB`, `1.5TB` (powers of 1,000) or `64GiB` (of 1,024)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        number, power, base = float(value), 0, 1000
    else:
        match = _SIZE_PATTERN.match(str(value).replace(",", "").replace("_", ""))
        if not match:
            raise InputError(f"The {what} {value!r} is not a size: write it like 64GB, 512MB, 1.5TB or 64GiB.")
        number, power = float(match.group(1)), _SIZE_POWERS[match.group(2).lower()]
        base = 1024 if match.group(3) else 1000
    if number <= 0 or not math.isfinite(number):
        raise InputError(f"The {what} must be above zero, not {value!r}.")
    return round(number * base**power)


def hnsw_index_bytes(chunks: int, dims: int, storage: str = "float32", m: int = 16) -> int:
    """Estimated bytes of a pgvector HNSW index over `chunks` vectors: each element stores its vector (as the
    index's type: float32, halfvec, or bits for binary quantization) and its neighbour lists."""
    if m < 2:
        raise InputError(f"HNSW m must be at least 2 (pgvector's default is 16), not {m}.")
    vector = vector_bytes(1, dims, storage) + 8
    neighbours = 4 + 6 * (2 + 1 / (m - 1)) * m
    return round(chunks * (vector + _HNSW_ELEMENT_BYTES + neighbours) * _HNSW_PAGE_FILL)


@dataclass(frozen=True)
class MemoryFit:
    """Whether one configuration's HNSW index fits a server of `memory_bytes`, or how many it needs."""

    memory_bytes: int
    usable_bytes: int  # INDEX_MEMORY_SHARE of memory
    index_bytes: int
    fits: bool
    nodes: int  # servers of this size the index needs, sharded by tenant (1 when it fits)


def memory_fit(index_bytes: int, memory_bytes: int) -> MemoryFit:
    usable = round(memory_bytes * INDEX_MEMORY_SHARE)
    nodes = max(1, math.ceil(index_bytes / usable))
    return MemoryFit(memory_bytes, usable, index_bytes, nodes == 1, nodes)


def tokens_from_words(words: float, tokens_per_word: float = 1.3) -> int:
    """Tokens in `words` words of English prose; 1.3 tokens a word is the chunk-size lesson's rule of thumb."""
    if words < 0 or tokens_per_word <= 0:
        raise InputError("Words must be zero or more and tokens per word above zero (English prose: about 1.3).")
    return round(words * tokens_per_word)


def chunk_count(tokens: int, chunk: int, overlap: int = 0) -> int:
    """Windows of `chunk` tokens that start every `chunk - overlap` tokens; the last, shorter one counts."""
    _check_chunk(chunk, overlap)
    return math.ceil(tokens / (chunk - overlap))


def embedded_tokens(tokens: int, chunks: int, overlap: int = 0) -> int:
    """Tokens sent to the embedding model: the corpus once, plus the overlap repeated by each later chunk."""
    return tokens + max(chunks - 1, 0) * overlap


def vector_bytes(chunks: int, dims: int, storage: str = "float32") -> int:
    """Raw bytes of `chunks` vectors: float32 4 bytes a dimension, halfvec 2, int8 1, binary 1 bit."""
    if storage not in STORAGE_TYPES:
        raise InputError(f"Unknown storage {storage!r}: use one of {', '.join(STORAGE_TYPES)}.")
    if dims <= 0:
        raise InputError(f"Dimensions must be a positive number (for example 384 or 1536), not {dims}.")
    per_vector = {"float32": 4 * dims, "halfvec": 2 * dims, "int8": dims, "binary": math.ceil(dims / 8)}[storage]
    return chunks * per_vector


def corpus_tokens(
    tokens: str | int | None = None,
    *,
    words: str | int | None = None,
    pages: str | int | None = None,
    words_per_page: float = 500,
    tokens_per_word: float = 1.3,
) -> int:
    """The corpus size in tokens from one of tokens, words or pages (pages * words/page * tokens/word)."""
    given = [name for name, value in (("tokens", tokens), ("words", words), ("pages", pages)) if value is not None]
    if len(given) != 1:
        raise InputError(
            "Give the corpus size once: --tokens (e.g. 10M), --words or --pages"
            + (f" (got {', '.join(given)})." if given else ".")
        )
    if tokens is not None:
        return parse_count(tokens, "token count")
    if words is not None:
        return tokens_from_words(parse_count(words, "word count"), tokens_per_word)
    if words_per_page <= 0:
        raise InputError("Words per page must be above zero (a dense manual page holds about 500).")
    return tokens_from_words(parse_count(pages, "page count") * words_per_page, tokens_per_word)


def pair_configs(chunk_sizes: Sequence[int], overlaps: Sequence[str | int]) -> list[tuple[int, int]]:
    """Pair each chunk size with its overlap: one overlap each, one overlap for all, or none (0)."""
    sizes = list(chunk_sizes) or [400]
    if not overlaps:
        overlaps = [0]
    if len(overlaps) == 1:
        overlaps = list(overlaps) * len(sizes)
    if len(overlaps) != len(sizes):
        raise InputError(
            f"Got {len(sizes)} chunk sizes and {len(overlaps)} overlaps: give one --overlap per --chunk, "
            "in the same order, or a single --overlap for all of them."
        )
    pairs = [(size, parse_overlap(overlap, size)) for size, overlap in zip(sizes, overlaps, strict=True)]
    for size, overlap in pairs:
        _check_chunk(size, overlap)
    return pairs


def _check_chunk(chunk: int, overlap: int) -> None:
    if chunk <= 0:
        raise InputError(f"The chunk size must be a positive number of tokens, not {chunk}.")
    if overlap < 0 or overlap >= chunk:
        raise InputError(
            f"The overlap ({overlap}) must be at least 0 and smaller than the chunk size ({chunk}); "
            "a 10% overlap of a 400-token chunk is 40."
        )


@dataclass(frozen=True)
class Pricing:
    """What a query costs around the retrieved chunks: model prices, traffic and the fixed prompt."""

    k: int = 5
    embed_price: float = 0.20  # USD per million tokens (the cost essay's assumption, docs/sources.md)
    input_price: float = 2.0  # USD per million input tokens (the cost essay's assumption, docs/sources.md)
    queries_per_day: int | None = None
    system_prompt_tokens: int = 0
    question_tokens: int = 0

    def __post_init__(self) -> None:
        if self.k <= 0:
            raise InputError(f"k (chunks retrieved per query) must be at least 1, not {self.k}.")
        if self.embed_price < 0 or self.input_price < 0:
            raise InputError("Prices are USD per million tokens and cannot be negative.")
        if self.system_prompt_tokens < 0 or self.question_tokens < 0:
            raise InputError("System prompt and question tokens cannot be negative.")
        if self.queries_per_day is not None and self.queries_per_day < 0:
            raise InputError("Queries per day cannot be negative.")


@dataclass(frozen=True)
class EstimateRow:
    """One configuration's numbers. Costs are USD; `chunker` is set when chunks were counted for real."""

    chunk: int | None
    overlap: int
    dims: int
    storage: str
    chunks: int
    embedded_tokens: int
    embedding_cost: float
    vector_bytes: int
    context_tokens_per_query: int
    input_tokens_per_query: int
    input_cost_per_query: float
    input_cost_per_day: float | None
    chunker: str | None = None
    mean_chunk_tokens: float | None = None
    hnsw_index_bytes: int = 0
    memory: MemoryFit | None = None


@dataclass(frozen=True)
class Estimate:
    """The corpus size, the assumptions and one row per configuration."""

    tokens: int | None
    pricing: Pricing
    rows: tuple[EstimateRow, ...]
    documents: int | None = None
    notes: tuple[str, ...] = field(default=(RAW_VECTORS_NOTE,))

    def to_dict(self) -> dict:
        return {
            "tokens": self.tokens,
            "documents": self.documents,
            **asdict(self.pricing),
            "rows": [asdict(row) for row in self.rows],
            "notes": list(self.notes),
        }


def _row(
    *,
    chunk: int | None,
    overlap: int,
    dims: int,
    storage: str,
    chunks: int,
    embedded: int,
    chunk_tokens: float,
    pricing: Pricing,
    chunker: str | None = None,
    memory: int | None = None,
    hnsw_m: int = 16,
) -> EstimateRow:
    context = round(min(pricing.k, chunks) * chunk_tokens)
    index = hnsw_index_bytes(chunks, dims, storage, hnsw_m)
    input_tokens = context + pricing.system_prompt_tokens + pricing.question_tokens
    per_query = input_tokens * pricing.input_price / 1e6
    return EstimateRow(
        chunk=chunk,
        overlap=overlap,
        dims=dims,
        storage=storage,
        chunks=chunks,
        embedded_tokens=embedded,
        embedding_cost=embedded * pricing.embed_price / 1e6,
        vector_bytes=vector_bytes(chunks, dims, storage),
        context_tokens_per_query=context,
        input_tokens_per_query=input_tokens,
        input_cost_per_query=per_query,
        input_cost_per_day=None if pricing.queries_per_day is None else per_query * pricing.queries_per_day,
        chunker=chunker,
        mean_chunk_tokens=None if chunker is None else chunk_tokens,
        hnsw_index_bytes=index,
        memory=None if memory is None else memory_fit(index, memory),
    )


def estimate(
    tokens: int | None = None,
    *,
    chunks: int | None = None,
    configs: Sequence[tuple[int, int]] = ((400, 0),),
    dims: Sequence[int] = (1536,),
    storage: Sequence[str] = ("float32",),
    pricing: Pricing | None = None,
    memory: int | None = None,
    hnsw_m: int = 16,
) -> Estimate:
    """Estimate each (chunk, overlap) configuration for a corpus of `tokens` tokens (with `memory`, in bytes:
    whether each HNSW index fits a server of that size).

    Give `chunks` instead of `tokens` when the chunk count is what you know (the chunking guide's "10M chunks"):
    the embedded tokens are then `chunks * chunk`, every chunk full.
    """
    if (tokens is None) == (chunks is None):
        raise InputError("Give the corpus size either in tokens (e.g. 10M) or in chunks, not both and not neither.")
    if (tokens or 0) < 0 or (chunks or 0) < 0:
        raise InputError("The corpus size cannot be negative.")
    if not configs:
        raise InputError("Give at least one chunk size (for example --chunk 400).")
    pricing = pricing or Pricing()
    rows = []
    for chunk, overlap in configs:
        _check_chunk(chunk, overlap)
        if tokens is not None:
            n_chunks = chunk_count(tokens, chunk, overlap)
            embedded = embedded_tokens(tokens, n_chunks, overlap)
        else:
            n_chunks, embedded = chunks, chunks * chunk
        for dim in dims:
            for kind in storage:
                rows.append(
                    _row(
                        chunk=chunk,
                        overlap=overlap,
                        dims=dim,
                        storage=kind,
                        chunks=n_chunks,
                        embedded=embedded,
                        chunk_tokens=chunk,
                        pricing=pricing,
                        memory=memory,
                        hnsw_m=hnsw_m,
                    )
                )
    return Estimate(tokens=tokens, pricing=pricing, rows=tuple(rows), notes=_notes(memory))


def estimate_corpus(
    paths: Iterable[str],
    chunker_specs: Sequence[str],
    *,
    dims: Sequence[int] = (1536,),
    storage: Sequence[str] = ("float32",),
    pricing: Pricing | None = None,
    memory: int | None = None,
    hnsw_m: int = 16,
    embedder=None,
) -> Estimate:
    """Chunk a real corpus with each chunker spec and estimate from the chunks and tokens actually counted.

    With ``embedder``, chunks are counted as a version of that model holds them (``get_chunker(spec,
    embedder=…)``, the one rule backfill, ingest, ``toolkit chunk --embedder`` and ``toolkit eval --model`` use: a
    chunk over the model's input limit, in its own tokenizer, is split again)."""
    from toolkit.chunking import get_chunker
    from toolkit.text.sources import SourceError, read_documents
    from toolkit.text.tokens import count_tokens

    if not chunker_specs:
        raise InputError("Give at least one --chunker spec with --corpus, for example markdown:400:40.")
    pricing = pricing or Pricing()
    documents, skipped = [], []
    for result in read_documents(list(paths)):
        if isinstance(result, SourceError):
            skipped.append(str(result))
        else:
            documents.append(result)
    if not documents:
        raise InputError("No readable documents were found under the --corpus path(s); point it at text files.")
    tokens = sum(count_tokens(document.text) for document in documents)
    rows = []
    notes = [*_notes(memory), "Context per query is k times the mean tokens of the chunks actually produced."]
    if embedder is None:
        notes.append(
            "Chunks as the chunker alone makes them: a version of a model holds more when some are over the model's "
            "input limit in its own tokenizer (backfill splits them again); give --embedder to count for that model."
        )
    else:
        notes.append(
            f"Chunks as a version of {embedder.ref} holds them: split again where over its input limit of "
            f"{embedder.max_input_tokens:,} tokens (its own tokenizer), as backfill does."
        )
    for spec in chunker_specs:
        chunker = get_chunker(spec, embedder=embedder)
        produced = [c for document in documents for c in chunker.chunk(document.text, document.doc_id)]
        chunk_list = [c for c in produced if not c.is_parent]  # small-to-big parents are not embedded
        parents = [c for c in produced if c.is_parent]
        embedded = sum(c.token_count for c in chunk_list)
        mean = embedded / len(chunk_list) if chunk_list else 0.0
        if parents:  # small-to-big: the LLM reads the parent of each retrieved child (at most k of them)
            mean = sum(c.token_count for c in parents) / len(parents)
            notes.append(f"{spec}: context per query counts k parents (mean {mean:,.0f} tokens), not the children.")
        size, overlap = _spec_size(spec)
        for dim in dims:
            for kind in storage:
                rows.append(
                    _row(
                        chunk=size,
                        overlap=overlap,
                        dims=dim,
                        storage=kind,
                        chunks=len(chunk_list),
                        embedded=embedded,
                        chunk_tokens=mean,
                        pricing=pricing,
                        chunker=spec,
                        memory=memory,
                        hnsw_m=hnsw_m,
                    )
                )
    if skipped:
        notes.append(f"Skipped {len(skipped)} file(s) that could not be read: " + "; ".join(skipped[:5]))
    return Estimate(tokens=tokens, pricing=pricing, rows=tuple(rows), documents=len(documents), notes=tuple(notes))


def _notes(memory: int | None) -> tuple[str, ...]:
    if memory is None:
        return (RAW_VECTORS_NOTE,)
    return (
        RAW_VECTORS_NOTE,
        f"An HNSW index is searched at index speed while it stays in memory: it may take {INDEX_MEMORY_SHARE:.0%} of "
        "a server's memory here; past that, shard by tenant (docs/scaling.md) or store smaller vectors.",
    )


def _spec_size(spec: str) -> tuple[int | None, int]:
    """The size and overlap fields of `strategy:size:overlap`, when they are plain integers (for display)."""
    parts = spec.split(":")
    try:
        return int(parts[1]), int(parts[2]) if len(parts) > 2 else 0
    except (IndexError, ValueError):
        return None, 0


def estimate_from(
    *,
    tokens: str | int | None = None,
    words: str | int | None = None,
    pages: str | int | None = None,
    chunk_total: str | int | None = None,
    words_per_page: float = 500,
    tokens_per_word: float = 1.3,
    corpus: Sequence[str] = (),
    chunkers: Sequence[str] = (),
    chunk_sizes: Sequence[int] = (),
    overlaps: Sequence[str | int] = (),
    dims: Sequence[int] = (),
    storage: Sequence[str] = (),
    k: int = 5,
    embed_price: float = 0.20,
    input_price: float = 2.0,
    queries_per_day: str | int | None = None,
    system_prompt_tokens: int = 0,
    question_tokens: int = 0,
    memory: str | int | None = None,
    hnsw_m: int = 16,
    embedder: str | None = None,
) -> Estimate:
    """The estimate for whichever description of the corpus is given (what ``toolkit estimate`` takes): real files
    (``corpus`` with ``chunkers`` specs: ``estimate_corpus``), a chunk count (``chunk_total``), or a size in tokens,
    words or pages (``corpus_tokens``), each with ``chunk_sizes``/``overlaps`` (``pair_configs``). Counts and the
    memory may be text such as 10M or 64GB; k to question_tokens are the ``Pricing``. Refuses a mix of descriptions.
    ``dims`` defaults to 1536 and ``storage`` to float32; ``embedder`` (a reference such as
    ``sentence-transformers:all-MiniLM-L6-v2``, with ``corpus`` only) counts chunks as that model's version holds
    them."""
    pricing = Pricing(
        k=k,
        embed_price=embed_price,
        input_price=input_price,
        queries_per_day=None if queries_per_day is None else parse_count(queries_per_day, "queries per day"),
        system_prompt_tokens=system_prompt_tokens,
        question_tokens=question_tokens,
    )
    shape = {
        "dims": dims or (1536,),
        "storage": storage or ("float32",),
        "pricing": pricing,
        "memory": None if memory is None else parse_size(memory),
        "hnsw_m": hnsw_m,
    }
    if corpus:
        if any(v is not None for v in (tokens, words, pages, chunk_total)) or chunk_sizes or overlaps:
            raise InputError(
                "--corpus measures the corpus itself: drop --tokens/--words/--pages/--chunks and give the "
                "chunking as --chunker SPEC (e.g. markdown:400:40) instead of --chunk/--overlap."
            )
        from toolkit.embedding import get_embedder

        model = get_embedder(embedder) if embedder else None
        if model is not None and not dims and model.dimensions:
            shape["dims"] = (model.dimensions,)  # its vectors, unless other dimensions are asked for
        return estimate_corpus(corpus, chunkers, embedder=model, **shape)
    if embedder:
        raise InputError(
            "--embedder counts the chunks of a real corpus as that model's version holds them: give it with --corpus "
            "and --chunker SPEC."
        )
    if chunkers:
        raise InputError("--chunker needs --corpus PATH to chunk; without a corpus use --chunk and --overlap.")
    if chunk_total is not None:
        if any(v is not None for v in (tokens, words, pages)):
            raise InputError("Give the corpus size once: --chunks, or --tokens / --words / --pages, not both.")
        return estimate(
            chunks=parse_count(chunk_total, "chunk count"), configs=pair_configs(chunk_sizes, overlaps), **shape
        )
    size = corpus_tokens(
        tokens, words=words, pages=pages, words_per_page=words_per_page, tokens_per_word=tokens_per_word
    )
    return estimate(size, configs=pair_configs(chunk_sizes, overlaps), **shape)
