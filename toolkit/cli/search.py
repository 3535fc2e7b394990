"""`toolkit search`: the best passages (or chunks, or their parents / windows) for a question, from the version that
serves the request (or a version named with --version), as an application searches. Its search options are made
from ``SearchOptions``' fields (name, doc, rule or choices, default): a field the record gains is an option here."""

from __future__ import annotations

import dataclasses

import click

from toolkit.cli import _render
from toolkit.cli._context import in_database
from toolkit.cli._output import FORMAT_OPTION
from toolkit.cli._params import Checked, Number
from toolkit.search_options import DEPRECATED, SearchOptions, parse_filters

# How a field is spelled on the command line when not --NAME-WITH-DASHES: k is -k, filters one --filter per pair.
FLAGS = {"k": "-k", "filters": "--filter"}
REPEATED = {"filters"}


def _parse_filter(pair: str) -> None:
    parse_filters([pair])


def _click_option(option: dataclasses.Field):
    """The click option of one SearchOptions field: numbers through their rule, choices as a choice, filters read
    as typed (exit 2 on a bad one, before the database is opened), other text as given."""
    meta = option.metadata
    flag = FLAGS.get(option.name, "--" + option.name.replace("_", "-"))
    settings: dict = {"help": meta["doc"], "metavar": meta.get("metavar")}
    if meta.get("rule") is not None:
        settings["type"] = Number(meta["rule"])
    elif meta.get("choices"):
        settings["type"] = click.Choice(meta["choices"])
        settings.pop("metavar")
    elif option.name in REPEATED:
        settings.update(multiple=True, type=Checked(_parse_filter, "filter"))
    if option.default is not None and option.name not in REPEATED:
        settings.update(default=option.default, show_default=True)
    return click.option(flag, option.name, **settings)


def search_option_decorators(command):
    """Adds every SearchOptions field as an option of ``command`` (in the record's order), and the deprecated
    spellings as flags that say so."""
    for name, instead in reversed(DEPRECATED.items()):
        command = click.option(f"--{name}", is_flag=True, help=f"Deprecated: {instead}.")(command)
    for option in reversed(dataclasses.fields(SearchOptions)):
        command = _click_option(option)(command)
    return command


@click.command(short_help="Search as an application would: the serving version, pinned.")
@click.argument("question")
@click.option("--tenant", required=True, help="Search this tenant's chunks (row-level security applies).")
@click.option("--request-key", metavar="KEY", help="The request's key (e.g. a user id) for the canary split.")
@click.option("--principal", "principals", metavar="P", multiple=True, help="Principals for access labels.")
@search_option_decorators
@FORMAT_OPTION
def search(question, tenant, request_key, principals, output_format, **options) -> None:
    """Search for QUESTION as an application does: `toolkit.serving_model(--request-key)` names the version (the
    active one, or the canary candidate for its share), the question is embedded with that version's model (and its
    query prefix), and that version is searched (pinned). Row-level security applies (the reader role).

    By default the results are passages (toolkit.search_passages): full-text and vector ranks fused, the hits of a
    document that overlap or touch merged and cut from its text, at most k within a token budget — the retrieval
    `toolkit verify` gates and `toolkit eval` measures. Prints rank, score, heading path, document, character span
    and text.
    """
    from toolkit.search import search_request

    hits = in_database(
        search_request,
        question,
        tenant,
        request_key=request_key,
        principals=principals,
        on_unlabelled=_render.say_unlabelled,
        **options,
    )
    _render.print_hits(hits, output_format)


commands = [search]
