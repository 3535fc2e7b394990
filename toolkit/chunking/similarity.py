"""Embedding text for comparison while chunking (``semantic`` sentences, ``cluster`` pieces): a text over the
model's input limit is compared by its longest prefix that fits, since the model refuses longer inputs and the
stored chunk is cut by offsets, not by what was compared."""

from __future__ import annotations

import numpy as np


def fitted(embedder, texts: list[str]) -> list[str]:
    """``texts``, each cut to the longest prefix the model accepts (counted with its own tokenizer)."""
    limit = getattr(embedder, "max_input_tokens", None)
    count = getattr(embedder, "count_tokens", None)
    if not limit or count is None:
        return texts
    prefix = len(getattr(embedder, "document_prefix", "") or "")
    result = []
    for text in texts:
        # Characters are at least one token each in no tokenizer the toolkit knows, so a text with no more
        # characters than the limit allows needs no count.
        if len(text) + prefix + 16 <= limit or count(text) <= limit:
            result.append(text)
            continue
        low, high = 1, len(text)
        while low < high:
            middle = (low + high + 1) // 2
            if count(text[:middle]) <= limit:
                low = middle
            else:
                high = middle - 1
        result.append(text[:low])
    return result


def unit_vectors(embedder, texts: list[str]) -> np.ndarray:
    """The texts' embeddings (fitted to the model's limit), normalised, as float64."""
    vectors = np.asarray(embedder.embed_documents(fitted(embedder, texts)), dtype=np.float64)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.where(norms == 0, 1, norms)
