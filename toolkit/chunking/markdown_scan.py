"""A line scanner that finds the same top-level Markdown blocks as markdown-it-py does with the rules the
``markdown`` strategy enables (CommonMark block rules plus GFM tables; lists, thematic breaks, link
reference definitions and raw HTML blocks read as paragraphs), several times faster.

It replays markdown-it's block rules line by line: ``table``, ``code`` (indented), ``fence``, ``heading``,
``lheading`` (setext) and ``paragraph``, with the same terminators. A block quote (lazy continuation lines,
nested blocks) is handed to markdown-it itself: at the top level, parsing at a block start depends only on
the lines from there on, and a block quote ends at the first empty line, fence or heading at the latest, so
markdown-it parses just the lines up to there and the scan resumes where the quote ended. Should quotes keep
ending long before those lines (lazy lines that turn out not to continue them), the scan gives up and the
caller parses the whole text with markdown-it once, so the work stays linear.
``tests/test_markdown_scan.py`` compares the result with markdown-it's on real README files and on generated
Markdown.
"""

from __future__ import annotations

import re
from itertools import repeat
from operator import sub

# What markdown-it treats as a line break (it normalizes \r\n and \r to \n first).
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
# markdown-it's mdTrim: the CommonMark whitespace set.
_TRIM = "\t\n\x0b\x0c\r \xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"  # noqa: E501
_DELIMITER_CHARS = frozenset("|-: \t")
_ALIGN = re.compile(r":?-+:?")
_MAX_AUTOCOMPLETED_CELLS = 0x10000


def _escaped_split(string: str) -> list[str]:
    """Cells of a table row: split at pipes that are not escaped (markdown-it's escapedSplit)."""
    if "\\" not in string:  # nothing escaped: every pipe splits
        return string.split("|")
    result: list[str] = []
    current = ""
    last = 0
    escaped = False
    for position, ch in enumerate(string):
        if ch == "|":
            if not escaped:
                result.append(current + string[last:position])
                current = ""
                last = position + 1
            else:
                current += string[last : position - 1]
                last = position
        escaped = ch == "\\"
    result.append(current + string[last:])
    return result


def _cells(row: str) -> list[str]:
    columns = _escaped_split(row)
    if columns and columns[0] == "":
        columns.pop(0)
    if columns and columns[-1] == "":
        columns.pop()
    return columns


class _Lines:
    def __init__(self, lines: list[str]):
        self.lines = lines
        self.n = len(lines)
        self.body = body = list(map(str.lstrip, lines, repeat(" \t")))
        self.indent = indent = list(map(sub, map(len, lines), map(len, body)))
        if not any(map(str.__contains__, lines, repeat("\t"))):
            return
        for i, width in enumerate(indent):
            if width and "\t" in lines[i][:width]:  # tabs advance to the next multiple of 4
                column = 0
                for ch in lines[i][:width]:
                    column = column + 4 - column % 4 if ch == "\t" else column + 1
                indent[i] = column

    def fence_open(self, i: int) -> tuple[str, int] | None:
        body = self.body[i]
        if self.indent[i] >= 4 or len(body) < 3 or body[0] not in "`~":
            return None
        marker = body[0]
        length = len(body) - len(body.lstrip(marker))
        if length < 3 or (marker == "`" and "`" in body[length:]):
            return None
        return marker, length

    def atx(self, i: int) -> tuple[int, str] | None:
        body = self.body[i]
        if self.indent[i] >= 4 or not body or body[0] != "#":
            return None
        level = len(body) - len(body.lstrip("#"))
        if level > 6 or (len(body) > level and body[level] not in " \t"):
            return None
        rest = body[level:].rstrip(" \t")
        without = rest.rstrip("#")
        if without and without[-1] in " \t":
            rest = without
        return level, rest.strip().replace("\x00", "\ufffd")  # markdown-it replaces NUL characters

    def underline(self, i: int) -> int | None:
        body = self.body[i]
        if body and body[0] in "-=" and not body.lstrip(body[0]).lstrip(" \t"):
            return 1 if body[0] == "=" else 2
        return None

    def table_header(self, i: int) -> int | None:
        """Column count if lines i and i + 1 start a table (markdown-it's table rule, silent part)."""
        if i + 2 > self.n or self.indent[i + 1] >= 4:
            return None
        second = self.body[i + 1]
        if len(second) < 2 or second[0] not in "|-:" or second[1] not in "|-: \t":
            return None
        if second[0] == "-" and second[1] in " \t":
            return None
        if not _DELIMITER_CHARS.issuperset(second):
            return None
        columns = second.split("|")
        aligns = 0
        for k, column in enumerate(columns):
            column = column.strip(_TRIM)
            if not column:
                if k == 0 or k == len(columns) - 1:
                    continue
                return None
            if not _ALIGN.fullmatch(column):
                return None
            aligns += 1
        header = self.body[i].strip(_TRIM)
        if "|" not in header or self.indent[i] >= 4:
            return None
        count = len(_cells(header))
        return count if count and count == aligns else None

    def quote(self, i: int) -> bool:
        return self.indent[i] < 4 and self.body[i][:1] == ">"

    def quote_window(self, first: int) -> int:
        """The end of the lines that decide the block quote starting at line ``first`` (markdown-it's
        blockquote rule): a '>' line (at any indentation) continues it; it ends at an empty line (and
        markdown-it counts the empty lines after it into the quote), at a line after an empty '>' line, or
        at a line where a fence or a heading starts; any other line is a lazy continuation."""
        n, body = self.n, self.body
        empty_quote_line = not body[first][1:].strip(" \t")
        end = first + 1
        while end < n:
            rest = body[end]
            if not rest:
                while end < n and not body[end]:
                    end += 1
                return end
            if rest[0] == ">":
                empty_quote_line = not rest[1:].strip(" \t")
            elif empty_quote_line or self.fence_open(end) is not None or self.atx(end) is not None:
                return end
            end += 1
        return end

    def interrupts(self, i: int) -> bool:
        """Whether line i ends a paragraph: a table, a fence, a block quote or a heading starts there."""
        return (
            self.table_header(i) is not None
            or self.fence_open(i) is not None
            or self.quote(i)
            or self.atx(i) is not None
        )


def scan(src: str, parse=None, lines: list[str] | None = None) -> list[tuple] | None:
    """Top-level blocks as (kind, first line, end line, extra): ``("heading", a, b, (level, title))``,
    ``("paragraph", a, b, None)``, ``("code", a, b, None)``, ``("table", a, b, None)``, and
    ``("other", a, b, protected)`` (a block quote) with the line ranges of the code blocks and tables inside it; line
    numbers as markdown-it counts them. ``parse`` is markdown-it's ``parse`` (configured as the strategy's),
    used for block quotes; without it, a text with a block quote gives None. ``lines``: ``src.split("\\n")`` when
    the caller has it already and ``src`` has no carriage return (the scan takes the list over)."""
    # str.split is several times as fast as the regular expression; without a carriage return they cut alike.
    if lines is None:
        lines = _LINE_BREAK.split(src) if "\r" in src else src.split("\n")
    # markdown-it gives a last line of only spaces (or nothing) no line of its own; then the last line it
    # counts ends with a line break.
    broken = bool(lines) and not lines[-1].strip(" \t")
    if broken:
        lines.pop()
    t = _Lines(lines)
    n, body, indent = t.n, t.body, t.indent
    if parse is None and ">" in src and any(t.quote(i) for i in range(n)):
        return None
    blocks: list[tuple] = []
    line = parsed = 0
    while line < n:
        rest = body[line]
        if not rest:
            line += 1
            continue
        # Each rule below reads the line's first character, and a table header holds a "|": lines that cannot
        # start a table, fence, quote or heading skip those rules (they would give None).
        first = rest[0]
        columns = t.table_header(line) if "|" in rest else None
        if columns is not None:
            end, filled = line + 2, 0
            while end < n:
                if body[end][:1] in "`~>#" and (
                    t.fence_open(end) is not None or t.quote(end) or t.atx(end) is not None
                ):
                    break  # markdown-it ends a table where a block quote would end
                row = body[end].strip(_TRIM)
                if not row or indent[end] >= 4:
                    break
                filled += columns - len(_cells(row))
                if filled > _MAX_AUTOCOMPLETED_CELLS:
                    break
                end += 1
            blocks.append(("table", line, end, None))
            line = end
            continue
        if indent[line] >= 4:
            end = next_line = line + 1
            while next_line < n:
                if not body[next_line]:
                    next_line += 1
                elif indent[next_line] >= 4:
                    next_line += 1
                    end = next_line
                else:
                    break
            blocks.append(("code", line, end, None))
            line = end
            continue
        fence = t.fence_open(line) if first in "`~" else None
        if fence is not None:
            marker, length = fence
            end = line + 1
            closed = False
            while end < n:
                rest = body[end]
                if rest[:1] == marker and indent[end] < 4:
                    run = len(rest) - len(rest.lstrip(marker))
                    if run >= length and not rest[run:].strip(" \t"):
                        closed = True
                        break
                end += 1
            end += 1 if closed else 0
            blocks.append(("code", line, end, None))
            line = end
            continue
        if first == ">":  # a quote (the indentation is under 4 here)
            end = t.quote_window(line)
            parsed += end - line
            if parsed > n // 2 + 200:
                return None  # long quote windows (lazy lines): one markdown-it parse of the whole text is cheaper
            blocks.append(_quote(parse, lines, line, end, end < n or broken))
            line = blocks[-1][2]
            continue
        heading = t.atx(line) if first == "#" else None
        if heading is not None:
            blocks.append(("heading", line, line + 1, heading))
            line += 1
            continue
        # Setext heading: paragraph lines up to an underline, unless something interrupts them first. Without an
        # underline, the lines up to that interruption are the paragraph. Only a line starting with one of "-="
        # can be an underline, and only one starting with one of "`~>#" or holding a "|" can interrupt.
        next_line, level = line + 1, None
        while next_line < n:
            rest = body[next_line]
            if not rest:
                break
            if indent[next_line] > 3:
                next_line += 1
                continue
            first = rest[0]
            if first in "-=":
                level = t.underline(next_line)
                if level is not None:
                    break
            if (first in "`~>#" or "|" in rest) and t.interrupts(next_line):
                break
            next_line += 1
        if level is not None:
            title = "\n".join(lines[line:next_line]).strip().replace("\x00", "\ufffd")
            blocks.append(("heading", line, next_line + 1, (level, title)))
            line = next_line + 1
            continue
        blocks.append(("paragraph", line, next_line, None))
        line = next_line
    return blocks


def _quote(parse, lines: list[str], first: int, end: int, line_break: bool) -> tuple:
    """The block quote starting at line ``first``: markdown-it parses lines first..end (``_Lines.quote_window``),
    and the quote is its first block."""
    # The lines exactly as markdown-it sees them in the whole text: whether the last one ends with a line
    # break matters (a fence inside the quote reads the character after an empty last line).
    blocks = blocks_from_tokens(parse("\n".join(lines[first:end]) + ("\n" if line_break else "")), first)
    if not blocks or blocks[0][:2] != ("other", first):
        raise AssertionError(f"markdown-it did not read line {first} as a block quote")
    return blocks[0]


_PROTECTED_TOKENS = ("fence", "code_block", "table_open")


def blocks_from_tokens(tokens, first_line: int = 0) -> list[tuple]:
    """The same block tuples as ``scan``, from markdown-it's tokens (line numbers shifted by ``first_line``).
    A top-level container (a block quote) is ``("other", a, b, protected)``, with the line ranges of the code
    blocks and tables inside it."""
    blocks: list[tuple] = []
    i, count = 0, len(tokens)
    while i < count:
        token = tokens[i]
        i += 1
        if token.level != 0 or token.nesting == -1 or not token.map:
            continue
        first, last = token.map[0] + first_line, token.map[1] + first_line
        if token.type == "heading_open":
            title = tokens[i].content.strip() if i < count else ""
            blocks.append(("heading", first, last, (int(token.tag[1]), title)))
        elif token.type == "paragraph_open":
            blocks.append(("paragraph", first, last, None))
        elif token.type in ("fence", "code_block"):
            blocks.append(("code", first, last, None))
        elif token.type == "table_open":
            blocks.append(("table", first, last, None))
        else:
            protected = []
            while i < count and not (tokens[i].level == 0 and tokens[i].nesting == -1):
                inner = tokens[i]
                if inner.type in _PROTECTED_TOKENS and inner.map:
                    protected.append((inner.map[0] + first_line, inner.map[1] + first_line))
                i += 1
            blocks.append(("other", first, last, protected))
    return blocks
