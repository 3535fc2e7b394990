"""Evaluating a version already in the database: its stored chunks of one tenant, searched through the pinned SQL
search function applications use, questions embedded with the version's model, scored like an offline
configuration (toolkit eval --version)."""

from __future__ import annotations

from pathlib import Path

from toolkit.errors import InputError
from toolkit.evaluation.frontier import mark_pareto
from toolkit.evaluation.queries import load_queries
from toolkit.evaluation.report import DEFAULT_INPUT_PRICE, HITS_PER_CONTEXT, EvalReport, Unit
from toolkit.evaluation.scoring import score_config
from toolkit.store.contents import stored_chunks


def score_stored_version(
    conn,
    version: int,
    queries: str | Path,
    *,
    k: int = 5,
    tenant: str | None = None,
    input_price: float = DEFAULT_INPUT_PRICE,
    cache=None,
    retrieval: str = "passages",
) -> EvalReport:
    """Evaluate a version already in the database: its stored chunks, searched as applications search them
    (``search()`` with its defaults: ``toolkit.search_passages`` as the reader role, on the HNSW index), questions
    embedded with the version's model. The documents and answers are the tenant's stored raw texts."""
    from toolkit.embedding.cache import EmbeddingCache
    from toolkit.search import MAX_K, search
    from toolkit.store.models import embedder_for_model, get_model
    from toolkit.verify import can_be_reader, pick_tenant, tenant_documents, version_info

    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_K // HITS_PER_CONTEXT:
        raise InputError(
            f"k (chunks retrieved per query) must be a whole number from 1 to {MAX_K // HITS_PER_CONTEXT}, not {k!r}."
        )
    tenant = pick_tenant(conn, tenant)
    alias, chunker_version, _, dims = version_info(conn, version)
    documents = tenant_documents(conn, tenant)
    labelled = load_queries(queries, documents)
    embedder = embedder_for_model(get_model(conn, alias), dims, cached=False)  # scored through `cache`
    stored, missing = stored_chunks(conn, version, tenant)
    if missing:
        raise InputError(
            f"Version {version} has {missing} chunks of tenant {tenant!r} without an embedding; finish it with "
            f"toolkit backfill --model {alias} --resume, then evaluate it."
        )
    chunks = [c for c in stored if not c.is_parent]
    if not chunks:
        raise InputError(f"Version {version} has no chunks for tenant {tenant!r}; ingest the corpus first.")
    parents = {c.chunk_id: c for c in stored if c.is_parent} or None
    by_id = {c.chunk_id: c for c in chunks}
    cache = cache if cache is not None else EmbeddingCache()
    vectors = cache.embed_queries(embedder, [q.query for q in labelled])
    as_reader = can_be_reader(conn)
    hits, served = [], None
    if parents:
        # Small-to-big: the children searched (vector), their parents scored as contexts.
        for vector in vectors:
            found = search(conn, vector, tenant, k * HITS_PER_CONTEXT, version=version, log=False, retrieval="vector")
            hits.append([by_id[hit.chunk_ids[0]] for hit in found])
    else:
        # What an application gets: search() with its defaults (toolkit.search_passages) or the retrieval named,
        # scored as handed over.
        served = []
        for q, vector in zip(labelled, vectors, strict=True):
            found = search(conn, vector, tenant, k, version=version, log=False, query_text=q.query, retrieval=retrieval)
            served.append(
                [Unit(h.doc_id, h.start, h.end, h.tokens if h.tokens is not None else by_id[h.chunk_ids[0]].token_count)
                 for h in found]
            )  # fmt: skip
            hits.append([by_id[hit.chunk_ids[0]] for hit in found])
    result = score_config(
        f"v{version}", chunker_version, chunks, parents, hits, documents, labelled, k, input_price, retrieved=served
    )
    result.retrieval = {"passages": "hybrid", "hybrid": "hybrid:assemble=off", "vector": "vector:assemble=off"}.get(
        retrieval, retrieval
    )
    mark_pareto([result])
    return EvalReport(
        model=f"{embedder.ref} (alias {alias})",
        scorer="embedding",
        k=k,
        queries=len(labelled),
        documents=len(documents),
        input_price=float(input_price),
        configs=[result],
        embedded_texts=cache.embedded_texts,
        cache_hits=cache.hits,
        cache_path=None if cache.path is None else str(cache.path),
        notes=[
            f"version {version} of tenant {tenant!r}: stored chunks searched through SQL"
            + (" as toolkit_reader" if as_reader else "")
            + f" with search(retrieval={retrieval!r}) on the HNSW index, as applications see it."
        ],
    )
