"""`toolkit ingest`: files and directories become embedded chunks in every live version."""

from __future__ import annotations

import sys

import click

from toolkit.cli import _render
from toolkit.cli._context import open_database
from toolkit.cli._output import FORMAT_OPTION, QUIET_OPTION
from toolkit.cli._params import Checked, Number, read_limit_options
from toolkit.validation import BATCH_DOCUMENTS, parse_metadata


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
    "--metadata",
    "metadata",
    multiple=True,
    metavar="KEY=VALUE",
    type=Checked(lambda pair: parse_metadata([pair]), "metadata"),  # refused as typed (exit 2)
    help="Metadata for every document of this run (repeatable; VALUE is JSON or text: lang=en, year=2024), "
    "what --filter metadata.KEY=VALUE finds.",
)
@click.option(
    "--prune", is_flag=True, help="Delete this tenant's documents that are no longer under PATH (from every version)."
)
@click.option(
    "--batch-size", type=Number(BATCH_DOCUMENTS), default=32, show_default=True, help="Documents per transaction."
)
@read_limit_options
@QUIET_OPTION
@FORMAT_OPTION
def ingest(paths, tenant, acl, metadata, prune, batch_size, quiet, output_format, limits) -> None:
    """Ingest PATH... (Markdown, text, HTML, PDF, code) for a tenant into every live version.

    Unchanged documents do nothing; changed ones are re-chunked and only new chunk texts are embedded.
    Unreadable files (not regular files, too large, PDFs over a limit) are reported and skipped; the others are
    stored; the exit code is 1 if any failed.
    """
    from toolkit.ingest import ingest as run
    from toolkit.progress import Progress

    options = {"acl": acl, "prune": prune, "batch_documents": batch_size, "limits": limits}
    options["metadata"] = parse_metadata(metadata)  # refused before the database is opened
    _, conn = open_database()
    progress = Progress("ingest", unit="documents", quiet=quiet)
    try:
        with conn:
            report = run(conn, paths, tenant, progress=progress, **options)
    except KeyboardInterrupt:
        _render.say_ingest_interrupted()
        sys.exit(130)
    _render.print_ingest(report, output_format)
    for version, reason in sorted(report.deferred.items()):
        click.echo(f"Version {version} (building) was left to its backfill: its model failed here ({reason})", err=True)
    if report.failed:
        sys.exit(1)


commands = [ingest]
