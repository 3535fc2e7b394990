"""`toolkit chunk`: output formats, per-file failures, option checks, and its documentation."""

from __future__ import annotations

import json
import re
from pathlib import Path

from click.testing import CliRunner

from toolkit.chunking import STRATEGIES
from toolkit.cli import main

DATA = Path(__file__).parent / "data" / "chunking"
DOCS = Path(__file__).parent.parent / "docs" / "chunking.md"


def run(*args):
    return CliRunner().invoke(main, ["chunk", *args])


def test_jsonl_lines_carry_the_documented_fields():
    result = run(str(DATA), "--spec", "markdown:120:0")
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.output.splitlines()]
    policy = (DATA / "policy.md").read_text(encoding="utf-8")
    rows = [r for r in lines if r["doc_id"] == "policy.md"]
    assert rows and {r["doc_id"] for r in lines} >= {"policy.md", "page.html", "sample.py", "pdf_text.txt"}
    for r in rows:
        assert {"doc_id", "source", "start", "end", "heading_path", "token_count", "text"} <= set(r)
        assert policy[r["start"] : r["end"]] == r["text"]
        assert r["source"].endswith("policy.md")


def test_strategy_follows_the_file_type_by_default():
    result = run(str(DATA))
    versions = {json.loads(line)["doc_id"]: json.loads(line)["chunker_version"] for line in result.output.splitlines()}
    assert versions == {
        "page.html": "html:400:40@1",
        "pdf_text.txt": "recursive:400:40@2",
        "policy.md": "markdown:400:40@1",
        "sample.py": "code:400:40@1",
    }


def test_stats_report_counts_tokens_and_cut_sentences():
    prose = "A first sentence is here. A second one follows it. The third closes the text."
    with CliRunner().isolated_filesystem():
        Path("p.txt").write_text(prose)
        fixed = CliRunner().invoke(main, ["chunk", "p.txt", "--spec", "fixed:4:0", "--format", "stats"])
        args = ["chunk", "p.txt", "--strategy", "sentence", "--size", "8", "--overlap", "0", "--format", "stats"]
        sentence = CliRunner().invoke(main, args)
    assert fixed.exit_code == 0 and sentence.exit_code == 0
    stat = lambda output, name: re.search(rf"^{name}\s+(\S+)", output, re.M).group(1)  # noqa: E731
    assert stat(fixed.output, "sentences") == "3" and int(stat(fixed.output, "sentences_cut")) >= 2
    assert stat(sentence.output, "sentences_cut") == "0" and stat(sentence.output, "chunks") == "3"
    assert int(stat(sentence.output, "tokens_max")) <= 8


def test_unreadable_files_are_reported_and_the_rest_still_chunked(tmp_path):
    (tmp_path / "good.md").write_text("# Good\n\nReadable text.")
    (tmp_path / "bad.md").write_bytes(b"\xff\xfe\xfd")
    (tmp_path / "nul.txt").write_bytes(b"a\x00b")
    result = CliRunner().invoke(main, ["chunk", str(tmp_path)])
    assert result.exit_code == 1
    assert json.loads(result.stdout.splitlines()[0])["doc_id"] == "good.md"
    assert "bad.md: is not valid UTF-8" in result.stderr and "nul.txt: contains NUL bytes" in result.stderr
    assert "2 file(s) could not be read" in result.stderr
    assert "Traceback" not in result.output


def test_spec_and_strategy_options_do_not_mix():
    result = run(str(DATA / "policy.md"), "--spec", "markdown:400:40", "--size", "100")
    assert result.exit_code == 1 and "either --spec or --strategy/--size/--overlap" in result.output


def test_a_bad_spec_is_a_clean_error():
    result = run(str(DATA / "policy.md"), "--spec", "markdown:400")
    assert result.exit_code == 1 and "needs at least strategy:size:overlap" in result.output
    assert "Traceback" not in result.output


def test_table_format():
    result = run(str(DATA / "policy.md"), "--spec", "markdown:400:0", "--format", "table")
    assert result.exit_code == 0
    assert result.output.splitlines()[0].split() == [
        "doc_id", "position", "start", "end", "token_count", "heading_path", "text",
    ]  # fmt: skip


def test_docs_cover_the_command_and_every_strategy():
    text = DOCS.read_text(encoding="utf-8")
    assert "## toolkit chunk" in text
    for strategy in STRATEGIES:
        assert f"`{strategy}`" in text, strategy
    for topic in ("unit=chars", "max_tokens", "parent=", "window=", "atomic", "--clean-pdf-text", "embed_text"):
        assert topic in text, topic
    help_text = CliRunner().invoke(main, ["chunk", "--help"]).output
    for option in re.findall(r"--[a-z-]+", help_text):
        assert option in text, option


def test_a_small_size_alone_gets_a_proportionate_overlap():
    result = run(str(DATA / "policy.md"), "--size", "30")
    assert result.exit_code == 0, result.output
    assert {json.loads(line)["chunker_version"] for line in result.output.splitlines()} == {"markdown:30:3@1"}
    result = run(str(DATA / "policy.md"), "--strategy", "sentence")
    assert {json.loads(line)["chunker_version"] for line in result.output.splitlines()} == {"sentence:400:1@2"}
