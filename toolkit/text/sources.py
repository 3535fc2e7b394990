"""Reading files and directories into documents to chunk, one result per file: a ``SourceDocument`` or a
``SourceError`` saying in a sentence why the file was skipped (binary, not UTF-8, empty, too long a line; for a
PDF: encrypted, image-only, damaged, or the ``pdf`` extra missing). Nothing here raises for one bad file; the
caller decides what a skipped file means. PDFs are read and cleaned by ``toolkit.text.pdf``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from toolkit.validation import text_problem

FORMATS = {
    ".md": "markdown", ".markdown": "markdown", ".mdx": "markdown",
    ".txt": "text", ".text": "text", ".rst": "text",
    ".html": "html", ".htm": "html",
    ".pdf": "pdf",
    ".py": "code", ".js": "code", ".ts": "code", ".go": "code", ".rs": "code", ".java": "code",
    ".c": "code", ".h": "code", ".cpp": "code", ".rb": "code", ".php": "code", ".sh": "code",
}  # fmt: skip
# A "line" longer than this is minified or generated data, not prose; chunking it would be meaningless.
MAX_LINE_CHARS = 1_000_000


@dataclass(frozen=True)
class SourceDocument:
    """A readable file: ``text`` is what is stored and chunked (chunk offsets refer to it). ``pages``, for a PDF,
    is where each page starts in ``text`` (``toolkit.text.pdf.pages_of_span`` maps a chunk's span to its pages)."""

    doc_id: str
    source: str
    title: str
    text: str
    format: str
    pages: tuple[int, ...] | None = None


@dataclass(frozen=True)
class SourceError:
    """A file that was skipped, and why (a sentence with what to do)."""

    doc_id: str
    source: str
    reason: str

    def __str__(self) -> str:
        return f"{self.source}: {self.reason}"


def read_documents(
    paths: Iterable[str | os.PathLike],
    *,
    clean_pdf_text: bool = False,
    max_line_chars: int = MAX_LINE_CHARS,
    clean_pdf: bool = True,
) -> Iterator[SourceDocument | SourceError]:
    """Each file under ``paths`` (directories walked in name order, hidden entries skipped, only the
    extensions in ``FORMATS``; a file named directly is read whatever its extension). ``doc_id`` is the
    path relative to the directory argument, or the path as given for a file argument. ``clean_pdf_text``
    cleans PDF-extracted ``.txt`` files; ``clean_pdf`` (on by default) cleans PDFs as they are read."""
    for argument in paths:
        root = Path(argument)
        if root.is_dir():
            for file in _walk(root):
                yield read_document(file, file.relative_to(root).as_posix(), clean_pdf_text, max_line_chars, clean_pdf)
        elif root.exists():
            yield read_document(root, root.as_posix(), clean_pdf_text, max_line_chars, clean_pdf)
        else:
            yield SourceError(str(argument), str(argument), "does not exist; check the path (directories are walked).")


def _walk(root: Path) -> list[Path]:
    """Text files under ``root`` in order of their relative path; hidden files and directories skipped."""
    found = []
    for directory, subdirectories, files in os.walk(root):
        subdirectories[:] = [d for d in subdirectories if not d.startswith(".")]
        found.extend(
            Path(directory) / name
            for name in files
            if not name.startswith(".") and Path(name).suffix.lower() in FORMATS
        )
    return sorted(found, key=lambda path: path.relative_to(root).as_posix())


def read_document(
    path: Path,
    doc_id: str,
    clean_pdf_text: bool = False,
    max_line_chars: int = MAX_LINE_CHARS,
    clean_pdf: bool = True,
) -> SourceDocument | SourceError:
    """One file as a document, or the reason it cannot be one."""
    source = str(path)

    def error(reason: str) -> SourceError:
        return SourceError(doc_id, source, reason)

    # A name in another encoding reaches Python as lone surrogates, which no UTF-8 database column can hold.
    bad_name = text_problem(source) or text_problem(doc_id)
    if bad_name:
        return error(f"has a path that {bad_name}; rename it in UTF-8 (e.g. convmv -f latin1 -t utf8 --notest).")

    if path.suffix.lower() == ".pdf":
        return _read_pdf(path, doc_id, clean_pdf)
    try:
        data = path.read_bytes()
    except OSError as exc:
        return error(f"cannot be read ({exc.strerror or exc}); check that it exists and is readable.")
    if not data.strip():
        return error("is empty (or only whitespace); there is nothing to chunk.")
    if b"\x00" in data:
        at = data.index(b"\x00")
        return error(
            f"contains NUL bytes (first at byte {at}), so it is binary, not text; convert it to text "
            "first (pdftotext for PDFs) or leave it out."
        )
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        return error(
            f"is not valid UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start}); re-encode it, "
            "e.g. iconv -f latin1 -t utf-8."
        )
    longest = max(map(len, text.splitlines()), default=0)
    if longest > max_line_chars:
        return error(
            f"has a line of {longest:,} characters (the limit is {max_line_chars:,}); that is minified or "
            "generated data rather than prose; break it into lines or leave the file out."
        )
    file_format = FORMATS.get(path.suffix.lower(), "text")
    if clean_pdf_text and file_format == "text":
        from toolkit.text.cleaning import clean_pdf_text as clean

        text = clean(text)
    return SourceDocument(doc_id, source, _title(text, file_format, path), text, file_format)


def _read_pdf(path: Path, doc_id: str, clean: bool) -> SourceDocument | SourceError:
    from toolkit.text.pdf import INSTALL_HINT, PdfError, read_pdf  # pdfminer itself is imported when a PDF is read

    try:
        pdf = read_pdf(path, clean=clean)
    except ImportError:
        return SourceError(
            doc_id,
            str(path),
            f"is a PDF, and reading PDFs needs the pdf extra, which is not installed; install it with {INSTALL_HINT}.",
        )
    except PdfError as exc:
        return SourceError(doc_id, str(path), str(exc))
    return SourceDocument(doc_id, str(path), pdf.title or path.stem, pdf.text, "pdf", pdf.pages)


_ATX_HEADING = re.compile(r"^ {0,3}#{1,6}[ \t]+(.+?)[ \t#]*$", re.M)


def _title(text: str, file_format: str, path: Path) -> str:
    if file_format == "markdown":
        match = _ATX_HEADING.search(text)
        if match:
            return match.group(1).strip()
    elif file_format == "html":
        from selectolax.lexbor import LexborHTMLParser

        tree = LexborHTMLParser(text)
        node = tree.css_first("title") or tree.css_first("h1")
        if node is not None and node.text(strip=True):
            return " ".join(node.text(strip=True).split())
        return path.stem
    elif file_format == "code":
        return path.name
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return first[:200] or path.stem
