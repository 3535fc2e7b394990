"""The bag-of-words cosine scorer of the source document's "Try It Yourself" example.

A toy lexical retriever (stop words removed, term counts, cosine): it reproduces the document's table and
gives evaluations a retriever that needs no model. It is not semantic and not a ranking function for users.
"""

from __future__ import annotations

import math
import re
from collections import Counter

# The seed's stop list, verbatim.
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
