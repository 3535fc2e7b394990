"""One counting rule for chunks (issue 23 item 9): `toolkit chunk`, `toolkit estimate` and `toolkit eval` counted
1,730 chunks of the sample for recursive:128:64 where a MiniLM backfill wrote 1,731, because the version's chunker
splits again a chunk over the model's input limit (in the model's tokenizer). The rule has one owner,
``get_chunker(spec, embedder=…)``; each command given the model counts what a backfill of it writes."""

from __future__ import annotations

import json

from click.testing import CliRunner

from toolkit.cli import main
from toolkit.evaluation.queries import SAMPLE_DOCS, SAMPLE_QUERIES

SPEC = "recursive:128:64"
# A hashing model with a 100-token limit: cheap, and under the chunk size, so the limit decides many chunks.
MODEL = "hashing:16:max_input_tokens=100"


def _run(*args: str, url: str | None = None) -> str:
    prefix = ["--database-url", url] if url else []
    result = CliRunner().invoke(main, [*prefix, *args], env={"TOOLKIT_PROGRESS": "never"})
    assert result.exit_code == 0, result.output
    return result.stdout


def _chunked(*embedder: str) -> int:
    stats = _run("chunk", str(SAMPLE_DOCS), "--spec", SPEC, *embedder, "--format", "stats")
    return int(next(line.split()[1] for line in stats.splitlines() if line.startswith("chunks ")))


def _estimated(*embedder: str) -> tuple[int, list[str]]:
    estimate = json.loads(
        _run("estimate", "--corpus", str(SAMPLE_DOCS), "--chunker", SPEC, *embedder, "--format", "json")
    )
    return estimate["rows"][0]["chunks"], estimate["notes"]


def test_chunk_estimate_eval_and_backfill_count_the_same_chunks_for_a_model(database_url, tmp_path):
    alone = _chunked()
    assert _estimated()[0] == alone
    assert any("give --embedder to count for that model" in note for note in _estimated()[1])

    counted = _chunked("--embedder", MODEL)
    assert counted > alone  # the limit splits chunks here: the test can tell the rules apart
    estimated, notes = _estimated("--embedder", MODEL)
    assert estimated == counted and any("input limit of 100 tokens" in note for note in notes)

    # Vector ranking without passages needs no database (the default embedded one must not be touched by a test).
    queries = tmp_path / "queries.jsonl"
    queries.write_text("".join(SAMPLE_QUERIES.read_text().splitlines(keepends=True)[:5]))
    evaluated = json.loads(
        _run("eval", "--corpus", str(SAMPLE_DOCS), "--queries", str(queries), "--configs", SPEC, "--model", MODEL,
             "--no-cache", "--retrieval", "vector:assemble=off", "--format", "json")
    )  # fmt: skip
    assert [config["chunks"] for config in evaluated["configs"]] == [counted]

    _run("model", "add", "h100", "--provider", "hashing", "--name", "16", "--max-input-tokens", "100", url=database_url)
    _run("ingest", str(SAMPLE_DOCS), "--tenant", "acme", url=database_url)
    built = json.loads(_run("backfill", "--model", "h100", "--chunker", SPEC, "--format", "json", url=database_url))
    assert built["rows_written"] == counted


def test_a_model_limit_under_the_chunk_size_never_repeats_a_chunk():
    """Splitting overlapping chunks to a model's limit could give one span twice (the same chunk id twice: the
    backfill above failed with a duplicate key); each span is now kept once, for every strategy and limit."""
    from collections import Counter

    from toolkit.chunking import get_chunker
    from toolkit.embedding import get_embedder
    from toolkit.text.sources import read_documents

    documents = list(read_documents([str(SAMPLE_DOCS)]))
    for limit in (40, 100):
        embedder = get_embedder(f"hashing:16:max_input_tokens={limit}")
        for spec in ("recursive:128:64", "fixed:128:64", "sentence:128:1", "markdown:128:32"):
            chunker = get_chunker(spec, embedder=embedder)
            for document in documents:
                ids = Counter(chunk.chunk_id for chunk in chunker.chunk(document.text, doc_id=document.doc_id))
                assert max(ids.values()) == 1, (limit, spec, document.doc_id)
