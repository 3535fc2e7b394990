"""`toolkit ingest`: files and directories become embedded chunks in every live version."""

from __future__ import annotations

import sys

import click

from toolkit.cli._output import FORMAT_OPTION, plural, to_json
from toolkit.cli._params import Number
from toolkit.validation import BATCH_DOCUMENTS


@click.command(short_help="Ingest files for a tenant into every live version.")
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("--tenant", required=True, help="The tenant that owns these documents.")
@click.option(
    "--acl",
    "acl",
    multiple=True,
    metavar="LABEL",
    help="Access label (repeatable): only principals holding one see the chunks.",
)
@click.option(
    "--prune", is_flag=True, help="Delete this tenant's documents that are no longer under PATH (from every version)."
)
@click.option(
    "--batch-size", type=Number(BATCH_DOCUMENTS), default=32, show_default=True, help="Documents per transaction."
)
@FORMAT_OPTION
def ingest(paths, tenant, acl, prune, batch_size, output_format) -> None:
    """Ingest PATH... (Markdown, text, HTML) for a tenant into every live version.

    Unchanged documents do nothing; changed ones are re-chunked and only new chunk texts are embedded.
    Unreadable files are reported and skipped; the exit code is 1 if any failed.
    """
    from toolkit.cli._context import open_database
    from toolkit.ingest import ingest as run
    from toolkit.progress import Progress

    _, conn = open_database()
    progress = Progress("ingest", unit="documents", quiet=output_format == "json" and not sys.stderr.isatty())
    try:
        with conn:
            report = run(conn, paths, tenant, acl=acl, prune=prune, batch_documents=batch_size, progress=progress)
    except KeyboardInterrupt:
        # The batch being written was rolled back; the ones before it are committed, and a run of the same
        # command skips them (their content hashes are unchanged).
        click.echo(
            "\ntoolkit: interrupted; the batches written so far are kept. Run the same command again to continue: "
            "unchanged documents are skipped.",
            err=True,
        )
        sys.exit(130)
    if output_format == "json":
        click.echo(to_json(report.as_dict()))
    else:
        click.echo(
            f"{plural(report.documents, 'document')} for tenant {report.tenant}: {report.new} new, "
            f"{report.changed} changed, {report.unchanged} unchanged, {report.deleted} deleted, "
            f"{len(report.failed)} failed."
        )
        for version, count in sorted(report.chunks_written.items()):
            click.echo(f"  version {version}: {plural(count, 'chunk')} written")
        click.echo(f"  embeddings: {report.embedded} computed, {report.reused} reused")
        if not report.versions:
            click.echo("  no version exists yet: the documents are stored; run `toolkit backfill --model ALIAS`.")
        for failure in report.failed:
            click.echo(f"  failed: {failure.source}: {failure.reason}", err=True)
    if report.failed:
        sys.exit(1)


commands = [ingest]
