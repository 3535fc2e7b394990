"""The statement of a search: ``toolkit.search(toolkit.search_request(...))``, every retrieval's one entry point, run in
the reader's transaction (``store.serving.as_reader``); the active model; pgvector's types on a caller's plain
connection."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from toolkit.db.connection import translate_errors
from toolkit.errors import InputError
from toolkit.store.serving import READER_ROLE, as_reader


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


# The fields of one search request Python sends, named as SQL's request names them (toolkit.search_request's
# arguments, the fields of toolkit.search_request_v1: tests/test_search_request.py keeps these among them). A field
# left None is not named, so it takes SQL's default.
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
    """The rows (toolkit.search_hit_v1) of one search ``request`` (a dict of REQUEST_FIELDS), as ``role`` in
    ``tenant`` with ``principals``."""
    unknown = set(request) - set(REQUEST_FIELDS)
    if unknown:
        raise InputError(f"Unknown search request field {sorted(unknown)[0]!r}.")
    params = {name: value for name, value in request.items() if value is not None}
    if "filters" in params:
        params["filters"] = Jsonb(params["filters"])
    arguments = sql.SQL(", ").join(
        sql.SQL("{} => {}").format(sql.Identifier(name), sql.Placeholder(name)) for name in params
    )
    statement = sql.SQL("SELECT * FROM toolkit.search(toolkit.search_request({}))").format(arguments)
    adapt_vectors(conn)
    with _search_errors(), as_reader(conn, tenant, principals, role):
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
