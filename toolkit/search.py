"""Searching the active version: embeds the question with the active model and calls the SQL search
functions (``toolkit.search_chunks``, ``hybrid_search_chunks``, ``search_context``) as the reader role,
with the tenant and principals set for one transaction, so row-level security decides what is seen."""

from __future__ import annotations

import contextlib
import re
import threading
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass

import numpy as np
import psycopg
from psycopg.types.json import Jsonb

from toolkit import validation
from toolkit.database import translate_errors
from toolkit.errors import InputError, ModelMismatchError, StateError

FILTER_KEYS = ("doc_id", "doc_id_prefix", "heading_prefix", "updated_after", "updated_before", "labels")
# Filters that take several values; the others take one.
LIST_FILTERS = ("doc_id", "doc_id_prefix", "heading_prefix", "labels")
READER_ROLE = "toolkit_reader"
_EXPAND = re.compile(r"^(parent|window:(\d{1,2}))$")


@dataclass(frozen=True)
class SearchHit:
    """One result: a chunk, or (with ``expand``) a context made of a parent or a window of chunks."""

    rank: int
    score: float
    doc_id: str
    start: int
    end: int
    heading_path: list[str]
    text: str
    kind: str  # chunk, parent or window
    chunk_ids: list[str]  # the matching chunks this result stands for, best first
    version: int
    model_alias: str
    distance: float | None = None
    vector_rank: int | None = None
    text_rank: int | None = None

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


def parse_filters(pairs: Sequence[str]) -> dict:
    """Turns ``KEY=VALUE`` strings into the filters object; a key given twice collects its values."""
    filters: dict = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or key not in FILTER_KEYS:
            raise InputError(
                f"The filter {pair!r} is not KEY=VALUE with a known key; the keys are {', '.join(FILTER_KEYS)} "
                "(e.g. --filter doc_id=guide.md --filter updated_after=2026-01-01)."
            )
        if key == "heading_prefix":
            value = [part.strip() for part in value.split(">")]
            filters[key] = value
        elif key in LIST_FILTERS:
            filters.setdefault(key, []).append(value)
        elif key in filters:
            raise InputError(f"The filter {key} was given twice; it takes one value.")
        else:
            filters[key] = value
    return filters


_embedders: dict[tuple, object] = {}
_embedders_lock = threading.Lock()


def active_model(conn: psycopg.Connection) -> dict:
    """The active version's model (``toolkit.active_model()``); StateError when no version is active."""
    with conn.transaction():
        cur = conn.execute("SELECT * FROM toolkit.active_model()")
        row = cur.fetchone()
        names = [c.name for c in cur.description]
    if row is None:
        raise StateError("No version is active, so there is nothing to search. Activate one with toolkit cutover.")
    return dict(zip(names, row, strict=True))


def query_embedder(conn: psycopg.Connection, model: dict | None = None):
    """The embedder of the active model (built once per model and dimensions, then reused)."""
    from toolkit.models import embedder_for_model, get_model

    model = model or active_model(conn)
    registered = get_model(conn, model["model_alias"])
    key = (registered.alias, registered.provider, registered.model_name, model["dimensions"])
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
    hybrid: bool = False,
    expand: str | None = None,
    filters: dict | None = None,
    principals: Sequence[str] | None = None,
    query_text: str | None = None,
    query_model: str | None = None,
    ef_search: int | None = None,
    role: str | None = READER_ROLE,
) -> list[SearchHit]:
    """Top-k results for ``query`` in ``tenant``'s chunks of the active version, best first.

    ``query`` is a question (embedded with the active model and its query prefix) or a vector already
    embedded (then declare its model with ``query_model`` so a mismatch is refused). ``hybrid`` fuses
    full-text and vector ranks (the question's text, or ``query_text``); ``expand`` is ``parent`` or
    ``window:N`` (small-to-big). The search runs as ``role`` (the reader: row-level security applies as it
    does for applications) when the connected user may switch to it; ``role=None`` keeps the current role.
    """
    if not isinstance(tenant, str) or not tenant:
        raise InputError("A search needs a tenant: pass --tenant (the tenant the documents were ingested for).")
    validation.RESULTS.check(k)
    validation.EF_SEARCH.check_optional(ef_search)
    expand = parse_expand(expand)
    unknown = sorted(set(filters or {}) - set(FILTER_KEYS))
    if unknown:
        raise InputError(f"Unknown search filter {unknown[0]!r}; the filters are {', '.join(FILTER_KEYS)}.")
    if isinstance(query, str):
        if not query.strip():
            raise InputError("The question is empty; pass the text to search for.")
        model = active_model(conn)
        if query_model is not None and query_model != model["model_alias"]:
            raise ModelMismatchError(
                f"The query model {query_model!r} is not the active model {model['model_alias']!r}. "
                "Leave the model out to embed the question with the active one."
            )
        vector = query_embedder(conn, model).embed_query(query)
        query_text = query if query_text is None else query_text
        query_model = model["model_alias"]
    else:
        vector = np.asarray(query, dtype=np.float32)
        if vector.ndim != 1 or not np.isfinite(vector).all():
            raise InputError("The query vector must be one finite vector of numbers.")
    if hybrid and not query_text:
        raise InputError("A hybrid search needs the question's text: pass a question, or query_text with a vector.")

    params = {"q": vector, "k": k, "filters": Jsonb(filters or {}), "model": query_model}
    if expand:
        params.update(expand=expand, text=query_text if hybrid else None)
        statement = "SELECT * FROM toolkit.search_context(%(q)s, %(k)s, %(expand)s, %(text)s, %(filters)s, %(model)s)"
    elif hybrid:
        params["text"] = query_text
        statement = "SELECT * FROM toolkit.hybrid_search_chunks(%(text)s, %(q)s, %(k)s, %(filters)s, %(model)s)"
    else:
        statement = "SELECT * FROM toolkit.search_chunks(%(q)s, %(k)s, %(filters)s, %(model)s)"

    # Rolled back at the end (it only reads): the role and settings set here then end with it, even inside a
    # transaction of the caller's (SET LOCAL would otherwise last until the caller's transaction ends).
    with _search_errors(), conn.transaction(force_rollback=True):
        if role and conn.execute("SELECT pg_has_role(current_user, %s, 'MEMBER')", (role,)).fetchone()[0]:
            conn.execute(psycopg.sql.SQL("SET LOCAL ROLE {}").format(psycopg.sql.Identifier(role)))
        conn.execute("SELECT toolkit.set_tenant(%s)", (tenant,))
        conn.execute("SELECT toolkit.set_principals(%s)", (list(principals or []),))
        if ef_search is not None:
            conn.execute("SELECT set_config('hnsw.ef_search', %s, true)", (str(int(ef_search)),))
        # No server-side preparation: each call is planned with its own tenant and filters.
        cur = conn.execute(statement, params, prepare=False)
        names = [c.name for c in cur.description]
        rows = [dict(zip(names, row, strict=True)) for row in cur.fetchall()]
    return [_hit(row) for row in rows]


def _hit(row: dict) -> SearchHit:
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
    )


@contextlib.contextmanager
def _search_errors() -> Iterator[None]:
    """A malformed date filter gets its own message; the rest (the model guard's TK001 included) as
    toolkit.database translates them."""
    with translate_errors():
        try:
            yield
        except psycopg.Error as error:
            if error.sqlstate in ("22007", "22008"):
                message = error.diag.message_primary or str(error).strip()
                raise InputError(
                    f"A date filter is not a timestamp ({message}); write e.g. 2026-11-29T12:00Z."
                ) from error
            raise
