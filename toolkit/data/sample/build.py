"""Rebuild the bundled sample corpus: chapters of the PostgreSQL 15 manual, HTML to Markdown.

Run by hand, never at run time (the .md files are committed):

    apt-get install postgresql-doc-15
    .venv/bin/python toolkit/data/sample/build.py [--html /usr/share/doc/postgresql-doc-15/html]

Each chapter becomes one Markdown file in docs/: headings by section number, paragraphs on one line,
fenced code, pipe tables, lists, notes as block quotes. Links, index terms and images are dropped.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from selectolax.lexbor import LexborHTMLParser, LexborNode

HERE = Path(__file__).resolve().parent
DEFAULT_HTML = Path("/usr/share/doc/postgresql-doc-15/html")

# Output name → the chapter (or section) page whose table of contents lists the pages, in order.
CHAPTERS = {
    "sql-syntax.md": "sql-syntax.html",
    "row-security.md": "ddl-rowsecurity.html",
    "data-types.md": "datatype.html",
    "indexes.md": "indexes.html",
    "full-text-search.md": "textsearch.html",
    "concurrency-control.md": "mvcc.html",
    "performance-tips.md": "performance-tips.html",
}
# Sections left out to keep the corpus near 450 KB (the data types chapter alone would be 190 KB).
LEFT_OUT = {
    "datatype-money.html",
    "datatype-binary.html",
    "datatype-textsearch.html",
    "datatype-geometric.html",
    "datatype-net-types.html",
    "datatype-bit.html",
    "datatype-xml.html",
    "rowtypes.html",
    "datatype-oid.html",
    "datatype-pg-lsn.html",
    "datatype-pseudo.html",
}

SKIPPED_DIVS = {"navheader", "navfooter", "toc", "figure", "mediaobject", "informalfigure"}
ADMONITIONS = {"note", "tip", "warning", "caution", "important"}
BLOCK_TAGS = {"p", "pre", "div", "ul", "ol", "dl", "table", "blockquote", "h1", "h2", "h3", "h4", "h5", "hr"}
_SPACE = re.compile(r"\s+")
_NUMBERED = re.compile(r"^(?:Chapter\s+)?(\d+(?:\.\d+)*)\.\s")


def _classes(node: LexborNode) -> set[str]:
    return set((node.attributes.get("class") or "").split())


def _children(node: LexborNode):
    child = node.child
    while child is not None:
        yield child
        child = child.next


def inline(node: LexborNode) -> str:
    """Inline Markdown for a node and its children; whitespace is collapsed later."""
    if node.tag == "-text":
        return node.text_content or ""
    if node.tag in {"code", "tt"} or (node.tag == "pre" and node.parent and node.parent.tag in {"td", "th"}):
        text = _SPACE.sub(" ", node.text(deep=True)).strip()
        fence = "``" if "`" in text else "`"
        return f"{fence}{text}{fence}" if text else ""
    if node.tag == "br":
        return " "
    if node.tag == "a" and "indexterm" in _classes(node):
        return ""
    inner = "".join(inline(child) for child in _children(node))
    if node.tag == "em" and inner.strip() and not inner.strip().startswith("`"):
        return f"*{inner.strip()}*"
    if node.tag in {"strong", "b"} and inner.strip():
        return f"**{inner.strip()}**"
    return inner


def _clean(text: str) -> str:
    return _SPACE.sub(" ", text).strip()


def _is_block(node: LexborNode) -> bool:
    return node.tag in BLOCK_TAGS


def _heading_level(title: str, tag: str) -> int:
    match = _NUMBERED.match(title)
    if match:
        return len(match.group(1).split("."))
    return {"h1": 1, "h2": 2, "h3": 3, "h4": 4}.get(tag, 5)


def _indent(block: str, prefix: str, first: str) -> str:
    lines = block.split("\n")
    return "\n".join([first + lines[0]] + [(prefix + line) if line else line for line in lines[1:]])


def _table(node: LexborNode) -> list[str]:
    rows: list[list[str]] = []
    header_rows = 0
    for tr in node.css("tr"):
        cells = []
        for cell in tr.css("th, td"):
            text = " ".join(blocks(cell)) if any(_is_block(c) for c in _children(cell)) else _clean(inline(cell))
            cells.append(_clean(text).replace("|", "\\|"))
        if tr.parent is not None and tr.parent.tag == "thead":
            header_rows += 1
        rows.append(cells)
    if not rows:
        return []
    if "simplelist" in _classes(node):
        return ["\n".join(f"- {cell}" for row in rows for cell in row if cell)]
    width = max(len(row) for row in rows)
    rows = [row + [""] * (width - len(row)) for row in rows]
    header, body = (rows[header_rows - 1], rows[header_rows:]) if header_rows else ([""] * width, rows)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * width]
    lines += ["| " + " | ".join(row) + " |" for row in body]
    return ["\n".join(lines)]


def blocks(node: LexborNode) -> list[str]:
    """Block-level Markdown strings for the children of `node`; runs of inline content become paragraphs."""
    out: list[str] = []
    pending: list[str] = []

    def flush() -> None:
        text = _clean("".join(pending))
        if text:
            out.append(text)
        pending.clear()

    for child in _children(node):
        if not _is_block(child):
            pending.append(inline(child))
            continue
        flush()
        out.extend(block(child))
    flush()
    return out


def block(node: LexborNode) -> list[str]:
    tag, classes = node.tag, _classes(node)
    if tag == "hr" or classes & SKIPPED_DIVS or (tag == "dl" and "toc" in classes):
        return []
    if tag in {"h1", "h2", "h3", "h4", "h5"}:
        title = _clean(inline(node))
        return [f"{'#' * _heading_level(title, tag)} {title}"] if title else []
    if tag == "p":
        if "title" in classes:  # example and table captions
            title = _clean(node.text(deep=True))
            return [f"**{title}**"] if title else []
        return blocks(node)
    if tag == "pre":
        text = node.text(deep=True).strip("\n")
        fence = "~~~" if "```" in text else "```"
        return [f"{fence}\n{text}\n{fence}"] if text.strip() else []
    if tag in {"ul", "ol"}:
        items = []
        for number, li in enumerate((c for c in _children(node) if c.tag == "li"), start=1):
            marker = f"{number}. " if tag == "ol" else "- "
            parts = blocks(li) or [""]
            pad = " " * len(marker)
            items.append("\n\n".join([_indent(parts[0], pad, marker)] + [_indent(p, pad, pad) for p in parts[1:]]))
        return ["\n".join(items) if all("\n" not in item for item in items) else "\n\n".join(items)]
    if tag == "dl":
        items = []
        for child in _children(node):
            if child.tag == "dt":
                items.append("- " + _clean(inline(child)))
            elif child.tag == "dd":
                items.extend(_indent(p, "  ", "  ") for p in blocks(child))
        return ["\n\n".join(items)] if items else []
    if tag == "table":
        return _table(node)
    if tag == "blockquote":
        return [_indent(b, "> ", "> ") for b in blocks(node)]
    if classes & ADMONITIONS:
        title_node = node.css_first("h3, h4, .title")
        title = _clean(title_node.text(deep=True)) if title_node else next(iter(classes & ADMONITIONS)).title()
        if title_node is not None:
            title_node.decompose()
        body = blocks(node)
        quoted = "\n>\n".join(_indent(b, "> ", "> ") for b in [f"**{title}**", *body])
        return [quoted]
    if "titlepage" in classes:
        heading = node.css_first("h1, h2, h3, h4, h5")
        return block(heading) if heading is not None else []
    return blocks(node)


def page_markdown(html: str) -> list[str]:
    tree = LexborHTMLParser(html)
    body = tree.css_first("#docContent") or tree.body
    return blocks(body)


def chapter_pages(html_dir: Path, first: str) -> list[str]:
    """The chapter page followed by the section pages its table of contents lists."""
    tree = LexborHTMLParser((html_dir / first).read_text(encoding="utf-8"))
    pages = [first]
    for link in tree.css("div.toc dl.toc > dt > span.sect1 > a"):
        href = (link.attributes.get("href") or "").split("#")[0]
        if href and href not in pages and href not in LEFT_OUT:
            pages.append(href)
    return pages


def chapter_markdown(html_dir: Path, first: str) -> str:
    parts: list[str] = []
    for page in chapter_pages(html_dir, first):
        parts.extend(page_markdown((html_dir / page).read_text(encoding="utf-8")))
    # Shift headings so the chapter (or the single section) title is a level-1 heading.
    levels = [len(p) - len(p.lstrip("#")) for p in parts if re.match(r"#+ ", p)]
    shift = (min(levels) - 1) if levels else 0
    if shift:
        parts = [p[shift:] if re.match(r"#+ ", p) else p for p in parts]
    return "\n\n".join(parts).replace("\u00a0", " ") + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--html", type=Path, default=DEFAULT_HTML, help="postgresql-doc-15's HTML folder")
    parser.add_argument("--out", type=Path, default=HERE / "docs")
    args = parser.parse_args()
    if not (args.html / "index.html").exists():
        raise SystemExit(
            f"No PostgreSQL HTML manual at {args.html}: apt-get install postgresql-doc-15, or pass --html."
        )
    args.out.mkdir(parents=True, exist_ok=True)
    for name, first in CHAPTERS.items():
        text = chapter_markdown(args.html, first)
        (args.out / name).write_text(text, encoding="utf-8")
        print(f"{name}: {len(text.encode()):,} bytes")


if __name__ == "__main__":
    main()
