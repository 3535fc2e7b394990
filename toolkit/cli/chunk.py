"""``toolkit chunk``: chunk files or directories and print the chunks (JSONL), a table, or statistics."""

from __future__ import annotations

import json

import click

from toolkit.chunking.spec import STRATEGIES
from toolkit.cli._params import Number
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
@click.option("--embedder", metavar="REF", help="Embedder for the semantic and cluster strategies, e.g. hashing:64.")
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
def chunk(paths, spec, strategy, size, overlap, embedder, clean_pdf_text, no_pdf_cleaning, output_format):
    """Chunk PATH... (files, or directories walked for .md/.txt/.html/.pdf/code) and print the chunks.

    A file that cannot be read is reported on stderr and skipped; the exit code is 1 if any was.
    """
    import sys

    from toolkit.chunking.files import ChunkStats, chunk_paths
    from toolkit.progress import Progress
    from toolkit.text.sources import SourceError

    model = None
    if embedder:
        from toolkit.embedding import get_embedder

        model = get_embedder(embedder)
    stats = ChunkStats()
    rows = []
    failed = 0
    produced = 0
    progress = Progress("chunk", unit="files", quiet=not sys.stderr.isatty())  # only on a terminal
    results = chunk_paths(
        paths,
        spec=spec,
        strategy=strategy,
        size=size,
        overlap=overlap,
        embedder=model,
        clean_pdf_text=clean_pdf_text,
        clean_pdf=not no_pdf_cleaning,
    )
    for document, chunks in results:
        produced += len(chunks)
        progress.advance(chunks=produced, skipped=failed)
        if isinstance(document, SourceError):
            failed += 1
            click.echo(f"toolkit: skipped {document}", err=True)
            continue
        if output_format == "stats":
            stats.add(document.text, chunks)
        for c in chunks:
            record = chunk_record(document.source, c, document.pages)
            if output_format == "jsonl":
                click.echo(json.dumps(record, ensure_ascii=False))
            elif output_format == "table":
                rows.append(record)
    progress.finish()
    if output_format == "table":
        from toolkit.cli._output import print_table

        for row in rows:
            row["heading_path"] = " > ".join(row["heading_path"])
            row["text"] = row["text"][:40].replace("\n", " ")
        print_table(rows, ["doc_id", "position", "start", "end", "token_count", "heading_path", "text"])
    elif output_format == "stats":
        from toolkit.cli._output import print_table

        stats.failed = failed
        print_table([{"measure": k, "value": v} for k, v in stats.as_dict().items()])
    if failed:
        raise click.ClickException(
            f"{failed} file(s) could not be read (see the messages above); the rest were chunked."
        )


def chunk_record(source: str, c, pages=None) -> dict:
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


commands = [chunk]
