"""An embedding cache keyed by model and text, so an evaluation sweep never embeds the same text twice.

Vectors are kept in memory for the run and, when a directory is given, in a SQLite file there
(``embeddings.sqlite``), so a second sweep over the same chunks embeds nothing. The key is the model's
identity (provider, name, revision, dimensions and prefixes: anything that changes the vector), whether the
text is a document or a query (the prefixes differ), and the SHA-256 of the text.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from toolkit.errors import InputError

CACHE_FILE = "embeddings.sqlite"
# Texts embedded per request to the model: each block is written to disk as soon as it is embedded,
# so an interrupted sweep keeps what it paid for.
BLOCK = 256


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/toolkit`` or ``~/.cache/toolkit``."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "toolkit"


def model_key(embedder) -> str:
    """What identifies an embedder's vectors: the same key always means the same vector for a text."""
    parts = [
        f"{getattr(embedder, 'provider', type(embedder).__name__)}:{getattr(embedder, 'name', '')}",
        f"revision={getattr(embedder, 'revision', None) or ''}",
        f"dims={getattr(embedder, 'dimensions', None) or ''}",
        f"query_prefix={getattr(embedder, 'query_prefix', '')!r}",
        f"document_prefix={getattr(embedder, 'document_prefix', '')!r}",
    ]
    return "|".join(parts)


def _digest(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()


class EmbeddingCache:
    """Embeds documents and queries through ``embedder`` once per distinct (model, kind, text).

    ``directory`` (optional) persists vectors in ``directory/embeddings.sqlite``. ``embedded_texts`` counts
    the texts actually sent to a model, ``hits`` those answered from memory or disk.
    """

    def __init__(self, directory: str | os.PathLike | None = None):
        self.memory: dict[tuple[str, str, bytes], np.ndarray] = {}
        self.embedded_texts = 0
        self.hits = 0
        self.path: Path | None = None
        self._db: sqlite3.Connection | None = None
        if directory is not None:
            self.path = Path(directory).expanduser() / CACHE_FILE
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._db = sqlite3.connect(self.path)
                self._db.execute(
                    "CREATE TABLE IF NOT EXISTS embeddings (model TEXT NOT NULL, kind TEXT NOT NULL,"
                    " text_hash BLOB NOT NULL, vector BLOB NOT NULL, PRIMARY KEY (model, kind, text_hash))"
                )
                self._db.commit()
            except (OSError, sqlite3.Error) as error:
                raise InputError(
                    f"Cannot use the embedding cache {str(self.path)!r} ({error}); pass another --cache-dir "
                    "or --no-cache."
                ) from None

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    def __enter__(self) -> EmbeddingCache:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def missing(self, embedder, texts: Sequence[str], kind: str = "document") -> int:
        """How many distinct texts of ``texts`` are in neither the memory nor the disk cache (the ones found on
        disk are loaded into memory on the way)."""
        model = model_key(embedder)
        absent = {(model, kind, _digest(text)): text for text in texts}
        for key in [key for key in absent if key in self.memory]:
            del absent[key]
        if absent and self._db is not None:
            self._load(model, kind, absent)
        return len(absent)

    def embed_documents(
        self, embedder, texts: Sequence[str], progress: Callable[[int], None] | None = None
    ) -> np.ndarray:
        """Vectors for ``texts`` (document prefix), shape (len(texts), d); each distinct text embedded once."""
        return self._embed(embedder, "document", list(texts), progress)

    def embed_queries(self, embedder, texts: Sequence[str]) -> np.ndarray:
        """Vectors for search queries (query prefix), shape (len(texts), d)."""
        return self._embed(embedder, "query", list(texts), None)

    def _embed(self, embedder, kind: str, texts: list[str], progress) -> np.ndarray:
        model = model_key(embedder)
        keys = [(model, kind, _digest(text)) for text in texts]
        missing: dict[tuple, str] = {}
        for key, text in zip(keys, texts, strict=True):
            if key not in self.memory and key not in missing:
                missing[key] = text
        if missing and self._db is not None:
            self._load(model, kind, missing)
        self.hits += len(texts) - len(missing)
        pending = list(missing.items())
        for start in range(0, len(pending), BLOCK):
            block = pending[start : start + BLOCK]
            block_texts = [text for _, text in block]
            if kind == "document":
                vectors = np.asarray(embedder.embed_documents(block_texts), dtype=np.float32)
            else:
                vectors = np.stack([np.asarray(embedder.embed_query(text), dtype=np.float32) for text in block_texts])
            self.embedded_texts += len(block)
            for (key, _), vector in zip(block, vectors, strict=True):
                self.memory[key] = vector
            self._store(block, vectors)
            if progress is not None:
                progress(len(block))
        if not texts:
            return np.zeros((0, getattr(embedder, "dimensions", None) or 0), dtype=np.float32)
        return np.stack([self.memory[key] for key in keys])

    def _load(self, model: str, kind: str, missing: dict) -> None:
        """Move the vectors the disk cache holds from ``missing`` into memory."""
        hashes = [key[2] for key in missing]
        for start in range(0, len(hashes), 500):
            part = hashes[start : start + 500]
            rows = self._db.execute(
                "SELECT text_hash, vector FROM embeddings WHERE model = ? AND kind = ? AND text_hash IN "
                f"({', '.join('?' * len(part))})",
                (model, kind, *part),
            ).fetchall()
            for text_hash, blob in rows:
                key = (model, kind, text_hash)
                self.memory[key] = np.frombuffer(blob, dtype=np.float32).copy()
                missing.pop(key, None)

    def _store(self, block: list, vectors: np.ndarray) -> None:
        if self._db is None:
            return
        with self._db:
            self._db.executemany(
                "INSERT OR REPLACE INTO embeddings (model, kind, text_hash, vector) VALUES (?, ?, ?, ?)",
                [(*key, vector.astype(np.float32).tobytes()) for (key, _), vector in zip(block, vectors, strict=True)],
            )
