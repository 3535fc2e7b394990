"""Reading a PDF into the text that is stored and chunked, with a page map (where each page starts in that text).

pdfminer.six (the ``pdf`` extra) finds the text lines and where they sit on each page; this module decides the
reading order and cleans: lines side by side are read as columns (one column after the other) when they look
like running text, as table rows (cells joined with `` | ``, one row a line) otherwise; running headers,
footers and page numbers are dropped (toolkit.text.cleaning's rules, applied to the lines at each page's
top and bottom); a paragraph's lines are re-flowed into one, hyphenated wraps joined, also across a page break.
"""

from __future__ import annotations

import itertools
import logging
import statistics
from dataclasses import dataclass
from pathlib import Path

from toolkit.text.cleaning import (
    EDGE_LINES,
    is_page_number,
    join_wrapped,
    line_shape,
    running_shapes,
)

# pdfminer logs a warning for every benign irregularity (a missing CropBox, an odd font); a reader of
# toolkit's output wants one sentence per file that could not be read, not those.
logging.getLogger("pdfminer").setLevel(logging.ERROR)

INSTALL_HINT = "pip install 'toolkit[pdf]'"
# A line at a page's edge is a header or footer candidate only within this share of the page height.
_EDGE_BAND = 0.10
_LIGATURES = str.maketrans({"ﬀ": "ff", "ﬁ": "fi", "ﬂ": "fl", "ﬃ": "ffi", "ﬄ": "ffl", "ﬅ": "st", "ﬆ": "st"})
_SENTENCE_END = (".", "!", "?", ":", ";")


class PdfError(Exception):
    """A PDF that cannot be read; ``str(error)`` says why and what to do, as a sentence after the file name."""


@dataclass(frozen=True)
class PdfText:
    """A PDF's text, its page map and its title (from the document's metadata, if it has one)."""

    text: str
    pages: tuple[int, ...]  # pages[i] is where page i + 1 starts in ``text`` (a page with no text: where the next does)
    title: str | None


@dataclass
class _Line:
    """One text line as pdfminer found it; coordinates in points, ``top`` and ``bottom`` measured down from
    the page's top edge."""

    text: str
    x0: float
    x1: float
    top: float
    bottom: float

    @property
    def height(self) -> float:
        return max(self.bottom - self.top, 0.1)


@dataclass
class _Page:
    lines: list[_Line]
    height: float
    images: int


@dataclass
class _Block:
    """A paragraph (``lines``) or a table (``rows`` of cells)."""

    lines: list[str] | None = None
    rows: list[list[str]] | None = None

    def text(self, clean: bool) -> str:
        if self.rows is not None:
            return "\n".join(" | ".join(cells) for cells in self.rows)
        if not clean:
            return "\n".join(self.lines)
        text = ""
        for line in self.lines:
            text = join_wrapped(text, line)
        return text


def pages_of_span(page_starts, start: int, end: int) -> list[int] | None:
    """The page numbers (1-based) that the characters ``start:end`` of a text come from, given where each page
    starts in it (``PdfText.pages``, stored in ``documents.metadata['pages']``); None for a text without pages."""
    from bisect import bisect_right

    if not page_starts:
        return None
    first = max(bisect_right(page_starts, start) - 1, 0)
    last = max(bisect_right(page_starts, max(end - 1, start)) - 1, first)
    return list(range(first + 1, last + 2))


def read_pdf(
    path: str | Path, *, clean: bool = True, max_pages: int | None = None, max_glyphs: int | None = None
) -> PdfText:
    """The text of the PDF at ``path``; raises ``PdfError`` for an encrypted, image-only or unreadable file, or one
    of more than ``max_pages`` pages or a page of more than ``max_glyphs`` glyphs (None: no limit), ``ImportError``
    when the ``pdf`` extra is not installed. ``clean=False`` keeps every line as extracted (in reading order, pages
    separated by form feeds): to see what cleaning removed. This reads in the calling process, with no bound on
    time or memory: files from elsewhere are read through ``toolkit.text.pdf_process.PdfReader``."""
    pages, title = _extract(Path(path), max_pages, max_glyphs)
    if not any(page.lines for page in pages):
        if any(page.images for page in pages):
            raise PdfError(
                f"has no text layer ({_pages(len(pages))}: a scan?); run OCR first "
                "(for example ocrmypdf --sidecar out.txt in.pdf out.pdf) and ingest the text, or leave it out."
            )
        raise PdfError("contains no text to extract (blank pages or vector drawings only); leave it out.")
    removed = _running_lines(pages) if clean else set()
    kept = [[line for line in page.lines if id(line) not in removed] for page in pages]
    usual = _usual_gap(kept)
    blocks = [_page_blocks(lines, usual) for lines in kept]
    text, starts = _assemble(blocks, clean)
    if not text.strip():
        raise PdfError("has only page headers, footers and numbers as text; there is nothing to chunk.")
    first_line = next((line for line in text.splitlines() if line.strip()), "")
    return PdfText(text, tuple(starts), title or first_line[:200] or None)


def _pages(count: int) -> str:
    return "its only page is an image" if count == 1 else f"all its {count} pages are images"


class _TooManyGlyphs(Exception):
    pass


class _ReferenceLoop(Exception):
    pass


def _guard_reference_loops() -> None:
    """Makes pdfminer's ``PDFObjRef.resolve`` follow a chain of references to its end itself, refusing one that
    comes back to an object it passed (``7 0 obj 8 0 R`` / ``8 0 obj 7 0 R``): pdfminer's own ``resolve1`` follows
    such a chain forever at one core. Done once per process; a chain without a loop resolves as before."""
    from pdfminer.pdftypes import PDFObjRef

    if getattr(PDFObjRef.resolve, "_guards_loops", False):
        return
    original = PDFObjRef.resolve

    def resolve(self, default=None):
        seen = {self.objid}
        value = original(self, default)
        while isinstance(value, PDFObjRef):
            if value.objid in seen:
                raise _ReferenceLoop(self.objid)
            seen.add(value.objid)
            value = original(value, default)
        return value

    resolve._guards_loops = True
    PDFObjRef.resolve = resolve


def _aggregator(manager, laparams, max_glyphs: int | None):
    """pdfminer's page aggregator, counting the glyphs each page draws and stopping past ``max_glyphs``: a page
    that draws millions (a glyph bomb) is refused before its layout is analysed."""
    from pdfminer.converter import PDFPageAggregator

    class Counting(PDFPageAggregator):
        glyphs = 0

        def begin_page(self, page, ctm) -> None:
            self.glyphs = 0
            super().begin_page(page, ctm)

        def render_char(self, *args, **kwargs):
            self.glyphs += 1
            if max_glyphs is not None and self.glyphs > max_glyphs:
                raise _TooManyGlyphs
            return super().render_char(*args, **kwargs)

    return Counting(manager, laparams=laparams)


def _extract(path: Path, max_pages: int | None = None, max_glyphs: int | None = None) -> tuple[list[_Page], str | None]:
    """Every page's text lines and image count, and the metadata title; errors become one ``PdfError``."""
    from pdfminer.layout import LAParams
    from pdfminer.pdfdocument import PDFDocument, PDFEncryptionError, PDFPasswordIncorrect
    from pdfminer.pdfinterp import PDFPageInterpreter, PDFResourceManager
    from pdfminer.pdfpage import PDFPage
    from pdfminer.pdfparser import PDFParser

    _guard_reference_loops()
    try:
        with open(path, "rb") as file:
            head = file.read(1024)
            if b"%PDF-" not in head:
                raise PdfError(
                    "is not a PDF (it does not start with %PDF-); check the file, or rename it if it is another format."
                )
            file.seek(0)
            document = PDFDocument(PDFParser(file), password="")
            title = _title(document)
            if max_pages is not None:  # count first (cheap: no page is interpreted), refuse before reading any
                counted = sum(1 for _ in itertools.islice(PDFPage.create_pages(document), max_pages + 1))
                if counted > max_pages:
                    raise PdfError(
                        f"has more than {max_pages:,} pages (the limit is --pdf-max-pages); split it, or raise "
                        "--pdf-max-pages if it is a real document."
                    )
            manager = PDFResourceManager(caching=True)
            device = _aggregator(manager, LAParams(all_texts=True, boxes_flow=None), max_glyphs)
            interpreter = PDFPageInterpreter(manager, device)
            pages = []
            for page in PDFPage.create_pages(document):
                try:
                    interpreter.process_page(page)
                except _TooManyGlyphs:
                    raise PdfError(
                        f"draws more than {max_glyphs:,} glyphs on page {len(pages) + 1} (the limit is "
                        "--pdf-max-glyphs; a dense page holds about 5,000); a PDF built to exhaust a reader (a glyph "
                        "bomb) looks like this: leave it out, or raise --pdf-max-glyphs if it is real."
                    ) from None
                pages.append(_page(device.get_result()))
    except (PdfError, MemoryError):
        raise
    except _ReferenceLoop as loop:
        raise PdfError(
            f"has a reference loop (object {loop.args[0]} refers back to itself through other references), which "
            "no reader can resolve; re-export it from its source, or leave it out."
        ) from None
    except PDFPasswordIncorrect:
        raise PdfError(
            "is encrypted and needs a password to open; decrypt it first (for example qpdf --decrypt --password=… "
            "in.pdf out.pdf) and ingest the decrypted copy."
        ) from None
    except PDFEncryptionError as error:
        raise PdfError(
            f"is encrypted in a way that cannot be read here ({error}); decrypt it first (for example qpdf --decrypt "
            "in.pdf out.pdf) and ingest the decrypted copy."
        ) from None
    except OSError as error:
        raise PdfError(f"cannot be read ({error.strerror or error}); check that it exists and is readable.") from None
    except Exception as error:  # pdfminer raises many kinds (syntax, EOF, key, type) for a damaged file
        reason = str(error) or type(error).__name__
        raise PdfError(
            f"is damaged or not a valid PDF ({reason[:200]}); re-export it from its source, or repair it "
            "(for example qpdf in.pdf repaired.pdf) and ingest the repaired copy."
        ) from None
    if not pages:
        raise PdfError("has no pages; re-export it from its source.")
    return pages, title


def _title(document) -> str | None:
    from pdfminer.utils import decode_text

    for info in document.info:
        value = info.get("Title")
        if isinstance(value, bytes):
            value = decode_text(value)
        if isinstance(value, str) and value.strip():
            return " ".join(value.split())[:200]
    return None


def _page(layout) -> _Page:
    from pdfminer.layout import LTImage, LTTextLineHorizontal

    height = layout.height
    lines: list[_Line] = []
    images = 0
    stack = list(layout)
    while stack:
        item = stack.pop()
        if isinstance(item, LTTextLineHorizontal):
            text = " ".join(item.get_text().translate(_LIGATURES).split())
            if text:
                lines.append(_Line(text, item.x0, item.x1, height - item.y1, height - item.y0))
        elif isinstance(item, LTImage):
            images += 1
        elif hasattr(item, "__iter__"):
            stack.extend(item)
    lines.sort(key=lambda line: (line.top, line.x0))
    return _Page(lines, height, images)


def _rows(lines: list[_Line]) -> list[list[_Line]]:
    """Lines on the same baseline (their vertical extents overlap by half the smaller height), left to right."""
    rows: list[list[_Line]] = []
    for line in lines:  # sorted by top
        if rows:
            row = rows[-1]
            top, bottom = min(x.top for x in row), max(x.bottom for x in row)
            smaller = min(line.height, min(x.height for x in row))
            if min(bottom, line.bottom) - max(top, line.top) >= 0.5 * smaller:
                row.append(line)
                continue
        rows.append([line])
    return [sorted(row, key=lambda line: line.x0) for row in rows]


def _running_lines(pages: list[_Page]) -> set[int]:
    """The lines (by id) that are running headers or footers, or page numbers, at the pages' edges: in the first
    or last rows of a page, within the top or bottom tenth of its height."""
    edges: list[list[list[_Line]]] = []
    for page in pages:
        rows = _rows(page.lines)
        band = _EDGE_BAND * page.height
        top = [row for row in rows[:EDGE_LINES] if max(x.bottom for x in row) <= band]
        bottom = [row for row in rows[-EDGE_LINES:] if min(x.top for x in row) >= page.height - band]
        edges.append(top + [row for row in bottom if not any(row is t for t in top)])
    running = running_shapes([{line_shape(line.text) for row in rows for line in row} for rows in edges])
    removed: set[int] = set()
    for rows in edges:
        for row in rows:
            kept = [line for line in row if line_shape(line.text) not in running]
            removed.update(id(line) for line in row if line not in kept)
            if len(kept) == 1 and is_page_number(kept[0].text):  # alone in its row: not a table cell
                removed.add(id(kept[0]))
    return removed


def _usual_gap(pages: list[list[_Line]]) -> float:
    """The median vertical gap between consecutive rows of text over the whole document: what "no paragraph
    break" looks like (a page of two lines cannot tell on its own)."""
    gaps = []
    for lines in pages:
        rows = _rows(lines)
        for above, below in itertools.pairwise(rows):
            gap = min(x.top for x in below) - max(x.bottom for x in above)
            if gap >= 0:
                gaps.append(gap)
    return statistics.median(gaps) if gaps else 0.0


def _page_blocks(lines: list[_Line], usual: float) -> list[_Block]:
    """A page's lines as paragraphs and tables, in reading order."""
    rows = _rows(lines)
    blocks: list[_Block] = []
    flow: list[_Line] = []
    i = 0
    while i < len(rows):
        if len(rows[i]) == 1:
            flow.append(rows[i][0])
            i += 1
            continue
        band, gutters = _band(rows, i)
        columns = _columns(band, gutters)
        if columns is not None:
            blocks += _paragraphs(flow, usual)
            flow = []
            for column in columns:
                blocks += _paragraphs(column, usual)
            i += len(band)
            continue
        band = _table_rows(band)
        blocks += _paragraphs(flow, usual)
        flow = []
        blocks.append(_table(band, gutters))
        i += len(band)
    blocks += _paragraphs(flow, usual)
    return blocks


def _band(rows: list[list[_Line]], start: int) -> tuple[list[list[_Line]], list[tuple[float, float]]]:
    """The run of rows from ``start`` whose lines all keep clear of the gaps between the first row's lines, and
    those gaps (gutters), narrowed to the strip that stays empty in every row of the run."""
    first = rows[start]
    gutters = [(a.x1, b.x0) for a, b in itertools.pairwise(first)]
    band = [first]
    for row in rows[start + 1 :]:
        narrowed = list(gutters)
        for line in row:
            centre = (line.x0 + line.x1) / 2
            for g, (left, right) in enumerate(narrowed):
                if centre < (left + right) / 2:
                    narrowed[g] = (max(left, line.x1), right)
                else:
                    narrowed[g] = (left, min(right, line.x0))
        if not all(left < right for left, right in narrowed):
            break  # a line across a gutter (a full-width line): the run ends before it
        gutters = narrowed
        band.append(row)
    return band, gutters


def _column_of(line: _Line, gutters: list[tuple[float, float]]) -> int:
    centre = (line.x0 + line.x1) / 2
    return sum(1 for left, right in gutters if centre > (left + right) / 2)


def _columns(band: list[list[_Line]], gutters: list[tuple[float, float]]) -> list[list[_Line]] | None:
    """The band's lines by column when it is running text set in columns, else None (a table).

    Columns of running text are about as wide as each other, their gutters narrow beside them, and they hold
    several lines; a table's cells are mostly narrower than the gaps between them."""
    if not 1 <= len(gutters) <= 2 or len(band) < 3:
        return None
    columns: list[list[_Line]] = [[] for _ in range(len(gutters) + 1)]
    for row in band:
        for line in row:
            columns[_column_of(line, gutters)].append(line)
    if any(len(column) < 2 for column in columns):
        return None
    widths = [max(x.x1 for x in column) - min(x.x0 for x in column) for column in columns]
    gaps = [right - left for left, right in gutters]
    if min(widths) < 0.6 * max(widths) or max(gaps) > 0.35 * min(widths):
        return None
    return columns


def _table_rows(band: list[list[_Line]]) -> list[list[_Line]]:
    """The band cut before the first gap between rows wider than a blank line: a table ends there (running
    text in columns is not cut this way: its paragraphs break at different heights in each column)."""
    for i in range(1, len(band)):
        gap = min(x.top for x in band[i]) - max(x.bottom for x in band[i - 1])
        if gap > 1.5 * statistics.median(x.height for x in band[i - 1]):
            return band[:i]
    return band


def _table(band: list[list[_Line]], gutters: list[tuple[float, float]]) -> _Block:
    """Table rows, cells left to right. Lines of the band that sit closer together than half the band's usual gap
    between rows belong to one table row: a cell whose text wrapped onto more lines (above or below the row's
    other cells, as a writer that centres cells vertically puts them)."""
    width = len(gutters) + 1
    gaps = [min(x.top for x in b) - max(x.bottom for x in a) for a, b in itertools.pairwise(band)]
    tight = 0.5 * statistics.median(gaps) if gaps else 0.0
    groups: list[list[list[_Line]]] = [[band[0]]]
    for gap, row in zip(gaps, band[1:], strict=True):
        if gap < tight:
            groups[-1].append(row)
        else:
            groups.append([row])
    rows = []
    for group in groups:
        cells = [""] * width
        for line in sorted((line for row in group for line in row), key=lambda line: (line.top, line.x0)):
            c = _column_of(line, gutters)
            cells[c] = join_wrapped(cells[c], line.text)
        rows.append(cells)
    return _Block(rows=rows)


def _paragraphs(lines: list[_Line], usual: float) -> list[_Block]:
    """Lines in reading order cut into paragraphs: at a gap clearly wider than the usual one between lines, and
    at a change of font size (a heading). A list item stays in its paragraph, on a line of its own."""
    if not lines:
        return []
    blocks = [_Block(lines=[lines[0].text])]
    for a, b in itertools.pairwise(lines):
        wide_gap = b.top - a.bottom > usual + 0.5 * min(a.height, b.height)
        size_change = abs(b.height - a.height) > 0.15 * max(a.height, b.height)
        if b.top < a.top or wide_gap or size_change:  # b.top < a.top: the next column starts
            blocks.append(_Block(lines=[b.text]))
        else:
            blocks[-1].lines.append(b.text)
    return blocks


def _assemble(pages: list[list[_Block]], clean: bool) -> tuple[str, list[int]]:
    """The pages' blocks as one text, paragraphs separated by a blank line, and where each page starts in it.

    With ``clean``, a paragraph that runs on over a page break (no sentence end before it, the next page starting
    in lower case) is joined across it; without, pages are separated by form feeds and lines kept as they are."""
    text = ""
    starts: list[int | None] = []
    last: _Block | None = None
    for number, blocks in enumerate(pages):
        if not clean and number:
            text += "\f"
        starts.append(None)
        for block in blocks:
            body = block.text(clean)
            if not body:
                continue
            runs_on = (
                clean
                and starts[-1] is None
                and last is not None
                and last.lines is not None
                and block.lines is not None
                and not text.endswith(_SENTENCE_END)
                and body[0].islower()
            )
            if runs_on:
                text = join_wrapped(text, body)
            elif text and not text.endswith("\f"):
                text += "\n\n" + body
            else:
                text += body
            if starts[-1] is None:
                starts[-1] = len(text) - len(body)  # where this page's first character landed
            last = block
    # A page without text starts where the next one does.
    following = len(text)
    for number in range(len(starts) - 1, -1, -1):
        if starts[number] is None:
            starts[number] = following
        following = starts[number]
    return text, starts
