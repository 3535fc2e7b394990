"""`toolkit estimate`: price a chunking choice before building it (library: toolkit.estimate)."""

from __future__ import annotations

import click

from toolkit import estimate as lib
from toolkit import validation
from toolkit.cli._output import FORMAT_OPTION, json_output
from toolkit.cli._params import Checked, Number


def _count(what: str) -> Checked:
    return Checked(lambda text: validation.CORPUS_COUNT.check(lib.parse_count(text, what)), "count")


def _overlap(text: str) -> None:
    # The share of a chunk is checked against a 100-token chunk: the percentage itself is what can be wrong.
    validation.OVERLAP_TOKENS.check(lib.parse_overlap(text, 100))


@click.command(short_help="Chunks, storage and cost per query of a chunking configuration.")
@click.option(
    "--tokens", type=_count("corpus size in tokens"), metavar="N", help="Corpus size in tokens: 65000, 65k, 1.5M, 10M."
)
@click.option(
    "--words", type=_count("corpus size in words"), metavar="N", help="Corpus size in words (times --tokens-per-word)."
)
@click.option(
    "--pages",
    type=_count("corpus size in pages"),
    metavar="N",
    help="Corpus size in pages (times --words-per-page and --tokens-per-word).",
)
@click.option(
    "--chunks",
    "chunk_total",
    type=_count("chunk count"),
    metavar="N",
    help="Corpus size as a chunk count (e.g. 10M chunks).",
)
@click.option(
    "--words-per-page", type=Number(validation.WORDS_PER_PAGE), default=500, show_default=True, help="For --pages."
)
@click.option(
    "--tokens-per-word",
    type=Number(validation.TOKENS_PER_WORD),
    default=1.3,
    show_default=True,
    help="For --words and --pages.",
)
@click.option(
    "--corpus",
    multiple=True,
    type=click.Path(exists=True),
    help="Count tokens and chunks for real in these files or folders (needs --chunker).",
)
@click.option("--chunker", "chunkers", multiple=True, metavar="SPEC", help="Chunker spec, e.g. markdown:400:40.")
@click.option(
    "--embedder",
    metavar="REF",
    help="With --corpus: count chunks as a version of this model holds them (split again where over its input "
    "limit, as backfill does), e.g. sentence-transformers:all-MiniLM-L6-v2.",
)
@click.option(
    "--chunk",
    "chunk_sizes",
    multiple=True,
    type=Number(validation.CHUNK_TOKENS),
    help="Chunk size in tokens (repeatable).",
)
@click.option(
    "--overlap",
    "overlaps",
    multiple=True,
    type=Checked(_overlap, "overlap"),
    help="Overlap in tokens or as 10%; one per --chunk or one for all.",
)
@click.option(
    "-k", "k", type=Number(validation.RESULTS), default=5, show_default=True, help="Chunks retrieved per query."
)
@click.option(
    "--dims", multiple=True, type=Number(validation.DIMENSIONS), help="Vector dimensions (repeatable). Default 1536."
)
@click.option(
    "--storage",
    multiple=True,
    type=click.Choice(lib.STORAGE_TYPES),
    help="Vector storage type (repeatable). Default float32.",
)
@click.option(
    "--embed-price",
    type=Number(validation.PRICE),
    default=0.20,
    show_default=True,
    help="USD per million embedded tokens.",
)
@click.option(
    "--input-price",
    type=Number(validation.PRICE),
    default=2.0,
    show_default=True,
    help="USD per million LLM input tokens.",
)
@click.option(
    "--queries-per-day",
    type=_count("queries per day"),
    metavar="N",
    help="Queries a day, for the daily input cost (e.g. 10k).",
)
@click.option(
    "--system-prompt-tokens",
    type=Number(validation.PROMPT_TOKENS),
    default=0,
    show_default=True,
    help="Added to every query.",
)
@click.option(
    "--question-tokens",
    type=Number(validation.PROMPT_TOKENS),
    default=0,
    show_default=True,
    help="Added to every query.",
)
@click.option(
    "--memory",
    type=Checked(lambda text: validation.MEMORY_BYTES.check(lib.parse_size(text)), "size"),
    metavar="SIZE",
    help="A server's memory (e.g. 64GB): says whether each HNSW index fits one server or how many it needs.",
)
@click.option(
    "--hnsw-m", type=Number(validation.HNSW_M), default=16, show_default=True, help="HNSW m, for the index size."
)
@FORMAT_OPTION
def estimate(output_format, **options):
    """Estimate chunks, embedding cost, raw vector bytes and prompt cost per query.

    Example: toolkit estimate --tokens 10M --chunk 200 --chunk 800 --overlap 0 --overlap 400 -k 5
    """
    result = lib.estimate_from(**options)
    if not json_output(output_format, result):
        click.echo(render_table(result))


def _size(n_bytes: int) -> str:
    if n_bytes >= 1e9:
        return f"{n_bytes / 1e9:,.1f} GB"
    if n_bytes >= 1e7:
        return f"{n_bytes / 1e6:,.0f} MB"
    if n_bytes >= 1e6:
        return f"{n_bytes / 1e6:.1f} MB"
    return f"{n_bytes / 1e3:,.0f} kB"


def _usd(value: float) -> str:
    return f"${value:,.2f}" if value >= 1 or value == 0 else f"${value:.4f}"


def render_table(result: lib.Estimate) -> str:
    """The estimate as an aligned text table with its assumptions above and notes below."""
    p = result.pricing
    corpus = f"{result.tokens:,} tokens" if result.tokens is not None else "chunk count given"
    if result.documents is not None:
        corpus += f" in {result.documents:,} document{'s' if result.documents != 1 else ''}"
    prices = f"USD per M tokens: embedding {p.embed_price:.2f}, input {p.input_price:.2f}"
    assumptions = f"corpus: {corpus}; k = {p.k}; {prices}"
    if p.system_prompt_tokens or p.question_tokens:
        assumptions += f"; system prompt + question {p.system_prompt_tokens + p.question_tokens:,} tokens"
    lines = [assumptions]
    header = [
        "chunker" if any(row.chunker for row in result.rows) else "chunk / overlap",
        "vectors",
        "chunks",
        "embedded tokens",
        "embedding cost",
        "raw vectors",
        "context/query",
        "input/query",
        "input $/query",
    ]
    if p.queries_per_day is not None:
        header.append(f"input $/day at {p.queries_per_day:,}")
    table = [header]
    for row in result.rows:
        config = row.chunker or f"{row.chunk} / {row.overlap}"
        cells = [
            config,
            f"{row.dims} {row.storage}",
            f"{row.chunks:,}",
            f"{row.embedded_tokens:,}",
            _usd(row.embedding_cost),
            _size(row.vector_bytes),
            f"{row.context_tokens_per_query:,}",
            f"{row.input_tokens_per_query:,}",
            _usd(row.input_cost_per_query),
        ]
        if p.queries_per_day is not None:
            cells.append(_usd(row.input_cost_per_day))
        table.append(cells)
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    for r in table:
        lines.append(
            "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
        )
    lines.extend(_memory_line(row) for row in result.rows if row.memory is not None)
    lines.extend(result.notes)
    return "\n".join(lines)


def _memory_line(row: lib.EstimateRow) -> str:
    """When do I need to shard: the row's HNSW index against the memory given."""
    fit = row.memory
    head = (
        f"memory {_size(fit.memory_bytes)}: {row.chunker or f'{row.chunk} / {row.overlap}'}, {row.dims} {row.storage}"
    )
    share = fit.index_bytes / fit.memory_bytes
    if fit.fits:
        return f"{head}: HNSW index {_size(fit.index_bytes)} ({share:.0%} of memory) fits one server."
    smaller = ""
    if row.storage == "float32":
        half = lib.hnsw_index_bytes(row.chunks, row.dims, "halfvec")
        bits = lib.hnsw_index_bytes(row.chunks, row.dims, "binary")
        smaller = f", or smaller vectors (halfvec index {_size(half)}, binary quantization {_size(bits)})"
    return (
        f"{head}: HNSW index {_size(fit.index_bytes)} ({share:.0%} of memory) is over the {_size(fit.usable_bytes)} "
        f"an index may use: shard by tenant over {fit.nodes} servers like this{smaller}."
    )


commands = [estimate]
