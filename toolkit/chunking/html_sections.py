"""HTML's sections: headings h1-h6 and blocks with their exact offsets, from the standard library's tokenizer (the
parse the ``html`` strategy packs and every other strategy's heading outline reads; no chunker here, so both may
use it). See toolkit.chunking.html."""

from __future__ import annotations

import re
from html.parser import HTMLParser

from toolkit.chunking.structure import Block, Section

_HEADINGS = {"h1", "h2", "h3", "h4", "h5", "h6"}
_BLOCKS = {"p", "pre", "table", "ul", "ol", "blockquote", "dl", "figure", "hr", "address"} | _HEADINGS
_KINDS = {"pre": "code", "table": "table", "ul": "list", "ol": "list", "p": "paragraph"}
_CLOSES_P = _BLOCKS | {"div", "section", "article", "header", "footer", "nav", "aside", "main", "li"}
_SKIP = {"script", "style", "template", "noscript"}


class _Element:
    __slots__ = ("children", "end", "header_rows", "heading_text", "name", "rows", "start")

    def __init__(self, name: str, start: int):
        self.name = name
        self.start = start
        self.end = start
        self.children: list[_Element] = []
        self.heading_text: list[str] = []
        self.rows: list[tuple[int, int, bool]] = []
        self.header_rows = 0


class _Outline(HTMLParser):
    """Collects top-level blocks (with list items and table rows) and their exact source ranges."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.text = text
        self.line_starts = [0, *(m.end() for m in re.finditer(r"\n", text))]
        self.blocks: list[_Element] = []
        self.open: list[_Element] = []  # open block-level elements we track (blocks, li, tr)
        self.skip_depth = 0
        self.in_thead = False

    def position(self) -> int:
        line, column = self.getpos()
        return self.line_starts[line - 1] + column

    def tag_end(self, start: int) -> int:
        end = self.text.find(">", start)
        return len(self.text) if end < 0 else end + 1

    def close_until(self, names: set[str], at: int) -> None:
        while self.open and self.open[-1].name in names:
            self._finish(self.open.pop(), at)

    def _finish(self, element: _Element, end: int) -> None:
        element.end = end
        parent = next((e for e in reversed(self.open) if e.name in _BLOCKS), None)
        if element.name == "li":
            owner = next((e for e in reversed(self.open) if e.name in ("ul", "ol")), None)
            if owner is not None and owner is self._outermost():
                owner.rows.append((element.start, end, False))
            return
        if element.name == "tr":
            table = next((e for e in reversed(self.open) if e.name == "table"), None)
            if table is not None:
                table.rows.append((element.start, end, self.in_thead))
            return
        if parent is None:
            self.blocks.append(element)

    def _outermost(self):
        return next((e for e in self.open if e.name in _BLOCKS), None)

    def handle_starttag(self, tag, attrs):
        start = self.position()
        if tag in _SKIP:
            self.skip_depth += 1
            return
        if tag in _CLOSES_P:
            self.close_until({"p"}, start)
        if tag == "li":
            self.close_until({"li", "p"}, start)
        if tag == "tr":
            self.close_until({"tr"}, start)
        if tag == "thead":
            self.in_thead = True
        if tag in _BLOCKS or tag in ("li", "tr"):
            element = _Element(tag, start)
            if tag == "hr":
                element.end = self.tag_end(start)
                if not any(e.name in _BLOCKS for e in self.open):
                    self.blocks.append(element)
                return
            self.open.append(element)

    def handle_startendtag(self, tag, attrs):
        pass  # <br/>, <img/>: inline, part of the surrounding block

    def handle_endtag(self, tag):
        start = self.position()
        end = self.tag_end(start)
        if tag in _SKIP:
            self.skip_depth = max(0, self.skip_depth - 1)
            return
        if tag == "thead":
            self.in_thead = False
        if not any(e.name == tag for e in self.open):
            return
        while self.open:
            element = self.open.pop()
            self._finish(element, end if element.name == tag else start)
            if element.name == tag:
                break

    def handle_data(self, data):
        if self.skip_depth:
            return
        for element in self.open:
            if element.name in _HEADINGS:
                element.heading_text.append(data)

    def close(self):
        super().close()
        while self.open:
            self._finish(self.open.pop(), len(self.text))


def parse_sections(text: str) -> tuple[list[Section], list[tuple[int, int]]]:
    outline = _Outline(text)
    outline.feed(text)
    outline.close()
    sections = [Section((), 0, 0, [])]
    stack: list[tuple[int, str]] = []
    protected = []
    for element in sorted(outline.blocks, key=lambda e: e.start):
        if element.name in _HEADINGS:
            level = int(element.name[1])
            title = " ".join("".join(element.heading_text).split())
            while stack and stack[-1][0] >= level:
                stack.pop()
            stack.append((level, title))
            sections.append(Section(tuple(t for _, t in stack), element.start, element.end, []))
            continue
        kind = _KINDS.get(element.name, "other")
        block = Block(element.start, element.end, kind)
        if kind in ("code", "table"):
            protected.append((element.start, element.end))
        if kind == "table" and element.rows:
            rows = sorted(element.rows)
            header = [r for r in rows if r[2]] or rows[:1]
            block.parts = [(a, b) for a, b, _ in header] + [(a, b) for a, b, h in rows if (a, b, h) not in header]
            block.header_rows = len(header)
        elif kind == "list":
            block.parts = [(a, b) for a, b, _ in sorted(element.rows)]
        sections[-1].blocks.append(block)
    return [s for s in sections if s.blocks or s.path], protected
