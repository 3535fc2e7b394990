"""The embedding cache (toolkit.embedding.cache): with TOOLKIT_EMBEDDING_CACHE set, the commands that embed with a
registered local model read each text's vector from the cache's SQLite file and write the ones they compute; unset,
nothing is cached; the hashing and hosted models never are; the key tells apart what gives other vectors; several
threads and processes share one directory."""

from __future__ import annotations

import shutil
import sqlite3
import threading
from types import SimpleNamespace

import numpy as np
import pytest

from toolkit.backfill import backfill
from toolkit.chunking.document import compose_embed_text
from toolkit.embedding import PROVIDERS, get_embedder
from toolkit.embedding.cache import (
    CACHE_FILE,
    CACHE_VARIABLE,
    CachedEmbedder,
    EmbeddingCache,
    cached_when_configured,
    default_cache_dir,
    model_key,
)
from toolkit.errors import InputError
from toolkit.evaluation.queries import SAMPLE_DOCS
from toolkit.ingest import ingest
from toolkit.store.models import register_model

MINILM = "all-MiniLM-L6-v2"


def stored(conn, version: int) -> dict[str, np.ndarray]:
    """A version's vectors by the text the model was given (heading path, context, body: as backfill composes it)."""
    rows = conn.execute(
        f"SELECT heading_path, context, text, embedding FROM toolkit.chunks_v{int(version)} WHERE NOT is_parent"
    ).fetchall()
    return {
        compose_embed_text(tuple(path or ()), context or "", text): np.asarray(vector, dtype=np.float32)
        for path, context, text, vector in rows
    }


def cached_rows(directory) -> list[tuple[str, bytes, bytes]]:
    with sqlite3.connect(directory / CACHE_FILE) as db:
        return db.execute("SELECT model, text_hash, vector FROM embeddings WHERE kind = 'document'").fetchall()


def test_a_registered_local_model_fills_the_cache_then_reads_it_and_unset_means_no_cache(
    conn, database_url, tmp_path, monkeypatch
):
    docs = tmp_path / "docs"
    docs.mkdir()
    shutil.copyfile(SAMPLE_DOCS / "row-security.md", docs / "row-security.md")
    ingest(conn, [docs], "acme")
    directory = tmp_path / "vectors"
    monkeypatch.setenv(CACHE_VARIABLE, str(directory))
    register_model(conn, "first", "sentence-transformers", MINILM)
    first = backfill(database_url, "first").version
    rows = cached_rows(directory)
    vectors = stored(conn, first)
    assert len(rows) == len(vectors) > 20  # one row per distinct text embedded
    # What was stored is the model's own vector (an embedder of this process, no cache in front of it).
    texts = sorted(vectors)
    model = get_embedder(f"sentence-transformers:{MINILM}")
    assert np.allclose(np.stack([vectors[t] for t in texts]), model.embed_documents(texts), atol=1e-5)

    # A second version of the same model and chunks reads the cache: vectors this user's toolkit wrote there under
    # the model's identity (here by a stand-in with the same key) are what it stores. (Vectors written there by
    # anything else fail their MAC and are recomputed: tests/test_attacks_caches.py.)
    planted = np.zeros(384, dtype=np.float32)
    planted[7] = 1.0
    stand_in = SimpleNamespace(
        **{name: getattr(model, name) for name in ("provider", "name", "revision", "dimensions")},
        query_prefix=model.query_prefix,
        document_prefix=model.document_prefix,
        embed_documents=lambda block: np.tile(planted, (len(block), 1)),
    )
    assert model_key(stand_in) == model_key(model)
    with EmbeddingCache(directory) as cache:
        cache.forget(texts)
        cache.embed_documents(stand_in, texts)
    register_model(conn, "second", "sentence-transformers", MINILM)
    second = backfill(database_url, "second").version
    assert all(np.array_equal(vector, planted) for vector in stored(conn, second).values())

    # Unset: the model computes every vector again.
    monkeypatch.delenv(CACHE_VARIABLE)
    register_model(conn, "third", "sentence-transformers", MINILM)
    third = stored(conn, backfill(database_url, "third").version)
    assert np.allclose(np.stack([third[t] for t in texts]), np.stack([vectors[t] for t in texts]), atol=1e-5)


def test_only_models_worth_caching_are_cached(tmp_path, monkeypatch):
    assert {name: cls.disk_cached for name, cls in PROVIDERS.items()} == {
        "openai": False,  # hosted: the provider's vectors, billed by it
        "sentence-transformers": True,
        "e5": True,
        "hashing": False,  # cheaper than a lookup
    }
    monkeypatch.setenv(CACHE_VARIABLE, str(tmp_path))
    words = get_embedder("hashing:8")
    assert cached_when_configured(words) is words
    local = get_embedder(f"sentence-transformers:{MINILM}")
    wrapped = cached_when_configured(local)
    assert isinstance(wrapped, CachedEmbedder)
    assert wrapped.max_input_tokens == local.max_input_tokens
    assert wrapped.count_tokens("a b") == local.count_tokens("a b")
    monkeypatch.delenv(CACHE_VARIABLE)
    assert cached_when_configured(local) is local


def test_the_key_tells_apart_what_gives_other_vectors(tmp_path):
    one, two = get_embedder("hashing:16", seed=1), get_embedder("hashing:16", seed=2)
    assert model_key(one) != model_key(two)
    with EmbeddingCache(tmp_path) as cache:
        a = cache.embed_documents(one, ["row level security policies"])
        b = cache.embed_documents(two, ["row level security policies"])
    assert not np.allclose(a, b)
    assert np.allclose(a, one.embed_documents(["row level security policies"]))
    assert np.allclose(b, two.embed_documents(["row level security policies"]))
    # Documents and queries are kept apart (their prefixes differ).
    prefixed = get_embedder("hashing:16", query_prefix="query: ")
    with EmbeddingCache(tmp_path) as cache:
        document = cache.embed_documents(prefixed, ["what is a policy"])[0]
        query = cache.embed_queries(prefixed, ["what is a policy"])[0]
    assert np.allclose(query, prefixed.embed_query("what is a policy"))
    assert not np.allclose(document, query)


def test_threads_and_processes_share_one_directory(tmp_path):
    """Two caches on one directory (two connections, as two processes have), two threads each, overlapping texts,
    all started together: every answer is the model's, every distinct text is stored once, no lock error."""
    model = get_embedder("hashing:32")
    texts = [f"text number {i} about indexes" for i in range(600)]
    caches = [EmbeddingCache(tmp_path, remember=False), EmbeddingCache(tmp_path, remember=False)]
    start = threading.Barrier(4)
    results, errors = {}, []

    def work(slot: int) -> None:
        try:
            start.wait()
            share = texts[slot * 100 : slot * 100 + 300]
            results[slot] = (share, caches[slot % 2].embed_documents(model, share, token_counts=None))
        except Exception as error:  # reported below
            errors.append(error)

    threads = [threading.Thread(target=work, args=(slot,)) for slot in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    for share, vectors in results.values():
        assert np.allclose(vectors, model.embed_documents(share))
    assert len(cached_rows(tmp_path)) == 600
    for cache in caches:
        cache.close()


def test_an_unusable_directory_is_one_clear_error(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv(CACHE_VARIABLE, str(blocker / "cache"))
    with pytest.raises(InputError, match="Cannot use the embedding cache") as raised:
        cached_when_configured(get_embedder(f"sentence-transformers:{MINILM}"))
    assert CACHE_VARIABLE in str(raised.value)
    assert default_cache_dir() == blocker / "cache"  # toolkit eval's default follows the same setting
