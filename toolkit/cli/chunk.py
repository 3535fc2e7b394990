"""``toolkit chunk``: chunk files or directories and print the chunks (JSONL), a table, or statistics."""

from __future__ import annotations

import click

from toolkit.chunking.spec import STRATEGIES
from toolkit.cli._params import Number, read_limit_options
from toolkit.cli._render import ChunkOutput
from toolkit.validation import CHUNK_TOKENS, OVERLAP_TOKENS


@click.command("chunk", short_help="Chunk files with a strategy; print JSONL, a table or stats.")
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=str))
@click.option("--spec", metavar="SPEC", help="strategy:size:overlap[:key=value...], e.g. markdown:400:40.")
@click.option(
    "--strategy",
    type=click.Choice(STRATEGIES),
    help="Strategy (default: from the file type: markdown, html, code, else recursive).",
)
@click.option("--size", type=Number(CHUNK_TOKENS), help="Chunk size in tokens (default 400).")
@click.option(
    "--overlap",
    type=Number(OVERLAP_TOKENS),
    help="Overlap in tokens (default: a tenth of the size, at most 40), or in sentences (default 1).",
)
@click.option(
    "--embedder",
    metavar="REF",
    help="Embedder for the semantic and cluster strategies, e.g. hashing:64; with any strategy, chunks over its "
    "input limit are split again, as a version of that model holds them.",
)
@click.option("--clean-pdf-text", is_flag=True, help="Clean PDF-extracted .txt files first (see docs).")
@click.option(
    "--no-pdf-cleaning",
    is_flag=True,
    help="Keep a PDF's lines as extracted (headers, page numbers, line wraps; pages split by form feeds).",
)
@click.option(
    "--format",
    "output_format",
    type=click.Choice(["jsonl", "table", "stats"]),
    default="jsonl",
    show_default=True,
    help="jsonl: one chunk per line; table: one row per chunk; stats: counts and token distribution.",
)
@read_limit_options
def chunk(paths, embedder, no_pdf_cleaning, output_format, **options):
    """Chunk PATH... (files, or directories walked for .md/.txt/.html/.pdf/code) and print the chunks.

    A file that cannot be read is reported on stderr and skipped; the exit code is 1 if any was.
    """

    from toolkit.chunking.report import chunk_files
    from toolkit.progress import Progress

    out = ChunkOutput(output_format)
    report = chunk_files(
        paths,
        embedder=_embedder(embedder),
        clean_pdf=not no_pdf_cleaning,
        stats=out.stats,
        on_record=out.record,
        on_skipped=out.skipped,
        progress=Progress("chunk", unit="files"),  # on a terminal only (toolkit.progress.shown)
        **options,
    )
    out.finish(report)


def _embedder(ref: str | None):
    """The embedder of ``--embedder`` (the semantic and cluster strategies), or None."""
    if not ref:
        return None
    from toolkit.embedding import get_embedder

    return get_embedder(ref)


commands = [chunk]
