"""Structure-aware packing shared by the Markdown and HTML strategies.

A parser turns the document into sections (a heading path and its blocks, with exact offsets); this module
applies the rules: a section that fits is one chunk; a longer one is packed block by block; a paragraph
or list over the budget is split at sentences and words but never inside a protected range (code, tables);
a code block is atomic; a table over the budget is split into row groups whose embed text repeats the
header rows; a section under ``merge`` tokens is merged into its neighbour.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from toolkit.chunking.document import Document, Span
from toolkit.chunking.split import split_range


@dataclass
class Block:
    """A top-level block of a section: ``kind`` is paragraph, code, table, list or other."""

    start: int
    end: int
    kind: str = "paragraph"
    # Tables: (start, end) of each row, header rows first; lists: (start, end) of each item.
    parts: list[tuple[int, int]] = field(default_factory=list)
    header_rows: int = 0


@dataclass
class Section:
    """A heading's own text (before its first subheading), with the heading path down to it."""

    path: tuple[str, ...]
    heading_start: int  # where the heading itself starts (== body start for the preamble)
    heading_end: int  # where the heading ends
    blocks: list[Block]


@dataclass
class _Unit:
    span: Span
    whole_section: bool
    heading_start: int
    path: tuple[str, ...]


def pack_sections(
    document: Document,
    sections: list[Section],
    size: int,
    overlap: int,
    merge: int,
    protected: list[tuple[int, int]],
) -> list[Span]:
    units: list[_Unit] = []
    for section in sections:
        units.extend(_section_units(document, section, size, overlap, protected))
    return _merge_small(document, units, size, merge)


def _section_units(document, section: Section, size, overlap, protected) -> list[_Unit]:
    path = section.path
    if not section.blocks:
        empty = Span(section.heading_end, section.heading_end, path)
        return [_Unit(empty, True, section.heading_start, path)]
    start, end = section.blocks[0].start, section.blocks[-1].end
    if document.fits(start, end, size, path):
        return [_Unit(Span(start, end, path), True, section.heading_start, path)]
    units = []
    group: list[Block] = []
    for block in section.blocks:
        if group and document.fits(group[0].start, block.end, size, path):
            group.append(block)
            continue
        if group:
            units.append(_Unit(Span(group[0].start, group[-1].end, path), False, group[0].start, path))
            group = []
        if document.fits(block.start, block.end, size, path):
            group = [block]
        else:
            spans = _split_block(document, block, path, size, overlap, protected)
            units.extend(_Unit(span, False, span.start, path) for span in spans)
    if group:
        units.append(_Unit(Span(group[0].start, group[-1].end, path), False, group[0].start, path))
    return units


def _split_block(document: Document, block: Block, path, size, overlap, protected) -> list[Span]:
    if block.kind == "code":
        return [Span(block.start, block.end, path, atomic=True)]
    if block.kind == "table" and block.parts:
        return _split_table(document, block, path, size)
    if block.kind == "list" and block.parts:
        spans: list[Span] = []
        group_start = None
        group_end = None
        for item_start, item_end in block.parts:
            if group_start is not None and document.fits(group_start, item_end, size, path):
                group_end = item_end
                continue
            if group_start is not None:
                spans.append(Span(group_start, group_end, path))
            if document.fits(item_start, item_end, size, path):
                group_start, group_end = item_start, item_end
            else:
                group_start = None
                spans.extend(split_range(document, Span(item_start, item_end, path), size, protected=protected))
        if group_start is not None:
            spans.append(Span(group_start, group_end, path))
        return spans
    return split_range(document, Span(block.start, block.end, path), size, overlap=overlap, protected=protected)


def _split_table(document: Document, block: Block, path, size) -> list[Span]:
    """Row groups; the first includes the header rows in its body, later ones repeat them as context."""
    text = document.text
    header = block.parts[: block.header_rows]
    rows = block.parts[block.header_rows :]
    header_text = "\n".join(text[a:b] for a, b in header)
    spans: list[Span] = []
    start, end, context, has_rows = block.start, (header[-1][1] if header else None), "", False
    for row_start, row_end in rows:
        if end is not None and document.fits(start, row_end, size, path, context):
            end, has_rows = row_end, True
            continue
        if end is not None and has_rows:
            spans.append(Span(start, end, path, context))
        start, end, context, has_rows = row_start, row_end, header_text, True
        if not document.fits(row_start, row_end, size, path, context):
            spans.append(Span(row_start, row_end, path, context, atomic=True))
            end = None
    if end is not None and (has_rows or not rows):
        spans.append(Span(start, end, path, context, atomic=not rows))
    return spans


def _common_prefix(a: tuple[str, ...], b: tuple[str, ...]) -> tuple[str, ...]:
    n = 0
    while n < len(a) and n < len(b) and a[n] == b[n]:
        n += 1
    return a[:n]


def _merged(first: _Unit, second: _Unit) -> _Unit:
    """One unit covering both. The path is what they share; a heading not in it stays in the body."""
    path = _common_prefix(first.path, second.path)
    start = first.span.start if path == first.path else first.heading_start
    span = Span(start, second.span.end, path)
    return _Unit(span, True, first.heading_start if start == first.heading_start else start, path)


def _merge_small(document: Document, units: list[_Unit], size: int, merge: int) -> list[Span]:
    """Whole sections under ``merge`` join the next section if the result fits, else the previous one."""

    def small(unit: _Unit) -> bool:
        span = unit.span
        return unit.whole_section and document.measure(span.start, span.end) < merge

    def fits(unit: _Unit) -> bool:
        return document.fits(unit.span.start, unit.span.end, size, unit.path)

    result: list[_Unit] = []
    i = 0
    while i < len(units):
        unit = units[i]
        while small(unit) and i + 1 < len(units) and units[i + 1].whole_section:
            candidate = _merged(unit, units[i + 1])
            if not fits(candidate):
                break
            unit = candidate
            i += 1
        if small(unit) and result and result[-1].whole_section:
            candidate = _merged(result[-1], unit)
            if fits(candidate):
                result[-1] = candidate
                i += 1
                continue
        result.append(unit)
        i += 1
    return [unit.span for unit in result if unit.span.end > unit.span.start]
