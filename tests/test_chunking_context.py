"""``context=title``: each chunk embeds its document's title above its body, while the stored span stays exactly
the body; the chunker version and the content hash change with it; the model's input limit still holds, counted
with the model's own tokenizer; eval embeds exactly what ingest and backfill store (Chunk.embed_text)."""

from __future__ import annotations

import pytest

from toolkit.chunking import STRATEGIES, get_chunker
from toolkit.chunking.base import document_title
from toolkit.embedding import get_embedder
from toolkit.errors import InputError
from toolkit.evaluation.offline import evaluate
from toolkit.evaluation.queries import read_sample_documents

SAMPLE = read_sample_documents()
HASHING = get_embedder("hashing:16")
LICENCE = (
    "                                 Apache License\n                           Version 2.0, January 2004\n\n"
    "   1. Definitions.\n\n" + '      "License" shall mean the terms and conditions for use, reproduction.\n' * 40
)


def test_the_title_is_the_first_line_with_text_without_markup():
    assert document_title(LICENCE) == "Apache License"
    assert document_title("\n\n# Chapter 13. Concurrency Control\n\nText.") == "Chapter 13. Concurrency Control"
    assert document_title("**Release notes**\n=====\n") == "Release notes"
    assert document_title("  \n\t\n") == ""
    long = "word " * 40
    assert len(document_title(long)) <= 80 and document_title(long).endswith("word")


@pytest.mark.parametrize("strategy", [s for s in STRATEGIES if s not in ("semantic", "cluster")] + ["cluster"])
def test_every_chunk_embeds_the_title_and_stores_its_exact_span(strategy):
    overlap = 0 if strategy == "cluster" else (1 if strategy == "sentence" else 8)
    spec = f"{strategy}:64:{overlap}:context=title"
    chunks = get_chunker(spec, embedder=HASHING).chunk(LICENCE, "apache.txt")
    assert chunks
    for chunk in chunks:
        assert LICENCE[chunk.start : chunk.end] == chunk.text
        prefix = chunk.embed_text[: len(chunk.embed_text) - len(chunk.text)]
        assert chunk.embed_text.endswith(chunk.text) and "Apache License\n" in prefix
        assert chunk.context.split("\n")[0] == "Apache License"
        assert chunk.token_count <= 64 or chunk.atomic


def test_the_version_and_the_content_hash_change_with_the_option():
    plain = get_chunker("recursive:64:0")
    titled = get_chunker("recursive:64:0:context=title")
    assert plain.version == "recursive:64:0@2" and titled.version == "recursive:64:0:context=title@2"
    a, b = plain.chunk(LICENCE, "x")[1], titled.chunk(LICENCE, "x")[1]
    assert (a.text, a.start) == (b.text, b.start)
    assert a.chunk_id == b.chunk_id  # the same span of the same document
    assert a.content_hash != b.content_hash  # but not the same embedded text: ingest re-embeds it
    renamed = titled.chunk(LICENCE.replace("Apache License", "Apache Licence", 1), "x")[1]
    assert renamed.content_hash != b.content_hash


def test_an_unknown_context_is_refused():
    with pytest.raises(InputError, match="context=summary; use one of title"):
        get_chunker("recursive:64:0:context=summary")


def test_small_to_big_children_embed_the_documents_title_not_their_parents_first_line():
    text = SAMPLE["row-security.md"]
    chunks = get_chunker("sentence:60:0:context=title:parent=recursive,400,0").chunk(text, "row-security.md")
    children = [c for c in chunks if not c.is_parent]
    assert {c.context for c in children} == {document_title(text)}


@pytest.mark.slow
def test_the_model_limit_holds_with_the_title_counted_by_the_models_tokenizer():
    model = get_embedder("sentence-transformers:all-MiniLM-L6-v2")
    # Code blocks and tables are atomic under the budget, but the model's limit splits them: they are where cl100k
    # and the model's word pieces disagree most.
    for spec in (
        "recursive:250:0:context=title:max_tokens=256",
        "fixed:250:20:context=title:max_tokens=256",
        "sentence:60:0:context=title:parent=markdown,400,0",
    ):
        chunker = get_chunker(spec, embedder=model)
        for doc_id, text in SAMPLE.items():
            for chunk in chunker.chunk(text, doc_id):
                if chunk.is_parent:
                    continue
                assert text[chunk.start : chunk.end] == chunk.text
                assert model.count_tokens(chunk.embed_text) <= 256, (spec, chunk.embed_text[:80])


class Recorder:
    """The hashing model, keeping every document text it is asked to embed."""

    def __init__(self):
        self.inner = get_embedder("hashing:16")
        self.texts: list[str] = []
        for name in ("provider", "name", "revision", "dimensions", "max_input_tokens", "query_prefix"):
            setattr(self, name, getattr(self.inner, name))
        self.document_prefix = self.inner.document_prefix

    def embed_documents(self, texts):
        self.texts.extend(texts)
        return self.inner.embed_documents(texts)

    def embed_query(self, text):
        return self.inner.embed_query(text)

    def count_tokens(self, text):
        return self.inner.count_tokens(text)


def test_eval_embeds_the_title_with_every_chunk(tmp_path):
    (tmp_path / "apache.txt").write_text(LICENCE, encoding="utf-8")
    queries = tmp_path / "q.jsonl"
    queries.write_text(
        '{"query": "what is the license", "answers": [{"doc_id": "apache.txt", "text": "1. Definitions."}]}\n'
    )
    model = Recorder()
    report = evaluate(
        tmp_path, queries, ["recursive:64:0:context=title"], embedder=model, k=1, retrieval="vector:assemble=off"
    )
    assert report.configs[0].chunker_version == "recursive:64:0:context=title@2"
    assert model.texts and all(t.startswith("Apache License\n") for t in model.texts)


class WordPieces:
    """A model whose tokenizer counts a token every two characters: far more than cl100k on this text."""

    max_input_tokens = 40
    document_prefix = ""

    def count_tokens(self, text: str) -> int:
        return -(-len(text) // 2)

    def embed_documents(self, texts):
        # As every real provider does: an input over the limit is refused, never truncated.
        over = [t for t in texts if self.count_tokens(t) > self.max_input_tokens]
        if over:
            raise InputError(f"{len(over)} inputs over the limit")
        return HASHING.embed_documents(texts)


@pytest.mark.parametrize("spec", ["sentence:30:0:parent=markdown,200,0", "recursive:30:0:context=title", "fixed:30:0"])
def test_the_limit_is_counted_with_the_models_tokenizer_for_children_too(spec):
    model = WordPieces()
    text = SAMPLE["row-security.md"][:6000]
    for chunk in get_chunker(spec, embedder=model).chunk(text, "row-security.md"):
        if not chunk.is_parent:
            assert model.count_tokens(chunk.embed_text) <= 40, chunk.embed_text


@pytest.mark.parametrize("spec", ["semantic:30:0", "cluster:30:0:piece=30"])
def test_strategies_that_embed_while_chunking_compare_long_sentences_by_what_fits(spec):
    model = WordPieces()
    text = "word " * 200 + "end. A short sentence follows. " + "Another long one " * 30 + "here."
    chunks = get_chunker(spec, embedder=model).chunk(text, "long.txt")
    assert chunks and all(text[c.start : c.end] == c.text for c in chunks)
    assert all(model.count_tokens(c.embed_text) <= 40 for c in chunks)
