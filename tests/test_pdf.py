"""Reading PDFs (toolkit.text.pdf, toolkit.text.sources, toolkit chunk) on PDFs written by fpdf2 in the test:
the cleaned text,
the reading order of columns and tables, the page map, chunk spans and pages, and one sentence per bad file."""

from __future__ import annotations

import json
import subprocess
import sys

import pdfs
import pytest
from click.testing import CliRunner

from toolkit.cli import main
from toolkit.text.pdf import pages_of_span, read_pdf
from toolkit.text.sources import SourceDocument, SourceError, read_documents


@pytest.fixture(scope="module")
def manual(tmp_path_factory):
    return pdfs.write_manual(tmp_path_factory.mktemp("pdf") / "manual.pdf")


@pytest.fixture(scope="module")
def text(manual):
    return read_pdf(manual).text


def page_starts_by_content(text: str) -> list[int]:
    """Where pages 2-4 start, found from what the builder put first on each page (not from the reader's map)."""
    return [0, text.index("Installation starts"), text.index("Plan | Price"), text.index("bour for two years")]


def test_running_headers_footers_and_page_numbers_are_removed(text):
    assert pdfs.HEADER not in text
    assert "Page " not in text and " of 4" not in text
    assert text.startswith("Returns and refunds\n\n")


def test_hyphenated_wraps_are_joined_and_paragraphs_reflowed(text):
    for sentence in pdfs.PAGE_1:
        assert sentence in text  # "deliv-" + "ery" and "con-" + "firms", each paragraph on one line
    assert "deliv-" not in text and "con-\n" not in text
    assert "\n\n- Keep the original packaging.\n- Photograph the damage before you unpack.\n\n" in text


def test_two_columns_are_read_one_after_the_other(text):
    # The file draws them interleaved, line by line; each column comes out whole, left before right.
    assert pdfs.LEFT_COLUMN in text and pdfs.RIGHT_COLUMN in text
    assert text.index(pdfs.LEFT_COLUMN) + len(pdfs.LEFT_COLUMN) < text.index(pdfs.RIGHT_COLUMN)


def test_table_rows_stay_rows_and_a_wrapped_cell_stays_in_its_row(text):
    rows = [" | ".join(cells) for cells in pdfs.TABLE]
    assert "\n".join(rows) in text


def test_a_paragraph_runs_on_across_a_page_break(text):
    assert pdfs.RUN_ON in text  # "la-" at the foot of page 3, "bour" at the top of page 4
    assert pdfs.PAGE_4 in text


def test_the_page_map_matches_where_each_page_content_starts(manual, text):
    document = read_pdf(manual)
    assert document.pages == tuple(page_starts_by_content(text))
    assert document.title == "ACME Widget Manual"  # from the document's metadata


@pytest.mark.parametrize(
    ("starts", "span", "expected"),
    [
        ([0, 100, 250], (0, 10), [1]),
        ([0, 100, 250], (90, 110), [1, 2]),
        ([0, 100, 250], (100, 250), [2]),  # end is exclusive: 250 is page 3's first character
        ([0, 100, 250], (99, 251), [1, 2, 3]),
        ([0, 100, 250], (300, 300), [3]),  # an empty span: the page it sits on
        ([0, 100, 100, 250], (50, 150), [1, 2, 3]),  # page 2 has no text: crossed on the way to page 3
        ([0, 100, 100, 250], (100, 120), [3]),
        ([], (0, 10), None),
        (None, (0, 10), None),
    ],
)
def test_pages_of_span(starts, span, expected):
    assert pages_of_span(starts, *span) == expected


def test_toolkit_chunk_gives_exact_spans_and_their_pages(manual, text):
    result = CliRunner().invoke(main, ["chunk", str(manual), "--spec", "recursive:30:0", "--format", "jsonl"])
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in result.output.splitlines()]
    assert len(records) > 6
    starts = [*page_starts_by_content(text), len(text)]
    for record in records:
        assert text[record["start"] : record["end"]] == record["text"]
        expected = [p + 1 for p in range(4) if record["start"] < starts[p + 1] and record["end"] > starts[p]]
        assert record["pages"] == expected, record
    run_on = next(r for r in records if "labour" in r["text"])
    assert run_on["pages"] == [3, 4]
    assert {p for r in records for p in r["pages"]} == {1, 2, 3, 4}


def test_bad_pdfs_get_one_sentence_each_and_the_rest_is_read(tmp_path, manual):
    folder = tmp_path / "batch"
    folder.mkdir()
    (folder / "manual.pdf").write_bytes(manual.read_bytes())
    pdfs.write_encrypted(folder / "locked.pdf")
    pdfs.write_image_only(folder / "scan.pdf")
    pdfs.write_damaged(folder / "damaged.pdf", manual)
    (folder / "notes.md").write_text("# Notes\n\nPlain notes.\n")
    results = {r.doc_id: r for r in read_documents([folder])}
    assert isinstance(results["manual.pdf"], SourceDocument) and results["manual.pdf"].format == "pdf"
    assert isinstance(results["notes.md"], SourceDocument) and results["notes.md"].pages is None
    reasons = {doc_id: r.reason for doc_id, r in results.items() if isinstance(r, SourceError)}
    assert set(reasons) == {"locked.pdf", "scan.pdf", "damaged.pdf"}
    assert (
        reasons["locked.pdf"].startswith("is encrypted and needs a password")
        and "qpdf --decrypt" in reasons["locked.pdf"]
    )
    assert (
        reasons["scan.pdf"].startswith("has no text layer (all its 2 pages are images") and "OCR" in reasons["scan.pdf"]
    )
    assert reasons["damaged.pdf"].startswith("is damaged or not a valid PDF") and "repair" in reasons["damaged.pdf"]
    for reason in reasons.values():  # one sentence: a single full stop, at the end
        assert reason.endswith(".") and reason.count(". ") == 0, reason

    result = CliRunner().invoke(main, ["chunk", str(folder), "--spec", "recursive:60:0"])
    assert result.exit_code == 1
    assert "3 file(s) could not be read" in result.output
    documents = {json.loads(line)["doc_id"] for line in result.stdout.splitlines() if line.startswith("{")}
    assert documents == {"manual.pdf", "notes.md"}


def test_a_file_that_is_not_a_pdf(tmp_path):
    path = tmp_path / "report.pdf"
    path.write_text("just text, misnamed")
    (result,) = read_documents([path])
    assert isinstance(result, SourceError) and result.reason.startswith("is not a PDF (it does not start with %PDF-)")


def test_without_cleaning_the_lines_are_kept_as_extracted(manual):
    raw = read_pdf(manual, clean=False)
    assert raw.text.count(pdfs.HEADER) == 4 and "Page 2 of 4" in raw.text
    assert "deliv-\nery" in raw.text
    assert raw.text.count("\f") == 3 and all(raw.text[start - 1] == "\f" for start in raw.pages[1:])
    result = CliRunner().invoke(main, ["chunk", str(manual), "--no-pdf-cleaning", "--spec", "recursive:400:0"])
    assert result.exit_code == 0 and pdfs.HEADER in result.output


def test_a_missing_pdf_extra_is_one_clear_sentence(manual):
    # A separate interpreter in which pdfminer cannot be imported (a None entry in sys.modules makes every
    # import of it fail), as on an installation without the pdf extra.
    code = (
        f"import sys; sys.modules['pdfminer'] = None\nfrom toolkit.cli import main\nmain(['chunk', {str(manual)!r}])\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    assert "needs the pdf extra, which is not installed; install it with pip install 'toolkit[pdf]'." in result.stderr
    assert "Traceback" not in result.stderr
