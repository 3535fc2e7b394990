"""The bag-of-words cosine scorer of the source document's "Try It Yourself" example.

A toy lexical retriever (stop words removed, term counts, cosine): it reproduces the document's table and
gives evaluations a retriever that needs no model. It is not semantic and not a ranking function for users.
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from collections.abc import Sequence

import numpy as np

# The source document's stop list, verbatim.
STOP_WORDS = frozenset(
    "the a an to of in on for is are be by and or you your it at from after with that within".split()  # noqa: SIM905
)


def bow_tokens(text: str) -> list[str]:
    """Lower-case alphanumeric words, stop words removed."""
    return [w for w in re.findall(r"[a-z0-9]+", text.lower()) if w not in STOP_WORDS]


def bow_cosine(query: str, text: str) -> float:
    """Cosine similarity of the two texts' word-count vectors (0.0 when either has no words)."""
    a, b = Counter(bow_tokens(query)), Counter(bow_tokens(text))
    dot = sum(a[w] * b[w] for w in a)
    na = math.sqrt(sum(v * v for v in a.values()))
    nb = math.sqrt(sum(v * v for v in b.values()))
    return dot / (na * nb) if na and nb else 0.0


def bow_scores(queries: Sequence[str], texts: Sequence[str]) -> np.ndarray:
    """The chunking guide's bag-of-words cosine (`bow_cosine`) of every query against every text,
    shape (queries, texts), computed through an inverted index with the same arithmetic."""
    from toolkit.evaluation.bag_of_words import bow_tokens

    index: dict[str, list[tuple[int, int]]] = defaultdict(list)
    norms = np.zeros(len(texts))
    for column, text in enumerate(texts):
        counts = Counter(bow_tokens(text))
        norms[column] = math.sqrt(sum(v * v for v in counts.values()))
        for word, count in counts.items():
            index[word].append((column, count))
    scores = np.zeros((len(queries), len(texts)))
    for row, query in enumerate(queries):
        counts = Counter(bow_tokens(query))
        query_norm = math.sqrt(sum(v * v for v in counts.values()))
        if not query_norm:
            continue
        dots: dict[int, int] = defaultdict(int)
        for word, count in counts.items():
            for column, text_count in index.get(word, ()):
                dots[column] += count * text_count
        for column, dot in dots.items():
            if norms[column]:
                scores[row, column] = dot / (query_norm * float(norms[column]))
    return scores
