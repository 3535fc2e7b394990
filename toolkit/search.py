"""Searching as an application does: ask which version serves the request (``toolkit.serving_model``), embed the
question with that version's model, and search that version (pinned), through the SQL search functions
(``toolkit.search_passages`` by default: the retrieval verify gates and eval measures; ``search_chunks``,
``hybrid_search_chunks`` and ``search_context`` as options), as the reader role, with the tenant and
principals set for one transaction, so row-level security decides what is seen. A cutover between the two steps
changes nothing for the request; a version retired meanwhile raises VersionUnavailableError (retry)."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import numpy as np
import psycopg

from toolkit import validation
from toolkit.errors import InputError, ModelMismatchError, StateError
from toolkit.search_options import (
    DEFAULT_RETRIEVAL,
    FILTER_KEYS,
    MAX_K,
    RETRIEVALS,
    SearchOptions,
    check_filters,
    parse_expand,
    parse_filters,
    parse_retrieval,
    search_options,
)
from toolkit.serving import READER_ROLE, ServingModel, serving_model, version_model
from toolkit.store.query_log import query_log_sample_rate, write_logged_question
from toolkit.store.search import run_search, select_active_model
from toolkit.store.serving import labels_apply

# The options and their parsers live in toolkit.search_options (declared once, light enough for the CLI's --help);
# named here too, where applications and earlier releases import them.
__all__ = [
    "DEFAULT_RETRIEVAL",
    "FILTER_KEYS",
    "MAX_K",
    "RETRIEVALS",
    "SearchHit",
    "SearchOptions",
    "active_model",
    "check_filters",
    "log_query",
    "parse_expand",
    "parse_filters",
    "parse_retrieval",
    "query_embedder",
    "search",
    "search_request",
]


@dataclass(frozen=True)
class SearchHit:
    """One result (a row of SQL's toolkit.search_hit_v1): a passage (the default: one or more touching hits of a
    document, stitched from its chunks), a chunk, or (with ``expand``) a context made of a parent or a window of
    chunks. ``score`` ranks the results of one search (a rank-fusion score for passages and hybrid chunks);
    ``similarity`` is the cosine similarity to the question, the number ``min_score`` filters on (a passage's or a
    context's: the largest of its hits')."""

    rank: int
    score: float
    doc_id: str
    start: int
    end: int
    heading_path: list[str]
    text: str
    kind: str  # passage, chunk, parent or window
    chunk_ids: list[str]  # the matching chunks this result stands for, best first
    version: int
    model_alias: str
    distance: float | None = None  # chunks: the distance the version ranks by; contexts: their best hit's
    vector_rank: int | None = None  # chunks and contexts: the (best) hit's rank in each list, None when not in it
    text_rank: int | None = None
    pages: list[int] | None = None  # the source's pages (PDFs), for citations; None when it has none
    hit_ranks: list[int] | None = None  # each chunk's rank among the hits (a chunk: its own rank)
    tokens: int | None = None  # passages: the tokens counted against the budget; chunks: theirs; contexts: None
    similarity: float | None = None  # the cosine similarity to the question, what min_score filters on

    def as_dict(self) -> dict:
        return asdict(self)


_embedders: dict[tuple, object] = {}
_embedders_lock = threading.Lock()


def active_model(conn: psycopg.Connection) -> dict:
    """The active version's model (``toolkit.active_model()``); StateError when no version is active."""
    model = select_active_model(conn)
    if model is None:
        raise StateError("No version is active, so there is nothing to search. Activate one with toolkit cutover.")
    return model


def query_embedder(conn: psycopg.Connection, model: dict | ServingModel | None = None):
    """The embedder of a version's model (the active one by default), built once per model and dimensions."""
    from toolkit.store.models import embedder_for_model, get_model

    model = model or active_model(conn)
    if isinstance(model, ServingModel):
        model = model.as_dict()
    registered = get_model(conn, model["model_alias"])
    # Everything the registry says of the model (prefixes, revision, options, server): a process may serve several
    # databases, and a model may be registered again with other settings.
    key = (repr(registered), model["dimensions"])
    with _embedders_lock:
        if key not in _embedders:
            _embedders[key] = embedder_for_model(registered, dimensions=model["dimensions"])
        return _embedders[key]


def search(
    conn: psycopg.Connection,
    query: str | Sequence[float] | np.ndarray,
    tenant: str,
    k: int | None = None,
    *,
    options: SearchOptions | None = None,
    principals: Sequence[str] | None = None,
    request_key: str | None = None,
    role: str | None = READER_ROLE,
    log: bool = True,
    **keywords,
) -> list[SearchHit]:
    """Top-k results for ``query`` in ``tenant``'s chunks, best first, always from one version.

    The search's options are ``toolkit.search_options.SearchOptions``' fields (``k``, ``retrieval``, ``max_tokens``,
    ``expand``, ``filters``, ``min_score``, ``diversity``, ``ef_search``, ``version``, ``query_model``,
    ``query_text``): given as ``options=SearchOptions(...)``, as keywords (``k=5, retrieval="vector"``), or both (a
    keyword replaces the record's field). A name that is no option is refused (InputError); ``hybrid=True`` is the
    deprecated ``retrieval="hybrid"``. Who asks is not an option: ``tenant``, ``principals`` (access labels) and
    ``request_key`` (the canary split).

    ``query`` is a question or a vector already embedded. A question is embedded with the model of ``version``
    when given, else of the version ``toolkit.serving_model(request_key)`` picks (the active version, or the canary
    candidate for its share of keys and tenants), and searched in that version. A vector is searched in ``version``
    (or the servable version of the model alias ``query_model``); with neither, in the active version (unpinned:
    a vector of the wrong dimensions is refused, one of another model with the same dimensions is not).
    ``retrieval`` is ``passages`` (the default, ``toolkit.search_passages``: full-text and vector ranks fused,
    touching hits of a document merged into passages cut from its text, at most k within ``max_tokens`` or the
    settings' budget: what toolkit verify gates and toolkit eval measures), ``hybrid`` (fused chunks) or
    ``vector`` (chunks by distance); full text needs the question's text (``query_text`` with a vector: without
    it, passages are assembled from the vector hits alone). ``expand`` is ``parent`` or ``window:N`` (small-to-big).
    ``filters`` may hold ``metadata``: ``{"lang": "en", "year": 2024}`` keeps the documents whose metadata has each
    top-level key equal to its value. ``min_score`` (-1 to 1) drops the hits whose cosine similarity to the question
    is below it, in every retrieval (passages are made of the hits that pass); fewer than k may come back.
    ``diversity`` (MMR lambda, 0 to 1; 0 is off) re-ranks the candidates by maximal marginal relevance, trading
    similarity to the question for dissimilarity to the hits already taken. The
    search runs as ``role`` (the reader: row-level security applies as for applications) when the connected user
    may take it; ``role=None`` keeps the current role. A pinned version that was retired meanwhile raises
    VersionUnavailableError: read the serving model again and retry. With the query log on (toolkit query-log), a
    share of questions is logged.
    """
    validation.check_tenant(tenant)
    if k is not None:
        keywords["k"] = k
    chosen = search_options(options, "search()", **keywords)
    query_text, query_model, version = chosen.query_text, chosen.query_model, chosen.version
    question = None
    if isinstance(query, str):
        if not query.strip():
            raise InputError("The question is empty; pass the text to search for.")
        question = query
        if version is not None:
            serving = version_model(conn, version)
        else:
            serving = serving_model(conn, tenant, request_key, role=role)
        if query_model is not None and query_model != serving.model_alias:
            raise ModelMismatchError(
                f"The query model {query_model!r} is not the model of version {serving.version} "
                f"({serving.model_alias!r}). Leave the model out to embed the question with the serving one."
            )
        vector = query_embedder(conn, serving).embed_query(query)
        query_text = query if query_text is None else query_text
        version, query_model = serving.version, serving.model_alias
    else:
        # One finite vector with a direction (SQL checks its dimensions against the version's: TK001 / TK002).
        vector = validation.query_vector(query)
    if chosen.retrieval == "hybrid" and not query_text:
        raise InputError(
            "The hybrid retrieval ranks by full text too, so it needs the question's text: pass a question, or "
            "query_text with a vector (or retrieval='vector')."
        )

    started = time.perf_counter()
    # The record's fields as SQL's request names them, with what the question resolved to.
    request = {
        **chosen.request(),
        "query_text": query_text,
        "query_embedding": vector,
        "model": query_model,
        "version": version,
    }
    rows = run_search(conn, request, tenant, principals, role)
    hits = [_hit(row) for row in rows]
    if log and question is not None:
        log_query(conn, tenant, question, hits, chosen.k, (time.perf_counter() - started) * 1000, request_key, role)
    return hits


# The query log's sample rate, read at most every LOG_RATE_TTL seconds per process (a search must not pay a round
# trip for a setting that changes once a month).
LOG_RATE_TTL = 30.0
_log_rate: dict[str, tuple[float, float]] = {}
_log_rate_lock = threading.Lock()


def _sample_rate(conn: psycopg.Connection) -> float:
    key = conn.info.dsn
    now = time.monotonic()
    with _log_rate_lock:
        cached = _log_rate.get(key)
        if cached and now - cached[1] < LOG_RATE_TTL:
            return cached[0]
    rate = query_log_sample_rate(conn)
    with _log_rate_lock:
        _log_rate[key] = (rate, now)
    return rate


def log_query(
    conn: psycopg.Connection,
    tenant: str,
    question: str,
    hits: Sequence[SearchHit],
    k: int,
    latency_ms: float,
    request_key: str | None = None,
    role: str | None = READER_ROLE,
) -> bool:
    """Logs a served question when the query log samples it (toolkit.log_query); returns whether it did. The row
    is committed with the caller's transaction (or at once when there is none)."""
    rate = _sample_rate(conn)
    if rate <= 0 or not hits or random.random() >= rate:
        return False
    results = [{"doc_id": h.doc_id, "start": h.start, "end": h.end, "rank": h.rank, "score": h.score} for h in hits]
    return write_logged_question(conn, tenant, question, hits[0].version, k, results, latency_ms, request_key, role)


def _hit(row: dict) -> SearchHit:
    """A row of toolkit.search (toolkit.search_hit_v1), whatever its kind."""
    return SearchHit(
        rank=row["rank"],
        score=row["score"],
        doc_id=row["doc_id"],
        start=row["start_offset"],
        end=row["end_offset"],
        heading_path=list(row["heading_path"] or []),
        text=row["text"],
        kind=row["kind"],
        chunk_ids=list(row["chunk_ids"]),
        version=row["version"],
        model_alias=row["model_alias"],
        distance=row["distance"],
        vector_rank=row["vector_rank"],
        text_rank=row["text_rank"],
        pages=list(row["pages"]) if row["pages"] else None,
        hit_ranks=list(row["hit_ranks"]) if row["hit_ranks"] is not None else None,
        tokens=row["tokens"],
        similarity=row["similarity"],
    )


def search_request(
    conn: psycopg.Connection,
    question: str,
    tenant: str,
    k: int | None = None,
    *,
    on_unlabelled: Callable[[], None] | None = None,
    **options,
) -> list[SearchHit]:
    """``search`` of a question as a request gives it, ``on_unlabelled`` called first when this login is a service
    role for which access labels are not applied (``store.serving.labels_apply``: False for a service role that
    cannot take the reader role). ``options`` are ``search``'s (``filters`` may be KEY=VALUE strings)."""
    if on_unlabelled is not None and not labels_apply(conn):
        on_unlabelled()
    return search(conn, question, tenant, k, **options)
