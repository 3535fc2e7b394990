"""Commands for applications and data requests: `toolkit delete` and `toolkit tenant erase` (a user's data request:
dry run by default), `toolkit embed` and `toolkit serve` (the serving model for any language), `toolkit show` and
`toolkit diff` (what a version holds)."""

from __future__ import annotations

import click

from toolkit.cli._context import in_database
from toolkit.cli._output import FORMAT_OPTION, emit, json_output, plural, say
from toolkit.cli._params import Number
from toolkit.cli.serving import tenant
from toolkit.validation import VERSION_NUMBER


def _print_deletion(report, output_format: str) -> None:
    if json_output(output_format, report):
        return
    emit([r.__dict__ for r in report.removed], "table", ["relation", "version", "rows"])
    what = f"tenant {report.tenant}" if report.action == "erase" else plural(len(report.doc_ids), "document")
    if report.dry_run:
        say(f"Dry run: nothing was changed. Pass --yes to remove these {plural(report.rows, 'row')} of {what}.")
    else:
        say(f"Removed {plural(report.rows, 'row')} of {what} in one transaction (audited in toolkit.deletions).")
        if report.cached_vectors_forgotten:
            say(f"Forgot {plural(report.cached_vectors_forgotten, 'vector')} of them in this user's embedding cache.")
        elif report.cached_vectors_forgotten is None:
            say(
                "This role may not read the chunks, so their vectors in this user's embedding cache were not "
                "forgotten: run toolkit cache purge (docs/deleting.md)."
            )


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
    answer = made.as_dict()
    answer["embedding"] = answer.pop("embeddings")[0]
    answer["tokens"] = answer["tokens"][0]
    if json_output(output_format, answer):
        return
    if output_format == "vector":
        say(f"toolkit: version {made.version} ({made.model_alias}) serves this request", err=True)
        say(literal)
    else:
        say(f"version\t{made.version}\nmodel\t{made.model_alias} ({made.provider}:{made.model_name})")
        say(f"dimensions\t{made.dimensions}\ndistance\t{made.distance}\nserving\t{made.serving}")
        say(f"vector\t{literal}")


@click.command(short_help="Serve embeddings (OpenAI-compatible) and search over HTTP on 127.0.0.1.")
@click.option("--host", default="127.0.0.1", show_default=True, help="A loopback address (no authentication).")
@click.option("--port", type=click.IntRange(0, 65535), default=8765, show_default=True)
@click.option("--tenant", help="Serve this tenant only: a request naming another is refused (single-tenant use).")
@click.option(
    "--pool-size", type=click.IntRange(1, 100), default=8, show_default=True, help="Database connections at most."
)
@click.option(
    "--trust-proxy-headers",
    is_flag=True,
    help="Behind an authenticating proxy: take the tenant and principals only from its X-Toolkit-Tenant and "
    "X-Toolkit-Principals headers, and refuse a body that names them.",
)
@click.option(
    "--allowed-host",
    "allowed_hosts",
    multiple=True,
    metavar="NAME",
    help="A Host / Origin name to accept besides the loopback ones (e.g. the name a proxy forwards); repeatable.",
)
def serve(host, port, tenant, pool_size, trust_proxy_headers, allowed_hosts) -> None:
    """Serve POST /v1/embeddings (OpenAI-compatible: the serving model, query prefix applied once), POST /search
    (the JSON of `toolkit search --format json`), GET /health (liveness), GET /ready (readiness: a real pinned search)
    and GET /metrics (Prometheus), with X-Toolkit-Version on every answer from a version. Who chooses the tenant and
    the principals, and every bound on a request: docs/serving.md#toolkit-serve and
    docs/security.md#toolkit-serves-trust-model."""
    from toolkit.cli._context import database_url

    try:
        from toolkit import serve as serving_http
    except ImportError as error:
        raise click.ClickException(
            f"toolkit serve needs the serve extra ({error.name} is missing): pip install 'toolkit[serve]'."
        ) from error
    from toolkit.validation import check_tenant

    serving_http.check_loopback(host)
    allowed = tuple(serving_http.check_allowed_host(name) for name in allowed_hosts)
    if tenant is not None:
        check_tenant(tenant)
    url = database_url()
    trust = "tenant and principals from the proxy's headers" if trust_proxy_headers else "every local caller trusted"
    say(f"toolkit: serving on http://{host}:{port} ({trust}; Ctrl-C stops)", err=True)
    settings = serving_http.ServerSettings(
        url, tenant, pool_size, trust_proxy_headers=trust_proxy_headers, allowed_hosts=allowed
    )
    serving_http.server(settings, host, port).run()


def _snippet(text: str, width: int = 60) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


@click.command(short_help="List a version's documents, or one document's chunks.")
@click.option("--version", "version", required=True, type=Number(VERSION_NUMBER), help="The version to look into.")
@click.option("--doc", "doc_id", metavar="DOC_ID", help="List this document's chunks (spans, tokens, headings).")
@click.option("--tenant", help="Only this tenant's documents (needed with --doc when several tenants have it).")
@FORMAT_OPTION
def show(version, doc_id, tenant, output_format) -> None:
    """Without --doc: the version's documents, with their chunks, parent sections, tokens and the span of text they
    cover. With --doc: that document's chunks in reading order (position, character span, tokens, heading path,
    pages, the start of the text), then its parent sections. Read as this login: row-level security applies."""
    from dataclasses import asdict

    from toolkit.contents import version_chunks, version_documents

    if doc_id is None:
        documents = in_database(version_documents, version, tenant)
        emit([asdict(d) for d in documents], output_format)
        return
    chunks = in_database(version_chunks, version, doc_id, tenant)
    if json_output(output_format, [asdict(c) for c in chunks]):
        return
    rows = [
        {
            "kind": "parent" if c.is_parent else "chunk",
            "position": c.position,
            "span": f"{c.start}-{c.end}",
            "tokens": c.token_count,
            "heading_path": " > ".join(c.heading_path),
            "pages": ",".join(map(str, c.pages)) if c.pages else None,
            "text": _snippet(c.text),
        }
        for c in chunks
    ]
    emit(rows, "table")


def _print_diff(found, output_format: str) -> None:
    if json_output(output_format, found):
        return
    for label, side in (("A", found.a), ("B", found.b)):
        say(
            f"{label}: version {side.version} ({side.model_alias}, {side.chunker_version}): "
            f"{plural(len(side.chunks), 'chunk')}, {side.tokens:,} tokens"
        )
    say(
        f"{plural(len(found.common_cuts), 'cut')} in common, {len(found.only_a)} only in A, "
        f"{len(found.only_b)} only in B."
    )

    def cell(chunk) -> str | None:
        return None if chunk is None else f"#{chunk['position']} {chunk['start']}-{chunk['end']} ({chunk['tokens']})"

    rows = [
        {
            "offset": r["offset"],
            "": "=" if r["a"] and r["b"] else "",
            "A": cell(r["a"]),
            "B": cell(r["b"]),
            "text": _snippet(r["text"], 50),
        }
        for r in found.rows()
    ]
    emit(rows, "table")


@click.command(short_help="Show how two versions cut one document.")
@click.option(
    "--version",
    "versions",
    required=True,
    multiple=True,
    type=Number(VERSION_NUMBER),
    help="A version to compare; give it twice: --version A --version B.",
)
@click.option("--doc", "doc_id", required=True, metavar="DOC_ID", help="The document to compare.")
@click.option("--tenant", help="The document's tenant (needed when several tenants have it).")
@FORMAT_OPTION
def diff(versions, doc_id, tenant, output_format) -> None:
    """How versions A and B cut DOC_ID: each side's chunker, chunks and tokens, then one line per cut point (where
    a chunk starts) with the chunk of A and of B that start there; cuts both share are marked =."""
    from toolkit.contents import diff_document

    if len(versions) != 2:
        raise click.UsageError("Give exactly two versions: --version A --version B.")
    _print_diff(in_database(diff_document, versions[0], versions[1], doc_id, tenant), output_format)


commands = [delete, diff, embed, serve, show]
