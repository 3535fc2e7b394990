"""What a chunker works on and what it returns: a document (its text, tokenizer and title), the spans a strategy
proposes, and the chunk records; below every strategy and the splitter they share."""

from __future__ import annotations

import re
from dataclasses import dataclass

from toolkit.errors import InputError

HEADING_SEPARATOR = " > "


@dataclass(frozen=True)
class Chunk:
    """One chunk. ``text == source[start:end]``; ``embed_text`` is what gets embedded."""

    text: str
    start: int
    end: int
    doc_id: str | None
    heading_path: tuple[str, ...]
    token_count: int
    position: int
    total: int
    chunk_id: str
    content_hash: str
    chunker_version: str
    parent_id: str | None = None
    is_parent: bool = False
    # Text placed between the heading path and the body in embed_text, e.g. a table's header row
    # repeated above a later row group, or a code file's path and enclosing class.
    context: str = ""
    # True when the chunk is one indivisible unit (a code block, a table row, a sentence) that is
    # larger than the budget on its own; the budget is the only rule such a chunk may break.
    atomic: bool = False
    # The whitespace before the chunk in its document, back to the previous other character (None when 4,096
    # characters or more): a search decides from it whether two hits touch and stitches a passage from its chunks.
    gap_before: str | None = ""

    @property
    def embed_text(self) -> str:
        return compose_embed_text(self.heading_path, self.context, self.text)


def compose_embed_text(heading_path: tuple[str, ...], context: str, body: str) -> str:
    """The heading path on its own line, then the context line(s), then the body."""
    prefix = HEADING_SEPARATOR.join(heading_path) + "\n" if heading_path else ""
    if context:
        prefix += context + "\n"
    return prefix + body


@dataclass
class Span:
    """A proposed chunk before it becomes a ``Chunk``."""

    start: int
    end: int
    heading_path: tuple[str, ...] = ()
    context: str = ""
    atomic: bool = False


class Document:
    """One text being chunked, with its span counter: measures spans in the chunker's unit."""

    def __init__(self, text: str, tokenizer, unit: str, doc_id: str | None = None):
        self.text = text
        self.doc_id = doc_id
        self.unit = unit
        self.tokenizer = tokenizer
        self._counter = None
        self._prefix_cache: dict[tuple, int] = {}
        self._exact: dict[tuple[int, int], int] = {}
        # Tokens every span will carry beside its own heading path and context (the document's title with
        # context=title): strategies plan with them counted, then the title is attached and this drops to 0.
        self.reserved = 0
        self.title = ""
        # A Markdown or HTML source's heading outline (toolkit.chunking.outline), for strategies that do not read
        # headings themselves.
        self.outline = None

    @property
    def counter(self):
        if self._counter is None:
            try:
                self._counter = self.tokenizer.span_counter(self.text)
            except UnicodeEncodeError as error:
                raise self.surrogate_error(error) from error
        return self._counter

    def surrogate_error(self, error: UnicodeEncodeError) -> InputError:
        surrogate = re.search("[\ud800-\udfff]", self.text)
        position = surrogate.start() if surrogate else error.start
        return InputError(
            f"{self.doc_id or 'The text'} contains a lone surrogate (character {position}), which is not "
            "valid Unicode text; decode the source with errors='replace' (or fix it) before chunking."
        )

    def tokens(self, start: int, end: int) -> int:
        """Exact tokens of the body ``text[start:end]`` (cached: budget checks and records both ask)."""
        key = (start, end)
        n = self._exact.get(key)
        if n is None:
            n = self._exact[key] = self.counter.count(start, end)
        return n

    def estimate(self, start: int, end: int, heading_path: tuple[str, ...] = (), context: str = "") -> int:
        """A fast size for planning (exact in characters, near-exact in tokens); budgets are re-checked."""
        if self.unit == "chars":
            return end - start
        return self.counter.estimate(start, end) + self.prefix_tokens(heading_path, context)

    def prefix_tokens(self, heading_path: tuple[str, ...], context: str) -> int:
        key = (heading_path, context)
        n = self._prefix_cache.get(key)
        if n is None:
            n = self._prefix_cache[key] = (
                self.tokenizer.count(compose_embed_text(heading_path, context, "")) if any(key) else 0
            )
        return n + self.reserved

    def sure_fit_ends(self, parts, budget: int, heading_path=(), context: str = ""):
        """For packing ``parts`` (consecutive (start, end) pairs): a sorted key per part end and a function of a
        start position, such that every part end whose key is below ``threshold(start)`` gives a span that
        ``fits`` without counting. None when the span counter has no cheap estimate."""
        if self.unit == "chars":
            return [end for _, end in parts], lambda start: start + budget + 1
        index = getattr(self.counter, "token_index", None)
        if index is None:
            return None
        limit = budget - 16 - self.prefix_tokens(heading_path, context)
        return [index(end) for _, end in parts], lambda start: index(start) + limit

    def fits(self, start: int, end: int, budget: int, heading_path=(), context: str = "") -> bool:
        """Exactly whether the span is within ``budget``; the exact count is skipped when the estimate is far
        below the budget."""
        if self.unit == "chars":
            return end - start <= budget
        # Only "fits" is decided from the estimate: it counts the whitespace at the span's ends, which the
        # measure leaves out, so a large estimate may still fit. (estimate and prefix_tokens, inline: the
        # structure-aware strategies ask this for every block.)
        counter = self._counter
        if counter is None:
            counter = self.counter
        prefix = self._prefix_cache.get((heading_path, context))
        if prefix is None:
            prefix = self.prefix_tokens(heading_path, context) - self.reserved
        if counter.estimate(start, end) + prefix + self.reserved < budget - 16:
            return True
        return self.measure(start, end, heading_path, context) <= budget

    def measure(self, start: int, end: int, heading_path: tuple[str, ...] = (), context: str = "") -> int:
        """The size of a span against the budget: characters of the body, or tokens of its embed text
        (whitespace at either end left out, as chunks are stored trimmed)."""
        if self.unit == "chars":
            return end - start
        text = self.text
        while start < end and text[start].isspace():
            start += 1
        while end > start and text[end - 1].isspace():
            end -= 1
        return self.tokens(start, end) + self.prefix_tokens(heading_path, context)

    def embed_tokens(self, span: Span) -> int:
        # Exact: the prefix ends in a newline and a trimmed body starts with non-whitespace, so
        # no tokenizer piece crosses the seam (tests compare against tiktoken on whole embed texts).
        if span.heading_path or span.context:
            body = self.text[span.start : span.end]
            if body[:1].isspace():
                return self.tokenizer.count(compose_embed_text(span.heading_path, span.context, body))
        return self.tokens(span.start, span.end) + self.prefix_tokens(span.heading_path, span.context)


def trim(text: str, span: Span) -> Span | None:
    """The span without leading and trailing whitespace, or None if nothing is left."""
    start, end = span.start, span.end
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    if start >= end:
        return None
    if start == span.start and end == span.end:
        return span
    return Span(start, end, span.heading_path, span.context, span.atomic)
