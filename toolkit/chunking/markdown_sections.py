"""Markdown's sections: headings, code blocks and tables found with markdown-it-py's block rules (the parse the
``markdown`` strategy packs and every other strategy's heading outline reads; no chunker here, so both may use it).

See toolkit.chunking.markdown for how lists, block quotes and front matter are read."""

from __future__ import annotations

import functools
import re
from itertools import accumulate, count
from operator import add

from toolkit.chunking.markdown_scan import blocks_from_tokens, scan
from toolkit.chunking.structure import Block, Section

# markdown-it normalizes \r\n and lone \r to \n, so its line numbers count those as line breaks too.
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_FRONT_MATTER = re.compile(r"---[ \t]*\r?\n(?:.*\r?\n)*?(?:---|\.\.\.)[ \t]*(?:\r?\n|$)")


@functools.lru_cache(maxsize=1)
def _parser():
    from markdown_it import MarkdownIt

    parser = MarkdownIt("commonmark").enable("table")
    parser.core.ruler.disable("inline")  # block structure is all we need; inline parsing triples the cost
    # Thematic breaks, link reference definitions and raw HTML blocks are read as paragraphs: that changes
    # nothing for chunking (none of them is protected) and saves a fifth of the parse; lists: see above.
    parser.block.ruler.disable(["hr", "reference", "html_block", "list"])
    return parser


def line_starts(text: str) -> list[int]:
    if "\r" in text:
        return [0, *(m.end() for m in _LINE_BREAK.finditer(text))]
    # Without a carriage return every line ends at a "\n": line k starts after the k lines before it and their k
    # line breaks (four times as fast as the regular expression's matches).
    return list(map(add, accumulate(map(len, text.split("\n")[:-1]), initial=0), count()))


def parse_sections(text: str, *, scanner: bool = True) -> tuple[list[Section], list[tuple[int, int]]]:
    """Sections with their blocks, and the protected ranges (code blocks and tables at any depth).

    The line scanner (``markdown_scan``) finds the blocks unless the text has a block quote or ``scanner`` is
    False; markdown-it-py finds them otherwise (the same blocks: the tests compare the two)."""
    sections = [Section((), 0, 0, [])]
    front = _FRONT_MATTER.match(text)
    skip = 0  # lines of front matter: the parser sees only what follows
    if front:
        sections[0].blocks.append(Block(0, front.end(), "code"))
    source = text[front.end() :] if front else text
    lines = None
    if "\r" in text:
        starts = line_starts(text)
        if front:
            skip = len(_LINE_BREAK.findall(text, 0, front.end()))
    else:
        # The front matter ends after a line break (or at the end), so the source's lines are the text's lines
        # from there on: their starts come from the lines the scanner reads, split once.
        lines = source.split("\n")
        starts = list(map(add, accumulate(map(len, lines), initial=front.end() if front else 0), count()))
        starts.pop()
    n_lines = len(starts)

    def offset(line: int) -> int:
        line += skip
        return starts[line] if line < n_lines else len(text)

    blocks = scan(source, _parser().parse, lines) if scanner else None
    if blocks is None:
        blocks = blocks_from_tokens(_parser().parse(source))
    stack: list[tuple[int, str]] = []
    protected: list[tuple[int, int]] = []
    for kind, first, last, extra in blocks:
        start, end = offset(first), offset(last)
        if kind == "heading":
            level, title = extra
            while stack and stack[-1][0] >= level:
                stack.pop()
            stack.append((level, title))
            sections.append(Section(tuple(t for _, t in stack), start, end, []))
            continue
        block = Block(start, end, kind)
        if kind == "other":  # a block quote: the code blocks and tables inside it are protected
            protected.extend((offset(a), offset(b)) for a, b in extra)
        elif kind != "paragraph":
            protected.append((start, end))
        if kind == "table":
            block.parts, block.header_rows = _line_rows(first, last, offset, text)
        sections[-1].blocks.append(block)
    return [s for s in sections if s.blocks or s.path], protected


def _line_rows(first, last, offset, text):
    """Each table line as a row; the header row and the delimiter row below it are the header."""
    rows = []
    for line in range(first, last):
        a, b = offset(line), offset(line + 1)
        while b > a and text[b - 1] in "\r\n":
            b -= 1
        if b > a:
            rows.append((a, b))
    return rows, min(2, len(rows))
