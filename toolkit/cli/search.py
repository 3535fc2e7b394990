"""`toolkit search`: the best chunks (or their parents / windows) for a question, from the version that serves the
request (or a version named with --version), as an application searches."""

from __future__ import annotations

import click

from toolkit.cli._context import open_database
from toolkit.cli._output import FORMAT_OPTION, emit
from toolkit.cli._params import Number
from toolkit.validation import EF_SEARCH, RESULTS, VERSION_NUMBER

COLUMNS = ["rank", "score", "heading_path", "doc_id", "span", "text"]


@click.command(short_help="Search as an application would: the serving version, pinned.")
@click.argument("question")
@click.option("--tenant", required=True, help="Search this tenant's chunks (row-level security applies).")
@click.option("-k", "k", type=Number(RESULTS), default=5, show_default=True, help="Results to return (1-1000).")
@click.option("--request-key", metavar="KEY", help="The request's key (e.g. a user id) for the canary split.")
@click.option(
    "--version", "version", type=Number(VERSION_NUMBER), help="Search this version instead of the serving one."
)
@click.option("--hybrid", is_flag=True, help="Fuse full-text and vector ranks (finds codes and identifiers).")
@click.option("--expand", metavar="parent|window:N", help="Return each hit's parent, or N chunks on each side.")
@click.option(
    "--filter",
    "filters",
    metavar="KEY=VALUE",
    multiple=True,
    help="doc_id, doc_id_prefix, heading_prefix (A > B), updated_after, updated_before, labels; repeatable.",
)
@click.option("--principal", "principals", metavar="P", multiple=True, help="Principals for access labels.")
@click.option("--ef-search", type=Number(EF_SEARCH), help="hnsw.ef_search for this search (default 40).")
@FORMAT_OPTION
def search(
    question, tenant, k, request_key, version, hybrid, expand, filters, principals, ef_search, output_format
) -> None:
    """Search for QUESTION as an application does: `toolkit.serving_model(--request-key)` names the version (the
    active one, or the canary candidate for its share), the question is embedded with that version's model (and its
    query prefix), and that version is searched (pinned). Row-level security applies (the reader role).

    Prints rank, score, heading path, document, character span and text.
    """
    from toolkit.search import applies_access_labels, parse_filters
    from toolkit.search import search as run_search

    _, conn = open_database()
    with conn:
        if not applies_access_labels(conn):
            click.echo(
                "toolkit: this login is a service role that cannot take toolkit_reader: access labels are not "
                "applied (every labelled chunk of the tenant is searched). Connect as a reader login to see what an "
                "application sees.",
                err=True,
            )
        hits = run_search(
            conn,
            question,
            tenant,
            k,
            hybrid=hybrid,
            expand=expand,
            filters=parse_filters(filters),
            principals=principals,
            ef_search=ef_search,
            version=version,
            request_key=request_key,
        )
    if hits:
        click.echo(f"toolkit: version {hits[0].version} ({hits[0].model_alias}) served this search", err=True)
    if output_format == "json":
        emit([hit.as_dict() for hit in hits], "json")
        return
    rows = [
        {
            "rank": hit.rank,
            "score": hit.score,
            "heading_path": " > ".join(hit.heading_path),
            "doc_id": hit.doc_id,
            "span": f"{hit.start}-{hit.end}",
            "pages": ",".join(map(str, hit.pages)) if hit.pages else None,
            "text": _one_line(hit.text),
        }
        for hit in hits
    ]
    # The pages column only when a hit has pages (PDF sources), for citations.
    columns = COLUMNS if not any(hit.pages for hit in hits) else [*COLUMNS[:-1], "pages", COLUMNS[-1]]
    emit(rows, "table", columns)


def _one_line(text: str, width: int = 100) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


commands = [search]
