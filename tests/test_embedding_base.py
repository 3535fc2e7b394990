"""Model references, the provider factory, response checks, batching, and the hashing embedder (no models)."""

import numpy as np
import pytest

from toolkit.embedding import check_vectors, get_embedder, parse_model_ref, probe_dimensions
from toolkit.embedding.base import batches
from toolkit.embedding.hashing import HashingEmbedder
from toolkit.errors import EmbeddingError, InputError


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        ("openai:text-embedding-3-small", ("openai", "text-embedding-3-small")),
        ("hashing:64", ("hashing", "64")),
        ("e5", ("e5", None)),
        ("sentence-transformers:/models/bge:v1.5", ("sentence-transformers", "/models/bge:v1.5")),
        ("  OpenAI:my-model ", ("openai", "my-model")),
    ],
)
def test_parse_model_ref(ref, expected):
    assert parse_model_ref(ref) == expected


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        ("", "empty"),
        ("cohere:embed-v3", "Unknown embedding provider 'cohere'"),
        ("openai:", "no model name"),
        ("all-MiniLM-L6-v2", "Unknown embedding provider"),
    ],
)
def test_parse_model_ref_refuses_bad_refs(ref, message):
    with pytest.raises(InputError, match=message):
        parse_model_ref(ref)


def test_get_embedder_builds_hashing_from_its_ref():
    embedder = get_embedder("hashing:64")
    assert isinstance(embedder, HashingEmbedder)
    assert (embedder.provider, embedder.name, embedder.dimensions, embedder.distance) == (
        "hashing",
        "64",
        64,
        "cosine",
    )
    assert embedder.ref == "hashing:64"


def test_options_a_provider_does_not_use_are_refused_but_none_is_ignored():
    with pytest.raises(InputError, match=r"does not take the option.*base_url"):
        get_embedder("hashing:64", base_url="http://127.0.0.1:1/v1")
    assert get_embedder("hashing:64", base_url=None, api_key=None).dimensions == 64


def test_hashing_dimensions_must_agree_with_its_name():
    with pytest.raises(InputError, match="use hashing:32"):
        get_embedder("hashing:64", dimensions=32)
    with pytest.raises(InputError, match="not a number of dimensions"):
        get_embedder("hashing:big")


# -- check_vectors: every answer passes here before it is returned --------------------------------------


def test_check_vectors_accepts_and_converts_to_float32():
    out = check_vectors([[1, 0], [0, 1]], 2, 2, source="test")
    assert out.dtype == np.float32 and out.shape == (2, 2)


@pytest.mark.parametrize(
    ("vectors", "count", "dims", "message"),
    [
        ([[1.0, 0.0]], 2, 2, "returned 1 vectors for 2 inputs"),
        ([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], 2, 2, "returned 3 vectors for 2 inputs"),
        ([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]], 2, 2, "3-dimensional vectors where 2 were declared"),
        ([[1.0, float("nan")], [0.0, 1.0]], 2, 2, r"NaN or infinite values \(input 0\)"),
        ([[1.0, 0.0], [0.0, float("inf")]], 2, 2, r"NaN or infinite values \(input 1\)"),
        ([[1.0, 0.0], [0.0]], 2, 2, "not a rectangular array"),
        ([None, None], 2, 2, "instead of one vector per input"),
        ([["a", "b"]], 1, 2, "not a rectangular array of numbers"),
        ([[1.0, 0.0], [0.0, 0.0]], 2, 2, r"all-zero vector \(input 1\)"),
    ],
)
def test_check_vectors_refuses_bad_answers(vectors, count, dims, message):
    with pytest.raises(EmbeddingError, match=message):
        check_vectors(vectors, count, dims, source="test")


def test_batches_bound_count_and_tokens():
    assert list(batches([1] * 7, 3, None)) == [(0, 3), (3, 6), (6, 7)]
    assert list(batches([4, 4, 4, 4, 4], 100, 10)) == [(0, 2), (2, 4), (4, 5)]
    # An item larger than the token bound travels alone rather than never.
    assert list(batches([2, 50, 2], 100, 10)) == [(0, 1), (1, 2), (2, 3)]
    assert list(batches([], 3, 10)) == []


# -- hashing embedder --------------------------------------------------------------------------------------


def test_hashing_is_deterministic_unit_length_and_word_based():
    embedder = get_embedder("hashing:64")
    texts = ["The cat sat on the mat.", "the CAT sat, on the mat", "Stock markets fell", ""]
    first = embedder.embed_documents(texts)
    again = get_embedder("hashing:64").embed_documents(texts)
    assert first.dtype == np.float32 and first.shape == (4, 64)
    np.testing.assert_array_equal(first, again)
    np.testing.assert_allclose(np.linalg.norm(first, axis=1), 1.0, rtol=1e-6)
    # Same words, different case and punctuation: the same features.
    np.testing.assert_allclose(first[0], first[1], atol=1e-7)
    assert not np.allclose(first[0], first[2])


def test_hashing_query_and_document_prefixes_are_applied():
    plain = get_embedder("hashing:64")
    prefixed = get_embedder("hashing:64", query_prefix="query:", document_prefix="passage:")
    assert not np.allclose(plain.embed_query("cats"), prefixed.embed_query("cats"))
    assert prefixed.count_tokens("cats and dogs") == 4  # "passage" + 3 words
    assert plain.embed_query("cats").shape == (64,)


def test_over_limit_input_is_refused_with_its_index_and_count():
    embedder = get_embedder("hashing:64", max_input_tokens=5)
    with pytest.raises(InputError, match=r"Input 2 has 6 tokens, over the 5-token input limit of hashing:64"):
        embedder.embed_documents(["a", "b c", "one two three four five six"])
    with pytest.raises(InputError, match="The query has 6 tokens"):
        embedder.embed_query("one two three four five six")


def test_inputs_must_be_a_list_of_strings():
    embedder = get_embedder("hashing:64")
    with pytest.raises(InputError, match="not one string"):
        embedder.embed_documents("just a string")
    with pytest.raises(InputError, match="Input 1 is a bytes"):
        embedder.embed_documents(["ok", b"bytes"])
    assert embedder.embed_documents([]).shape == (0, 64)


def test_probe_dimensions_reports_what_the_model_produces():
    assert probe_dimensions(get_embedder("hashing:48")) == 48


def test_token_counts_given_by_the_caller_are_used_for_the_limit():
    embedder = get_embedder("hashing:64", max_input_tokens=5)
    # The caller's counts decide (backfill counts once for its budget and passes them on).
    assert embedder.embed_documents(["one two three four five six"], token_counts=[5]).shape == (1, 64)
    with pytest.raises(InputError, match="Input 0 has 9 tokens"):
        embedder.embed_documents(["a"], token_counts=[9])
    with pytest.raises(InputError, match="2 token counts were given for 1 texts"):
        embedder.embed_documents(["a"], token_counts=[1, 1])


def test_count_chunk_tokens_is_count_tokens_of_the_embedded_text():
    from toolkit.chunking import get_chunker
    from toolkit.embedding.openai import OpenAIEmbedder

    text = "# Title\n\n## Part\n\n" + " ".join(f"Sentence {i} says something about parcels." for i in range(80))
    chunks = get_chunker("markdown:40:0").chunk(text, doc_id="d")
    assert len(chunks) > 3
    for embedder in (
        get_embedder("hashing:64"),
        OpenAIEmbedder("text-embedding-3-small", base_url="http://127.0.0.1:9/v1"),
        OpenAIEmbedder("text-embedding-3-small", base_url="http://127.0.0.1:9/v1", document_prefix="passage: "),
    ):
        assert embedder.count_chunk_tokens(chunks) == [embedder.count_tokens(c.embed_text) for c in chunks]
