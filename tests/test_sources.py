"""Reading files: every unreadable file gets a clear per-file reason; readable ones get doc ids."""

from __future__ import annotations

from toolkit.text.sources import SourceDocument, SourceError, read_documents


def only(results):
    (result,) = list(results)
    return result


def test_binary_file(tmp_path):
    path = tmp_path / "logo.png"
    path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    result = only(read_documents([path]))
    assert isinstance(result, SourceError)
    assert "contains NUL bytes" in result.reason and "binary" in result.reason


def test_nul_bytes_in_text(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_bytes(b"plain text\x00with a NUL")
    assert "NUL bytes (first at byte 10)" in only(read_documents([path])).reason


def test_invalid_utf8(tmp_path):
    path = tmp_path / "latin1.md"
    path.write_bytes("caf\u00e9 au lait".encode("latin-1"))
    result = only(read_documents([path]))
    assert isinstance(result, SourceError)
    assert "not valid UTF-8 (byte 0xe9 at offset 3)" in result.reason and "iconv" in result.reason


def test_empty_and_blank_files(tmp_path):
    (tmp_path / "empty.md").write_bytes(b"")
    (tmp_path / "blank.md").write_bytes(b"  \n\n\t\n")
    results = list(read_documents([tmp_path]))
    assert [r.doc_id for r in results] == ["blank.md", "empty.md"]
    assert all(isinstance(r, SourceError) and "is empty" in r.reason for r in results)


def test_fifty_megabyte_single_line(tmp_path):
    path = tmp_path / "minified.txt"
    path.write_bytes(b"a" * (50 * 1024 * 1024))
    result = only(read_documents([path]))
    assert isinstance(result, SourceError)
    assert "has a line of 52,428,800 characters" in result.reason and "break it into lines" in result.reason


def test_missing_path(tmp_path):
    result = only(read_documents([tmp_path / "nope.md"]))
    assert isinstance(result, SourceError) and "does not exist" in result.reason
    assert str(result).startswith(str(tmp_path / "nope.md"))


def test_directory_walk_doc_ids_titles_and_formats(tmp_path):
    (tmp_path / "guide").mkdir()
    (tmp_path / "guide" / "returns.md").write_text("Intro\n\n# Returns policy\n\nText.", encoding="utf-8")
    (tmp_path / "faq.html").write_text("<html><head><title>FAQ page</title></head><body>x</body></html>")
    (tmp_path / "notes.txt").write_text("\ufeffFirst line is the title\nmore", encoding="utf-8")
    (tmp_path / "image.bin").write_bytes(b"\x00")  # not a text extension: not walked
    (tmp_path / ".hidden").mkdir()
    (tmp_path / ".hidden" / "x.md").write_text("# hidden")
    results = list(read_documents([tmp_path]))
    assert all(isinstance(r, SourceDocument) for r in results)
    assert [(r.doc_id, r.format, r.title) for r in results] == [
        ("faq.html", "html", "FAQ page"),
        ("guide/returns.md", "markdown", "Returns policy"),
        ("notes.txt", "text", "First line is the title"),
    ]
    assert results[2].text.startswith("First line")  # the byte-order mark is not part of the text


def test_pdf_text_cleaning_is_optional(tmp_path):
    path = tmp_path / "manual.txt"
    path.write_text("\f".join(f"ACME manual\nbody of page {w}\nPage {n}" for n, w in enumerate("abcd")))
    assert "ACME manual" in only(read_documents([path])).text
    assert "ACME manual" not in only(read_documents([path], clean_pdf_text=True)).text
