"""Code chunking: Python split by class and function with ``ast``; other languages split recursively on
their own definition keywords. The file path and the enclosing class/function signature form the heading
path, so they are embedded with the code."""

from __future__ import annotations

import re

from toolkit.chunking.base import Chunker
from toolkit.chunking.document import Document, Span
from toolkit.chunking.languages import DEFINITION_KEYWORDS, EXTENSIONS
from toolkit.chunking.split import split_range
from toolkit.chunking.structure import Block, Section, pack_sections


def language_of(doc_id: str | None, option: str | None) -> str | None:
    if option:
        return option.lower()
    if doc_id:
        for extension, language in EXTENSIONS.items():
            if doc_id.lower().endswith(extension):
                return language
    return None


def separators_for(language: str | None):
    keywords = DEFINITION_KEYWORDS.get(language or "")
    separators = [re.compile(r"\n[ \t]*\n\s*"), re.compile(r"\n"), re.compile(r"[ \t]+")]
    if keywords:
        separators.insert(0, re.compile(rf"\n(?=(?:{keywords}))", re.M))
    return tuple(separators)


class CodeChunker(Chunker):
    """``code:size:overlap[:language=python]``; the language defaults from the file extension of doc_id."""

    # Its heading path is the file and the enclosing definitions; unchanged since version 1.
    algorithm_version = 1
    own_headings = True

    def spans(self, document: Document) -> list[Span]:
        text = document.text
        if not text:
            return []
        language = language_of(document.doc_id, self.spec.options.get("language"))
        root = (document.doc_id,) if document.doc_id else ()
        if language in (None, "python"):
            sections = python_sections(document, root, self.size)
            if sections is not None:
                merge = self.spec.options.get("merge", 50)
                return pack_sections(document, sections, self.size, self.overlap, merge, [])
        return split_range(
            document,
            Span(0, len(text), root),
            self.size,
            separators=separators_for(language),
            overlap=self.overlap,
        )


def python_sections(document: Document, root: tuple[str, ...], size: int) -> list[Section] | None:
    """One section per top-level function, per class (per method when the class is over the budget),
    and per run of other statements; None if the text is not valid Python."""
    import ast

    text = document.text
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    starts = [0]
    for line in text.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))

    def span_of(node) -> tuple[int, int]:
        first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
        return starts[first - 1], starts[min(node.end_lineno, len(starts) - 1)]

    def sections_for(body, path) -> list[Section]:
        result: list[Section] = []
        loose: list[tuple[int, int]] = []

        def flush() -> None:
            if loose:
                result.append(Section(path, loose[0][0], loose[0][0], [Block(a, b) for a, b in loose]))
                loose.clear()

        for node in body:
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                loose.append(span_of(node))
                continue
            flush()
            start, end = span_of(node)
            inner = (*path, signature(node))
            if isinstance(node, ast.ClassDef) and not document.fits(start, end, size, inner):
                result.extend(sections_for(node.body, inner))  # a long class: one chunk per method
            else:
                result.append(Section(inner, start, start, [Block(start, end)]))
        flush()
        return result

    return sections_for(tree.body, root)


def signature(node) -> str:
    import ast

    if isinstance(node, ast.ClassDef):
        bases = ", ".join(ast.unparse(b) for b in node.bases)
        return f"class {node.name}({bases})" if bases else f"class {node.name}"
    prefix = "async def" if isinstance(node, ast.AsyncFunctionDef) else "def"
    returns = f" -> {ast.unparse(node.returns)}" if node.returns else ""
    return f"{prefix} {node.name}({ast.unparse(node.args)}){returns}"
