"""Fixed-size windows with overlap: the baseline that cuts anywhere, in tokens or in characters."""

from __future__ import annotations

from toolkit.chunking.base import Chunker
from toolkit.chunking.document import Document, Span
from toolkit.errors import InputError


class FixedChunker(Chunker):
    """``fixed:size:overlap``: window i starts at i × (size − overlap); whitespace-only windows are dropped.

    Windows are not trimmed (a cut through a word is the point of this baseline). With ``unit=chars`` it is
    exactly ``text[i:i + size] for i in range(0, len(text), size - overlap)``, stopping after the first window
    that reaches the end of the text.
    """

    trims_whitespace = False

    def spans(self, document: Document) -> list[Span]:
        text = document.text
        if self.unit == "chars":
            bounds = list(range(len(text) + 1))
            return self._windows(text, bounds, lambda a, b: True)
        offsets = self._token_offsets(text)
        size = max(1, self.size - document.reserved)  # a title (context=title) takes its tokens from the window
        return self._windows(text, offsets, lambda a, b: document.tokens(a, b) <= size, size)

    def _windows(self, text: str, bounds: list[int], fits, size: int | None = None) -> list[Span]:
        """Windows over boundary positions ``bounds`` (characters, or the character offset of each token)."""
        n = len(bounds) - 1
        size = self.size if size is None else size
        step = max(1, size - self.overlap)
        spans = []
        for first in range(0, n, step):
            last = min(first + size, n)
            # Re-encoding a token window can give a token or two more than the window had; shrink until exact.
            while last > first + 1 and not fits(bounds[first], bounds[last]):
                last -= 1
            start, end = bounds[first], bounds[last]
            if start < end and text[start:end].strip():
                spans.append(Span(start, end))
            if first + size >= n:
                break
        return spans

    def _token_offsets(self, text: str) -> list[int]:
        """Character offset where each token starts, plus len(text); a token that starts inside a
        multi-byte character is moved to that character's start, so every window is a valid span."""
        encode = getattr(self.tokenizer, "encode", None)
        encoding = getattr(self.tokenizer, "_encoding", None)
        if encode is None or encoding is None:
            raise InputError(
                "fixed windows in tokens need a tiktoken encoding to map tokens back to characters; "
                "use the default tokenizer or unit=chars."
            )
        tokens = encode(text)
        lengths = [len(b) for b in encoding.decode_tokens_bytes(tokens)]
        offsets = [0]
        position = 0
        for length in lengths:
            position += length
            offsets.append(position)
        if text.isascii():
            return offsets
        import numpy as np

        raw = np.frombuffer(text.encode("utf-8"), dtype=np.uint8)
        starts = (raw & 0xC0) != 0x80
        char_at_byte = np.append(np.cumsum(starts) - 1, len(text))
        mapped = char_at_byte[np.asarray(offsets)].tolist()
        mapped[-1] = len(text)
        # Collapse duplicates created by several tokens inside one character.
        result = [mapped[0]]
        for value in mapped[1:]:
            result.append(max(value, result[-1]))
        return result
