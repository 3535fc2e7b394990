"""Recursive splitting (``split_range``): paragraphs, then lines, then sentences, then words, then characters.

The ``recursive`` strategy is this splitter on a whole document; it is also the fallback every other strategy (and
the chunker base's budget and input-limit checks) uses for a piece that is over its budget. It never cuts inside a
protected range (a code fence or a table) unless told to.
"""

from __future__ import annotations

import re
import string
from bisect import bisect_left, bisect_right
from itertools import accumulate, compress, pairwise, repeat
from operator import gt, sub

from toolkit.chunking.document import Document, Span, trim
from toolkit.text.tokens import _first_resync, _last_resync

# A sentence ends at . ! or ? (a closing quote or bracket may follow) before whitespace.
SENTENCE_BOUNDARY = re.compile(r"(?:(?<=[.!?])|(?<=[.!?][\"'”’)\]]))\s+")

PROSE_SEPARATORS = (
    re.compile(r"\n[ \t]*\n\s*"),  # blank lines: paragraphs
    re.compile(r"\n"),  # lines
    SENTENCE_BOUNDARY,  # sentences
    re.compile(r"[ \t]+"),  # words
)


def split_range(
    document: Document,
    span: Span,
    budget: int,
    *,
    separators=PROSE_SEPARATORS,
    overlap: int = 0,
    protected: list[tuple[int, int]] | None = None,
    in_tokens: bool = False,
    ignore_protection: bool = False,
) -> list[Span]:
    """Split ``span`` into spans whose size is at most ``budget`` (heading path and context included).

    Cuts go after a separator match, trying coarser separators first; pieces are packed greedily, with
    ``overlap`` (same unit) of trailing pieces repeated at the start of the next span. A cut is never
    placed strictly inside a ``protected`` range; a protected range that alone is over the budget comes
    back as one atomic span (unless ``ignore_protection``, used for the embedding model's hard limit).
    """
    splitter = _Splitter(document, span, budget, separators, overlap, protected or [], in_tokens)
    splitter.ignore_protection = ignore_protection
    # A cut can leave a piece that is only the whitespace between two separators (a lone line break): such a
    # piece holds nothing to find, so it never becomes a chunk.
    text = document.text
    return [p for p in splitter.run() if p.end > p.start and not text[p.start : p.end].isspace()]


class _Splitter:
    def __init__(self, document, span, budget, separators, overlap, protected, in_tokens):
        self.document = document
        self.text = document.text
        self.heading_path = span.heading_path
        self.context = span.context
        self.span = span
        self.budget = budget
        self.separators = separators
        self.overlap = overlap
        self.protected = sorted(protected)
        self.protected_starts = [start for start, _ in self.protected]
        self.in_tokens = in_tokens
        self.ignore_protection = False
        self.out: list[Span] = []

    def fits(self, start: int, end: int, budget: int | None = None) -> bool:
        budget = self.budget if budget is None else budget
        if self.in_tokens and self.document.unit == "chars":
            return self.exact_size(start, end) <= budget
        return self.document.fits(start, end, budget, self.heading_path, self.context)

    def exact_size(self, start: int, end: int) -> int:
        if self.in_tokens or self.document.unit == "tokens":
            # Measured as the chunk will be stored (whitespace trimmed), so the count is cached once.
            text = self.text
            while start < end and text[start].isspace():
                start += 1
            while end > start and text[end - 1].isspace():
                end -= 1
            return self.document.tokens(start, end) + self.document.prefix_tokens(self.heading_path, self.context)
        return end - start

    def allowed(self, position: int) -> bool:
        if self.ignore_protection or not self.protected:
            return True
        i = bisect_right(self.protected_starts, position) - 1
        return i < 0 or not (self.protected[i][0] < position < self.protected[i][1])

    def run(self) -> list[Span]:
        self.split(self.span.start, self.span.end, 0)
        return self.out

    def emit(self, start: int, end: int, atomic: bool = False) -> None:
        self.out.append(Span(start, end, self.heading_path, self.context, atomic or self.span.atomic))

    def split(self, start: int, end: int, level: int) -> None:
        if self.exact_size(start, end) <= self.budget:
            self.emit(start, end)
            return
        if level >= len(self.separators):
            self.split_characters(start, end)
            return
        cuts = [m.end() for m in self.separators[level].finditer(self.text, start, end)]
        if cuts and cuts[-1] >= end:
            cuts.pop()
        if self.protected and not self.ignore_protection:
            cuts = [cut for cut in cuts if self.allowed(cut)]
        if not cuts:
            self.split(start, end, level + 1)
            return
        bounds = [start, *cuts, end]
        parts = list(pairwise(bounds))
        self.pack(parts, level)

    def pack(self, parts: list[tuple[int, int]], level: int) -> None:
        n = len(parts)
        i = 0
        fits = self.fits
        # Where the planning estimate alone says "fits" (see Document.fits), the greedy extension below
        # would say so too: jump there by bisection instead of asking part by part.
        sure = None
        if not (self.in_tokens and self.document.unit == "chars"):  # that case measures exactly (see fits)
            sure = self.document.sure_fit_ends(parts, self.budget, self.heading_path, self.context)
        while i < n:
            start = parts[i][0]
            j = i
            if sure is not None:
                ends, threshold = sure
                j = max(i, bisect_left(ends, threshold(start), i) - 1)
            while j + 1 < n and fits(start, parts[j + 1][1]):
                j += 1
            end = parts[j][1]
            if j == i and not fits(start, end):
                self.split(start, end, level + 1)
            else:
                self.emit(start, end)
            if j + 1 >= n:
                break
            k = j + 1
            if self.overlap:
                # Stepping back stops at the part holding this chunk's first text: going further, over parts of
                # whitespace only, would start the next chunk with this one's text again.
                text = self.text
                first = start
                while first < end and text[first].isspace():
                    first += 1
                stop = max(i, bisect_right(parts, (first, len(text) + 1)) - 1)
                while k - 1 > stop and fits(parts[k - 1][0], end, self.overlap):
                    k -= 1
            i = k

    def split_characters(self, start: int, end: int) -> None:
        """Last resort (one word longer than the budget): the longest prefixes that fit."""
        if not self.ignore_protection and self.protected and not all(self.allowed(p) for p in (start + 1, end - 1)):
            self.emit(start, end, atomic=True)
            return
        while start < end:
            # The largest cut with size <= budget: galloping out from the start first, so that each probe costs
            # about a chunk (a word with no resynchronisation point inside is counted by encoding the probe).
            low, high = start + 1, end
            step = max(self.budget, 1)
            while start + step < end and self.exact_size(start, start + step) <= self.budget:
                low = start + step
                step *= 2
            high = min(end, start + step)
            while low < high:
                middle = (low + high + 1) // 2
                if self.exact_size(start, middle) <= self.budget:
                    low = middle
                else:
                    high = middle - 1
            if self.exact_size(start, low) > self.budget:
                # The heading path and context alone fill the budget: one-character chunks would be
                # absurd, so the unit is kept whole and flagged.
                self.emit(start, end, atomic=True)
                return
            self.emit(start, low)
            start = low


def _line_start(text: str, position: int, end: int) -> bool:
    """Whether ``position`` (just after a line break) is followed by spaces or tabs, if any, and then a non-space
    character before ``end``: then it follows the last line break of a whitespace run that ends in text, where
    every tokenization has a boundary (cl100k's ``\\s*[\\r\\n]`` runs to the last line break of a run, and nothing
    else crosses one)."""
    while position < end:
        char = text[position]
        if char not in " \t":
            return not char.isspace()
        position += 1
    return False


def _part_boundary(text: str, previous: int, b: int, following: int) -> int | None:
    """A token boundary for the part ``[b, following)`` (the previous part starts at ``previous``): ``b`` itself
    when it starts a line (``_line_start``), the start of the indentation before ``b`` when a line break inside
    the previous part precedes it, or else the part's first resynchronisation point."""
    before = text[b - 1]
    if before in "\r\n":
        if _line_start(text, b, following):
            return b
    elif before in " \t" and not text[b].isspace():
        p = b - 1
        while p > previous and text[p - 1] in " \t":
            p -= 1
        if p > previous + 1 and text[p - 1] in "\r\n":
            return p
    return _first_resync(text, b, following)


_ALNUM = frozenset(string.ascii_letters + string.digits)
_PUNCTUATION = frozenset(string.punctuation)


class _Parts:
    """One range split at one separator level: exact token counts of any run of consecutive parts.

    Each part gets a *boundary*: its first resynchronisation point (see ``toolkit.text.tokens``), or the range start
    for the first part when it starts with text. The engine counts the text between consecutive boundaries once
    (``segments``, stopping early past ``limit``); a run of parts is then counted as the short head before its
    first boundary, the segments in between, and a tail correction at its last boundary: two short strings.
    """

    __slots__ = (
        "boundaries", "bounds", "budget", "count", "count_till", "first", "flagged", "inner", "level",
        "segment_sums", "short", "span", "sparse", "splitter", "text",
    )  # fmt: skip

    def __init__(self, splitter, bounds, level):
        self.splitter = splitter
        self.bounds = bounds
        self.level = level
        self.count = splitter.count
        self.count_till = splitter.count_till
        self.budget = splitter.budget
        self.short = splitter.short
        text = self.text = splitter.text
        # The range's start is the first part's boundary (every span counted starts at or after it). The usual
        # cut (after a line break, at text) is its own part's boundary; for the others one is looked for.
        boundaries = [bounds[0]]
        boundaries += [
            b if text[b - 1] in "\r\n" and not text[b].isspace() else _part_boundary(text, previous, b, following)
            for previous, b, following in zip(bounds, bounds[1:-1], bounds[2:])  # noqa: B905 (lengths differ)
        ]
        # Parts without a boundary share their predecessor's segment. When such a shared segment is long, spans
        # starting or ending inside it would be counted from far away (quadratic for text such as "a.\xa0" * n):
        # ``sparse`` hands the range to the splitter on offsets instead.
        self.sparse = False
        if None in boundaries:
            owners = [k for k, b in enumerate(boundaries) if b is not None]
            first = list(accumulate((b is not None for b in boundaries), initial=0))
            boundaries = [b for b in boundaries if b is not None]
            ends = [*boundaries[1:], bounds[-1]]
            shared = (o2 - o1 > 1 for o1, o2 in zip(owners, [*owners[1:], len(bounds) - 1], strict=True))
            self.sparse = any(
                share and b - a > splitter.long for share, a, b in zip(shared, boundaries, ends, strict=True)
            )
        else:
            owners = first = range(len(bounds))
        boundaries.append(bounds[-1])
        self.boundaries = boundaries
        self.first = first  # per part: the index in boundaries of the first boundary at or after the part's start
        self._count_segments(owners)

    def _count_segments(self, owners):
        text = self.text
        bounds = self.bounds
        boundaries = self.boundaries
        splitter = self.splitter
        limit = splitter.limit
        slices = list(map(slice, boundaries, boundaries[1:]))
        # A long part that starts at its boundary, ends at the next one's and will probably be split at the next
        # level is split there now: the sum of its own segments is its count, so no text is counted twice.
        self.inner = {}  # part index -> the parts it splits into
        inner = {}  # segment index -> the same
        long = splitter.long
        if self.level + 1 < len(splitter.separators):
            for x in compress(range(len(boundaries) - 1), map(gt, map(sub, boundaries[1:], boundaries), repeat(long))):
                k = owners[x]
                if (
                    boundaries[x] == bounds[k]
                    and bounds[k + 1] == boundaries[x + 1]
                    and not text[boundaries[x]].isspace()
                ):
                    parts = splitter.parts_at(boundaries[x], boundaries[x + 1], self.level + 1)
                    if parts is not None:
                        self.inner[k] = inner[x] = parts
                        slices[x] = slice(0, 0)
        counts = splitter.count_each(list(map(text.__getitem__, slices)), limit)
        for x, parts in inner.items():
            counts[x] = parts.segment_sums[-1] if parts.flagged is None or parts.segment_sums[-1] <= limit else None
        self.flagged = None
        if None in counts:  # segments past the limit: counted as limit + 1, a lower bound
            self.flagged = list(accumulate((c is None for c in counts), initial=0))
            counts = [limit + 1 if c is None else c for c in counts]
        self.segment_sums = list(accumulate(counts, initial=0))

    def tokens(self, i, j):
        """Exact tokens of parts i..j, whitespace at either end left out, when at most the budget (otherwise some
        number over it); the trimmed span is left in ``self.span``."""
        text = self.text
        bounds = self.bounds
        s = bounds[i]
        hi = e = bounds[j + 1]
        while s < hi and text[s].isspace():
            s += 1
        if s == hi:
            self.span = None
            return 0
        while text[e - 1].isspace():
            e -= 1
        self.span = (s, e)
        boundaries = self.boundaries
        a = self.first[i]
        while a + 1 < len(boundaries) and boundaries[a + 1] <= s:  # parts of whitespace only at the start
            a += 1
        start_boundary = boundaries[a]
        if start_boundary >= e:  # no boundary inside the span
            return self.direct(s, e)
        count = self.count
        segment_sums = self.segment_sums
        b = self.first[j + 1]
        low = start_boundary  # the segments are summed from here; the head before it is counted on its own
        if s == start_boundary:
            head = 0
        elif s < start_boundary:
            head = count(text[s:start_boundary])
        else:  # an indented first line: the boundary is before the indentation, so its segment is corrected
            low = _first_resync(text, s, min(e + 1, len(text)))
            if low is None or boundaries[a + 1] < low:
                low = boundaries[a + 1]
            if low > e:
                return self.direct(s, e)
            head = count(text[s:low]) - count(text[start_boundary:low])
        last = boundaries[b - 1]
        if last == e:
            return self.checked(head + segment_sums[b - 1] - segment_sums[a], a, b - 1, s, e)
        # The tail is corrected at a token boundary q near its end: the segment's text from q on is replaced by the
        # span's. After an ASCII letter or digit the span's end is one; after ASCII punctuation, the start of
        # that run is (or the space before it, which the run's piece would take). Both strings are short and
        # repeat ("\n\n", ".\n\n" and "."), so they are counted once per document.
        q = None
        last_char = text[e - 1]
        if last_char in _ALNUM:
            q = e
        elif last_char in _PUNCTUATION:
            q = e - 1
            while q > last and text[q - 1] in _PUNCTUATION:
                q -= 1
            if q > last:
                before = text[q - 1]
                if before == " ":
                    q -= 1
                elif before not in _ALNUM and before not in "\t\r\n":
                    q = None
        if q is not None and q >= low:
            n = self.short_count(text[q : boundaries[b]]) - (self.short_count(text[q:e]) if q < e else 0)
            return self.checked(head + segment_sums[b] - segment_sums[a] - n, a, b, s, e)
        # Otherwise at a resynchronisation point t: a space or tab after the span, or else the space before its
        # last word (any resynchronisation point gives the same count; a near one keeps the strings short).
        if e < len(text) and text[e] in " \t":
            t = e
        else:
            t = text.rfind(" ", last + 1, e)
            if t < 1 or text[t - 1].isspace():
                t = _last_resync(text, last, e)
        if t is not None and t >= low:
            return self.checked(
                head + segment_sums[b] - segment_sums[a] - count(text[t : boundaries[b]]) + count(text[t:e]), a, b, s, e
            )
        if last >= low:
            return self.checked(head + segment_sums[b - 1] - segment_sums[a] + count(text[last:e]), a, b - 1, s, e)
        return self.direct(s, e)

    def short_count(self, string):
        """The count of a string at a span's end, remembered for the document when it is short (they repeat)."""
        n = self.short.get(string)
        if n is None:
            n = self.count(string)
            if len(string) <= 64:
                self.short[string] = n
        return n

    def checked(self, n, a, stop, s, e):
        """``n``, counted with segments a..stop-1: exact unless one of them was past the limit."""
        if self.flagged is not None and self.flagged[stop] != self.flagged[a] and n <= self.budget:
            return self.direct(s, e)  # a segment past the limit makes n a lower bound only
        return n

    def direct(self, s, e):
        """The tokens of ``text[s:e]`` counted on their own, up to the budget."""
        n = self.count_till(self.text[s:e], self.budget)
        return self.budget + 1 if n is None else n


class _CountingSplitter:
    """``split_range`` for a whole document in tokens with the cl100k counter, no heading path and nothing
    protected (the ``recursive`` strategy): the same cuts and the same greedy packing, counted segment by segment
    (see ``_Parts``) instead of from one encoding of the document. Yields trimmed spans with exact counts."""

    def __init__(self, document, budget, overlap, separators):
        self.document = document
        self.text = document.text
        self.budget = budget
        self.overlap = overlap
        self.separators = separators
        tokenizer = document.tokenizer
        # Heads and tails are short strings, rarely seen twice: the engine counts them as fast as a cache lookup.
        self.count = tokenizer.count_uncached
        self.count_till = tokenizer.count_till
        self.count_each = tokenizer.count_each
        # Segments are counted up to here: one that is longer is over the budget in any span that holds it.
        self.limit = budget + 64
        # Longer segments are split at the next level before they are counted (see _Parts).
        self.long = max(3 * budget, 256)
        self.short = {}  # counts of the short strings at the ends of spans
        self.out = []

    def run(self):
        # A text within the budget is one chunk whatever its separators: counted once, instead of measuring the
        # parts of its first separator level first (nearly all of the ~1 ms an 800-character document took).
        whole = trim(self.text, Span(0, len(self.text)))
        if whole is None:
            return self.out
        parts = None
        if whole.end - whole.start > 4 * self.budget:
            # Most likely over the budget: counting the whole text first would count it twice (fastokens does not
            # stop at the limit). ``split`` sums the parts' segments, exactly, and keeps the text whole if it fits.
            parts = self.parts_at(0, len(self.text), 0)
            if parts is not None and not parts.sparse:
                self.split(0, len(self.text), parts, False)
                return self.out
        n = self.count_till(self.text[whole.start : whole.end], self.budget)
        if n is not None:
            self.out.append((whole, n))
            return self.out
        if parts is None:
            parts = self.parts_at(0, len(self.text), 0)
        self.split(0, len(self.text), parts, False)
        return self.out

    def emit(self, start, end, n, atomic=False):
        span = trim(self.text, Span(start, end, atomic=atomic))
        if span is not None:
            self.out.append((span, n))

    def parts_at(self, start, end, level):
        """The parts of ``[start, end)`` at the first separator level from ``level`` on that cuts it, or None."""
        text = self.text
        separators = self.separators
        while level < len(separators):
            cuts = [m.end() for m in separators[level].finditer(text, start, end)]
            if cuts and cuts[-1] >= end:
                cuts.pop()
            if cuts:
                return _Parts(self, [start, *cuts, end], level)
            level += 1
        return None

    def split(self, start, end, parts, over):
        if parts is None:
            self.on_offsets(start, end, len(self.separators))
            return
        if parts.sparse:
            self.on_offsets(start, end, parts.level)
            return
        if not over:
            n = parts.tokens(0, len(parts.bounds) - 2)
            if n <= self.budget:
                if parts.span is not None:
                    self.out.append((Span(*parts.span), n))
                return
        self.pack(parts)

    def pack(self, parts):
        bounds = parts.bounds
        n = len(bounds) - 1
        budget = self.budget
        tokens = parts.tokens
        first = parts.first
        segment_sums = parts.segment_sums
        sums = (
            segment_sums if isinstance(first, range) else [segment_sums[f] for f in first]
        )  # per part: the segments before it
        text = self.text
        i = 0
        while i < n:
            # Where the segments alone leave 16 tokens to spare, the exact count would say "fits" as well (as
            # with Document.sure_fit_ends): jump there by bisection instead of counting part by part.
            start = bounds[i]
            s = start
            while s < bounds[i + 1] and text[s].isspace():
                s += 1
            a = first[i]
            head = self.count(text[s : parts.boundaries[a]]) if s < parts.boundaries[a] else 0
            threshold = budget - 16 - head + segment_sums[a]
            j = max(i, bisect_left(sums, threshold, i + 1, n + 1) - 2)
            size = span = None
            while j + 1 < n:
                m = tokens(i, j + 1)
                if m > budget:
                    break
                j += 1
                size, span = m, parts.span
            if size is None:
                size, span = tokens(i, j), parts.span
            if j == i and size > budget:
                inner = parts.inner.get(i)
                if inner is None:
                    inner = self.parts_at(bounds[i], bounds[i + 1], parts.level + 1)
                self.split(bounds[i], bounds[i + 1], inner, True)
            elif span is not None:
                self.out.append((Span(*span), size))
            if j + 1 >= n:
                break
            k = j + 1
            if self.overlap and span is not None:
                # As in _Splitter.pack: never back past the part holding this chunk's first text.
                stop = max(i, bisect_right(bounds, span[0]) - 1)
                while k - 1 > stop and tokens(k - 1, j) <= self.overlap:
                    k -= 1
            i = k

    def on_offsets(self, start, end, level):
        """``split_range`` from ``level`` on, on this range's own encoding: for one word over the budget (no
        separator left) and for ranges with too few token boundaries (see ``_Parts.sparse``)."""
        sub = Document(self.text[start:end], self.document.tokenizer, "tokens", self.document.doc_id)
        separators = self.separators[level:]
        for span in split_range(sub, Span(0, end - start), self.budget, separators=separators, overlap=self.overlap):
            self.emit(span.start + start, span.end + start, sub.measure(span.start, span.end), span.atomic)
