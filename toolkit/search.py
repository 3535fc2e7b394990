"""Searching as an application does: ask which version serves the request (``toolkit.serving_model``), embed the
question with that version's model, and search that version (pinned), through the SQL search functions
(``toolkit.search_passages`` by default: the retrieval verify gates and eval measures; ``search_chunks``,
``hybrid_search_chunks`` and ``search_context`` as options), as the reader role, with the tenant and
principals set for one transaction, so row-level security decides what is seen. A cutover between the two steps
changes nothing for the request; a version retired meanwhile raises VersionUnavailableError (retry)."""

from __future__ import annotations

import random
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import numpy as np
import psycopg

from toolkit import validation
from toolkit.errors import InputError, ModelMismatchError, StateError
from toolkit.serving import READER_ROLE, ServingModel, serving_model, version_model
from toolkit.store.query_log import query_log_sample_rate, write_logged_question
from toolkit.store.search import run_search, select_active_model
from toolkit.store.serving import labels_apply

FILTER_KEYS = ("doc_id", "doc_id_prefix", "heading_prefix", "updated_after", "updated_before", "labels", "metadata")
# A metadata filter as typed: metadata.KEY=VALUE (a top-level key of documents.metadata, equal to VALUE).
METADATA_PREFIX = "metadata."
# Filters that take several values; the others take one.
LIST_FILTERS = ("doc_id", "doc_id_prefix", "heading_prefix", "labels")
# A value of each key, for the sentence that refuses an empty one.
FILTER_EXAMPLES = {
    "doc_id": "guide.md",
    "doc_id_prefix": "support/",
    "heading_prefix": "Guide > Install",
    "updated_after": "2026-01-01",
    "updated_before": "2026-01-01",
    "labels": "eng",
}
# The largest k of every search function (toolkit.search_max_k(); a test keeps the two equal).
MAX_K = validation.RESULTS.maximum
_EXPAND = re.compile(r"^(parent|window:(\d{1,2}))$")
# The retrievals a search can run: passages (the default: toolkit.search_passages, hybrid hits assembled into
# passages), hybrid (hybrid_search_chunks: fused chunks), vector (search_chunks).
RETRIEVALS = ("passages", "hybrid", "vector")
DEFAULT_RETRIEVAL = "passages"


@dataclass(frozen=True)
class SearchHit:
    """One result: a passage (the default: one or more touching hits of a document, cut from its text), a chunk,
    or (with ``expand``) a context made of a parent or a window of chunks."""

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
    distance: float | None = None
    vector_rank: int | None = None
    text_rank: int | None = None
    pages: list[int] | None = None  # the source's pages (PDFs), for citations; None when it has none
    hit_ranks: list[int] | None = None  # passages: each chunk's rank among the hybrid hits
    tokens: int | None = None  # passages: the tokens the passage counts against the budget

    def as_dict(self) -> dict:
        return asdict(self)


def parse_expand(expand: str | None) -> str | None:
    """``parent`` or ``window:N`` (N neighbouring chunks on each side), or None for plain chunks."""
    if expand is None or expand == "":
        return None
    if not _EXPAND.match(expand):
        raise InputError(
            f"--expand {expand!r} is not understood: use parent (each hit's parent section) or window:N "
            "(N chunks before and after each hit, N from 0 to 99), e.g. window:1."
        )
    return expand


def parse_retrieval(retrieval: str | None, *, hybrid: bool = False, expand: str | None = None) -> str:
    """The retrieval a search runs: ``passages`` (the default), ``hybrid`` or ``vector``. ``hybrid=True`` (the
    earlier option) means ``hybrid``; ``expand`` (small-to-big) searches chunks, vector or hybrid."""
    if retrieval is None:
        retrieval = "hybrid" if hybrid else ("vector" if expand else DEFAULT_RETRIEVAL)
    if retrieval not in RETRIEVALS:
        raise InputError(
            f"The retrieval {retrieval!r} is not one of {', '.join(RETRIEVALS)}; passages (the default) is what "
            "toolkit verify gates."
        )
    if hybrid and retrieval != "hybrid":
        raise InputError(f"hybrid=True asks for the hybrid retrieval, but retrieval={retrieval!r} was given; pick one.")
    if expand and retrieval == "passages":
        raise InputError(
            "--expand returns parents or windows of chunk hits, not passages: add --retrieval vector or hybrid."
        )
    return retrieval


def parse_filters(pairs: Sequence[str]) -> dict:
    """Turns ``KEY=VALUE`` strings into the filters object; a key given twice collects its values.
    ``metadata.KEY=VALUE`` filters on a top-level key of the document's metadata (``validation.metadata_value``).
    Every value must say something: ``doc_id=`` (empty, or only spaces) is refused, not searched for; so is an empty
    heading in ``heading_prefix`` (``A >``)."""
    if isinstance(pairs, str | bytes) or not isinstance(pairs, Sequence):
        raise InputError('The filters are a list of KEY=VALUE strings, e.g. ["doc_id=guide.md"].')
    filters: dict = {}
    for pair in pairs:
        if not isinstance(pair, str):
            raise InputError(f"A filter is a KEY=VALUE string (e.g. doc_id=guide.md), not {validation.shown(pair)}.")
        if pair.strip().startswith(METADATA_PREFIX):
            key, sep, text = pair.strip().partition("=")
            name = key[len(METADATA_PREFIX) :].strip()
            if not sep or not name:
                raise InputError(
                    f"The metadata filter {validation.shown(pair)} is not metadata.KEY=VALUE with a key; "
                    "e.g. --filter metadata.lang=en."
                )
            metadata = filters.setdefault("metadata", {})
            if name in metadata:
                raise InputError(f"The metadata filter {name} was given twice; it takes one value.")
            metadata[name] = validation.metadata_value(name, text)
            continue
        parsed = validation.key_value(pair, FILTER_KEYS)
        if parsed is None:
            raise InputError(
                f"The filter {pair!r} is not KEY=VALUE with a known key; the keys are {', '.join(FILTER_KEYS[:-1])} "
                "and metadata.KEY (e.g. --filter doc_id=guide.md --filter updated_after=2026-01-01 "
                "--filter metadata.lang=en)."
            )
        key, value = parsed
        if key == "metadata":
            raise InputError("Write a metadata filter as metadata.KEY=VALUE, e.g. --filter metadata.lang=en.")
        if not value.strip():
            raise InputError(
                f"The filter {key} has no value; write one after the = (e.g. {key}={FILTER_EXAMPLES[key]}), or leave "
                "the filter out."
            )
        if key == "heading_prefix":
            value = [part.strip() for part in value.split(">")]
            if not all(value):
                raise InputError(
                    f"The filter heading_prefix {validation.shown(pair.partition('=')[2])} has an empty heading; "
                    "write the headings from the top, each non-empty, e.g. heading_prefix=Guide > Install."
                )
            filters[key] = value
        elif key in LIST_FILTERS:
            filters.setdefault(key, []).append(value)
        elif key in filters:
            raise InputError(f"The filter {key} was given twice; it takes one value.")
        else:
            filters[key] = value
    return filters


def check_filters(filters: dict | None) -> None:
    """The filters object as search() takes it (from Python, or a JSON body): known keys, nested at most
    ``validation.MAX_JSON_DEPTH`` levels (SQL checks each value's type: 22023), and no empty text where a value is
    compared (``{"doc_id": ""}`` is a mistake, not a document)."""
    if filters is None:
        return
    if not isinstance(filters, dict):
        raise InputError(f"The filters are an object of KEY: VALUE pairs, not {validation.shown(filters)}.")
    unknown = sorted((str(key) for key in set(filters) - set(FILTER_KEYS)), key=str)
    if unknown:
        raise InputError(f"Unknown search filter {unknown[0]!r}; the filters are {', '.join(FILTER_KEYS)}.")
    if validation.value_depth(filters) > validation.MAX_JSON_DEPTH:
        raise validation.too_deep("the filters")
    for key, value in filters.items():
        if key == "metadata":
            continue  # its values may be "" (a document's metadata may hold the empty string)
        values = value if isinstance(value, list | tuple) else [value]
        if any(isinstance(item, str) and not item.strip() for item in values):
            raise InputError(
                f"The filter {key} holds an empty value; give e.g. {FILTER_EXAMPLES[key]!r}, or leave the filter out."
            )


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
    k: int = 5,
    *,
    retrieval: str | None = None,
    max_tokens: int | None = None,
    hybrid: bool = False,
    expand: str | None = None,
    filters: dict | None = None,
    principals: Sequence[str] | None = None,
    query_text: str | None = None,
    query_model: str | None = None,
    version: int | None = None,
    request_key: str | None = None,
    ef_search: int | None = None,
    min_score: float | None = None,
    diversity: float = 0.0,
    role: str | None = READER_ROLE,
    log: bool = True,
) -> list[SearchHit]:
    """Top-k results for ``query`` in ``tenant``'s chunks, best first, always from one version.

    ``query`` is a question or a vector already embedded. A question is embedded with the model of ``version``
    when given, else of the version ``toolkit.serving_model(request_key)`` picks (the active version, or the canary
    candidate for its share of keys and tenants), and searched in that version. A vector is searched in ``version``
    (or the servable version of the model alias ``query_model``); with neither, in the active version (unpinned:
    a vector of the wrong dimensions is refused, one of another model with the same dimensions is not).
    ``retrieval`` is ``passages`` (the default, ``toolkit.search_passages``: full-text and vector ranks fused,
    touching hits of a document merged into passages cut from its text, at most k within ``max_tokens`` or the
    settings' budget: what toolkit verify gates and toolkit eval measures), ``hybrid`` (fused chunks) or
    ``vector`` (chunks by distance); full text needs the question's text (``query_text`` with a vector: without
    it, passages are assembled from the vector hits alone).
    ``hybrid=True`` is ``retrieval="hybrid"``. ``expand`` is ``parent`` or ``window:N`` (small-to-big).
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
    validation.RESULTS.check(k)
    validation.EF_SEARCH.check_optional(ef_search)
    validation.VERSION_NUMBER.check_optional(version)
    min_score = validation.MIN_SCORE.check_optional(min_score)
    diversity = validation.DIVERSITY.check(diversity)
    expand = parse_expand(expand)
    retrieval = parse_retrieval(retrieval, hybrid=hybrid, expand=expand)
    if max_tokens is not None:
        if retrieval != "passages":
            raise InputError("max_tokens is the passages' token budget; it applies to the passages retrieval only.")
        validation.PASSAGE_TOKENS.check(max_tokens)
    if expand and (min_score is not None or diversity):
        raise InputError(
            "--min-score and --diversity choose among hits; --expand returns their parents or windows: use one or "
            "the other."
        )
    check_filters(filters)
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
    if retrieval == "hybrid" and not query_text:
        raise InputError(
            "The hybrid retrieval ranks by full text too, so it needs the question's text: pass a question, or "
            "query_text with a vector (or retrieval='vector')."
        )

    started = time.perf_counter()
    request = {
        "query_text": query_text,
        "query_embedding": vector,
        "k": k,
        "retrieval": retrieval,
        "expand": expand,
        "filters": filters or {},
        "model": query_model,
        "version": version,
        "max_tokens": max_tokens,
        "min_score": None if min_score is None else float(min_score),
        "diversity": float(diversity),
        "ef_search": ef_search,
    }
    rows = run_search(conn, request, tenant, principals, role)
    hits = [_hit(row) for row in rows]
    if log and question is not None:
        log_query(conn, tenant, question, hits, k, (time.perf_counter() - started) * 1000, request_key, role)
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
    if "hit_ranks" in row:  # a passage (search_passages)
        return SearchHit(
            rank=row["rank"],
            score=row["score"],
            doc_id=row["doc_id"],
            start=row["start_offset"],
            end=row["end_offset"],
            heading_path=list(row["heading_path"] or []),
            text=row["text"],
            kind="passage",
            chunk_ids=list(row["chunk_ids"]),
            version=row["version"],
            model_alias=row["model_alias"],
            pages=list(row["pages"]) if row.get("pages") else None,
            hit_ranks=list(row["hit_ranks"]),
            tokens=row["tokens"],
        )
    context = "kind" in row  # a small-to-big context (search_context) rather than a chunk
    return SearchHit(
        rank=row["rank"],
        score=row["score"],
        doc_id=row["doc_id"],
        start=row["start_offset"],
        end=row["end_offset"],
        heading_path=list(row["heading_path"] or []),
        text=row["text"],
        kind=row["kind"] if context else "chunk",
        chunk_ids=list(row["chunk_ids"]) if context else [row["chunk_id"]],
        version=row["version"],
        model_alias=row["model_alias"],
        # What the SQL returns beside: distance (vector hits), ranks in each list (hybrid).
        distance=row.get("distance"),
        vector_rank=row.get("vector_rank"),
        text_rank=row.get("text_rank"),
        pages=list(row["pages"]) if row.get("pages") else None,
    )


def search_request(
    conn: psycopg.Connection,
    question: str,
    tenant: str,
    k: int = 5,
    *,
    filters: Sequence[str] | dict = (),
    on_unlabelled: Callable[[], None] | None = None,
    **options,
) -> list[SearchHit]:
    """``search`` of a question as a request gives it: ``filters`` may be KEY=VALUE pairs (``parse_filters``), and
    ``on_unlabelled`` is called first when this login is a service role for which access labels are not applied
    (``store.serving.labels_apply``: False for a service role that cannot take the reader role). ``options`` are
    ``search``'s."""
    if on_unlabelled is not None and not labels_apply(conn):
        on_unlabelled()
    chosen = filters if isinstance(filters, dict) else parse_filters(filters)
    return search(conn, question, tenant, k, filters=chosen, **options)
