"""`toolkit search`: the best passages (or chunks, or their parents / windows) for a question, from the version that
serves the request (or a version named with --version), as an application searches."""

from __future__ import annotations

import click

from toolkit.cli import _render
from toolkit.cli._context import in_database
from toolkit.cli._output import FORMAT_OPTION
from toolkit.cli._params import Checked, Number
from toolkit.validation import DIVERSITY, EF_SEARCH, MIN_SCORE, PASSAGE_TOKENS, RESULTS, VERSION_NUMBER


def _parse_filter(pair: str) -> None:
    from toolkit.search import parse_filters  # numpy and psycopg: loaded when a filter is given, not for --help

    parse_filters([pair])


@click.command(short_help="Search as an application would: the serving version, pinned.")
@click.argument("question")
@click.option("--tenant", required=True, help="Search this tenant's chunks (row-level security applies).")
@click.option("-k", "k", type=Number(RESULTS), default=5, show_default=True, help="Results to return (1-1000).")
@click.option("--request-key", metavar="KEY", help="The request's key (e.g. a user id) for the canary split.")
@click.option(
    "--version", "version", type=Number(VERSION_NUMBER), help="Search this version instead of the serving one."
)
@click.option(
    "--retrieval",
    type=click.Choice(["passages", "hybrid", "vector"]),
    help="passages (default: hybrid hits merged into passages, what verify gates), hybrid (fused chunks) or vector.",
)
@click.option(
    "--max-tokens", type=Number(PASSAGE_TOKENS), help="The passages' token budget (default: k x 1.5 mean chunks)."
)
@click.option("--hybrid", is_flag=True, help="Same as --retrieval hybrid (fused chunks).")
@click.option("--expand", metavar="parent|window:N", help="Return each hit's parent, or N chunks on each side.")
@click.option(
    "--filter",
    "filters",
    metavar="KEY=VALUE",
    multiple=True,
    type=Checked(_parse_filter, "filter"),  # each value refused as typed (exit 2), before the database is opened
    help="doc_id, doc_id_prefix, heading_prefix (A > B), updated_after, updated_before, labels, metadata.KEY "
    "(JSON value or text); repeatable.",
)
@click.option(
    "--min-score",
    type=Number(MIN_SCORE),
    help="Drop hits whose cosine similarity to the question is below this (-1 to 1); fewer than k may come back.",
)
@click.option(
    "--diversity",
    type=Number(DIVERSITY),
    default=0.0,
    show_default=True,
    help="MMR re-ranking: 0 is off, up to 1 prefers hits unlike those already chosen.",
)
@click.option("--principal", "principals", metavar="P", multiple=True, help="Principals for access labels.")
@click.option("--ef-search", type=Number(EF_SEARCH), help="hnsw.ef_search for this search (default 40).")
@FORMAT_OPTION
def search(question, tenant, k, output_format, **options) -> None:
    """Search for QUESTION as an application does: `toolkit.serving_model(--request-key)` names the version (the
    active one, or the canary candidate for its share), the question is embedded with that version's model (and its
    query prefix), and that version is searched (pinned). Row-level security applies (the reader role).

    By default the results are passages (toolkit.search_passages): full-text and vector ranks fused, the hits of a
    document that overlap or touch merged and cut from its text, at most k within a token budget — the retrieval
    `toolkit verify` gates and `toolkit eval` measures. Prints rank, score, heading path, document, character span
    and text.
    """
    from toolkit.search import search_request

    hits = in_database(search_request, question, tenant, k, on_unlabelled=_render.say_unlabelled, **options)
    _render.print_hits(hits, output_format)


commands = [search]
