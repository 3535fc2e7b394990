"""Commands for applications and data requests: `toolkit delete` and `toolkit tenant erase` (a user's data request:
dry run by default), `toolkit embed` and `toolkit serve` (the serving model for any language), `toolkit show` and
`toolkit diff` (what a version holds)."""

from __future__ import annotations

import click

from toolkit.cli._context import in_database
from toolkit.cli._output import FORMAT_OPTION, emit, plural, to_json
from toolkit.cli.serving import tenant


def _print_deletion(report, output_format: str) -> None:
    if output_format == "json":
        click.echo(to_json(report.as_dict()))
        return
    emit([r.__dict__ for r in report.removed], "table", ["relation", "version", "rows"])
    what = f"tenant {report.tenant}" if report.action == "erase" else plural(len(report.doc_ids), "document")
    if report.dry_run:
        click.echo(f"Dry run: nothing was changed. Pass --yes to remove these {plural(report.rows, 'row')} of {what}.")
    else:
        click.echo(f"Removed {plural(report.rows, 'row')} of {what} in one transaction (audited in toolkit.deletions).")


@click.command(short_help="Delete documents of a tenant from every version and the query log (dry run by default).")
@click.option("--tenant", required=True, help="The tenant the documents belong to.")
@click.argument("doc_ids", nargs=-1, required=True)
@click.option("--yes", is_flag=True, help="Delete (without it: list what would be deleted, change nothing).")
@click.option("--reason", help="Recorded in toolkit.deletions (e.g. the request's reference).")
@FORMAT_OPTION
def delete(tenant, doc_ids, yes, reason, output_format) -> None:
    """Delete DOC_IDS of --tenant: the documents, their chunks in every live version (building, ready, verified,
    active, standby) and the logged questions whose results cite them, in one transaction, audited in
    toolkit.deletions (document ids as SHA-256). Without --yes, a dry run lists the rows per table.

    A version that loses rows is marked changed: its verification must be run again before an unforced cutover.
    Serving goes on: the active version simply no longer returns the documents.
    """
    from toolkit.deletion import delete_documents

    _print_deletion(in_database(delete_documents, tenant, doc_ids, dry_run=not yes, reason=reason), output_format)


@tenant.command("erase")
@click.argument("name", metavar="TENANT")
@click.option("--yes", is_flag=True, help="Erase (without it: list what would be erased, change nothing).")
@click.option("--reason", help="Recorded in toolkit.deletions (e.g. the request's reference).")
@FORMAT_OPTION
def tenant_erase(name, yes, reason, output_format) -> None:
    """Erase TENANT: its documents, its rows in every live version, its logged questions and the logins' bindings
    to it, in one transaction (all or nothing), audited in toolkit.deletions. Needs the deployer or owner role.
    Without --yes, a dry run lists the rows per table."""
    from toolkit.deletion import erase_tenant

    _print_deletion(in_database(erase_tenant, name, dry_run=not yes, reason=reason), output_format)


commands = [delete]
