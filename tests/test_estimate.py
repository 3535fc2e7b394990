"""`toolkit estimate` against the worked numbers of the seed documents (000, 003, 004), library and CLI."""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import asdict
from pathlib import Path

import pytest
from click.testing import CliRunner

from toolkit.chunking import get_chunker
from toolkit.cli import main
from toolkit.errors import InputError
from toolkit.estimate import (
    Pricing,
    chunk_count,
    corpus_tokens,
    estimate,
    hnsw_index_bytes,
    pair_configs,
    parse_count,
    parse_overlap,
    parse_size,
    vector_bytes,
)
from toolkit.evaluation.queries import SAMPLE_DOCS
from toolkit.text.sources import read_documents
from toolkit.text.tokens import count_tokens

# The 004 table: 10M tokens, k = 5, 1,536 float32 dimensions, $0.20 / $2 per million tokens.
# (chunk, overlap, chunks, embedding cost, raw vectors in MB, context tokens per query, input cost per query)
TABLE_004 = [
    (100, 0, 100_000, "$2.00", 614, 500, "$0.0010"),
    (200, 0, 50_000, "$2.00", 307, 1_000, "$0.0020"),
    (200, 50, 66_667, "$2.67", 410, 1_000, "$0.0020"),
    (400, 0, 25_000, "$2.00", 154, 2_000, "$0.0040"),
    (800, 0, 12_500, "$2.00", 77, 4_000, "$0.0080"),
    (800, 400, 25_000, "$4.00", 154, 4_000, "$0.0080"),
]


def _cli(*args: str) -> dict:
    result = CliRunner().invoke(main, ["estimate", *args, "--format", "json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def _check_004_row(row: dict, expected: tuple) -> None:
    chunk, overlap, chunks, embedding, megabytes, context, per_query = expected
    assert (row["chunk"], row["overlap"]) == (chunk, overlap)
    assert row["chunks"] == chunks
    assert f"${row['embedding_cost']:.2f}" == embedding
    assert round(row["vector_bytes"] / 1e6) == megabytes  # the seed's MB are 10^6 bytes: 100,000 × 6,144 B
    assert row["context_tokens_per_query"] == context
    assert f"${row['input_cost_per_query']:.4f}" == per_query


@pytest.mark.parametrize("expected", TABLE_004, ids=lambda e: f"{e[0]}/{e[1]}")
def test_004_table_rows_through_the_library(expected):
    chunk, overlap = expected[:2]
    result = estimate(10_000_000, configs=[(chunk, overlap)], pricing=Pricing(k=5, embed_price=0.20, input_price=2))

    _check_004_row(asdict(result.rows[0]), expected)


def test_004_table_through_the_cli_as_one_table():
    args = ["--tokens", "10M", "-k", "5", "--dims", "1536", "--storage", "float32"]
    for chunk, overlap, *_ in TABLE_004:
        args += ["--chunk", str(chunk), "--overlap", str(overlap)]
    data = _cli(*args, "--embed-price", "0.20", "--input-price", "2")
    assert data["tokens"] == 10_000_000
    assert len(data["rows"]) == len(TABLE_004)
    for row, expected in zip(data["rows"], TABLE_004, strict=True):
        _check_004_row(row, expected)


def test_004_daily_cost_800_against_200_tokens_at_10000_queries():
    # 5 × 800 = 4,000 tokens × $2/M = $0.008 × 10,000 = $80; 5 × 200 = 1,000 tokens → $20.
    pricing = Pricing(k=5, input_price=2, queries_per_day=10_000)
    rows = estimate(10_000_000, configs=[(800, 0), (200, 0)], pricing=pricing).rows
    assert [row.input_cost_per_day for row in rows] == pytest.approx([80.0, 20.0])
    data = _cli("--tokens", "10M", "--chunk", "800", "--chunk", "200", "--queries-per-day", "10k")
    assert [row["input_cost_per_day"] for row in data["rows"]] == pytest.approx([80.0, 20.0])


def test_003_policy_manual():
    # 100 pages × 500 words × 1.3 tokens a word = 65,000 tokens.
    tokens = corpus_tokens(pages=100, words_per_page=500, tokens_per_word=1.3)
    assert tokens == 65_000
    pricing = Pricing(k=5, system_prompt_tokens=600, question_tokens=50)
    plain, overlapped = estimate(tokens, configs=[(400, 0), (400, 40)], pricing=pricing).rows
    # 65,000 ÷ 400 = 162.5 → the seed's "≈ 163 chunks" (the last, shorter window is a chunk too).
    assert plain.chunks == 163
    # Windows every 360 tokens: ceil(65,000 / 360) = 181; 65,000 + 180 × 40 = 72,200 → the seed's "about 72k".
    assert round(overlapped.embedded_tokens, -3) == 72_000
    # 5 × 400 + 600 + 50 = 2,650 input tokens per question, with or without overlap.
    assert plain.input_tokens_per_query == overlapped.input_tokens_per_query == 2_650
    # Weekly update: 20 pages × 500 words × 1.3 ≈ 13,000 tokens ≈ 33 chunks (13,000 / 400 = 32.5 → 33).
    weekly = corpus_tokens(pages=20)
    assert weekly == 13_000
    assert estimate(weekly, configs=[(400, 0)]).rows[0].chunks == 33


def test_003_policy_manual_through_the_cli():
    data = _cli(
        "--pages", "100", "--chunk", "400", "--overlap", "0", "--chunk", "400", "--overlap", "40",
        "--system-prompt-tokens", "600", "--question-tokens", "50",
    )  # fmt: skip
    assert data["tokens"] == 65_000
    plain, overlapped = data["rows"]
    assert plain["chunks"] == 163
    assert round(overlapped["embedded_tokens"], -3) == 72_000
    assert plain["input_tokens_per_query"] == 2_650
    weekly = _cli("--words", "10000", "--tokens-per-word", "1.3", "--chunk", "400")
    assert weekly["tokens"] == 13_000 and weekly["rows"][0]["chunks"] == 33


# The 000 storage table: 10M chunks × dims × 4 B, printed as GB of 10^9 bytes with one decimal.
STORAGE_000 = [(384, 15.4), (768, 30.7), (1536, 61.4), (3072, 122.9)]


@pytest.mark.parametrize(("dims", "gigabytes"), STORAGE_000)
def test_000_storage_table(dims, gigabytes):
    assert round(vector_bytes(10_000_000, dims, "float32") / 1e9, 1) == gigabytes


def test_000_storage_table_through_the_cli_and_int8():
    args = ["--chunks", "10M", "--chunk", "300"]
    for dims, _ in STORAGE_000:
        args += ["--dims", str(dims)]
    data = _cli(*args)
    assert [round(row["vector_bytes"] / 1e9, 1) for row in data["rows"]] == [gb for _, gb in STORAGE_000]
    # int8 at 1,536 dims: 10M × 1,536 × 1 B = 15.4 GB.
    int8 = _cli("--chunks", "10M", "--dims", "1536", "--storage", "int8")
    assert round(int8["rows"][0]["vector_bytes"] / 1e9, 1) == 15.4


def test_000_re_embedding_cost_from_a_chunk_count():
    # 10M chunks of about 300 tokens = 3 billion tokens; at $0.10/M about $300, at $1/M $3,000.
    rows = estimate(chunks=10_000_000, configs=[(300, 0)], pricing=Pricing(embed_price=0.10)).rows
    assert rows[0].embedded_tokens == 3_000_000_000
    assert rows[0].embedding_cost == pytest.approx(300.0)
    assert estimate(chunks=10_000_000, configs=[(300, 0)], pricing=Pricing(embed_price=1)).rows[
        0
    ].embedding_cost == pytest.approx(3_000.0)


def test_000_system_design_tie_in():
    # 50,000 documents × 4,000 tokens = 200M tokens; 400-token chunks with a 10% (40-token) overlap.
    # Windows every 360 tokens: ceil(200M / 360) = 555,556. The seed multiplies 500,000 by 1.1 and says
    # "roughly 550,000"; the two agree within 1%, and both give "about 3.4 GB" at 6,144 B a vector.
    row = estimate(50_000 * 4_000, configs=pair_configs([400], ["10%"])).rows[0]
    assert row.overlap == 40
    assert row.chunks == 555_556
    assert abs(row.chunks - 550_000) / 550_000 < 0.015
    assert round(row.vector_bytes / 1e9, 1) == 3.4
    data = _cli("--tokens", "200M", "--chunk", "400", "--overlap", "10%")
    assert round(data["rows"][0]["vector_bytes"] / 1e9, 1) == 3.4


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("10M", 10_000_000),
        ("65k", 65_000),
        ("1.5M", 1_500_000),
        ("65000", 65_000),
        ("10,000", 10_000),
        ("2B", 2e9),
    ],
)
def test_parse_count(text, expected):
    assert parse_count(text) == expected


@pytest.mark.parametrize("text", ["ten", "10X", "-5", "", "1.2.3M"])
def test_parse_count_rejects_garbage(text):
    with pytest.raises(InputError, match=r"write a number|zero or more"):
        parse_count(text)


def test_storage_types_bytes_per_vector():
    # 1,536 dims: float32 6,144 B, halfvec 3,072 B, int8 1,536 B, binary 1,536 bits = 192 B.
    assert [vector_bytes(1, 1536, kind) for kind in ("float32", "halfvec", "int8", "binary")] == [
        6144,
        3072,
        1536,
        192,
    ]


def test_overlap_pairs_and_percentages():
    assert parse_overlap("10%", 400) == 40
    assert pair_configs([200, 800], ["50", "400"]) == [(200, 50), (800, 400)]
    assert pair_configs([200, 800], ["0"]) == [(200, 0), (800, 0)]  # one overlap applies to every size
    assert pair_configs([], []) == [(400, 0)]
    with pytest.raises(InputError, match="one --overlap per --chunk"):
        pair_configs([100, 200, 300], ["0", "10"])


def test_bad_input_is_a_clean_cli_error():
    runner = CliRunner()
    result = runner.invoke(main, ["estimate", "--tokens", "10M", "--chunk", "200", "--overlap", "200"])
    assert result.exit_code == 1
    assert "must be at least 0 and smaller than the chunk size" in result.output
    result = runner.invoke(main, ["estimate", "--tokens", "10M", "--pages", "3"])
    assert result.exit_code == 1
    assert "Give the corpus size once" in result.output
    result = runner.invoke(main, ["estimate", "--chunks", "1M", "--tokens", "3"])
    assert result.exit_code == 1
    assert "Give the corpus size once" in result.output


def test_table_output_shows_the_seed_figures_and_the_index_note():
    result = CliRunner().invoke(
        main,
        [
            "estimate",
            "--tokens",
            "10M",
            "--chunk",
            "100",
            "--chunk",
            "800",
            "--overlap",
            "0",
            "--overlap",
            "400",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "100,000" in result.output and "614 MB" in result.output and "$0.0010" in result.output
    assert "$4.00" in result.output and "154 MB" in result.output
    assert "HNSW" in result.output


def test_chunk_count_rejects_overlap_as_large_as_the_chunk():
    with pytest.raises(InputError, match="smaller than the chunk size"):
        chunk_count(1000, 100, 100)


def test_corpus_path_counts_real_chunks_and_tokens(tmp_path):
    (tmp_path / "a.md").write_text("# Refunds\n\n" + "Refunds are issued within 14 days. " * 60, encoding="utf-8")
    (tmp_path / "b.md").write_text("# Shipping\n\n" + "Express shipping takes one day. " * 40, encoding="utf-8")
    (tmp_path / "c.bin").write_bytes(b"\x00\x01")  # not a text format: not read
    args = ["estimate", "--corpus", str(tmp_path), "--chunker", "fixed:100:10", "--chunker", "markdown:400:40"]
    result = CliRunner().invoke(main, [*args, "-k", "2", "--format", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    documents = list(read_documents([str(tmp_path)]))
    assert data["documents"] == len(documents) == 2
    assert data["tokens"] == sum(count_tokens(d.text) for d in documents)
    for row, spec in zip(data["rows"], ["fixed:100:10", "markdown:400:40"], strict=True):
        chunks = [c for d in documents for c in get_chunker(spec).chunk(d.text, d.doc_id)]
        assert row["chunker"] == spec
        assert row["chunks"] == len(chunks)
        assert row["embedded_tokens"] == sum(c.token_count for c in chunks)
        mean = row["embedded_tokens"] / row["chunks"]
        assert row["context_tokens_per_query"] == round(min(2, len(chunks)) * mean)
    assert data["rows"][0]["chunks"] > 2  # 100-token windows over ~700 tokens
    assert (data["rows"][0]["chunk"], data["rows"][0]["overlap"]) == (100, 10)


def test_corpus_with_no_readable_documents_is_an_error(tmp_path):
    result = CliRunner().invoke(main, ["estimate", "--corpus", str(tmp_path), "--chunker", "fixed:100:0"])
    assert result.exit_code == 1 and "No readable documents" in result.output
    result = CliRunner().invoke(main, ["estimate", "--corpus", str(tmp_path)])
    assert result.exit_code == 1 and "--chunker" in result.output


def test_corpus_and_token_options_do_not_mix(tmp_path):
    result = CliRunner().invoke(main, ["estimate", "--corpus", str(tmp_path), "--tokens", "10M"])
    assert result.exit_code == 1 and "--corpus measures the corpus itself" in result.output
    result = CliRunner().invoke(main, ["estimate", "--tokens", "10M", "--chunker", "markdown:400:40"])
    assert result.exit_code == 1 and "--chunker needs --corpus" in result.output


def test_small_to_big_context_counts_the_parents_the_llm_reads():
    spec = "sentence:60:0:parent=markdown:400:0"
    result = CliRunner().invoke(
        main,
        ["estimate", "--corpus", str(SAMPLE_DOCS / "row-security.md"), "--chunker", spec, "--format", "json"],
    )
    assert result.exit_code == 0, result.output
    row = json.loads(result.output)["rows"][0]
    (document,) = read_documents([str(SAMPLE_DOCS / "row-security.md")])
    produced = get_chunker(spec).chunk(document.text, document.doc_id)
    children = [c for c in produced if not c.is_parent]
    parents = [c for c in produced if c.is_parent]
    assert parents and row["chunks"] == len(children)  # only children are embedded and stored as vectors
    assert row["embedded_tokens"] == sum(c.token_count for c in children)
    mean_parent = sum(c.token_count for c in parents) / len(parents)
    assert row["context_tokens_per_query"] == round(5 * mean_parent)


# -- when do I need to shard ---------------------------------------------------------------------------------------
# DESIGN.md's HNSW builds here, 200k × 384 (m = 16): vector 391 MB, halfvec 223 MB, binary quantization 67 MB.
MEASURED_HNSW = [("float32", 391e6), ("halfvec", 223e6), ("binary", 67e6)]


@pytest.mark.parametrize(("storage", "measured"), MEASURED_HNSW)
def test_hnsw_index_size_is_within_ten_percent_of_the_measured_builds(storage, measured):
    assert abs(hnsw_index_bytes(200_000, 384, storage) - measured) / measured < 0.10


def test_000_a_100m_chunk_corpus_is_over_600_gb_and_does_not_fit_one_server():
    # 000: "a 100M-chunk corpus at the same dimension [1,536] is over 600 GB and forces sharding, quantization or a
    # disk-based index".
    data = _cli("--chunks", "100M", "--dims", "1536", "--memory", "64GB")
    (row,) = data["rows"]
    assert row["vector_bytes"] > 600e9
    fit = row["memory"]
    assert fit["memory_bytes"] == 64_000_000_000 and fit["usable_bytes"] == 48_000_000_000
    assert not fit["fits"] and fit["index_bytes"] > row["vector_bytes"]  # the graph comes on top of the vectors
    assert fit["nodes"] == -(-fit["index_bytes"] // fit["usable_bytes"])
    table = CliRunner().invoke(main, ["estimate", "--chunks", "100M", "--dims", "1536", "--memory", "64GB"]).output
    assert "shard by tenant over" in table and "binary quantization" in table


def test_000_the_system_design_corpus_fits_one_server():
    # 000: 550,000 chunks at 1,536 dims "about 3.4 GB before index overhead, which fits in memory on one node".
    row = estimate(200_000_000, configs=[(400, 40)], memory=parse_size("64GB")).rows[0]
    assert row.memory.fits and row.memory.nodes == 1
    assert row.vector_bytes < row.hnsw_index_bytes < 2 * row.vector_bytes


@pytest.mark.parametrize(
    ("text", "expected"),
    [("64GB", 64e9), ("64 GB", 64e9), ("64G", 64e9), ("512MB", 512e6), ("1.5TB", 1.5e12), ("64GiB", 64 * 2**30)],
)
def test_parse_size(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["lots", "64XB", "0GB", "-3GB"])
def test_parse_size_rejects_garbage(text):
    with pytest.raises(InputError, match=r"is not a size|above zero"):
        parse_size(text)


def test_a_bad_memory_size_is_a_clean_cli_error():
    result = CliRunner().invoke(main, ["estimate", "--tokens", "10M", "--memory", "lots"])
    assert result.exit_code == 2 and "is not a size" in result.output and "Traceback" not in result.output


# -- the documented outputs ----------------------------------------------------------------------------------------
REPOSITORY = Path(__file__).resolve().parent.parent
DOCUMENTED = sorted(
    (path.relative_to(REPOSITORY).as_posix(), command, output)
    for path in (REPOSITORY / "docs").glob("*.md")
    for command, output in re.findall(
        r"```\n(toolkit estimate (?:[^\n]*\\\n)*[^\n]*)\n```\n\n```\n(.*?)\n```", path.read_text(encoding="utf-8"), re.S
    )
)


def test_the_docs_show_estimate_outputs():
    assert {path for path, _, _ in DOCUMENTED} >= {"docs/estimate.md", "docs/scaling.md"}


@pytest.mark.parametrize(("path", "command", "output"), DOCUMENTED, ids=[f"{p}:{c[:60]}" for p, c, _ in DOCUMENTED])
def test_a_documented_estimate_output_is_what_the_command_prints(path, command, output, monkeypatch):
    monkeypatch.chdir(REPOSITORY)  # the commands name paths from the repository's top
    args = shlex.split(command.replace("\\\n", " "))[2:]
    result = CliRunner().invoke(main, ["estimate", *args])
    assert result.exit_code == 0, result.output
    assert result.output.rstrip("\n") == output, f"{path}: the output of `{command}` changed; paste the new one"
