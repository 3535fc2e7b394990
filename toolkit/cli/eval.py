"""`toolkit eval`: compare chunker configurations on labelled queries without a database
(toolkit.evaluation.offline)."""

from __future__ import annotations

import click

from toolkit.cli._output import FORMAT_OPTION, emit, plural, to_json
from toolkit.cli._params import Number
from toolkit.errors import InputError
from toolkit.validation import PRICE, RESULTS, VERSION_NUMBER

COLUMNS = [
    "config",
    "retrieval",
    "chunks",
    "tok/chunk",
    "cut",
    "recall@k",
    "mrr",
    "ndcg@k",
    "span_r",
    "span_p",
    "iou",
    "p_omega",
    "tok/query",
    "usd/query",
    "frontier",
]


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
@click.option("--plot", type=click.Path(dir_okay=False), help="Write recall against tokens per query to this PNG.")
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
@click.option("--quiet", is_flag=True, help="No progress lines on stderr.")
@FORMAT_OPTION
def eval_command(
    corpus,
    queries,
    configs,
    model,
    k,
    scorer,
    retrieval,
    plot,
    input_price,
    cache_dir,
    no_cache,
    version,
    tenant,
    quiet,
    output_format,
) -> None:
    """Chunk, embed and search the corpus with each configuration; report recall@k, MRR, nDCG@k, span
    recall / precision / IoU, precision-Ω, cut answers, tokens and input cost per query.

    \b
    Example:
      toolkit eval --corpus docs/ --queries queries.jsonl --configs fixed:200:0,markdown:400:40 \\
        --model e5:multilingual-e5-small --plot frontier.png

    Read recall against tokens per query as a frontier, not a winner.
    """
    from toolkit.evaluation.cache import default_cache_dir

    directory = None if no_cache or scorer == "bow" else (cache_dir or default_cache_dir())
    if version is not None:
        if retrieval:
            raise InputError("--version searches the version through SQL as applications do; drop --retrieval.")
        report = _evaluate_version(version, corpus, configs, model, scorer, queries, k, tenant, input_price, directory)
    else:
        report = _evaluate_files(corpus, configs, model, scorer, retrieval, queries, k, input_price, directory, quiet)
    if plot:
        from toolkit.evaluation.frontier import plot_frontier

        plot_frontier(report, plot)
    if output_format == "json":
        click.echo(to_json(report.to_dict()))
        return
    click.echo(
        f"{plural(report.queries, 'query', 'queries')}, {plural(report.documents, 'document')}, k = {report.k}, "
        f"{report.model or 'bag-of-words scorer'}; {report.embedded_texts:,} texts embedded, "
        f"{report.cache_hits:,} from the cache"
    )
    emit([_row(r) for r in report.configs], "table", COLUMNS)
    click.echo(
        "cut: answers no single chunk holds whole. frontier: no other configuration has more recall for fewer "
        "tokens; read it as a frontier, not a winner."
    )
    for note in report.notes[1:] if version is None else report.notes:
        click.echo(note)
    if plot:
        click.echo(f"plot written to {plot}")


def _evaluate_files(corpus, configs, model, scorer, retrieval, queries, k, input_price, directory, quiet):
    import contextlib

    from toolkit.chunking import recommended_spec
    from toolkit.evaluation import offline as lib
    from toolkit.evaluation.cache import EmbeddingCache
    from toolkit.evaluation.retrieval import split_retrievals

    if not corpus:
        raise InputError(
            "Give the documents with --corpus PATH (and the chunker configurations with --configs, e.g. "
            "fixed:200:0,markdown:400:40), or evaluate a database version with --version N."
        )
    embedder = _embedder(model) if scorer == "embedding" else _refuse_model(model)
    configs = configs or [recommended_spec(getattr(embedder, "max_input_tokens", None))]
    retrieval = list(retrieval) or None
    lexical = scorer == "embedding" and any(r.lexical for r in split_retrievals(retrieval))
    with contextlib.ExitStack() as stack:
        conn = stack.enter_context(_open_connection()) if lexical else None
        cache = stack.enter_context(EmbeddingCache(directory))
        return lib.evaluate(
            list(corpus),
            queries,
            list(configs),
            embedder=embedder,
            scorer=scorer,
            k=k,
            input_price=input_price,
            cache=cache,
            progress=not quiet,
            retrieval=retrieval,
            conn=conn,
        )


def _open_connection():
    from toolkit.cli._context import open_database

    return open_database()[1]


def _evaluate_version(version, corpus, configs, model, scorer, queries, k, tenant, input_price, directory):
    from toolkit.cli._context import open_database
    from toolkit.evaluation import stored as lib
    from toolkit.evaluation.cache import EmbeddingCache

    given = [name for name, value in (("--corpus", corpus), ("--configs", configs), ("--model", model)) if value]
    if given or scorer != "embedding":
        raise InputError(
            f"--version evaluates the version's own documents, chunks and model; drop {', '.join(given) or '--scorer'}."
        )
    _, conn = open_database()
    with conn, EmbeddingCache(directory) as cache:
        return lib.evaluate_version(conn, version, queries, k=k, tenant=tenant, input_price=input_price, cache=cache)


def _embedder(model: str | None):
    from toolkit.embedding import DEFAULT_MODEL_REF, get_embedder

    if model is None or ":" in model:
        return get_embedder(model or DEFAULT_MODEL_REF)
    # A registered alias: the registry is in the database (the only case that opens it).
    from toolkit.cli._context import open_database
    from toolkit.store.models import embedder_for_model, get_model

    _, conn = open_database()
    with conn:
        return embedder_for_model(get_model(conn, model))


def _refuse_model(model: str | None):
    if model is not None:
        raise InputError("--scorer bow scores words, not vectors, so --model has no effect; drop one of the two.")
    return None


def _row(result) -> dict:
    return {
        "config": result.spec,
        "retrieval": result.retrieval,
        "chunks": result.chunks if result.parents is None else f"{result.chunks} ({result.parents} parents)",
        "tok/chunk": f"{result.mean_chunk_tokens:.0f}",
        "cut": f"{result.cut_answers}/{result.answers}",
        "recall@k": f"{result.recall:.3f}",
        "mrr": f"{result.mrr:.3f}",
        "ndcg@k": f"{result.ndcg:.3f}",
        "span_r": f"{result.span_recall:.3f}",
        "span_p": f"{result.span_precision:.3f}",
        "iou": f"{result.span_iou:.3f}",
        "p_omega": "-" if result.precision_omega is None else f"{result.precision_omega:.3f}",
        "tok/query": f"{result.retrieved_tokens:,.0f}",
        "usd/query": f"{result.input_cost_per_query:.5f}",
        "frontier": "*" if result.pareto else "",
    }


commands = [eval_command]
