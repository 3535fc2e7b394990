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


@click.command(short_help="Embed a question with the serving model (for SQL of your own).")
@click.argument("question")
@click.option("--tenant", required=True, help="The tenant the request is for (a canary may serve whole tenants).")
@click.option("--request-key", metavar="KEY", help="The request's key (e.g. a user id) for the canary split.")
@click.option(
    "--format",
    "output_format",
    type=click.Choice(["table", "json", "vector"]),
    default="table",
    show_default=True,
    help="table: version, model and the vector; json: all of it for scripts; vector: the pgvector literal alone.",
)
def embed(question, tenant, request_key, output_format) -> None:
    """Print the version that serves this request and QUESTION's vector, embedded with that version's model and
    its query prefix applied once: bind the vector as $1 and the version as query_version (docs/sql.md).

    --format vector prints only the pgvector literal ([0.1,...]), e.g. for psql's backquotes; the version then
    goes to stderr.
    """
    from toolkit.question import embed_questions, vector_literal

    made = in_database(embed_questions, [question], tenant, request_key)
    literal = vector_literal(made.embeddings[0])
    if output_format == "json":
        answer = made.as_dict()
        answer["embedding"] = answer.pop("embeddings")[0]
        answer["tokens"] = answer["tokens"][0]
        click.echo(to_json(answer))
    elif output_format == "vector":
        click.echo(f"toolkit: version {made.version} ({made.model_alias}) serves this request", err=True)
        click.echo(literal)
    else:
        click.echo(f"version\t{made.version}\nmodel\t{made.model_alias} ({made.provider}:{made.model_name})")
        click.echo(f"dimensions\t{made.dimensions}\ndistance\t{made.distance}\nserving\t{made.serving}")
        click.echo(f"vector\t{literal}")


@click.command(short_help="Serve embeddings (OpenAI-compatible) and search over HTTP on 127.0.0.1.")
@click.option("--host", default="127.0.0.1", show_default=True, help="A loopback address (no authentication).")
@click.option("--port", type=click.IntRange(0, 65535), default=8765, show_default=True)
@click.option("--tenant", help="The tenant of requests that name none (a single-tenant deployment).")
@click.option(
    "--pool-size", type=click.IntRange(1, 100), default=8, show_default=True, help="Database connections at most."
)
def serve(host, port, tenant, pool_size) -> None:
    """Serve POST /v1/embeddings (OpenAI-compatible: the serving model, query prefix applied once), POST /search
    (the JSON of `toolkit search --format json`) and GET /health, with X-Toolkit-Version on every answer from a
    version. See docs/serving.md#toolkit-serve."""
    from toolkit.cli._context import database_url

    try:
        from toolkit import serve as serving_http
    except ImportError as error:
        raise click.ClickException(
            f"toolkit serve needs the serve extra ({error.name} is missing): pip install 'toolkit[serve]'."
        ) from error
    serving_http.check_loopback(host)
    url = database_url()
    click.echo(f"toolkit: serving on http://{host}:{port} (Ctrl-C stops)", err=True)
    serving_http.server(serving_http.ServerSettings(url, tenant, pool_size), host, port).run()


commands = [delete, embed, serve]
