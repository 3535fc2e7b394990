"""PDFs for the tests, written with fpdf2 (a real PDF writer) from the text below: no binary fixtures.

``write_manual`` lays out four pages the way manuals are: a running header and a "Page N of 4" footer on every
page, a heading, paragraphs with words hyphenated at line wraps, a list, a page set in two columns (drawn line by
line across both columns, so the file's own order interleaves them), a table with a wrapped cell, and a paragraph
that runs on from page 3 to page 4 inside a hyphenated word.
"""

from __future__ import annotations

from pathlib import Path

HEADER = "ACME Widget Manual - Release 3"
# (page, text) of sentences the tests look for; each occurs once and belongs to one page.
PAGE_1 = [
    "Refunds are issued within fourteen days of delivery, to the original payment method.",
    "Customised orders are not refundable.",
    "Damaged parcels are replaced free of charge when the courier confirms the damage within two days.",
]
LEFT_COLUMN = (
    "Installation starts with the wall bracket. Mark the four holes with the template, drill them with a six "
    "millimetre bit and push in the plugs. Screw the bracket to the wall, hang the widget on its hooks and tighten "
    "the locking screw until the widget no longer moves."
)
RIGHT_COLUMN = (
    "Maintenance takes a few minutes a month. Unplug the widget, wipe the housing with a soft dry cloth and "
    "vacuum the air vents. Never use solvents or spray cleaners on the display, because they dissolve its "
    "protective coating and void the warranty."
)
TABLE = [
    ("Plan", "Price", "Seats"),
    ("Basic", "$10 a month", "1"),
    ("Pro", "$20 a month", "5"),
    ("Enterprise", "Contact sales for a quote tailored to your team", "unlimited"),
]
RUN_ON = "The warranty covers parts and labour for two years from the date of purchase."
PAGE_4 = "Contact support at help@acme.example for anything this manual does not answer."


def _manual_class():
    from fpdf import FPDF

    class Manual(FPDF):
        def header(self):
            self.set_font("Helvetica", "B", 9)
            self.cell(0, 8, HEADER, align="C")
            self.ln(14)

        def footer(self):
            self.set_y(-15)
            self.set_font("Helvetica", size=9)
            self.cell(0, 8, f"Page {self.page_no()} of {{nb}}", align="C")

    return Manual


def _lines(pdf, text: str, width: float) -> list[str]:
    """``text`` wrapped to ``width`` millimetres as fpdf2 would wrap it."""
    return pdf.multi_cell(width, 6, text, dry_run=True, output="LINES")


def _write_lines(pdf, lines: list[str]) -> None:
    for line in lines:
        pdf.cell(0, 6, line)
        pdf.ln(6)


def write_manual(path: Path) -> Path:
    pdf = _manual_class()()
    pdf.set_auto_page_break(False)
    pdf.set_title("ACME Widget Manual")

    # Page 1: a heading, paragraphs wrapped by hand (two words hyphenated at the wrap), a list.
    pdf.add_page()
    pdf.set_font("Helvetica", "B", 16)
    pdf.cell(0, 10, "Returns and refunds")
    pdf.ln(14)
    pdf.set_font("Helvetica", size=11)
    _write_lines(
        pdf,
        [
            "Refunds are issued within fourteen days of deliv-",
            "ery, to the original payment method. Customised",
            "orders are not refundable.",
        ],
    )
    pdf.ln(6)
    _write_lines(
        pdf,
        [
            "Damaged parcels are replaced free of charge when the courier con-",
            "firms the damage within two days.",
        ],
    )
    pdf.ln(6)
    _write_lines(pdf, ["- Keep the original packaging.", "- Photograph the damage before you unpack."])

    # Page 2: two columns, drawn line by line across both (left line 1, right line 1, left line 2, ...).
    pdf.add_page()
    pdf.set_font("Helvetica", size=11)
    left, right = _lines(pdf, LEFT_COLUMN, 85), _lines(pdf, RIGHT_COLUMN, 85)
    top = pdf.get_y() + 4
    for i in range(max(len(left), len(right))):
        if i < len(left):
            pdf.text(10, top + 6 * i, left[i])
        if i < len(right):
            pdf.text(105, top + 6 * i, right[i])

    # Page 3: a table (one cell wraps onto a second line), then a paragraph that runs on to page 4.
    pdf.add_page()
    pdf.set_font("Helvetica", size=11)
    with pdf.table(col_widths=(40, 60, 40), text_align="LEFT") as table:
        for cells in TABLE:
            row = table.row()
            for cell in cells:
                row.cell(cell)
    pdf.set_y(255)
    _write_lines(pdf, ["The warranty covers parts and la-"])
    pdf.add_page()
    pdf.set_font("Helvetica", size=11)
    _write_lines(pdf, ["bour for two years from the date of purchase."])
    pdf.ln(6)
    _write_lines(pdf, [PAGE_4])
    pdf.output(str(path))
    return path


def write_encrypted(path: Path) -> Path:
    """A one-page PDF that needs the user password "secret" to open."""
    pdf = _manual_class()()
    pdf.set_encryption(owner_password="owner", user_password="secret")
    pdf.add_page()
    pdf.set_font("Helvetica", size=11)
    pdf.cell(0, 6, "Confidential pricing for resellers.")
    pdf.output(str(path))
    return path


def write_image_only(path: Path) -> Path:
    """Two pages that are pictures only (as a scanner makes them): no text layer."""
    from fpdf import FPDF
    from PIL import Image, ImageDraw

    pdf = FPDF()
    for n in range(2):
        image = Image.new("L", (400, 560), 255)
        ImageDraw.Draw(image).rectangle((40, 40 + 60 * n, 360, 80 + 60 * n), fill=0)
        pdf.add_page()
        pdf.image(image, x=10, y=10, w=190)
    pdf.output(str(path))
    return path


def write_damaged(path: Path, source: Path) -> Path:
    """``source`` with everything after its first kilobyte replaced by junk: a header and no body."""
    data = source.read_bytes()
    path.write_bytes(data[:1024] + b"\x00garbage" * 200)
    return path


# -- hostile PDFs, written byte by byte (no PDF writer would make them) ---------------------------------------


def raw_pdf(objects: dict[int, bytes], root: int = 1) -> bytes:
    """A PDF of the numbered ``objects`` (their bodies, between ``N 0 obj`` and ``endobj``), with a correct
    cross-reference table, so a reader takes the file's structure as it is written."""
    out = bytearray(b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n")
    offsets = {}
    for number in sorted(objects):
        offsets[number] = len(out)
        out += b"%d 0 obj\n" % number + objects[number] + b"\nendobj\n"
    size = max(objects) + 1
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % size
    for number in range(1, size):
        out += b"%010d 00000 n \n" % offsets[number] if number in offsets else b"0000000000 65535 f \n"
    out += b"trailer\n<< /Size %d /Root %d 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (size, root, xref)
    return bytes(out)


def _stream(data: bytes, filters: str = "") -> bytes:
    return b"<< /Length %d %s>>\nstream\n" % (len(data), filters.encode()) + data + b"\nendstream"


FONT = b"<< /Font << /F1 << /Type /Font /Subtype /Type1 /BaseFont /Helvetica >> >> >>"


def write_reference_loop(path: Path) -> Path:
    """The catalog's page tree is object 7, which is a reference to object 8, which is a reference to object 7:
    resolving it never ends (pdfminer loops at one core)."""
    path.write_bytes(
        raw_pdf(
            {
                1: b"<< /Type /Catalog /Pages 7 0 R >>",
                2: b"<< /Producer (loop) >>",
                7: b"8 0 R",
                8: b"7 0 R",
            }
        )
    )
    return path


def write_flate_bomb(path: Path, decoded_bytes: int = 2_000_000_000) -> Path:
    """One page whose content stream is compressed twice (``/Filter [/FlateDecode /FlateDecode]``): a few
    kilobytes that decode to ``decoded_bytes`` of spaces."""
    import zlib

    # Deflate each megabyte with a full flush: every segment then compresses alone to the same bytes, so the inner
    # stream is one segment repeated (no need to compress gigabytes here), and its checksum is summed block by block.
    block = b" " * (1 << 20)
    deflate = zlib.compressobj(9, zlib.DEFLATED, -15)
    deflate.compress(block)
    deflate.flush(zlib.Z_FULL_FLUSH)
    segment = deflate.compress(block) + deflate.flush(zlib.Z_FULL_FLUSH)
    count = decoded_bytes // len(block)
    checksum = 1
    for _ in range(count):
        checksum = zlib.adler32(block, checksum)
    inner = b"\x78\xda" + segment * count + deflate.flush() + checksum.to_bytes(4, "big")
    assert zlib.decompressobj().decompress(inner, 3 << 20)[: len(block)] == block
    twice = zlib.compress(inner, 9)
    path.write_bytes(
        raw_pdf(
            {
                1: b"<< /Type /Catalog /Pages 2 0 R >>",
                2: b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
                3: b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources %s /Contents 4 0 R >>" % FONT,
                4: _stream(twice, "/Filter [/FlateDecode /FlateDecode] "),
            }
        )
    )
    return path


def write_glyph_bomb(path: Path, glyphs: int = 4_000_000) -> Path:
    """One page that draws ``glyphs`` glyphs (a line of text shown over and over), compressed to a few
    kilobytes."""
    import zlib

    line = b"(" + b"A" * 1000 + b") Tj\n"
    content = b"BT /F1 1 Tf 10 10 Td\n" + line * (glyphs // 1000) + b"ET\n"
    path.write_bytes(
        raw_pdf(
            {
                1: b"<< /Type /Catalog /Pages 2 0 R >>",
                2: b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
                3: b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources %s /Contents 4 0 R >>" % FONT,
                4: _stream(zlib.compress(content, 9), "/Filter /FlateDecode "),
            }
        )
    )
    return path


def write_many_pages(path: Path, pages: int = 100_000) -> Path:
    """``pages`` pages of one line each (all drawing the same content stream)."""
    first = 5
    kids = b" ".join(b"%d 0 R" % (first + i) for i in range(pages))
    objects = {
        1: b"<< /Type /Catalog /Pages 2 0 R >>",
        2: b"<< /Type /Pages /Kids [" + kids + b"] /Count %d >>" % pages,
        3: _stream(b"BT /F1 12 Tf 72 720 Td (One line on this page.) Tj ET"),
        4: FONT,
    }
    for i in range(pages):
        objects[first + i] = b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources 4 0 R /Contents 3 0 R >>"
    path.write_bytes(raw_pdf(objects))
    return path
