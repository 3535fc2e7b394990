"""A deterministic feature-hashing embedder for tests and benchmarks of the toolkit's own cost.

It is fast and needs no model, but it is not semantic: never use it for real retrieval.
"""

from __future__ import annotations

import re
import threading
import zlib

import numpy as np

from toolkit import validation
from toolkit.embedding.base import Embedder, positive_int, reject_unused
from toolkit.errors import InputError

DEFAULT_DIMENSIONS = 256
_WORD = re.compile(r"\w+")
# Hashed instead of nothing, so an empty text still gets a unit vector (a zero vector has no cosine).
_EMPTY = "\x00empty"
_CACHE_LIMIT = 1_000_000
_BLOCK_ROWS = 1024


class HashingEmbedder(Embedder):
    """``hashing:64``: signed feature hashing of lower-cased word tokens into 64 dimensions, L2-normalized.

    ``seed`` (an option) gives another vector space of the same dimensions: two seeds model two different models,
    which is what the serving tests need (a question must never be ranked against another model's vectors)."""

    provider = "hashing"
    revision = "1"
    disk_cached = False  # hashing a text is cheaper than looking its vector up

    def __init__(
        self,
        name: str | None = None,
        *,
        dimensions: int | None = None,
        max_input_tokens: int | None = None,
        query_prefix: str | None = None,
        document_prefix: str | None = None,
        batch_size: int | None = None,
        seed: int | None = None,
        **unused,
    ):
        reject_unused(self.provider, unused)
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**32):
            raise InputError(f"The hashing seed must be a whole number from 0 to 4294967295, not {seed!r}.")
        self.seed = seed or 0
        if name is None:
            size = dimensions if dimensions is not None else DEFAULT_DIMENSIONS
        elif name.isdigit():
            size = int(name)
        else:
            raise InputError(f"The hashing model name {name!r} is not a number of dimensions; write e.g. hashing:64.")
        size = validation.DIMENSIONS.check(positive_int(size, "dimensions"))
        if dimensions is not None and dimensions != size:
            raise InputError(
                f"hashing:{name} has {size} dimensions but dimensions={dimensions} was asked; "
                f"use hashing:{dimensions} instead."
            )
        self.name = str(size)
        self.dimensions = size
        self.max_input_tokens = positive_int(8192 if max_input_tokens is None else max_input_tokens, "max_input_tokens")
        self.query_prefix = query_prefix or ""
        self.document_prefix = document_prefix or ""
        # Word -> signed feature code; words repeat a lot, so each distinct word is hashed once.
        self._features: dict[str, int] = {}
        self._last_words = threading.local()

    def _token_counts(self, texts: list[str], is_query: bool) -> list[int]:
        words = self._words(self._prefixed(texts, is_query))
        # embed_documents counts, then embeds the same list: keep the words so they are found only once.
        self._last_words.value = (texts, is_query, words)
        return [len(found) for found in words]

    def _words(self, texts: list[str]) -> list[list[str]]:
        return [_WORD.findall(text.lower()) for text in texts]

    def _embed(self, texts: list[str], is_query: bool, token_counts: list[int]) -> np.ndarray:
        last = getattr(self._last_words, "value", None)
        self._last_words.value = None
        if last is not None and last[0] is texts and last[1] == is_query:
            words = last[2]
        else:
            words = self._words(self._prefixed(texts, is_query))
        out = np.empty((len(texts), self.dimensions), dtype=np.float32)
        # Blocks of rows keep the dense intermediate arrays in cache: several times faster than all at once.
        for start in range(0, len(texts), _BLOCK_ROWS):
            block = words[start : start + _BLOCK_ROWS]
            out[start : start + len(block)] = self._embed_block(block)
        return out

    def _embed_block(self, word_lists: list[list[str]]) -> np.ndarray:
        size = self.dimensions
        words: list[str] = []
        lengths: list[int] = []
        for found in word_lists:
            found = found or [_EMPTY]
            words += found
            lengths.append(len(found))
        # Each word's feature is a signed code, (bucket + 1) * sign, cached per distinct word.
        codes = list(map(self._features.get, words))
        if None in codes:
            codes = [self._feature(word) if code is None else code for word, code in zip(words, codes, strict=True)]
        codes = np.asarray(codes, dtype=np.int64)
        rows = np.repeat(np.arange(len(word_lists), dtype=np.int64), lengths)
        flat = np.bincount(rows * size + np.abs(codes) - 1, weights=np.sign(codes), minlength=len(word_lists) * size)
        vectors = flat.reshape(len(word_lists), size)
        norms = np.sqrt(np.einsum("ij,ij->i", vectors, vectors))[:, None]
        # Words can cancel out exactly (+1 and -1 in one bucket); fall back to the first basis vector.
        zero = norms[:, 0] == 0
        vectors[zero, 0] = 1.0
        norms[zero] = 1.0
        return vectors / norms

    def _feature(self, word: str) -> int:
        code = self._features.get(word)
        if code is None:
            digest = zlib.crc32(word.encode("utf-8"), self.seed)
            code = (digest % self.dimensions + 1) * (1 if digest & 0x80000000 else -1)
            if len(self._features) < _CACHE_LIMIT:
                self._features[word] = code
        return code
