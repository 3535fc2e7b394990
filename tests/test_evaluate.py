"""`toolkit eval` and toolkit.evaluation.offline: the seed 000 table through the command, the embedding cache counted
at a
real (hashing) model, small-to-big contexts, the frontier, the plot, and clean errors."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

# The seed's "Try It Yourself" corpus, queries and printed table, shared with the chunking test.
from test_chunking_seed import QUERIES, SEED_TABLE, TEXT

from toolkit.cli import main
from toolkit.embedding import get_embedder
from toolkit.embedding.cache import EmbeddingCache
from toolkit.errors import InputError
from toolkit.evaluation.bag_of_words import bow_cosine, bow_scores
from toolkit.evaluation.frontier import mark_pareto
from toolkit.evaluation.metrics import cut_answers
from toolkit.evaluation.offline import ConfigResult, evaluate, split_configs

SEED_SPECS = [row[0] for row in SEED_TABLE]


@pytest.fixture
def seed_files(tmp_path: Path) -> tuple[Path, Path]:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "policy.txt").write_text(TEXT, encoding="utf-8")
    queries = tmp_path / "queries.jsonl"
    queries.write_text(
        "".join(json.dumps({"query": q, "answers": [{"doc_id": "policy.txt", "text": a}]}) + "\n" for q, a in QUERIES)
    )
    return corpus, queries


def run(*args: str):
    # Vector ranking without passages needs no database; full text and passages read SQL's lexemes and settings
    # (tests/test_retrieval_sql.py, and the stored-version test below).
    extra = [] if "--scorer" in args or "--retrieval" in args else ["--retrieval", "vector:assemble=off"]
    return CliRunner().invoke(main, ["eval", *args, *extra])


def seed_split_sentences(text: str) -> list[str]:  # the seed's own splitter
    return [s.strip() for s in re.split(r"(?<=[.!?])\s+", text) if s.strip()]


# -- the seed's table ------------------------------------------------------------------------------------------


def test_seed_table_through_toolkit_eval_with_the_bow_scorer(seed_files):
    corpus, queries = seed_files
    result = run(
        "--corpus", str(corpus), "--queries", str(queries), "--configs", ",".join(SEED_SPECS),
        "--scorer", "bow", "-k", "2", "--format", "json",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert (report["queries"], report["scorer"], report["k"]) == (7, "bow", 2)
    rows = {c["spec"]: c for c in report["configs"]}
    for spec, n, avg, cut, hit1, hit2 in SEED_TABLE:
        row = rows[spec]
        # The seed's columns: chunks, avg len (characters), cut sents, hit@1 and hit@2 out of 7.
        assert (row["chunks"], round(row["mean_chunk_chars"]), row["cut_sentences"], *row["hits_at"]) == (
            n, avg, cut, hit1, hit2,
        ), spec  # fmt: skip
        assert row["sentences"] == 12
        assert row["recall"] == hit2 / 7


def test_cut_answers_count_only_the_answer_sentences_that_are_cut(seed_files):
    """The seed's "cut sents" counts all 12 sentences; the harness's cut answers counts the 7 answers. Each seed
    answer is one sentence, so cut answers = the cut sentences that are answers, never more than cut sents."""
    corpus, queries = seed_files
    report = evaluate(corpus, queries, SEED_SPECS, scorer="bow", k=2)
    from toolkit.chunking import get_chunker

    answers = {a for _, a in QUERIES}
    for row in report.configs:
        texts = [c.text for c in get_chunker(row.spec).chunk(TEXT)]
        cut_sentences = [s for s in seed_split_sentences(TEXT) if not any(s in t for t in texts)]
        assert row.cut_sentences == len(cut_sentences)
        assert row.cut_answers == sum(s in answers for s in cut_sentences) <= row.cut_sentences
    by_spec = {r.spec: r for r in report.configs}
    # fixed 200/40: three sentences cut, two of them answers (the third, on two-factor codes, is asked by no one).
    assert (by_spec["fixed:200:40:unit=chars"].cut_sentences, by_spec["fixed:200:40:unit=chars"].cut_answers) == (3, 2)


def test_small_to_big_hands_back_parents_as_the_seed_prints(seed_files):
    # Seed: "small-to-big: hit@1 7/7, avg context returned 348 chars" (children = sentences of 400-char parents).
    corpus, queries = seed_files
    spec = "sentence:1:0:unit=chars:parent=sentence,400,0,unit=chars"
    report = evaluate(corpus, queries, [spec], scorer="bow", k=1)
    row = report.configs[0]
    assert (row.chunks, row.parents) == (12, 3)
    assert row.hits_at == [7]
    assert round(row.retrieved_chars) == 348
    assert row.cut_answers == 0


def test_bow_scores_are_the_seed_cosine():
    texts = [TEXT[i : i + 150] for i in range(0, len(TEXT), 120)] + ["", "the a an"]
    queries = [q for q, _ in QUERIES] + ["the"]
    scores = bow_scores(queries, texts)
    expected = np.array([[bow_cosine(q, t) for t in texts] for q in queries])
    assert np.array_equal(scores, expected)  # same arithmetic, so equal, not just close: ties break alike


# -- a real model, the embedding cache -------------------------------------------------------------------------


class CountingEmbedder:
    """Wraps a real embedder and records every text it is asked to embed."""

    def __init__(self, embedder):
        self.inner = embedder
        self.documents: list[str] = []
        self.queries: list[str] = []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def embed_documents(self, texts):
        self.documents.extend(texts)
        return self.inner.embed_documents(texts)

    def embed_query(self, text):
        self.queries.append(text)
        return self.inner.embed_query(text)


def test_a_sweep_embeds_each_distinct_text_once_and_a_cached_rerun_embeds_nothing(seed_files, tmp_path):
    corpus, queries = seed_files
    model = CountingEmbedder(get_embedder("hashing:64"))
    # Sentence chunks with and without a one-sentence overlap share most of their texts.
    configs = ["sentence:200:0:unit=chars", "sentence:200:1:unit=chars", "sentence:200:0:unit=chars:max_tokens=500"]
    from toolkit.chunking import get_chunker

    distinct = {c.embed_text for spec in configs for c in get_chunker(spec).chunk(TEXT, "policy.txt")}
    every = [c.embed_text for spec in configs for c in get_chunker(spec).chunk(TEXT, "policy.txt")]
    assert len(every) > len(distinct)  # the configurations do share chunks

    with EmbeddingCache(tmp_path / "cache") as cache:
        report = evaluate(corpus, queries, configs, embedder=model, k=2, cache=cache, retrieval="vector:assemble=off")
    assert sorted(model.documents) == sorted(distinct)  # every distinct text once, none twice
    assert sorted(model.queries) == sorted(q for q, _ in QUERIES)
    seen: set[str] = set()
    new_texts = []
    for spec in configs:
        texts = {c.embed_text for c in get_chunker(spec).chunk(TEXT, "policy.txt")}
        new_texts.append(len(texts - seen))
        seen |= texts
    assert [r.embedded_texts for r in report.configs] == new_texts
    assert new_texts[0] == 6 and new_texts[2] == 0  # the third configuration's chunks are the first one's
    assert report.embedded_texts == len(distinct) + len(QUERIES)

    again = CountingEmbedder(get_embedder("hashing:64"))
    with EmbeddingCache(tmp_path / "cache") as cache:  # a new run, read from disk
        second = evaluate(corpus, queries, configs, embedder=again, k=2, cache=cache, retrieval="vector:assemble=off")
    assert again.documents == [] and again.queries == [] and second.embedded_texts == 0
    assert [r.to_dict() | {"seconds": 0, "embedded_texts": 0} for r in second.configs] == [
        r.to_dict() | {"seconds": 0, "embedded_texts": 0} for r in report.configs
    ]


def test_the_cache_keeps_models_and_query_or_document_apart(tmp_path):
    with EmbeddingCache(tmp_path) as cache:
        small, large = get_embedder("hashing:16"), get_embedder("hashing:32")
        assert cache.embed_documents(small, ["refund"]).shape == (1, 16)
        assert cache.embed_documents(large, ["refund"]).shape == (1, 32)
        assert cache.embed_queries(small, ["refund"]).shape == (1, 16)
        assert cache.embedded_texts == 3
        np.testing.assert_array_equal(cache.embed_documents(small, ["refund"])[0], small.embed_documents(["refund"])[0])
        assert cache.embedded_texts == 3 and cache.hits == 1


def test_ranking_and_metrics_match_a_search_done_by_hand(seed_files):
    """Exact cosine top-k recomputed in the test from the chunks and the model, then scored with
    toolkit.evaluation.metrics."""
    from toolkit.chunking import get_chunker
    from toolkit.evaluation.metrics import score_query
    from toolkit.evaluation.queries import load_queries

    corpus, queries = seed_files
    model = get_embedder("hashing:64")
    spec = "fixed:150:30:unit=chars"
    report = evaluate(corpus, queries, [spec], embedder=model, k=3, retrieval="vector:assemble=off")
    chunks = get_chunker(spec, embedder=model).chunk(TEXT, "policy.txt")
    vectors = np.asarray(model.embed_documents([c.embed_text for c in chunks]), dtype=np.float64)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    labelled = load_queries(queries, {"policy.txt": TEXT})
    recalls, tokens = [], []
    for q in labelled:
        query = np.asarray(model.embed_query(q.query), dtype=np.float64)
        similarity = vectors @ (query / np.linalg.norm(query))
        # SQL's order: distance, then chunk id (search_chunks' ORDER BY h.distance, h.chunk_id).
        order = sorted(range(len(chunks)), key=lambda i: (round(1 - similarity[i], 12), chunks[i].chunk_id))
        top = [chunks[i] for i in order[:3]]
        recalls.append(score_query([(c.doc_id, c.start, c.end) for c in top], q.answers, 3).recall)
        tokens.append(sum(c.token_count for c in top))
    row = report.configs[0]
    assert row.recall == pytest.approx(sum(recalls) / len(recalls))
    assert [rank is not None for rank in row.ranks] == [bool(r) for r in recalls]
    assert row.retrieved_tokens == pytest.approx(sum(tokens) / len(tokens))
    assert row.input_cost_per_query == pytest.approx(row.retrieved_tokens * 2.0 / 1e6)
    assert row.cut_answers == cut_answers(
        [(c.doc_id, c.start, c.end) for c in chunks], [a for q in labelled for a in q.answers]
    )


# -- options, frontier, plot -----------------------------------------------------------------------------------


def test_split_configs_keeps_parent_specs_whole():
    assert split_configs("fixed:200:0, sentence:60:0:parent=markdown,800,0,markdown:400:40") == [
        "fixed:200:0",
        "sentence:60:0:parent=markdown,800,0",
        "markdown:400:40",
    ]
    assert split_configs(["fixed:200:0", "sentence:200:1"]) == ["fixed:200:0", "sentence:200:1"]
    with pytest.raises(InputError, match="listed twice"):
        split_configs("fixed:200:0,fixed:200:0")


def test_pareto_marks_what_nothing_beats_on_recall_and_tokens():
    def result(spec, recall, tokens):
        return ConfigResult(spec, spec, 1, None, 1, 1, 1, 0, 1, 0, recall, 0, 0, 0, 0, 0, None, tokens, 0, 0)

    rows = [result("a", 0.5, 100), result("b", 0.7, 300), result("c", 0.6, 400), result("d", 0.5, 100)]
    mark_pareto(rows)
    assert [r.pareto for r in rows] == [True, True, False, True]  # c: b has more recall for fewer tokens


def test_plot_and_table_output(seed_files, tmp_path):
    corpus, queries = seed_files
    plot = tmp_path / "out" / "frontier.png"
    plot.parent.mkdir()  # the plot's folder must exist (a missing one is refused: tests/test_attacks_inputs.py)
    result = run(
        "--corpus", str(corpus), "--queries", str(queries), "--model", "hashing:64", "--no-cache", "--plot", str(plot),
        "--configs", "fixed:200:0:unit=chars,sentence:200:1:unit=chars",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and plot.stat().st_size > 10_000
    assert "recall@k" in result.stdout and "sentence:200:1:unit=chars" in result.stdout
    assert "frontier, not a winner" in result.stdout


def test_the_plot_labels_each_point_by_chunker_and_retrieval(seed_files, tmp_path, monkeypatch, database_url):
    """Two retrievals of one chunker are two points: labelled by the chunker alone they could not be told apart.
    (Full text reads SQL's lexemes: the test database, never the default embedded one.)"""
    from matplotlib.axes import Axes

    labels = []
    annotate = Axes.annotate
    monkeypatch.setattr(
        Axes, "annotate", lambda self, text, *a, **kw: labels.append(text) or annotate(self, text, *a, **kw)
    )
    corpus, queries = seed_files
    result = CliRunner().invoke(main, [
        "--database-url", database_url, "eval", "--corpus", str(corpus), "--queries", str(queries),
        "--model", "hashing:64", "--no-cache", "--plot", str(tmp_path / "frontier.png"),
        "--configs", "fixed:200:0:unit=chars", "--retrieval", "vector:assemble=off,text:assemble=off",
    ])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert sorted(labels) == [
        "fixed:200:0:unit=chars [text:assemble=off]",
        "fixed:200:0:unit=chars [vector:assemble=off]",
    ]


# -- errors: exit code 1, a sentence, no traceback -------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"--configs": "fixed:200:0,chapters:400:0"}, "unknown strategy 'chapters'"),
        ({"--configs": "fixed:200:300"}, "overlap 300 ≥ size 200"),
        ({"--queries": "missing.jsonl"}, "cannot be read"),
        ({"--model": "nosuch:model"}, "Unknown embedding provider"),
        ({"-k": "0"}, None),  # click's own range check (exit code 2)
        ({"--retrieval": "fuzzy"}, "Unknown retrieval mode 'fuzzy'; use one of vector, hybrid, text."),
        ({"--retrieval": "vector:k1=x"}, "has k1=x, which is not a float"),
        ({"--retrieval": "vector:b=2"}, "BM25's b must be between 0 and 1"),
        ({"--retrieval": "vector:depth=3"}, "has an option 'depth=3' it does not take"),
        ({"--retrieval": "vector,vector"}, "The retrieval 'vector' is listed twice"),
    ],
)
def test_bad_input_is_a_clean_error(seed_files, change, message):
    corpus, queries = seed_files
    options = {"--corpus": str(corpus), "--queries": str(queries), "--configs": "fixed:200:0", "--model": "hashing:8"}
    if change.get("--queries") == "missing.jsonl":
        change = {"--queries": str(queries.parent / "missing.jsonl")}
    options.update(change)
    result = run(*[part for pair in options.items() for part in pair], "--no-cache")
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output
    if message is None:
        assert result.exit_code == 2
        return
    assert result.exit_code == 1, result.output
    assert message in result.output


def test_an_answer_not_in_the_corpus_is_a_clean_error(seed_files):
    corpus, queries = seed_files
    queries.write_text(json.dumps({"query": "q", "answers": [{"doc_id": "policy.txt", "text": "not there"}]}) + "\n")
    result = run("--corpus", str(corpus), "--queries", str(queries), "--configs", "fixed:200:0", "--scorer", "bow")
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "line 1: the answer text 'not there' is not in 'policy.txt'" in result.output


def test_bow_with_a_retrieval_mode_is_refused(seed_files):
    corpus, queries = seed_files
    result = run(
        "--corpus", str(corpus), "--queries", str(queries), "--configs", "fixed:200:0",
        "--scorer", "bow", "--retrieval", "hybrid",
    )  # fmt: skip
    assert result.exit_code == 1 and "--retrieval has no effect" in result.output


def test_bow_with_a_model_is_refused(seed_files):
    corpus, queries = seed_files
    result = run(
        "--corpus", str(corpus), "--queries", str(queries), "--configs", "fixed:200:0",
        "--scorer", "bow", "--model", "hashing:8",
    )  # fmt: skip
    assert result.exit_code == 1 and "--model has no effect" in result.output


# -- a registered alias: the only case that opens the database -------------------------------------------------


def test_a_registered_alias_is_read_from_the_database(seed_files, database_url, make_model):
    corpus, queries = seed_files
    make_model("toy", dimensions=32)
    common = ["eval", "--corpus", str(corpus), "--queries", str(queries), "--configs", "sentence:200:1:unit=chars"]
    common += ["--no-cache", "--format", "json", "--retrieval", "vector:assemble=off"]
    by_alias = CliRunner().invoke(main, ["--database-url", database_url, *common, "--model", "toy"])
    assert by_alias.exit_code == 0, by_alias.output
    by_ref = CliRunner().invoke(main, [*common, "--model", "hashing:32"])
    alias_report, ref_report = json.loads(by_alias.stdout), json.loads(by_ref.stdout)
    assert alias_report["model"] == "hashing:32"
    strip = {"seconds": 0}
    assert [c | strip for c in alias_report["configs"]] == [c | strip for c in ref_report["configs"]]

    unknown = CliRunner().invoke(main, ["--database-url", database_url, *common, "--model", "nosuch"])
    assert unknown.exit_code == 1 and "No model is registered as 'nosuch'" in unknown.output


def test_a_database_version_is_evaluated_through_sql_like_its_files(seed_files, database_url):
    corpus, queries = seed_files

    def cli(*args: str):
        result = CliRunner().invoke(main, ["--database-url", database_url, *args])
        assert result.exit_code == 0, result.output
        return result

    spec = "sentence:200:1:unit=chars"
    cli("model", "add", "toy", "--provider", "hashing", "--name", "64")
    cli("ingest", str(corpus), "--tenant", "acme")
    version = json.loads(cli("backfill", "--model", "toy", "--chunker", spec, "--format", "json").stdout)["version"]
    stored = json.loads(
        cli("eval", "--version", str(version), "--queries", str(queries), "-k", "2", "--no-cache", "--format", "json")
        .stdout
    )  # fmt: skip
    # The files, evaluated offline with eval's default retrieval (hybrid passages, SQL's lexemes and settings).
    files = json.loads(
        cli("eval", "--corpus", str(corpus), "--queries", str(queries), "--configs", spec, "--model", "hashing:64",
            "-k", "2", "--no-cache", "--format", "json").stdout
    )  # fmt: skip
    assert stored["model"] == "hashing:64 (alias toy)" and "through SQL" in stored["notes"][0]
    row, expected = stored["configs"][0], files["configs"][0]
    assert row["spec"] == f"v{version}" and row["chunker_version"] == expected["chunker_version"]
    # Nine vectors: the HNSW search finds what exact cosine finds, so what search() hands an application (SQL's
    # passages) scores exactly what eval's offline assembly does.
    same = ["chunks", "cut_answers", "cut_sentences", "recall", "mrr", "hits_at", "span_recall", "retrieved_tokens"]
    assert {key: row[key] for key in same} == {key: expected[key] for key in same}

    refused = CliRunner().invoke(
        main, ["--database-url", database_url, "eval", "--version", str(version), "--queries", str(queries),
               "--configs", spec],
    )  # fmt: skip
    assert refused.exit_code == 1 and "drop --configs" in refused.output

    # The other served retrievals by name; one SQL does not serve is refused.
    chunks = json.loads(
        cli("eval", "--version", str(version), "--queries", str(queries), "-k", "2", "--no-cache", "--format", "json",
            "--retrieval", "vector:assemble=off").stdout
    )["configs"][0]  # fmt: skip
    by_files = json.loads(
        cli("eval", "--corpus", str(corpus), "--queries", str(queries), "--configs", spec, "--model", "hashing:64",
            "-k", "2", "--no-cache", "--format", "json", "--retrieval", "vector:assemble=off").stdout
    )["configs"][0]  # fmt: skip
    assert chunks["retrieval"] == "vector:assemble=off"
    assert {key: chunks[key] for key in same} == {key: by_files[key] for key in same}
    text = CliRunner().invoke(
        main, ["--database-url", database_url, "eval", "--version", str(version), "--queries", str(queries),
               "--retrieval", "text"],
    )  # fmt: skip
    assert text.exit_code == 1 and "not 'text'" in text.output
