"""A deterministic feature-hashing embedder for tests and benchmarks of the toolkit's own cost.

It is fast and needs no model, but it is not semantic: never use it for real retrieval.
"""

from __future__ import annotations

import re
import zlib

import numpy as np

from toolkit.embedding.base import Embedder, positive_int, reject_unused
from toolkit.errors import InputError

DEFAULT_DIMENSIONS = 256
_WORD = re.compile(r"\w+")
# Hashed instead of nothing, so an empty text still gets a unit vector (a zero vector has no cosine).
_EMPTY = "\x00empty"


class HashingEmbedder(Embedder):
    """``hashing:64``: signed feature hashing of lower-cased word tokens into 64 dimensions, L2-normalized."""

    provider = "hashing"
    revision = "1"

    def __init__(
        self,
        name: str | None = None,
        *,
        dimensions: int | None = None,
        max_input_tokens: int | None = None,
        query_prefix: str | None = None,
        document_prefix: str | None = None,
        batch_size: int | None = None,
        **unused,
    ):
        reject_unused(self.provider, unused)
        if name is None:
            size = dimensions if dimensions is not None else DEFAULT_DIMENSIONS
        elif name.isdigit():
            size = int(name)
        else:
            raise InputError(
                f"The hashing model name {name!r} is not a number of dimensions; write e.g. hashing:64."
            )
        size = positive_int(size, "dimensions")
        if dimensions is not None and dimensions != size:
            raise InputError(
                f"hashing:{name} has {size} dimensions but dimensions={dimensions} was asked; "
                f"use hashing:{dimensions} instead."
            )
        self.name = str(size)
        self.dimensions = size
        self.max_input_tokens = positive_int(max_input_tokens or 8192, "max_input_tokens")
        self.query_prefix = query_prefix or ""
        self.document_prefix = document_prefix or ""
        # Word -> (bucket, sign); words repeat a lot, so each distinct word is hashed once per process.
        self._features: dict[str, tuple[int, float]] = {}

    def _token_counts(self, texts: list[str], is_query: bool) -> list[int]:
        return [len(_WORD.findall(text)) for text in self._prefixed(texts, is_query)]

    def _embed(self, texts: list[str], is_query: bool, token_counts: list[int]) -> np.ndarray:
        size = self.dimensions
        cells: list[int] = []
        signs: list[float] = []
        for row, text in enumerate(self._prefixed(texts, is_query)):
            words = _WORD.findall(text.lower()) or [_EMPTY]
            base = row * size
            for word in words:
                feature = self._features.get(word)
                if feature is None:
                    digest = zlib.crc32(word.encode("utf-8"))
                    feature = self._features[word] = (digest % size, 1.0 if digest & 0x80000000 else -1.0)
                cells.append(base + feature[0])
                signs.append(feature[1])
        flat = np.bincount(np.asarray(cells, dtype=np.int64), weights=signs, minlength=len(texts) * size)
        vectors = flat.reshape(len(texts), size)
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        # Words can cancel out exactly (+1 and -1 in one bucket); fall back to the first basis vector.
        zero = norms[:, 0] == 0
        vectors[zero, 0] = 1.0
        norms[zero] = 1.0
        return (vectors / norms).astype(np.float32)
