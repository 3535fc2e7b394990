"""Evaluate chunker configurations on labelled queries without a database: chunk, embed, search, score.

For each chunker spec the corpus is chunked, the chunks are embedded through an `EmbeddingCache` (or scored by
the chunking guide's bag-of-words cosine), the top k are found by exact cosine with numpy, and every metric of
`toolkit.evaluation.metrics` is reported beside chunk counts, cut answers and the prompt cost of what was retrieved.
Small-to-big specs (`parent=` / `window=`) search the children and hand back their parents, merged the way
`toolkit search --expand` merges them. docs/evaluation.md explains the metrics and how to read the result.
"""

from __future__ import annotations

import math
import re
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from toolkit.errors import InputError
from toolkit.evaluation.bag_of_words import bow_scores
from toolkit.evaluation.frontier import mark_pareto
from toolkit.evaluation.queries import LabelledQuery, load_queries
from toolkit.evaluation.report import DEFAULT_INPUT_PRICE, HITS_PER_CONTEXT, ConfigResult, EvalReport, Unit
from toolkit.evaluation.retrieval import passage_budget
from toolkit.evaluation.scoring import score_config

SCORERS = ("embedding", "bow")

__all__ = ["DEFAULT_INPUT_PRICE", "HITS_PER_CONTEXT", "ConfigResult", "EvalReport", "Unit", "evaluate", "score_config"]


def split_configs(configs: str | Sequence[str]) -> list[str]:
    """Chunker specs from a comma-separated list (or several such lists).

    A comma inside a small-to-big ``parent=`` spec (``sentence:60:0:parent=markdown,800,0``) stays with its
    spec: a piece that does not start with a word and a colon (``800``, ``unit=chars``) continues the previous
    spec. Specs are checked later, by the chunking module.
    """
    texts = [configs] if isinstance(configs, str) else list(configs)
    specs: list[str] = []
    starts_spec = re.compile(r"^\s*[A-Za-z][\w-]*\s*:")
    for text in texts:
        for piece in text.split(","):
            if not piece.strip():
                continue
            if specs and not starts_spec.match(piece):
                specs[-1] += "," + piece.strip()
            else:
                specs.append(piece.strip())
    if not specs:
        raise InputError("Give at least one chunker configuration, e.g. --configs fixed:200:0,markdown:400:40.")
    duplicates = [spec for spec, n in Counter(specs).items() if n > 1]
    if duplicates:
        raise InputError(f"The configuration {duplicates[0]!r} is listed twice; list each one once.")
    return specs


def read_corpus(paths: str | Path | Sequence[str | Path], skipped: list[str] | None = None) -> dict[str, str]:
    """doc id → text for every readable file under ``paths`` (as `toolkit ingest` would store them); the
    reasons files were skipped are appended to ``skipped``."""
    from toolkit.text.sources import SourceError, read_documents

    if isinstance(paths, str | Path):
        paths = [paths]
    documents: dict[str, str] = {}
    for result in read_documents(list(paths)):
        if isinstance(result, SourceError):
            if skipped is not None:
                skipped.append(str(result))
            continue
        documents[result.doc_id] = result.text
    if not documents:
        shown = ", ".join(map(str, paths)) or "(none)"
        raise InputError(
            f"No readable documents were found in --corpus {shown}; point it at a folder of text, Markdown or "
            "HTML files (doc ids in the query file are paths relative to that folder)."
        )
    return documents


def evaluate(
    corpus: str | Path | Sequence[str | Path] | dict[str, str],
    queries: str | Path | Sequence[LabelledQuery],
    configs: str | Sequence[str],
    *,
    embedder=None,
    scorer: str = "embedding",
    k: int = 5,
    input_price: float = DEFAULT_INPUT_PRICE,
    cache=None,
    progress: bool = False,
    retrieval=None,
    conn=None,
) -> EvalReport:
    """Evaluate each chunker spec of ``configs`` on the labelled ``queries`` over ``corpus``.

    ``corpus`` is paths (read like `toolkit ingest`) or a doc id → text mapping; ``queries`` a JSONL path or
    loaded queries. ``scorer="embedding"`` needs ``embedder`` (any object with the `Embedder` interface);
    ``scorer="bow"`` is the chunking guide's bag-of-words cosine and takes none. ``cache`` is an `EmbeddingCache`
    (a memory-only one is made if omitted); pass the same one to several calls to share vectors.
    ``retrieval`` is one or more `toolkit.evaluation.retrieval` modes (``"vector,hybrid"``; default hybrid with passage
    assembly, as the toolkit recommends); full text needs ``conn``, a connection to a database with the toolkit
    schema, whose ``to_tsvector`` and settings make the ranking the one SQL serves.
    """
    from toolkit.embedding.cache import CachedEmbedder, EmbeddingCache
    from toolkit.evaluation.retrieval import split_retrievals

    if scorer not in SCORERS:
        raise InputError(f"Unknown scorer {scorer!r}; use embedding (a model) or bow (a bag-of-words cosine).")
    if scorer == "embedding" and embedder is None:
        raise InputError("The embedding scorer needs a model; pass --model provider:name (e.g. hashing:64) or alias.")
    if scorer == "bow" and embedder is not None:
        raise InputError("--scorer bow scores words, not vectors, so --model has no effect; drop one of the two.")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise InputError(f"k (chunks retrieved per query) must be a whole number ≥ 1, not {k!r}.")
    if not isinstance(input_price, int | float) or input_price < 0 or not math.isfinite(input_price):
        raise InputError(f"The input price is USD per million tokens and must be ≥ 0, not {input_price!r}.")
    specs = split_configs(configs)
    cache = cache if cache is not None else EmbeddingCache()
    # Every spec checked before any work; semantic and cluster embed their sentences and pieces through the cache.
    chunk_embedder = None if embedder is None else CachedEmbedder(embedder, cache)
    chunkers = {spec: _chunker(spec, chunk_embedder) for spec in specs}
    if scorer == "bow":
        if retrieval is not None:
            raise InputError("--scorer bow ranks by shared words alone, so --retrieval has no effect; drop one.")
        retrievals = [None]
    else:
        retrievals = split_retrievals(retrieval)
        if any(r.needs_settings for r in retrievals):
            if conn is None:
                raise InputError(
                    "Full-text ranking (retrieval text or hybrid) and passage assembly ask PostgreSQL for the lexemes "
                    "and the retrieval settings; pass a connection (the CLI opens the database), or use "
                    "--retrieval vector:assemble=off."
                )
            settings = _retrieval_settings_or_error(conn)
            retrievals = [r.resolved(settings) if r.needs_settings else r for r in retrievals]
    skipped: list[str] = []
    documents = dict(corpus) if isinstance(corpus, dict) else read_corpus(corpus, skipped)
    labelled = load_queries(queries, documents) if isinstance(queries, str | Path) else list(queries)
    if not labelled:
        raise InputError("There are no labelled queries to evaluate; the query file is empty.")
    embedded_at_start, hits_at_start = cache.embedded_texts, cache.hits
    query_vectors = None
    if scorer == "embedding":
        # As embedded, not normalized: SQL gets the same vector, and cosine distance normalizes both sides.
        query_vectors = cache.embed_queries(embedder, [q.query for q in labelled])
    results = []
    for spec in specs:
        started = time.monotonic()
        embedded_before = cache.embedded_texts
        found = _evaluate_config(
            spec, chunkers[spec], documents, labelled, embedder, scorer, k, input_price, cache, query_vectors,
            progress, retrievals, conn,
        )  # fmt: skip
        for result in found:
            result.embedded_texts = cache.embedded_texts - embedded_before
            result.seconds = round(time.monotonic() - started, 2)
            embedded_before = cache.embedded_texts
        results.extend(found)
    mark_pareto(results)
    notes = [
        "recall is recall@k: a whole answer inside one retrieved chunk; read recall against retrieved tokens "
        "as a frontier, not a winner (pareto marks the configurations no other beats on both)."
    ]
    if skipped:
        notes.append(f"Skipped {len(skipped)} unreadable file(s): " + "; ".join(skipped[:5]))
    if any(r.parents is not None for r in results):
        notes.append(
            "small-to-big: children are searched, their parents are handed back (hits sharing a parent or "
            "overlapping make one context); metrics, cut answers and tokens are about the parents."
        )
    return EvalReport(
        model=None if embedder is None else getattr(embedder, "ref", None) or str(embedder),
        scorer=scorer,
        k=k,
        queries=len(labelled),
        documents=len(documents),
        input_price=float(input_price),
        configs=results,
        embedded_texts=cache.embedded_texts - embedded_at_start,
        cache_hits=cache.hits - hits_at_start,
        cache_path=None if cache.path is None else str(cache.path),
        notes=notes,
    )


def _chunker(spec: str, embedder):
    from toolkit.chunking import get_chunker

    # With the model given, a chunk over its input limit is split by the chunker, never refused later.
    return get_chunker(spec, embedder=embedder)


def _retrieval_settings_or_error(conn) -> dict:
    import psycopg

    from toolkit.store.lexical import retrieval_settings

    try:
        with conn.transaction():
            return retrieval_settings(conn)
    except psycopg.errors.UndefinedFunction:
        raise InputError(
            "The database has no toolkit.retrieval_settings(); its toolkit schema is older than this toolkit. "
            "Run toolkit migrate, then evaluate again."
        ) from None


def _evaluate_config(
    spec, chunker, documents, queries, embedder, scorer, k, input_price, cache, query_vectors, progress,
    retrievals, conn,
) -> list[ConfigResult]:  # fmt: skip
    from toolkit.chunking.small_to_big import SmallToBigChunker

    chunks, parents = [], {}
    for doc_id, text in documents.items():
        for chunk in chunker.chunk(text, doc_id):
            if chunk.is_parent:
                parents[chunk.chunk_id] = chunk
            else:
                chunks.append(chunk)
    if not chunks:
        raise InputError(f"The configuration {spec!r} produced no chunks from the corpus; is the corpus empty?")
    texts = [c.embed_text for c in chunks]
    small_to_big = isinstance(chunker, SmallToBigChunker)
    if scorer == "bow":
        scores = bow_scores([q.query for q in queries], texts)
        depth = min(len(chunks), k * HITS_PER_CONTEXT if small_to_big else k)
        # Stable sort of negated scores: ties keep corpus order, as the chunking guide's sorted(..., reverse=True) does.
        ranked = np.argsort(-scores, axis=1, kind="stable")[:, :depth]
        hits = [[chunks[i] for i in order] for order in ranked]
        return [
            score_config(
                spec, chunker.version, chunks, parents if small_to_big else None, hits, documents, queries, k,
                input_price,
            )
        ]  # fmt: skip
    meter = None
    if progress and (pending := cache.missing(embedder, texts)):
        from toolkit.progress import Progress

        meter = Progress(f"eval {spec}: embedding", pending, unit="chunks")
    vectors = cache.embed_documents(embedder, texts, None if meter is None else meter.advance)
    if meter is not None:
        meter.finish()
    rankings = rank_chunks(chunks, vectors, query_vectors, [q.query for q in queries], retrievals, k, small_to_big,
                           conn)  # fmt: skip
    results = []
    for retrieval, hits in zip(retrievals, rankings, strict=True):
        # Passages fill k slots within k x passage_chunks mean chunks of tokens (toolkit.search_passages);
        # small-to-big hands back parents instead.
        budget = None
        if retrieval.assemble and not small_to_big:
            budget = passage_budget(k, [c.token_count for c in chunks], retrieval.passage_chunks)
        result = score_config(
            spec, chunker.version, chunks, parents if small_to_big else None, hits, documents, queries, k,
            input_price, budget=budget,
        )  # fmt: skip
        result.retrieval = retrieval.label
        results.append(result)
    return results


def rank_chunks(chunks, vectors, query_vectors, questions, retrievals, k, small_to_big, conn) -> list[list[list]]:
    """For each retrieval, per question the chunks found, best first, as the SQL search functions rank them:
    exact cosine distance then chunk id (``search_chunks``), BM25 over PostgreSQL's lexemes, fused by RRF
    (``hybrid_search_chunks``); deep enough for small-to-big contexts (``search_context``: 4 x k hits) and for
    passage assembly (the same depth)."""
    from toolkit.evaluation import retrieval as lexical
    from toolkit.store import lexical as store_lexical

    ids = [c.chunk_id for c in chunks]
    distances = lexical.cosine_distances(query_vectors, vectors)
    vector_orders = [lexical.order_by(row, ids, descending=False) for row in distances]
    results = []
    lexemes_by_config: dict[str, tuple] = {}
    for retrieval in retrievals:
        # Passages are made from hits_per_passage x k hits (search_passages), contexts from HITS_PER_CONTEXT x k.
        per_result = (
            HITS_PER_CONTEXT if small_to_big or retrieval.hits_per_passage is None else retrieval.hits_per_passage
        )
        depth = min(len(chunks), k * per_result)
        if not retrieval.lexical:
            results.append([[chunks[i] for i in order[:depth]] for order in vector_orders])
            continue
        config = retrieval.text_search_config
        if config not in lexemes_by_config:
            with conn.transaction():
                lexemes_by_config[config] = (
                    store_lexical.chunk_lexemes(conn, chunks, config),
                    store_lexical.query_lexemes(conn, questions, config),
                )
        chunk_terms, question_terms = lexemes_by_config[config]
        bm25 = lexical.BM25(
            chunk_terms, [c.token_count for c in chunks], retrieval.k1, retrieval.b, retrieval.postings_limit
        )
        pool = max(retrieval.candidates, depth)
        found = []
        for order, terms in zip(vector_orders, question_terms, strict=True):
            text = lexical.text_ranking(bm25, terms, ids, pool)
            vector = order[:pool] if retrieval.mode == "hybrid" else []
            found.append([chunks[i] for i in lexical.fuse(vector, text, ids, depth, retrieval.rrf_k)])
        results.append(found)
    return results


def evaluate_request(
    queries: str | Path,
    *,
    corpus: Sequence[str | Path] = (),
    configs: Sequence[str] = (),
    model: str | None = None,
    k: int = 5,
    scorer: str = "embedding",
    retrieval: Sequence[str] = (),
    input_price: float = DEFAULT_INPUT_PRICE,
    cache_dir: str | Path | None = None,
    no_cache: bool = False,
    version: int | None = None,
    tenant: str | None = None,
    progress: bool = False,
    plot: str | Path | None = None,
    connect=None,
) -> EvalReport:
    """What ``toolkit eval`` runs: the database ``version`` through SQL (``toolkit.evaluation.stored``; its own
    documents, chunks and model, so no corpus, configs, model or retrieval), or else ``evaluate`` of the ``corpus``
    with each of ``configs`` (default: the spec recommended for the model's input limit). ``model`` is
    provider:name (default MiniLM) or a registered alias. Embeddings are cached in ``cache_dir`` (default
    ~/.cache/toolkit) unless ``no_cache`` or the bow scorer; ``plot`` writes the frontier PNG. ``connect()`` returns
    a connection when one is needed (the version, an alias, full-text retrieval); default: the toolkit database."""
    from toolkit.embedding.cache import default_cache_dir

    if plot:
        from toolkit.evaluation.frontier import plot_path

        plot_path(plot)  # a plot that cannot be written is refused before the evaluation runs, not after
    if connect is None:
        from toolkit.db.schema import open_database

        def connect():
            return open_database()[1]

    directory = None if no_cache or scorer == "bow" else (cache_dir or default_cache_dir())
    if version is not None:
        report = _evaluate_stored(
            version, corpus, configs, model, scorer, queries, k, tenant, input_price, directory, connect,
            served_retrieval(retrieval),
        )  # fmt: skip
    else:
        report = _evaluate_corpus(
            corpus, configs, model, scorer, retrieval, queries, k, input_price, directory, progress, connect
        )
    if plot:
        from toolkit.evaluation.frontier import plot_frontier

        plot_frontier(report, plot)
    return report


def _evaluate_corpus(corpus, configs, model, scorer, retrieval, queries, k, input_price, directory, progress, connect):
    import contextlib

    from toolkit.chunking import recommended_spec
    from toolkit.embedding.cache import EmbeddingCache
    from toolkit.evaluation.retrieval import split_retrievals

    if not corpus:
        raise InputError(
            "Give the documents with --corpus PATH (and the chunker configurations with --configs, e.g. "
            "fixed:200:0,markdown:400:40), or evaluate a database version with --version N."
        )
    if scorer == "embedding":
        embedder = _model_embedder(model, connect)
    elif model is not None:
        raise InputError("--scorer bow scores words, not vectors, so --model has no effect; drop one of the two.")
    else:
        embedder = None
    configs = configs or [recommended_spec(getattr(embedder, "max_input_tokens", None))]
    retrieval = list(retrieval) or None
    # Full text and passages read SQL's lexemes and settings: the command's database.
    needs_database = scorer == "embedding" and any(r.needs_settings for r in split_retrievals(retrieval))
    with contextlib.ExitStack() as stack:
        conn = stack.enter_context(connect()) if needs_database else None
        cache = stack.enter_context(EmbeddingCache(directory))
        return evaluate(
            list(corpus),
            queries,
            list(configs),
            embedder=embedder,
            scorer=scorer,
            k=k,
            input_price=input_price,
            cache=cache,
            progress=progress,
            retrieval=retrieval,
            conn=conn,
        )


def served_retrieval(retrieval) -> str:
    """The search() retrieval a stored version is evaluated with: ``hybrid`` (the default, with passages) is
    ``passages``, ``hybrid:assemble=off`` is ``hybrid`` (fused chunks), ``vector:assemble=off`` is ``vector``; other
    settings exist only offline (SQL serves its own)."""
    from toolkit.evaluation.retrieval import SETTINGS, split_retrievals

    if not retrieval:
        return "passages"
    chosen = split_retrievals(retrieval)
    if len(chosen) == 1 and all(getattr(chosen[0], name) is None for name in SETTINGS):
        r = chosen[0]
        served = {("hybrid", True): "passages", ("hybrid", False): "hybrid", ("vector", False): "vector"}
        if (r.mode, r.assemble) in served and r.text_search_config == "english":
            return served[(r.mode, r.assemble)]
    raise InputError(
        f"--version searches the version through SQL as applications do, which serves hybrid (passages, the default), "
        f"hybrid:assemble=off (fused chunks) or vector:assemble=off (chunks by distance); not "
        f"{','.join([retrieval] if isinstance(retrieval, str) else retrieval)!r}."
    )


def _evaluate_stored(
    version, corpus, configs, model, scorer, queries, k, tenant, input_price, directory, connect, retrieval
):
    from toolkit.embedding.cache import EmbeddingCache
    from toolkit.evaluation.stored import score_stored_version

    given = [name for name, value in (("--corpus", corpus), ("--configs", configs), ("--model", model)) if value]
    if given or scorer != "embedding":
        raise InputError(
            f"--version evaluates the version's own documents, chunks and model; drop {', '.join(given) or '--scorer'}."
        )
    with connect() as conn, EmbeddingCache(directory) as cache:
        return score_stored_version(
            conn, version, queries, k=k, tenant=tenant, input_price=input_price, cache=cache, retrieval=retrieval
        )


def _model_embedder(model: str | None, connect):
    """The embedder of provider:name (default MiniLM), or of a registered alias (read through ``connect()``)."""
    from toolkit.embedding import DEFAULT_MODEL_REF, get_embedder

    if model is None or ":" in model:
        return get_embedder(model or DEFAULT_MODEL_REF)
    from toolkit.store.models import embedder_for_model, get_model

    with connect() as conn:
        return embedder_for_model(get_model(conn, model), cached=False)  # the evaluation's own cache is in front
