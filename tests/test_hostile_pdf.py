"""Hostile PDFs (issue 28, item 6): a PDF cannot hang `toolkit ingest` / `toolkit chunk` or take the machine's
memory, and the files beside it are stored.

Each attack is a file built byte by byte (tests/pdfs.py): a reference loop in the page tree (pdfminer resolves it
forever at one core), a two-layer Flate bomb (5 KB that decode to 2 GB), a glyph bomb (9 KB, four million glyphs on
one page), 100,000 one-line pages. Every command runs as a real process and the test waits for it to exit; the
``timeout`` of ``subprocess.run`` only turns a hang (what main did) into a failure instead of a stuck suite.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pdfs
import pytest

from toolkit.db.connection import connect

# A hang on main must fail the test, not stall the suite: no case below needs more than a few seconds.
HANG = 120


def toolkit(*args: str, url: str | None = None) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "toolkit", *(["--database-url", url] if url else []), *args]
    env = {**os.environ, "TOOLKIT_DATA_DIR": "/nonexistent/no-embedded-server"}
    return subprocess.run(command, capture_output=True, text=True, timeout=HANG, env=env)


@pytest.fixture
def folder(tmp_path):
    """A good Markdown file and a good PDF, each sorted after the hostile file added beside them, so the reader
    must recover from the hostile one to read them."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "b-notes.md").write_text("# Notes\n\nPlain notes about the widget, kept beside a hostile PDF.\n")
    pdfs.write_manual(corpus / "c-manual.pdf")
    return corpus


def chunked_doc_ids(result: subprocess.CompletedProcess) -> set[str]:
    return {json.loads(line)["doc_id"] for line in result.stdout.splitlines() if line.strip()}


LOOP = "a-loop.pdf: has a reference loop (object 7 refers back to itself through other references)"


def test_a_reference_loop_pdf_is_refused_and_the_other_files_are_stored(folder, database_url, make_model):
    pdfs.write_reference_loop(folder / "a-loop.pdf")
    assert (folder / "a-loop.pdf").stat().st_size < 1000
    make_model("h", 8)
    result = toolkit("ingest", str(folder), "--tenant", "acme", "--batch-size", "1", url=database_url)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert LOOP in result.stderr
    with connect(database_url, autocommit=True) as conn:
        stored = {r[0] for r in conn.execute("SELECT doc_id FROM toolkit.documents")}
    assert stored == {"b-notes.md", "c-manual.pdf"}


def test_a_reference_loop_pdf_does_not_hang_chunk(folder):
    pdfs.write_reference_loop(folder / "a-loop.pdf")
    result = toolkit("chunk", str(folder))
    assert result.returncode == 1, result.stderr
    assert LOOP in result.stderr
    assert chunked_doc_ids(result) == {"b-notes.md", "c-manual.pdf"}


def test_a_pdf_past_the_time_limit_is_stopped_and_the_next_one_is_read(folder):
    # The reader's process is killed at the deadline whatever it is doing; 10 ms is less than the child needs to
    # start Python and import pdfminer, so the first PDF is stopped, and the next file is still read.
    pdfs.write_manual(folder / "a-first.pdf")
    result = toolkit("chunk", str(folder / "a-first.pdf"), str(folder), "--pdf-timeout", "0.01")
    assert result.returncode == 1, result.stderr
    assert "a-first.pdf: took longer than 0.01 s to read and was stopped (the limit is --pdf-timeout)" in result.stderr
    assert "b-notes.md" in chunked_doc_ids(result)


def test_a_two_layer_flate_bomb_is_stopped_at_the_memory_limit(folder):
    pdfs.write_flate_bomb(folder / "a-bomb.pdf")  # decodes to 2 GB
    assert (folder / "a-bomb.pdf").stat().st_size < 10_000
    result = toolkit("chunk", str(folder), "--pdf-memory", "300MB")
    assert result.returncode == 1, result.stderr
    assert "a-bomb.pdf: needed more than 300 MB of memory to read and was stopped (the limit is --pdf-memory)" in (
        result.stderr
    )
    assert chunked_doc_ids(result) == {"b-notes.md", "c-manual.pdf"}


def test_a_glyph_bomb_is_refused_at_the_glyph_limit(folder):
    pdfs.write_glyph_bomb(folder / "a-glyphs.pdf")  # four million glyphs on one page
    result = toolkit("chunk", str(folder))
    assert result.returncode == 1, result.stderr
    assert "a-glyphs.pdf: draws more than 100,000 glyphs on page 1 (the limit is --pdf-max-glyphs" in result.stderr
    assert chunked_doc_ids(result) == {"b-notes.md", "c-manual.pdf"}


def test_a_pdf_of_100000_pages_is_refused_at_the_page_limit_before_any_page_is_read(folder):
    pdfs.write_many_pages(folder / "a-pages.pdf")
    result = toolkit("chunk", str(folder))
    assert result.returncode == 1, result.stderr
    assert "a-pages.pdf: has more than 10,000 pages (the limit is --pdf-max-pages)" in result.stderr
    assert chunked_doc_ids(result) == {"b-notes.md", "c-manual.pdf"}


def test_raising_a_limit_reads_a_document_the_default_refuses(tmp_path):
    path = pdfs.write_many_pages(tmp_path / "pages.pdf", pages=30)
    refused = toolkit("chunk", str(path), "--pdf-max-pages", "20")
    assert refused.returncode == 1 and "has more than 20 pages" in refused.stderr
    read = toolkit("chunk", str(path), "--pdf-max-pages", "30", "--no-pdf-cleaning")  # one line repeated: a header
    assert read.returncode == 0, read.stderr
    assert "One line on this page." in read.stdout


def test_the_library_applies_the_limits_too(tmp_path):
    from toolkit.text.sources import ReadLimits, SourceDocument, SourceError, read_documents

    pdfs.write_glyph_bomb(tmp_path / "a.pdf", glyphs=20_000)
    pdfs.write_manual(tmp_path / "b.pdf")
    first, second = read_documents([tmp_path], limits=ReadLimits(pdf_max_glyphs=10_000))
    assert isinstance(first, SourceError) and "draws more than 10,000 glyphs on page 1" in first.reason
    assert isinstance(second, SourceDocument) and "Refunds are issued" in second.text
    assert isinstance(next(read_documents([tmp_path / "a.pdf"])), SourceDocument)  # under the default limit


@pytest.mark.parametrize(
    ("option", "value"),
    [("--pdf-timeout", "0"), ("--pdf-memory", "10MB"), ("--pdf-max-pages", "0"), ("--pdf-max-glyphs", "-1")],
)
def test_a_limit_that_cannot_work_is_a_usage_error(tmp_path, option, value):
    (tmp_path / "a.md").write_text("# A\n\nText.\n")
    result = toolkit("chunk", str(tmp_path), option, value)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and f"Invalid value for '{option}'" in result.stderr
