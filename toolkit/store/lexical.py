"""What the offline mirror of SQL's retrieval asks SQL (toolkit.evaluation.retrieval): the lexemes a version's
``fts`` column would hold for a chunk and those a question is searched with (SQL decides what is indexed), and the
retrieval settings SQL owns."""

from __future__ import annotations

from collections.abc import Sequence

# The text search configuration a version's fts column is built with unless its chunker spec says otherwise.
DEFAULT_TEXT_SEARCH_CONFIG = "english"


def chunk_lexemes(conn, chunks: Sequence, config: str = DEFAULT_TEXT_SEARCH_CONFIG) -> list[dict[str, int]]:
    """Each chunk's lexemes and their counts: the tsvector a version's ``fts`` column holds for it
    (``to_tsvector(config, toolkit.chunk_search_text(context, text))``: SQL decides what is indexed)."""
    result: list[dict[str, int]] = [{} for _ in chunks]
    for start in range(0, len(chunks), 2000):
        part = chunks[start : start + 2000]
        rows = conn.execute(
            "SELECT t.n, l.lexeme, cardinality(l.positions) FROM unnest(%s::text[], %s::text[])"
            " WITH ORDINALITY AS t (context, body, n),"
            " unnest(to_tsvector(%s::regconfig, toolkit.chunk_search_text(t.context, t.body))) AS l",
            ([c.context for c in part], [c.text for c in part], config),
            prepare=False,
        ).fetchall()
        for n, lexeme, count in rows:
            result[start + n - 1][lexeme] = count
    return result


def retrieval_settings(conn) -> dict:
    """The SQL defaults (``toolkit.retrieval_settings()``): k1, b, rrf_k, candidates, hits_per_passage,
    passage_chunks and postings_limit."""
    cur = conn.execute("SELECT * FROM toolkit.retrieval_settings()")
    return dict(zip([c.name for c in cur.description], cur.fetchone(), strict=True))


def query_lexemes(conn, queries: Sequence[str], config: str = DEFAULT_TEXT_SEARCH_CONFIG) -> list[list[str]]:
    """The distinct lexemes of each question (``toolkit.query_lexemes``), sorted, as the SQL search uses them."""
    rows = conn.execute(
        "SELECT t.n, toolkit.query_lexemes(%s::regconfig, t.q) FROM unnest(%s::text[]) WITH ORDINALITY AS t (q, n)"
        " ORDER BY t.n",
        (config, list(queries)),
        prepare=False,
    ).fetchall()
    return [list(row[1] or []) for row in rows]
