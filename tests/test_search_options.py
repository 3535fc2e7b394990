"""The search options applications ask for, in every retrieval: metadata filters (documents.metadata, through its
GIN index), min_score (a cosine-similarity floor) and MMR re-ranking (diversity), and their refusals."""

from __future__ import annotations

import re

import numpy as np
import psycopg
import pytest
from psycopg.types.json import Jsonb
from test_search import activate, as_role, plans

from toolkit import search, validation
from toolkit.errors import InputError
from toolkit.store import versions

DIMS = 8
RETRIEVALS = ("vector", "hybrid", "passages")


def unit(*pairs: tuple[int, float]) -> np.ndarray:
    """A unit vector from (axis, weight) pairs."""
    v = np.zeros(DIMS, dtype=np.float32)
    for axis, weight in pairs:
        v[axis] = weight
    return v / np.linalg.norm(v)


QUERY = unit((0, 1.0))
# Three documents of one chunk each. near is close to the question, twin a near-duplicate of near (another
# document), other as close to the question as twin is but unlike near: MMR must skip twin for other.
CHUNKS = {
    "near.md": unit((0, 1.0), (1, 0.45)),
    "twin.md": unit((0, 1.0), (1, 0.45), (3, 0.02)),
    "other.md": unit((0, 1.0), (2, 0.5)),
    "far.md": unit((0, 0.2), (4, 1.0)),
}
METADATA = {
    "near.md": {"lang": "en", "year": 2024, "draft": False},
    "twin.md": {"lang": "en", "year": 2023},
    "other.md": {"lang": "de", "year": 2024},
    "far.md": {"lang": "en", "year": "2024"},
}


def cosine(a, b) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


def add_document(conn, version, tenant, doc_id, vector, metadata) -> None:
    text = f"Chunk of {doc_id}: words about {doc_id.split('.')[0]} only."
    conn.execute(
        "INSERT INTO toolkit.documents (tenant, doc_id, source, raw_text, content_hash, metadata)"
        " VALUES (%s, %s, %s, %s, %s, %s)",
        (tenant, doc_id, doc_id, text, doc_id, Jsonb(metadata)),
    )
    conn.execute(
        f"INSERT INTO toolkit.chunks_v{int(version)} (tenant, chunk_id, doc_id, position, start_offset, end_offset,"
        " heading_path, text, content_hash, token_count, embedding)"
        " VALUES (%s, %s, %s, 0, 0, %s, '{}', %s, %s, 8, %s)",
        (tenant, f"c-{doc_id}", doc_id, len(text), text, doc_id, vector),
    )


@pytest.fixture
def corpus(conn, make_model):
    """Tenant a holds CHUNKS with METADATA; tenant b the same documents, all with lang en (never a's)."""
    make_model("o", DIMS, model_name=str(DIMS))
    v = versions.create_version(conn, "o", "fixed:10:0", "fixed:10:0@1")
    for doc_id, vector in CHUNKS.items():
        add_document(conn, v, "a", doc_id, vector, METADATA[doc_id])
        add_document(conn, v, "b", doc_id, vector, {"lang": "en"})
    activate(conn, v)
    return v


def run(conn, retrieval, k=4, **options):
    # The question's text is one no chunk holds: hybrid and passages rank by the vector alone, so each retrieval's
    # order is known from the vectors.
    return search.search(conn, QUERY, "a", k, retrieval=retrieval, query_text="zzz unmatched", log=False, **options)


def docs(hits) -> list[str]:
    return [h.doc_id for h in hits]


# -- metadata filters ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("retrieval", RETRIEVALS)
@pytest.mark.parametrize(
    ("metadata", "expected"),
    [
        ({"lang": "en"}, {"near.md", "twin.md", "far.md"}),
        ({"lang": "en", "year": 2024}, {"near.md"}),  # every key must hold
        ({"year": "2024"}, {"far.md"}),  # JSON values: the string "2024" is not the number 2024
        ({"draft": False}, {"near.md"}),
        ({"lang": "fr"}, set()),
    ],
)
def test_a_metadata_filter_returns_only_the_matching_documents(conn, corpus, retrieval, metadata, expected):
    hits = run(conn, retrieval, filters={"metadata": metadata})
    assert set(docs(hits)) == expected
    assert all(h.doc_id in expected for h in hits)


def test_metadata_and_doc_id_filters_both_hold(conn, corpus):
    hits = run(conn, "vector", filters={"metadata": {"lang": "en"}, "doc_id": ["twin.md", "other.md"]})
    assert docs(hits) == ["twin.md"]


def test_the_metadata_filter_from_the_command_line_form(conn, corpus):
    filters = search.parse_filters(["metadata.lang=en", "metadata.year=2024"])
    assert filters == {"metadata": {"lang": "en", "year": 2024}}
    assert docs(run(conn, "vector", filters=filters)) == ["near.md"]
    assert search.parse_filters(['metadata.year="2024"']) == {"metadata": {"year": "2024"}}


def test_the_metadata_filter_finds_the_documents_through_an_index_under_row_level_security(conn, make_model):
    """As the reader (row-level security forced), on a tenant of 20,000 documents: the documents a metadata filter
    matches are found through toolkit.document_metadata_keys' primary key, not by reading the tenant's documents (a
    GIN index on documents.metadata could not serve this caller: jsonb's @> is not leakproof)."""
    make_model("o", DIMS, model_name=str(DIMS))
    v = versions.create_version(conn, "o", "fixed:10:0", "fixed:10:0@1")
    conn.execute(
        "INSERT INTO toolkit.documents (tenant, doc_id, source, raw_text, content_hash, metadata)"
        " SELECT 'big', 'd' || i, 's', 't', 'h', jsonb_build_object('n', i, 'lang', 'en')"
        " FROM generate_series(1, 20000) AS i"
    )
    add_document(conn, v, "big", "x.md", CHUNKS["near.md"], {"n": -1, "team": "search"})
    conn.execute("ANALYZE toolkit.documents, toolkit.document_metadata_keys")
    activate(conn, v)
    notices = plans(conn)
    hits = search.search(
        conn, QUERY, "big", 5, retrieval="vector", filters={"metadata": {"team": "search", "n": -1}}, log=False
    )
    assert docs(hits) == ["x.md"]
    lookups = [n for n in notices if "FROM toolkit.document_metadata_keys AS m" in n]
    assert lookups, notices
    for plan in lookups:
        assert "Index Only Scan using document_metadata_keys_pkey" in plan or (
            "Index Scan using document_metadata_keys_pkey" in plan
        ), plan
        assert "Seq Scan on documents" not in plan, plan


def test_the_metadata_keys_follow_the_documents(conn, corpus):
    """The trigger keeps the keys in step: a changed value is found under its new value only, a document's new
    labels apply to its keys, a deleted document's keys are gone."""
    conn.execute("UPDATE toolkit.documents SET metadata = metadata || '{\"lang\": \"fr\"}' WHERE doc_id = 'near.md'")
    assert set(docs(run(conn, "vector", filters={"metadata": {"lang": "fr"}}))) == {"near.md"}
    assert "near.md" not in docs(run(conn, "vector", filters={"metadata": {"lang": "en"}}))
    assert docs(run(conn, "vector", filters={"metadata": {"year": 2024.0}})) == ["near.md", "other.md"]
    conn.execute("UPDATE toolkit.documents SET access_labels = '{hr}' WHERE tenant = 'a' AND doc_id = 'other.md'")
    keys = as_role(
        conn,
        "SELECT DISTINCT doc_id FROM toolkit.document_metadata_keys ORDER BY 1",
        tenant="a",
        principals=["eng"],
    )
    assert keys == [("far.md",), ("near.md",), ("twin.md",)]  # other.md's keys need the hr label now
    conn.execute("DELETE FROM toolkit.documents WHERE tenant = 'a' AND doc_id = 'twin.md'")
    left = conn.execute(
        "SELECT count(*) FROM toolkit.document_metadata_keys WHERE tenant = 'a' AND doc_id = 'twin.md'"
    ).fetchone()[0]
    assert left == 0


def test_the_upgrades_keys_are_the_triggers(conn):
    """sql/incremental/009 indexes the documents stored before it with the expression toolkit._metadata_key_value
    computes for later ones."""
    from toolkit.db import sql_files

    text = (sql_files.sql_dir() / "incremental" / "009-document-metadata-keys.sql").read_text(encoding="utf-8")
    expression = re.search(r"    (encode\(sha256\(.*?'hex'\)) AS key_value,\n", text, re.S).group(1)
    for value in ['"en"', "2024", "2024.0", "2.50", "-0", "true", "null", '"é ü\\tx"', '"2024"']:
        key = "année"
        mine, theirs = conn.execute(
            f"SELECT {expression.replace('e.key', '%(key)s::text').replace('e.value', '%(value)s::jsonb')},"
            " toolkit._metadata_key_value(%(key)s, %(value)s::jsonb)",
            {"key": key, "value": value},
        ).fetchone()
        assert mine == theirs, value


@pytest.mark.parametrize(
    ("metadata", "words"),
    [
        (["lang"], "must be a JSON object"),
        ({"tags": []}, "compares a top-level key with one value"),
        ({"tags": [["a"]]}, "compares a top-level key with one value"),
        ({"owner": {"team": "x"}}, "compares a top-level key with one value"),
        ({"": "x"}, "needs a key"),
    ],
)
def test_a_malformed_metadata_filter_is_refused_by_sql(conn, corpus, metadata, words):
    with pytest.raises(psycopg.errors.InvalidParameterValue, match=words):
        as_role(
            conn,
            "SELECT * FROM toolkit.search_chunks(%s, 5, %s)",
            (QUERY, Jsonb({"metadata": metadata})),
            tenant="a",
        )
    with pytest.raises(InputError, match=words):
        run(conn, "vector", filters={"metadata": metadata})


@pytest.mark.parametrize(
    ("pairs", "words"),
    [
        (["metadata.=en"], "is not metadata.KEY=VALUE with a key"),
        (["metadata.lang"], "is not metadata.KEY=VALUE with a key"),
        (["metadata.tags=[1, 2]"], "not with a JSON list"),
        (['metadata.owner={"a": 1}'], "not with a JSON object"),
        (['metadata.lang={"a":'], "starts like JSON but is not JSON"),
        (["metadata.lang=en", "metadata.lang=de"], "given twice"),
        (["metadata=en"], "Write a metadata filter as metadata.KEY=VALUE"),
    ],
)
def test_a_malformed_metadata_filter_is_refused_with_the_fix(pairs, words):
    with pytest.raises(InputError, match=words):
        search.parse_filters(pairs)


# -- min_score ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("retrieval", RETRIEVALS)
def test_min_score_cuts_the_hits_below_the_threshold(conn, corpus, retrieval):
    similarity = {doc: cosine(QUERY, vector) for doc, vector in CHUNKS.items()}
    everything = run(conn, retrieval)
    assert set(docs(everything)) == set(CHUNKS) or retrieval == "passages"
    threshold = (similarity["other.md"] + similarity["far.md"]) / 2
    kept = run(conn, retrieval, min_score=threshold)
    assert "far.md" in docs(everything)
    assert docs(kept) == [d for d in docs(everything) if similarity[d] >= threshold]
    assert "far.md" not in docs(kept) and kept
    assert [h.rank for h in kept] == list(range(1, len(kept) + 1))
    assert run(conn, retrieval, min_score=1.0) == []


def test_min_score_is_a_cosine_similarity_in_an_l2_version_too(conn, make_model):
    make_model("l", DIMS, model_name=str(DIMS), distance="l2")
    v = versions.create_version(conn, "l", "fixed:10:0", "fixed:10:0@1")
    # Lengths differ, so l2 distance and cosine disagree: far.md scaled down is nearer in l2 than other.md scaled up.
    add_document(conn, v, "a", "near.md", CHUNKS["near.md"], {})
    add_document(conn, v, "a", "far.md", CHUNKS["far.md"] * 0.5, {})
    add_document(conn, v, "a", "other.md", CHUNKS["other.md"] * 3, {})
    activate(conn, v)
    threshold = (cosine(QUERY, CHUNKS["other.md"]) + cosine(QUERY, CHUNKS["far.md"])) / 2
    hits = search.search(conn, QUERY, "a", 3, retrieval="vector", min_score=threshold, log=False)
    assert sorted(docs(hits)) == ["near.md", "other.md"]


# -- diversity (MMR) ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("retrieval", ("vector", "hybrid"))
def test_diversity_skips_the_near_duplicate(conn, corpus, retrieval):
    assert docs(run(conn, retrieval, k=3)) == ["near.md", "twin.md", "other.md"]
    # near first; then other (as relevant as twin, unlike near); then far (barely relevant, unlike both) before twin.
    assert docs(run(conn, retrieval, k=3, diversity=0.5)) == ["near.md", "other.md", "far.md"]
    # A little diversity keeps the order of relevance; the most diversity still starts from the best hit.
    assert docs(run(conn, retrieval, k=3, diversity=0.01)) == ["near.md", "twin.md", "other.md"]
    assert docs(run(conn, retrieval, k=2, diversity=1.0))[0] == "near.md"


def test_diversity_orders_the_passages_hits(conn, corpus):
    assert docs(run(conn, "passages", k=2)) == ["near.md", "twin.md"]
    assert docs(run(conn, "passages", k=2, diversity=0.5)) == ["near.md", "other.md"]


def test_diversity_keeps_each_hits_own_score(conn, corpus):
    plain = {h.doc_id: h.score for h in run(conn, "vector")}
    diverse = run(conn, "vector", diversity=0.5)
    assert {h.doc_id: h.score for h in diverse} == pytest.approx(plain)
    assert [h.rank for h in diverse] == [1, 2, 3, 4]


def test_min_score_and_diversity_together(conn, corpus):
    threshold = (cosine(QUERY, CHUNKS["other.md"]) + cosine(QUERY, CHUNKS["far.md"])) / 2
    assert docs(run(conn, "vector", diversity=0.5, min_score=threshold)) == ["near.md", "other.md", "twin.md"]


# -- bad values ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"diversity": 1.5}, "diversity \\(MMR lambda\\) must be from 0 \\(off\\) to 1"),
        ({"diversity": -0.1}, "diversity \\(MMR lambda\\) must be from 0 \\(off\\) to 1"),
        ({"diversity": None}, "diversity \\(MMR lambda\\) must be from 0 \\(off\\) to 1"),
        ({"min_score": 1.01}, "min_score is a cosine similarity, from -1 to 1"),
        ({"min_score": float("nan")}, "min_score is a cosine similarity, from -1 to 1"),
    ],
)
def test_sql_refuses_bad_options(conn, corpus, options, words):
    for function in ("search_chunks(%(q)s, 4", "hybrid_search_chunks('x', %(q)s, 4", "search_passages('x', %(q)s, 4"):
        statement = f"SELECT * FROM toolkit.{function}, min_score => %(min_score)s, diversity => %(diversity)s)"
        params = {"q": QUERY, "min_score": None, "diversity": 0.0, **options}
        with pytest.raises(psycopg.errors.InvalidParameterValue, match=words):
            as_role(conn, statement, params, tenant="a")


def test_sql_refuses_options_without_a_query_embedding(conn, corpus):
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="has no query embedding"):
        as_role(conn, "SELECT * FROM toolkit.hybrid_search_chunks('near', NULL, 4, diversity => 0.5)", tenant="a")


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"diversity": 2}, "The diversity \\(MMR lambda\\) must be a number from 0 to 1, not 2"),
        ({"diversity": "0.5"}, "The diversity \\(MMR lambda\\) must be a number"),
        ({"min_score": "abc"}, "The score threshold \\(min_score\\) must be a number from -1 to 1, not 'abc'"),
        ({"min_score": float("inf")}, "The score threshold \\(min_score\\) must be a number"),
        ({"min_score": 0.5, "expand": "parent", "retrieval": "vector"}, "use one or the other"),
    ],
)
def test_search_refuses_bad_options_with_a_sentence(conn, corpus, options, words):
    with pytest.raises(InputError, match=words):
        search.search(conn, QUERY, "a", 4, log=False, **options)


def test_the_python_bounds_are_the_sqls(conn, corpus):
    """validation.MIN_SCORE and DIVERSITY refuse what toolkit._check_search_options refuses."""
    for rule, name, inside, outside in (
        (validation.MIN_SCORE, "min_score", (-1.0, 1.0), (-1.001, 1.001)),
        (validation.DIVERSITY, "diversity", (0.0, 1.0), (-0.001, 1.001)),
    ):
        assert (rule.minimum, rule.maximum) == inside
        for value in inside:
            options = {"min_score": None, "diversity": 0.0, name: value}
            conn.execute("SELECT toolkit._check_search_options(%(min_score)s, %(diversity)s, true)", options)
        for value in outside:
            options = {"min_score": None, "diversity": 0.0, name: value}
            with pytest.raises(psycopg.errors.InvalidParameterValue), conn.transaction():
                conn.execute("SELECT toolkit._check_search_options(%(min_score)s, %(diversity)s, true)", options)
            with pytest.raises(InputError):
                rule.check(value)


# -- the default path ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("retrieval", RETRIEVALS)
def test_the_defaults_are_the_plain_search(conn, corpus, retrieval):
    """No option given and the options at their defaults give the same rows as the SQL called without them."""
    statement = {
        "vector": "SELECT * FROM toolkit.search_chunks(%(q)s, 4)",
        "hybrid": "SELECT * FROM toolkit.hybrid_search_chunks('zzz unmatched', %(q)s, 4)",
        "passages": "SELECT * FROM toolkit.search_passages('zzz unmatched', %(q)s, 4)",
    }[retrieval]
    bare = as_role(conn, statement, {"q": QUERY}, tenant="a")
    explicit = as_role(
        conn, statement.replace(", 4)", ", 4, min_score => NULL, diversity => 0)"), {"q": QUERY}, tenant="a"
    )
    assert bare == explicit and bare
    assert [h.doc_id for h in run(conn, retrieval)] == [
        row[{"vector": 4, "hybrid": 6, "passages": 2}[retrieval]] for row in bare
    ]


def test_diversity_ranks_a_chunk_still_waiting_for_its_embedding_last(conn, corpus):
    """Full text finds rows a backfill has not embedded yet; MMR has no relevance for them and must not let that
    unknown (NULL) beat every known one."""
    text = "Chunk of pending.md: zzz zzz zzz unmatched words only here."
    conn.execute(
        "INSERT INTO toolkit.documents (tenant, doc_id, source, raw_text, content_hash) VALUES ('a', 'pending.md',"
        " 'pending.md', %s, 'pending.md')",
        (text,),
    )
    conn.execute(
        f"INSERT INTO toolkit.chunks_v{int(corpus)} (tenant, chunk_id, doc_id, position, start_offset, end_offset,"
        " heading_path, text, content_hash, token_count, embedding)"
        " VALUES ('a', 'c-pending.md', 'pending.md', 0, 0, %s, '{}', %s, 'pending.md', 8, NULL)",
        (len(text), text),
    )
    plain = docs(run(conn, "hybrid", k=5))
    assert "pending.md" in plain  # full text finds it
    diverse = docs(run(conn, "hybrid", k=5, diversity=0.5))
    assert diverse[0] == "near.md" and diverse[-1] == "pending.md"
