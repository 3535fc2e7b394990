"""`toolkit eval`: compare chunker configurations on labelled queries without a database
(toolkit.evaluation.offline)."""

from __future__ import annotations

import click

from toolkit.cli import _render
from toolkit.cli._context import open_database
from toolkit.cli._output import FORMAT_OPTION, QUIET_OPTION
from toolkit.cli._params import Checked, Number
from toolkit.evaluation.frontier import plot_path
from toolkit.validation import PRICE, RESULTS, VERSION_NUMBER


@click.command("eval", short_help="Compare chunker configurations: recall against cost per query.")
@click.option(
    "--corpus",
    "corpus",
    multiple=True,
    type=click.Path(exists=True),
    help="Files or folders of documents (doc ids are paths relative to a folder). Repeatable.",
)
@click.option("--queries", "queries", required=True, type=click.Path(), help="Labelled queries (JSONL).")
@click.option(
    "--configs",
    "configs",
    multiple=True,
    metavar="SPECS",
    help='Chunker specs, comma-separated: "fixed:200:0,sentence:200:1,markdown:400:40". Repeatable. '
    "Default: the spec recommended for the model's input limit.",
)
@click.option(
    "--model",
    metavar="ALIAS|PROVIDER:NAME",
    help="Embedding model: provider:name (e.g. e5:multilingual-e5-small, hashing:64; no database needed) or "
    "a registered alias (read from the database). Default: sentence-transformers:all-MiniLM-L6-v2.",
)
@click.option("-k", "k", type=Number(RESULTS), default=5, show_default=True, help="Chunks retrieved per query.")
@click.option(
    "--scorer",
    type=click.Choice(["embedding", "bow"]),
    default="embedding",
    show_default=True,
    help="embedding: cosine of the model's vectors; bow: a bag-of-words cosine (no model; see docs/evaluation.md).",
)
@click.option(
    "--retrieval",
    "retrieval",
    multiple=True,
    metavar="MODES",
    help="How chunks are ranked, as SQL serves them: vector, text (BM25) or hybrid (both, fused by RRF), with "
    "options such as hybrid:rrf_k=60:assemble=off; comma-separated to compare. Default: hybrid with passage "
    "assembly (full text opens the database: the embedded one unless --database-url).",
)
@click.option(
    "--plot",
    type=Checked(plot_path, "plot file"),
    help="Write recall against tokens per query to this PNG (its folder must exist).",
)
@click.option(
    "--input-price", type=Number(PRICE), default=2.0, show_default=True, help="USD per million LLM input tokens."
)
@click.option(
    "--cache-dir",
    type=click.Path(file_okay=False),
    help="Where embeddings are cached between runs. Default: ~/.cache/toolkit (XDG_CACHE_HOME).",
)
@click.option("--no-cache", is_flag=True, help="Keep embeddings in memory for this run only.")
@click.option(
    "--version",
    "version",
    type=Number(VERSION_NUMBER),
    metavar="N",
    help="Evaluate database version N instead (its stored chunks and model, searched through SQL); "
    "replaces --corpus, --configs and --model.",
)
@click.option("--tenant", help="With --version: the tenant whose documents the queries are about.")
@QUIET_OPTION
@FORMAT_OPTION
def eval_command(version, plot, quiet, output_format, **options) -> None:
    """Chunk, embed and search the corpus with each configuration; report recall@k, MRR, nDCG@k, span
    recall / precision / IoU, precision-Ω, cut answers, tokens and input cost per query.

    \b
    Example:
      toolkit eval --corpus docs/ --queries queries.jsonl --configs fixed:200:0,markdown:400:40 \\
        --model e5:multilingual-e5-small --plot frontier.png

    Read recall against tokens per query as a frontier, not a winner.
    """
    from toolkit.evaluation.offline import evaluate_request

    report = evaluate_request(version=version, plot=plot, progress=not quiet, connect=_connect, **options)
    _render.print_eval(report, output_format, stored=version is not None, plot=plot)


def _connect():
    """A connection to the command's database, for the evaluations that need one."""
    return open_database()[1]


commands = [eval_command]
