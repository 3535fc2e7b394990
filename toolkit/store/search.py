"""The statements of a search: the SQL search function of each retrieval (``search_passages``, ``hybrid_search_chunks``,
``search_chunks``, ``search_context``) run in the reader's transaction (``store.serving.as_reader``), the active
model, and pgvector's types on a caller's plain connection."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

import psycopg
from psycopg.types.json import Jsonb

from toolkit.db.connection import translate_errors
from toolkit.errors import InputError
from toolkit.store.serving import READER_ROLE, as_reader

# One statement per retrieval; the parameters are named as search() builds them.
STATEMENTS = {
    "passages": (
        "SELECT * FROM toolkit.search_passages(%(text)s, %(q)s, %(k)s, %(filters)s, %(model)s, %(version)s,"
        " %(max_tokens)s, %(min_score)s, %(diversity)s)"
    ),
    "hybrid": (
        "SELECT * FROM toolkit.hybrid_search_chunks(%(text)s, %(q)s, %(k)s, %(filters)s, %(model)s,"
        " query_version => %(version)s, min_score => %(min_score)s, diversity => %(diversity)s)"
    ),
    "vector": (
        "SELECT * FROM toolkit.search_chunks(%(q)s, %(k)s, %(filters)s, %(model)s, %(version)s, %(min_score)s,"
        " %(diversity)s)"
    ),
    "expand": (
        "SELECT * FROM toolkit.search_context(%(q)s, %(k)s, %(expand)s, %(text)s, %(filters)s, %(model)s, %(version)s)"
    ),
}


@contextlib.contextmanager
def _search_errors() -> Iterator[None]:
    """A malformed date filter gets its own message; the rest (the model guard's TK001 included) as
    toolkit.db.connection translates them."""
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


def adapt_vectors(conn: psycopg.Connection) -> None:
    """Teaches a plain psycopg connection pgvector's types (once): the documented search() works on any connection,
    not only on toolkit.db.connection.connect()'s."""
    import numpy as np
    from psycopg.adapt import PyFormat

    try:
        conn.adapters.get_dumper(np.ndarray, PyFormat.AUTO)
    except psycopg.ProgrammingError:
        from pgvector.psycopg import register_vector

        with conn.transaction():
            register_vector(conn)


# The fields of one search request, named as SQL's request names them (toolkit.search_request). search() fills
# every one; None (or the field's default) leaves SQL's default.
REQUEST_FIELDS = (
    "query_text",
    "query_embedding",
    "k",
    "retrieval",
    "expand",
    "filters",
    "model",
    "version",
    "max_tokens",
    "min_score",
    "diversity",
    "ef_search",
)


def run_search(
    conn: psycopg.Connection,
    request: dict,
    tenant: str,
    principals: Sequence[str] | None,
    role: str | None = READER_ROLE,
) -> list[dict]:
    """The rows of one search ``request`` (a dict of REQUEST_FIELDS), as ``role`` in ``tenant`` with
    ``principals``."""
    unknown = set(request) - set(REQUEST_FIELDS)
    if unknown:
        raise InputError(f"Unknown search request field {sorted(unknown)[0]!r}.")
    retrieval, expand = request.get("retrieval") or "passages", request.get("expand")
    # A statement uses the named parameters it names; the others are ignored (small-to-big ranks by full text only
    # when it expands hybrid hits).
    query_text = request.get("query_text")
    params = {
        "q": request["query_embedding"],
        "k": request.get("k", 5),
        "filters": Jsonb(request.get("filters") or {}),
        "model": request.get("model"),
        "version": request.get("version"),
        "min_score": request.get("min_score"),
        "diversity": float(request.get("diversity") or 0.0),
        "expand": expand,
        "text": query_text if not expand or retrieval == "hybrid" else None,
        "max_tokens": request.get("max_tokens"),
    }
    ef_search = request.get("ef_search")
    statement = STATEMENTS["expand" if expand else retrieval]
    adapt_vectors(conn)
    with _search_errors(), as_reader(conn, tenant, principals, role):
        if ef_search is not None:
            conn.execute("SELECT set_config('hnsw.ef_search', %s, true)", (str(int(ef_search)),))
        # No server-side preparation: each call is planned with its own tenant and filters.
        cur = conn.execute(statement, params, prepare=False)
        names = [c.name for c in cur.description]
        return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def select_active_model(conn: psycopg.Connection) -> dict | None:
    """The active version's model (``toolkit.active_model()``), None when no version is active."""
    with conn.transaction():
        cur = conn.execute("SELECT * FROM toolkit.active_model()")
        row = cur.fetchone()
        names = [c.name for c in cur.description]
    return None if row is None else dict(zip(names, row, strict=True))
