"""Reading files and directories into documents to chunk, one result per file: a ``SourceDocument`` or a
``SourceError`` saying in a sentence why the file was skipped (not a regular file, too large, binary, not UTF-8,
empty, too long a line; for a PDF: encrypted, image-only, damaged, over a limit of ``ReadLimits``, or the ``pdf``
extra missing). Nothing here raises for one bad file; the caller decides what a skipped file means. PDFs are read
and cleaned by ``toolkit.text.pdf``, in a child process bounded in time and memory (``toolkit.text.pdf_process``).

Only regular files are read: a named pipe would block ``open()`` forever, ``/dev/zero`` never ends, and a symbolic
link may point at either. The type is checked with ``stat`` before anything is opened, and again on the open file
(opened non-blocking), so a file swapped for a pipe in between is refused too.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from toolkit import validation
from toolkit.errors import InputError
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
class ReadLimits:
    """What one file may cost to read. ``max_file_bytes`` applies to every file; the ``pdf_`` limits to each PDF,
    read in a child process: ``pdf_seconds`` of wall time, ``pdf_memory_bytes`` of address space for the whole
    reading process, ``pdf_max_pages`` pages, ``pdf_max_glyphs`` glyphs drawn on one page. A file over a limit is
    skipped with a sentence naming it; the command-line options are ``--max-file-size``, ``--pdf-timeout``,
    ``--pdf-memory``, ``--pdf-max-pages`` and ``--pdf-max-glyphs``."""

    max_file_bytes: int = 100_000_000
    pdf_seconds: float = 300.0
    pdf_memory_bytes: int = 1_000_000_000
    pdf_max_pages: int = 10_000
    pdf_max_glyphs: int = 100_000

    def __post_init__(self) -> None:
        object.__setattr__(self, "max_file_bytes", validation.FILE_BYTES.check(self.max_file_bytes))
        object.__setattr__(self, "pdf_seconds", validation.PDF_SECONDS.check(self.pdf_seconds))
        object.__setattr__(self, "pdf_memory_bytes", validation.PDF_MEMORY_BYTES.check(self.pdf_memory_bytes))
        object.__setattr__(self, "pdf_max_pages", validation.PDF_PAGES.check(self.pdf_max_pages))
        object.__setattr__(self, "pdf_max_glyphs", validation.PDF_GLYPHS.check(self.pdf_max_glyphs))


DEFAULT_LIMITS = ReadLimits()

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


class NotReadable(Exception):
    """Why a file cannot be read, as the end of a sentence after its name."""


def check_regular(path: str | os.PathLike, max_bytes: int | None) -> os.stat_result:
    """The file's status when it is a regular file (a symbolic link to one is fine) of at most ``max_bytes``;
    raises ``NotReadable`` otherwise. Nothing is opened."""
    try:
        status = os.stat(path)
    except OSError as exc:
        raise NotReadable(f"cannot be read ({exc.strerror or exc}); check that it exists and is readable.") from None
    if not stat.S_ISREG(status.st_mode):
        link = " is a symbolic link to" if os.path.islink(path) else " is"
        raise NotReadable(
            f"{link.strip()} {_kind(status.st_mode)}, not a regular file; only regular files are read (a pipe or a "
            "device can block or never end), so leave it out."
        )
    if max_bytes is not None and status.st_size > max_bytes:
        raise NotReadable(_too_large(status.st_size, max_bytes))
    return status


def _too_large(size: int | None, max_bytes: int) -> str:
    what = f"{size:,} bytes" if size is not None else "larger"
    return (
        f"is {what}, over the limit of {max_bytes:,} bytes (--max-file-size); split it, or raise the limit if "
        "it is a real document."
    )


def read_regular_file(path: str | os.PathLike, max_bytes: int) -> bytes:
    """The bytes of a regular file of at most ``max_bytes``; raises ``NotReadable`` with the reason otherwise
    (never blocks: a pipe is refused before it is opened, and the file is opened non-blocking and checked again)."""
    check_regular(path, max_bytes)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise NotReadable(f"cannot be read ({exc.strerror or exc}); check that it exists and is readable.") from None
    try:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            raise NotReadable(f"is {_kind(status.st_mode)}, not a regular file; only regular files are read.")
        chunks, total = [], 0
        while piece := os.read(fd, min(1 << 20, max_bytes + 1 - total)):
            chunks.append(piece)
            total += len(piece)
            if total > max_bytes:  # it grew while it was read: cut at the limit, not at the end of the disk
                raise NotReadable(_too_large(None, max_bytes))
        return b"".join(chunks)
    except OSError as exc:
        raise NotReadable(f"cannot be read ({exc.strerror or exc}); check that it is readable.") from None
    finally:
        os.close(fd)


def read_text_file(path: str | os.PathLike, what: str, max_bytes: int) -> str:
    """A UTF-8 text file given as an option (a query file): regular, at most ``max_bytes``; ``InputError`` with one
    sentence naming ``what`` otherwise."""
    try:
        data = read_regular_file(path, max_bytes)
    except NotReadable as exc:
        raise InputError(f"The {what} {str(path)!r} {str(exc).rstrip('.')}.") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise InputError(f"The {what} {str(path)!r} is not UTF-8 text; save it as UTF-8.") from None


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
    limits: ReadLimits | None = None,
) -> Iterator[SourceDocument | SourceError]:
    """Each file under ``paths`` (directories walked in name order, hidden entries skipped, only the
    extensions in ``FORMATS``; a file named directly is read whatever its extension). ``doc_id`` is the
    path relative to the directory argument, or the path as given for a file argument. ``clean_pdf_text``
    cleans PDF-extracted ``.txt`` files; ``clean_pdf`` (on by default) cleans PDFs as they are read.
    ``limits`` bounds what each file may cost (``DEFAULT_LIMITS`` when None)."""
    from toolkit.text.pdf_process import PdfReader

    limits = limits or DEFAULT_LIMITS
    with PdfReader(limits) as pdfs:  # the child process starts at the first PDF, and ends with the walk
        for argument in paths:
            root = Path(argument)
            if root.is_dir():
                for file in _walk(root):
                    doc_id = file.relative_to(root).as_posix()
                    yield read_document(file, doc_id, clean_pdf_text, max_line_chars, clean_pdf, limits, pdfs)
            elif root.exists() or root.is_symlink():
                yield read_document(root, root.as_posix(), clean_pdf_text, max_line_chars, clean_pdf, limits, pdfs)
            else:
                yield SourceError(
                    str(argument), str(argument), "does not exist; check the path (directories are walked)."
                )


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
    limits: ReadLimits | None = None,
    pdfs=None,
) -> SourceDocument | SourceError:
    """One file as a document, or the reason it cannot be one. ``pdfs`` (a ``PdfReader``) reads PDFs; without one,
    a reader is started for this file."""
    limits = limits or DEFAULT_LIMITS
    source = str(path)

    def error(reason: str) -> SourceError:
        return SourceError(doc_id, source, reason)

    # A name in another encoding reaches Python as lone surrogates, which no UTF-8 database column can hold.
    bad_name = text_problem(source) or text_problem(doc_id)
    if bad_name:
        return error(f"has a path that {bad_name}; rename it in UTF-8 (e.g. convmv -f latin1 -t utf8 --notest).")

    if path.suffix.lower() == ".pdf":
        try:
            check_regular(path, limits.max_file_bytes)
        except NotReadable as exc:
            return error(str(exc))
        if pdfs is None:
            from toolkit.text.pdf_process import PdfReader

            with PdfReader(limits) as reader:
                return _read_pdf(path, doc_id, clean_pdf, reader)
        return _read_pdf(path, doc_id, clean_pdf, pdfs)
    try:
        data = read_regular_file(path, limits.max_file_bytes)
    except NotReadable as exc:
        return error(str(exc))
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


def _read_pdf(path: Path, doc_id: str, clean: bool, reader) -> SourceDocument | SourceError:
    from toolkit.text.pdf import INSTALL_HINT, PdfError  # pdfminer itself is imported by the reading process

    try:
        pdf = reader.read(path, clean=clean)
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
