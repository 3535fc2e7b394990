"""The embedder interface shared by every provider, model references, and the checks every response passes."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

import numpy as np

from toolkit.errors import EmbeddingError, InputError

DEFAULT_MODEL_REF = "sentence-transformers:all-MiniLM-L6-v2"


class Embedder:
    """One embedding model: what it is, what it accepts, and how to embed documents and queries.

    Subclasses set the attributes in ``__init__`` and implement ``_token_count`` and ``_embed``. The public
    methods here refuse over-limit inputs before any work is done and check every result before returning it.
    """

    provider: str
    # An HTTP API (OpenAI-compatible): a base URL, dimensions asked of the server, requests under a rate limit.
    remote: bool = False
    # Whether TOOLKIT_EMBEDDING_CACHE keeps its vectors (toolkit.embedding.cache): a model that costs more than a
    # lookup and whose vectors are this machine's to keep.
    disk_cached: bool = True
    name: str
    revision: str | None = None
    dimensions: int | None
    max_input_tokens: int
    query_prefix: str = ""
    document_prefix: str = ""
    distance: str = "cosine"

    @property
    def ref(self) -> str:
        """The ``provider:name`` reference that ``get_embedder`` accepts."""
        return f"{self.provider}:{self.name}"

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.ref} dims={self.dimensions} limit={self.max_input_tokens}>"

    # -- public interface ---------------------------------------------------------------------------------
    def count_tokens(self, text: str) -> int:
        """Tokens the model receives for ``text`` embedded as a document (prefix and special tokens included).

        ``count_tokens(t) <= max_input_tokens`` is exactly the test ``embed_documents`` applies.
        """
        return self._token_counts([text], is_query=False)[0]

    def embed_documents(self, texts: Sequence[str], *, token_counts: Sequence[int] | None = None) -> np.ndarray:
        """Embed documents (document prefix applied inside): float32 array, shape (len(texts), dimensions).

        ``token_counts``, when the caller has them already (``count_tokens`` / ``count_chunk_tokens`` of these
        texts, as backfill has for its budget), saves counting every text a second time."""
        texts = _as_text_list(texts)
        if not texts:
            return np.zeros((0, self.dimensions or 0), dtype=np.float32)
        if token_counts is None:
            counts = self._token_counts(texts, is_query=False)
        else:
            counts = [int(count) for count in token_counts]
            if len(counts) != len(texts):
                raise InputError(f"{len(counts)} token counts were given for {len(texts)} texts; give one per text.")
        self._refuse_over_limit(counts)
        return self._checked(self._embed(texts, is_query=False, token_counts=counts), len(texts))

    def count_chunk_tokens(self, chunks) -> list[int]:
        """``count_tokens(chunk.embed_text)`` for each chunk; a provider whose count is the chunker's own
        (cl100k, no prefix) takes the count the chunker already made."""
        return self._token_counts([chunk.embed_text for chunk in chunks], is_query=False)

    def probe(self) -> np.ndarray:
        """Embed one short string (``model add`` checks a model with it); providers may fail faster here."""
        return self.embed_documents(["dimension probe"])

    def embed_query(self, text: str) -> np.ndarray:
        """Embed one search query (query prefix applied inside): float32 array of shape (dimensions,)."""
        texts = _as_text_list([text])
        counts = self._token_counts(texts, is_query=True)
        self._refuse_over_limit(counts, what="The query")
        return self._checked(self._embed(texts, is_query=True, token_counts=counts), 1)[0]

    # -- for subclasses -----------------------------------------------------------------------------------
    def _token_counts(self, texts: list[str], is_query: bool) -> list[int]:
        raise NotImplementedError

    def _embed(self, texts: list[str], is_query: bool, token_counts: list[int]) -> np.ndarray:
        """Embed raw texts (the subclass applies its prefix); any array-like of shape (n, d) is accepted."""
        raise NotImplementedError

    def _prefixed(self, texts: list[str], is_query: bool) -> list[str]:
        prefix = self.query_prefix if is_query else self.document_prefix
        return [prefix + text for text in texts] if prefix else texts

    def _refuse_over_limit(self, counts: list[int], what: str | None = None) -> None:
        for index, count in enumerate(counts):
            if count > self.max_input_tokens:
                subject = what or f"Input {index}"
                raise InputError(
                    f"{subject} has {count} tokens, over the {self.max_input_tokens}-token input limit of "
                    f"{self.ref}; nothing was sent. Split it into smaller chunks (a smaller chunk size) "
                    f"before embedding."
                )

    def _checked(self, vectors, expected_count: int) -> np.ndarray:
        vectors = check_vectors(vectors, expected_count, self.dimensions, source=self.ref)
        if self.dimensions is None:
            # A model of unknown size learns it from its first answer; later answers must agree.
            self.dimensions = int(vectors.shape[1])
        return vectors


def check_vectors(vectors, expected_count: int, dimensions: int | None, *, source: str) -> np.ndarray:
    """Return ``vectors`` as float32 (n, d) after checking count, dimensions and finiteness.

    Raises EmbeddingError before anything is returned, so a bad answer can never be stored.
    """
    from toolkit.validation import has_booleans, vector_problem

    if has_booleans(vectors):
        raise EmbeddingError(
            f"{source} returned booleans (true/false) where an embedding's numbers belong; nothing was kept. "
            "Check that the model and server are the ones configured."
        )
    try:
        array = np.asarray(vectors, dtype=np.float32)
    except (TypeError, ValueError) as error:
        raise EmbeddingError(
            f"{source} returned embeddings that are not a rectangular array of numbers ({error}); "
            f"check that the model and server are the ones configured."
        ) from error
    if array.ndim != 2:
        raise EmbeddingError(
            f"{source} returned an array of shape {array.shape} instead of one vector per input; "
            f"check that the model and server are the ones configured."
        )
    if array.shape[0] != expected_count:
        raise EmbeddingError(
            f"{source} returned {array.shape[0]} vectors for {expected_count} inputs; nothing was kept. "
            f"The server dropped or added inputs: check its batch limits, or lower batch_size."
        )
    if dimensions is not None and array.shape[1] != dimensions:
        raise EmbeddingError(
            f"{source} returned {array.shape[1]}-dimensional vectors where {dimensions} were declared; "
            f"nothing was kept. Fix the model's declared dimensions or point base_url at the right model."
        )
    if array.shape[1] == 0:
        raise EmbeddingError(f"{source} returned empty vectors; check the model and server configuration.")
    problem = vector_problem(array)
    if problem is not None:
        row, why = problem
        if why.startswith("has NaN"):
            raise EmbeddingError(
                f"{source} returned a vector with NaN or infinite values (input {row}); nothing was kept. "
                f"The model or server is faulty: retry later or use another model."
            )
        if why.startswith("is all zeros"):
            raise EmbeddingError(
                f"{source} returned an all-zero vector (input {row}); nothing was kept. A zero vector has no "
                f"direction (its cosine distance to anything is NaN): the model or server is faulty."
            )
        raise EmbeddingError(
            f"{source} returned a vector that {why} (input {row}); nothing was kept. The model or server is faulty."
        )
    return array


def probe_dimensions(embedder: Embedder) -> int:
    """Embed one short string and return the vector size the model really produces.

    The model registry calls this once when a model is added, to confirm (or learn) its dimensions. If the
    embedder declares dimensions and the model answers with another size, this raises EmbeddingError.
    """
    vector = embedder.probe()
    return int(vector.shape[1])


def batches(counts: Sequence[int], max_count: int, max_tokens: int | None) -> Iterator[tuple[int, int]]:
    """Yield ``(start, stop)`` ranges covering ``counts`` with at most ``max_count`` items and ``max_tokens``
    tokens each (an item larger than ``max_tokens`` alone forms its own batch)."""
    start, tokens = 0, 0
    for index, count in enumerate(counts):
        full = index - start >= max_count or (max_tokens is not None and index > start and tokens + count > max_tokens)
        if full:
            yield start, index
            start, tokens = index, 0
        tokens += count
    if start < len(counts):
        yield start, len(counts)


def positive_int(value, option: str, *, allow_none: bool = False) -> int | None:
    """Validate an integer option given by a user (``dimensions``, ``batch_size``...)."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value) or value < 1:
        raise InputError(f"The embedding option {option} must be a positive integer, not {value!r}.")
    return int(value)


def positive_float(value, option: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise InputError(f"The embedding option {option} must be a positive number of seconds, not {value!r}.")
    return float(value)


def _as_text_list(texts) -> list[str]:
    if isinstance(texts, str):
        raise InputError("embed_documents takes a list of texts, not one string; wrap it in a list.")
    texts = list(texts)
    for index, text in enumerate(texts):
        if not isinstance(text, str):
            raise InputError(f"Input {index} is a {type(text).__name__}, not a string; embed text only.")
    return texts


def reject_unused(provider: str, unused: dict) -> None:
    """Refuse options a provider does not use; ``None`` values are ignored (a registry row passes whole)."""
    given = sorted(key for key, value in unused.items() if value is not None)
    if given:
        raise InputError(
            f"The {provider} embedding provider does not take the option(s) {', '.join(given)}; "
            f"remove them (see docs/embedding.md for each provider's options)."
        )
