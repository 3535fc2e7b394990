"""The offline ranking of `toolkit eval` is the one SQL serves: on the whole sample set (7 documents, 260
questions), the exact-cosine ranking with its chunk-id tie-break (`search_chunks`), BM25 full text alone and
fused with the vector ranks (`hybrid_search_chunks`), the passages assembled from those hits (`search_passages`,
what applications get by default), and small-to-big contexts (`search_context`) come out of
`toolkit.evaluation.retrieval` / `toolkit.evaluation.offline` exactly as the SQL functions return them, chunk by chunk,
in order.

The version has an HNSW index, as every version does; the searches run with index scans off, so SQL ranks by
exact distance too (an approximate index is measured in docs/search.md, not here)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from support import insert_test_model, prepared_database

from toolkit import cutover
from toolkit.chunking import get_chunker
from toolkit.embedding import get_embedder
from toolkit.evaluation.offline import rank_chunks
from toolkit.evaluation.queries import SAMPLE_QUERIES, load_queries, read_sample_documents
from toolkit.evaluation.report import HITS_PER_CONTEXT
from toolkit.evaluation.retrieval import (
    BM25,
    Retrieval,
    assemble,
    cosine_distances,
    fuse,
    order_by,
    passage_budget,
    text_ranking,
)
from toolkit.evaluation.scoring import _contexts
from toolkit.store import versions
from toolkit.store.lexical import chunk_lexemes, query_lexemes, retrieval_settings

DIMS = 64
EMBEDDER = get_embedder(f"hashing:{DIMS}")
DOCUMENTS = read_sample_documents()
QUERIES = load_queries(SAMPLE_QUERIES, DOCUMENTS)
TENANT = "acme"
K = 5


def store(conn, spec: str, alias: str, documents=DOCUMENTS, *, gaps: bool = True):
    """A version of the sample chunked with ``spec`` and embedded with the hashing model, active; returns its
    chunks (parents included, in the order eval sees them) and the children's vectors. ``gaps=False`` writes the
    rows as the release before 0006 did, without the whitespace before each chunk (gap_before NULL)."""
    version = versions.create_version(conn, alias, spec, get_chunker(spec).version)
    chunker = get_chunker(spec, embedder=EMBEDDER)
    chunks = [c for doc_id, text in documents.items() for c in chunker.chunk(text, doc_id)]
    children = [c for c in chunks if not c.is_parent]
    vectors = EMBEDDER.embed_documents([c.embed_text for c in children])
    by_id = dict(zip((c.chunk_id for c in children), vectors, strict=True))
    with conn.cursor() as cur:
        cur.executemany(
            f"INSERT INTO toolkit.chunks_v{int(version)} (tenant, chunk_id, doc_id, parent_id, is_parent, position,"
            " start_offset, end_offset, heading_path, context, text, content_hash, token_count, gap_before, embedding)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
            [
                (
                    TENANT,
                    c.chunk_id,
                    c.doc_id,
                    c.parent_id,
                    c.is_parent,
                    c.position,
                    c.start,
                    c.end,
                    list(c.heading_path),
                    c.context,
                    c.text,
                    c.content_hash,
                    c.token_count,
                    c.gap_before if gaps else None,
                    by_id.get(c.chunk_id),
                )
                for c in chunks
            ],
        )
    conn.execute(f"ANALYZE toolkit.chunks_v{int(version)}")
    versions.create_version_index(conn, version, maintenance_work_mem="64MB")
    versions.mark_version_ready(conn, version)
    cutover.activate_version(conn, version, force=True)
    return chunks, children, np.asarray(vectors)


def as_reader(conn, statement: str, params) -> list[tuple]:
    with conn.transaction():
        conn.execute("SET LOCAL ROLE toolkit_reader")
        conn.execute("SELECT toolkit.set_tenant(%s)", (TENANT,))
        conn.execute("SET LOCAL enable_indexscan = off")  # exact distances, as eval computes them
        return conn.execute(statement, params, prepare=False).fetchall()


def build_sample_version(conn):
    insert_test_model(conn, "h", DIMS, model_name=str(DIMS))
    return store(conn, "recursive:128:64", "h")


# The sample's version is built once per module and copied for each test that asks (conftest's template_database).
PREPARED_DATABASES = {"sample_version": "sample_database"}


@pytest.fixture(scope="module")
def sample_database(pg_admin_url, migrated_template):
    with prepared_database(pg_admin_url, migrated_template, build_sample_version) as prepared:
        yield prepared


@pytest.fixture
def sample_version(sample_database, conn):
    """(chunks, children, the children's vectors) of the sample's version, in this test's copy of its database."""
    return sample_database[1]


def sql_ranking(conn, question: str, vector, depth: int) -> list[tuple[str, float]]:
    rows = as_reader(conn, "SELECT chunk_id, distance FROM toolkit.search_chunks(%s, %s)", (vector, depth))
    return [(r[0], r[1]) for r in rows]


def test_vector_ranking_is_search_chunks(conn, sample_version):
    """The same chunks at every rank, and the same distances, to float32 rounding: pgvector sums in float32 with
    SIMD lanes (``-fassociative-math``), numpy in float64, so two chunks whose distances agree to 1e-7 may swap;
    every other position is identical, and exact ties are broken by chunk id on both sides."""
    _, children, vectors = sample_version
    ids = [c.chunk_id for c in children]
    index = {chunk_id: i for i, chunk_id in enumerate(ids)}
    query_vectors = np.stack([EMBEDDER.embed_query(q.query) for q in QUERIES])
    distances = cosine_distances(query_vectors, vectors)
    swapped = same = 0
    for question, vector, row in zip(QUERIES, query_vectors, distances, strict=True):
        expected = [ids[i] for i in order_by(row, ids, descending=False)[:20]]
        found = sql_ranking(conn, question.query, vector, 20)
        for (chunk_id, distance), mine in zip(found, expected, strict=True):
            assert distance == pytest.approx(row[index[chunk_id]], abs=1e-6)
            if chunk_id == mine:
                same += 1
                continue
            assert abs(row[index[chunk_id]] - row[index[mine]]) < 1e-7, (question.query, chunk_id, mine)
            swapped += 1
    assert same > 10 * swapped  # the hashing model's quantized vectors make exact-math ties common


def offline_fused(retrieval, bm25, ids, sql_vector_ids, question_terms, depth: int) -> list[str]:
    """The hybrid ranking from SQL's own vector candidates: the BM25 ranking and the fusion are computed
    offline (toolkit.evaluation.retrieval), so any difference is in those, not in float32 rounding of distances."""
    position = {chunk_id: i for i, chunk_id in enumerate(ids)}
    pool = max(retrieval.candidates, depth)
    text = text_ranking(bm25, question_terms, ids, pool)
    vector = [position[chunk_id] for chunk_id in sql_vector_ids[:pool]] if retrieval.mode == "hybrid" else []
    return [ids[i] for i in fuse(vector, text, ids, depth, retrieval.rrf_k)]


@pytest.mark.parametrize("mode", ["hybrid", "text"])
def test_full_text_and_fusion_are_hybrid_search_chunks(conn, sample_version, mode):
    _, children, _ = sample_version
    depth = K * HITS_PER_CONTEXT  # what eval asks for (contexts and passages are made from these)
    retrieval = Retrieval(mode).resolved(retrieval_settings(conn))
    pool = max(retrieval.candidates, depth)
    ids = [c.chunk_id for c in children]
    with conn.transaction():
        bm25 = BM25(
            chunk_lexemes(conn, children),
            [c.token_count for c in children],
            retrieval.k1,
            retrieval.b,
            retrieval.postings_limit,
        )
        question_terms = query_lexemes(conn, [q.query for q in QUERIES])
    compared = 0
    for question, terms in zip(QUERIES, question_terms, strict=True):
        vector = EMBEDDER.embed_query(question.query)
        sql_vector_ids = (
            [chunk_id for chunk_id, _ in sql_ranking(conn, question.query, vector, pool)] if mode == "hybrid" else []
        )
        expected = offline_fused(retrieval, bm25, ids, sql_vector_ids, terms, depth)
        rows = as_reader(
            conn,
            "SELECT chunk_id FROM toolkit.hybrid_search_chunks(%s, %s, %s)",
            (question.query, vector if mode == "hybrid" else None, depth),
        )
        assert [r[0] for r in rows] == expected, question.query
        compared += len(expected)
    assert compared > len(QUERIES) * K  # the lists are long: full text found chunks for most questions


def test_bm25_settings_come_from_sql(conn):
    settings = retrieval_settings(conn)
    assert set(settings) == {
        "k1",
        "b",
        "rrf_k",
        "candidates",
        "hits_per_passage",
        "passage_chunks",
        "postings_limit",
    }
    resolved = Retrieval("hybrid", rrf_k=3).resolved(settings)
    assert (resolved.k1, resolved.b, resolved.rrf_k) == (settings["k1"], settings["b"], 3)


@pytest.mark.parametrize("query_text", [False, True])
def test_small_to_big_contexts_are_search_context(conn, make_model, query_text):
    """Contexts made offline (toolkit.evaluation.offline._contexts) from the hits SQL found are the ones search_context
    returns: the same spans, merged the same way, in the same order."""
    make_model("p", DIMS, model_name=str(DIMS))
    chunks, _, _ = store(conn, "sentence:60:0:parent=markdown,400,0", "p")
    parents = {c.chunk_id: c for c in chunks if c.is_parent}
    by_id = {c.chunk_id: c for c in chunks if not c.is_parent}
    for question in QUERIES:
        vector = EMBEDDER.embed_query(question.query)
        if query_text:
            found = as_reader(
                conn, "SELECT chunk_id FROM toolkit.hybrid_search_chunks(%s, %s, %s)", (question.query, vector, 4 * K)
            )
        else:
            found = as_reader(conn, "SELECT chunk_id FROM toolkit.search_chunks(%s, %s)", (vector, 4 * K))
        expected = [(u.doc_id, u.start, u.end) for u in _contexts([by_id[r[0]] for r in found], parents, DOCUMENTS, K)]
        rows = as_reader(
            conn,
            "SELECT doc_id, start_offset, end_offset FROM toolkit.search_context(%s, %s, 'parent', %s)",
            (vector, K, question.query if query_text else None),
        )
        assert [tuple(r) for r in rows] == expected, question.query


def test_a_tie_is_broken_by_chunk_id_on_both_sides(conn, make_model):
    """Two documents with the same text give chunks with the same vector (and lexemes) but different ids."""
    make_model("t", DIMS, model_name=str(DIMS))
    text = DOCUMENTS["row-security.md"]
    _, children, vectors = store(conn, "recursive:128:0", "t", {"a.md": text, "b.md": text, "c.md": text})
    question = "Which roles bypass row security?"
    vector = EMBEDDER.embed_query(question)
    settings = retrieval_settings(conn)
    for retrieval in (Retrieval("vector"), Retrieval("hybrid").resolved(settings)):
        (ranked,) = rank_chunks(children, vectors, vector[None, :], [question], [retrieval], 9, False, conn)
        ids = [c.chunk_id for c in ranked[0][:9]]
        assert len({c.text for c in ranked[0][:3]}) == 1  # the top three are one text, three times
        if retrieval.mode == "vector":
            rows = as_reader(conn, "SELECT chunk_id FROM toolkit.search_chunks(%s, 9)", (vector,))
        else:
            rows = as_reader(conn, "SELECT chunk_id FROM toolkit.hybrid_search_chunks(%s, %s, 9)", (question, vector))
        assert [r[0] for r in rows] == ids


def store_documents(conn, documents) -> None:
    """The documents' rows (search_passages cuts passages from their raw text)."""
    with conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO toolkit.documents (tenant, doc_id, source, raw_text, content_hash)"
            " VALUES (%s, %s, %s, %s, %s)",
            [(TENANT, doc_id, doc_id, text, str(hash(text))) for doc_id, text in documents.items()],
        )


PLAIN = Path(__file__).resolve().parent.parent / "bench" / "data" / "plain"


def plain_set():
    documents = {p.name: p.read_text(encoding="utf-8") for p in sorted((PLAIN / "docs").iterdir()) if p.is_file()}
    return documents, load_queries(PLAIN / "queries.jsonl", documents)


@pytest.mark.parametrize(("corpus", "gaps"), [("sample", True), ("plain", True), ("sample", False)])
def test_passages_are_search_passages(conn, make_model, corpus, gaps):
    """Passages assembled offline (toolkit.evaluation.retrieval.assemble, the budget from passage_budget) from the
    hybrid hits SQL found are the ones search_passages returns: the same spans, tokens, chunks and order, and the
    text the document's own. With each chunk's gap_before, SQL never reads the document; rows written before chunks
    kept it (gaps=False) are joined and cut by reading the document, with the same result."""
    documents, queries = (DOCUMENTS, QUERIES) if corpus == "sample" else plain_set()
    make_model("g", DIMS, model_name=str(DIMS))
    _, children, _ = store(conn, "recursive:128:64", "g", documents, gaps=gaps)
    if not gaps:
        # Only rows without their gap need the documents: with it, SQL has none to read and still matches.
        store_documents(conn, documents)
    settings = retrieval_settings(conn)
    by_id = {c.chunk_id: c for c in children}
    budget = passage_budget(K, [c.token_count for c in children], settings["passage_chunks"])
    depth = K * settings["hits_per_passage"]
    merged = 0
    for question in queries:
        vector = EMBEDDER.embed_query(question.query)
        hits = as_reader(
            conn, "SELECT chunk_id FROM toolkit.hybrid_search_chunks(%s, %s, %s)", (question.query, vector, depth)
        )
        expected = [
            (p.doc_id, p.start, p.end, p.tokens, [m.chunk_id for m in p.members], documents[p.doc_id][p.start : p.end])
            for p in assemble([by_id[r[0]] for r in hits], K, budget, documents)
        ]
        rows = as_reader(
            conn,
            "SELECT doc_id, start_offset, end_offset, tokens, chunk_ids, text FROM toolkit.search_passages(%s, %s, %s)",
            (question.query, vector, K),
        )
        found = [(r[0], r[1], r[2], r[3], r[4], r[5]) for r in rows]
        # Members in rank order on both sides.
        expected = [(*e[:4], sorted(e[4], key=[r[0] for r in hits].index), e[5]) for e in expected]
        assert found == expected, question.query
        assert sum(r[3] for r in rows) <= budget
        merged += sum(1 for r in rows if len(r[4]) > 1)
    assert merged > len(queries) // 4  # touching hits were merged often: the comparison covers merging


def store_rows(conn, alias: str, documents: dict[str, str]) -> list:
    """A version of one-chunk documents written in one statement (the postings triggers fire once), active; returns
    its chunks."""
    spec = "recursive:128:0"
    version = versions.create_version(conn, alias, spec, get_chunker(spec).version)
    chunker = get_chunker(spec, embedder=EMBEDDER)
    chunks = [c for doc_id, text in documents.items() for c in chunker.chunk(text, doc_id)]
    vectors = EMBEDDER.embed_documents([c.embed_text for c in chunks])
    conn.execute(
        f"INSERT INTO toolkit.chunks_v{int(version)} (tenant, chunk_id, doc_id, position, start_offset, end_offset,"
        " context, text, content_hash, token_count, embedding)"
        " SELECT %s, r.chunk_id, r.doc_id, r.position, r.s, r.e, r.context, r.text, r.h, r.tokens, r.v::vector"
        " FROM unnest(%s::text[], %s::text[], %s::int[], %s::int[], %s::int[], %s::text[], %s::text[], %s::text[],"
        " %s::int[], %s::text[]) AS r (chunk_id, doc_id, position, s, e, context, text, h, tokens, v)",
        (
            TENANT,
            [c.chunk_id for c in chunks],
            [c.doc_id for c in chunks],
            [c.position for c in chunks],
            [c.start for c in chunks],
            [c.end for c in chunks],
            [c.context for c in chunks],
            [c.text for c in chunks],
            [c.content_hash for c in chunks],
            [c.token_count for c in chunks],
            [str(list(map(float, v))) for v in vectors],
        ),
    )
    conn.execute(f"ANALYZE toolkit.chunks_v{int(version)}")
    versions.create_version_index(conn, version, maintenance_work_mem="64MB")
    versions.mark_version_ready(conn, version)
    cutover.activate_version(conn, version, force=True)
    return chunks


def test_full_text_candidates_stay_within_the_postings_limit(conn, make_model):
    """More chunks hold the questions' common words than ``postings_limit`` allows: full text scores the chunks
    holding the rarer lexemes whose postings fit together, or, when even the rarest has too many, its first
    postings_limit chunks by chunk id; each over all the question's lexemes. SQL and the offline ranking agree, and
    the limit changes the ranking (an unbounded BM25 ranks otherwise)."""
    make_model("w", DIMS, model_name=str(DIMS))
    settings = retrieval_settings(conn)
    limit = settings["postings_limit"]
    count = limit + limit // 5
    documents = {
        f"d{i:05d}.md": " ".join(
            ["alpha"] * (1 + i % 3)
            + ["beta"] * (1 + i % 5)
            + [f"word{i % 40}", "gamma" if i % 7 == 0 else "delta", "epsilon" if i % 11 == 0 else "zeta"]
        )
        for i in range(count)
    }
    chunks = store_rows(conn, "w", documents)
    assert len(chunks) == count
    ids = [c.chunk_id for c in chunks]
    retrieval = Retrieval("text").resolved(settings)
    depth = 20
    with conn.transaction():
        terms = chunk_lexemes(conn, chunks)
        questions = ["alpha beta", "alpha gamma", "gamma epsilon delta", "word7 alpha", "zeta delta", "alpha"]
        question_terms = query_lexemes(conn, questions)
    lengths = [c.token_count for c in chunks]
    bounded = BM25(terms, lengths, retrieval.k1, retrieval.b, limit)
    unbounded = BM25(terms, lengths, retrieval.k1, retrieval.b)
    assert bounded.candidates(question_terms[0], ids) == set(
        sorted((i for i, c in enumerate(chunks) if "alpha" in terms[i]), key=ids.__getitem__)[:limit]
    )
    differs = 0
    for question, lexemes in zip(questions, question_terms, strict=True):
        expected = [ids[i] for i in text_ranking(bounded, lexemes, ids, depth)]
        rows = as_reader(conn, "SELECT chunk_id FROM toolkit.hybrid_search_chunks(%s, NULL, %s)", (question, depth))
        assert [r[0] for r in rows] == expected, question
        differs += expected != [ids[i] for i in text_ranking(unbounded, lexemes, ids, depth)]
    assert differs >= 2


def test_postings_follow_the_chunk_table(conn, make_model):
    """Inserts, updates (text, labels, an embedding only) and deletes of chunk rows leave the postings and the
    statistics equal to what the chunk table holds."""
    make_model("f", DIMS, model_name=str(DIMS))
    chunks = store_rows(conn, "f", {f"{name}.md": DOCUMENTS[name] for name in sorted(DOCUMENTS)[:3]})
    (version,) = conn.execute("SELECT toolkit.active_version()").fetchone()
    table = f"toolkit.chunks_v{int(version)}"
    terms, stats = conn.execute(
        "SELECT toolkit._postings_table(%s), toolkit._statistics_table(%s)",
        (version, version),
    ).fetchone()

    def check():
        held = conn.execute(
            f"SELECT c.tenant, l.lexeme, c.chunk_id, cardinality(l.positions), c.token_count, c.access_labels"
            f" FROM {table} AS c CROSS JOIN LATERAL unnest(c.fts) AS l WHERE NOT c.is_parent ORDER BY 1, 2, 3"
        ).fetchall()
        posted = conn.execute(
            f"SELECT tenant, lexeme, chunk_id, tf, token_count, access_labels FROM {terms} ORDER BY 1, 2, 3"
        ).fetchall()
        assert posted == held
        counted = conn.execute(
            f"SELECT tenant, access_labels, lexeme, count(*), 0 FROM {terms} GROUP BY 1, 2, 3"
            f" UNION ALL SELECT tenant, access_labels, '', count(*), sum(token_count) FROM {table}"
            " WHERE NOT is_parent GROUP BY 1, 2 ORDER BY 1, 2, 3"
        ).fetchall()
        summed = conn.execute(
            f"SELECT tenant, access_labels, lexeme, sum(df), sum(tokens) FROM {stats} GROUP BY 1, 2, 3"
            " HAVING sum(df) <> 0 OR sum(tokens) <> 0 ORDER BY 1, 2, 3"
        ).fetchall()
        assert [(*r[:3], int(r[3]), int(r[4])) for r in summed] == [(*r[:3], int(r[3]), int(r[4])) for r in counted]

    check()
    first, second, third = chunks[0].chunk_id, chunks[1].chunk_id, chunks[2].chunk_id
    conn.execute(
        f"UPDATE {table} SET text = text || ' zymurgy zymurgy', token_count = token_count + 2 WHERE chunk_id = %s",
        (first,),
    )
    conn.execute(f"UPDATE {table} SET access_labels = '{{hr}}' WHERE chunk_id = ANY (%s)", ([second, third],))
    conn.execute(f"UPDATE {table} SET embedding = NULL WHERE chunk_id = %s", (third,))
    conn.execute(f"DELETE FROM {table} WHERE doc_id = %s", (chunks[-1].doc_id,))
    check()
    assert conn.execute(f"SELECT sum(df) FROM {stats} WHERE lexeme = 'zymurgi'").fetchone()[0] == 1
    conn.execute("SELECT toolkit._fold_term_stats(%s)", (version,))
    check()
    assert (
        conn.execute(
            f"SELECT count(*) FROM (SELECT 1 FROM {stats} GROUP BY tenant, access_labels, lexeme"
            " HAVING count(*) > 1) AS x"
        ).fetchone()[0]
        == 0
    )


def test_concurrent_writers_of_the_same_words_do_not_wait_for_each_other(conn, database_url, make_model):
    """Two open transactions write chunks holding the same lexemes, one of them folding the statistics: the other
    neither waits (a lock wait would exceed its lock_timeout and fail) nor folds; both commit and the statistics sum
    to what the chunk table holds."""
    from toolkit.db.connection import connect

    make_model("c", DIMS, model_name=str(DIMS))
    store_rows(conn, "c", {"seed.md": "alpha beta gamma"})
    (version,) = conn.execute("SELECT toolkit.active_version()").fetchone()
    table = f"toolkit.chunks_v{int(version)}"
    stats = conn.execute("SELECT toolkit._statistics_table(%s)", (version,)).fetchone()[0]
    insert = (
        f"INSERT INTO {table} (tenant, chunk_id, doc_id, position, start_offset, end_offset, text, content_hash,"
        " token_count) VALUES (%s, %s, %s, 0, 0, 16, 'alpha beta delta', 'h', 3)"
    )
    # The postings' statistics alone: the registry's change record (version_rows_changed, which makes a verification
    # stale) updates the version's row, so writers of a live version do queue there, once per transaction.
    conn.execute(f"ALTER TABLE {table} DISABLE TRIGGER version_rows_changed")
    with connect(database_url) as first, connect(database_url) as second:
        first.execute(insert, (TENANT, "one", "one.md"))
        assert first.execute("SELECT toolkit._fold_term_stats(%s)", (version,)).fetchone()[0]
        second.execute("SET lock_timeout = '5s'")
        second.execute(insert, (TENANT, "two", "two.md"))
        assert not second.execute("SELECT toolkit._fold_term_stats(%s)", (version,)).fetchone()[0]
        first.commit()
        second.commit()
    counted = conn.execute(
        f"SELECT l.lexeme, count(*) FROM {table} AS c CROSS JOIN LATERAL unnest(c.fts) AS l GROUP BY 1 ORDER BY 1"
    ).fetchall()
    summed = conn.execute(
        f"SELECT lexeme, sum(df)::bigint FROM {stats} WHERE lexeme <> '' GROUP BY 1 HAVING sum(df) <> 0 ORDER BY 1"
    ).fetchall()
    assert summed == counted and ("alpha", 3) in counted


def _postings_of_the_rows(conn, version: int) -> tuple[list, list]:
    """What a version's postings and statistics must hold, computed from its chunk table: each (tenant, lexeme,
    chunk, tf, token_count, labels), and per (tenant, label set, lexeme) the chunks holding it ('' : the chunk count
    and their tokens)."""
    table = f"toolkit.chunks_v{int(version)}"
    postings = conn.execute(
        f"SELECT c.tenant, l.lexeme, c.chunk_id, cardinality(l.positions), c.token_count, c.access_labels"
        f" FROM {table} AS c CROSS JOIN LATERAL unnest(c.fts) AS l WHERE NOT c.is_parent ORDER BY 1, 2, 3"
    ).fetchall()
    statistics = conn.execute(
        f"SELECT c.tenant, c.access_labels, l.lexeme, count(*)::bigint, 0::bigint FROM {table} AS c"
        " CROSS JOIN LATERAL unnest(c.fts) AS l WHERE NOT c.is_parent GROUP BY 1, 2, 3"
        " UNION ALL SELECT c.tenant, c.access_labels, '', count(*), sum(c.token_count) FROM"
        f" {table} AS c WHERE NOT c.is_parent GROUP BY 1, 2 ORDER BY 1, 2, 3"
    ).fetchall()
    return postings, statistics


def test_postings_are_built_when_a_version_becomes_ready_and_go_when_it_builds_again(conn, make_model):
    """A version being built has no postings, statistics or triggers keeping them (a backfill loads its rows alone);
    mark_version_ready builds them from the rows, and triggers keep them for writes after it; mark_version_building
    drops them with their triggers, and becoming ready again builds them from the rows as they are then. No chunk
    table has a GIN index over its tsvector."""
    from support import fill_version

    make_model("p", DIMS, model_name=str(DIMS))
    version = versions.create_version(conn, "p", "fixed:10:0", "fixed:10:0@postings-at-ready")
    table = f"toolkit.chunks_v{int(version)}"
    terms, stats = conn.execute(
        "SELECT toolkit._postings_table(%s), toolkit._statistics_table(%s)", (version, version)
    ).fetchone()

    def built() -> tuple[bool, list]:
        exists = conn.execute("SELECT to_regclass(%s) IS NOT NULL AND to_regclass(%s) IS NOT NULL", (terms, stats))
        triggers = conn.execute(
            "SELECT tgname FROM pg_trigger WHERE tgrelid = %s::regclass AND tgname LIKE 'text_postings%%' ORDER BY 1",
            (table,),
        ).fetchall()
        return exists.fetchone()[0], [t[0] for t in triggers]

    def held() -> tuple[list, list]:
        postings = conn.execute(
            f"SELECT tenant, lexeme, chunk_id, tf, token_count, access_labels FROM {terms} ORDER BY 1, 2, 3"
        ).fetchall()
        statistics = conn.execute(
            f"SELECT tenant, access_labels, lexeme, sum(df)::bigint, sum(tokens)::bigint FROM {stats}"
            " GROUP BY 1, 2, 3 HAVING sum(df) <> 0 OR sum(tokens) <> 0 ORDER BY 1, 2, 3"
        ).fetchall()
        return postings, statistics

    assert built() == (False, [])
    fill_version(conn, version, DIMS, {"a": 30, "b": 7}, labels=[[], ["hr"]])
    assert built() == (False, [])  # the load wrote none
    versions.create_version_index(conn, version, maintenance_work_mem="64MB")
    versions.mark_version_ready(conn, version)
    assert built() == (True, ["text_postings_delete", "text_postings_insert", "text_postings_update"])
    expected = _postings_of_the_rows(conn, version)
    assert len(expected[0]) > 60 and held() == expected
    # Kept by the triggers afterwards.
    conn.execute(f"UPDATE {table} SET text = 'zymurgy ' || text WHERE tenant = 'a' AND position < 3")
    conn.execute(f"DELETE FROM {table} WHERE tenant = 'b' AND position = 0")
    assert held() == _postings_of_the_rows(conn, version)
    # Back to building: gone with their triggers; a write meanwhile; ready again: built from the rows as they are.
    conn.execute("SELECT toolkit.mark_version_building(%s)", (version,))
    assert built() == (False, [])
    conn.execute(f"DELETE FROM {table} WHERE tenant = 'a' AND position = 5")
    versions.mark_version_ready(conn, version)
    assert held() == _postings_of_the_rows(conn, version)
    gin = conn.execute(
        "SELECT count(*) FROM pg_index AS i JOIN pg_class AS c ON c.oid = i.indexrelid JOIN pg_am AS a"
        " ON a.oid = c.relam WHERE a.amname = 'gin' AND i.indrelid IN (SELECT oid FROM pg_class"
        " WHERE relnamespace = 'toolkit'::regnamespace AND relname ~ '^chunks_v[0-9]+$')"
    ).fetchone()[0]
    assert gin == 0
