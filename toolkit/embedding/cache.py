"""An embedding cache keyed by model and text: an evaluation sweep never embeds the same text twice, and with
``TOOLKIT_EMBEDDING_CACHE`` set, neither do the commands that embed documents with a registered local model
(backfill, ingest, verify, shadow).

Vectors are kept in a SQLite file (``embeddings.sqlite``) in the cache's directory, so a second sweep or a second
build over the same chunks embeds nothing; an evaluation also keeps its run's vectors in memory. The key is the
model's identity (provider, name, revision, dimensions and prefixes: anything that changes the vector; a local
model's revision names its weights and runtime), whether the text is a document or a query (the prefixes differ),
and a keyed hash of the text (HMAC-SHA256 with this user's signing key, toolkit.private_files: the file is no record
of which texts were embedded to anyone who can guess them). Several threads and processes may share one directory
(SQLite's WAL and its lock).

Trust: the directory is created 0700 and the file 0600, and a directory or file another user owns, or that its
group or others may write, is refused (like ssh's StrictModes). Each entry carries an HMAC over (model, kind, text
key, vector) with the signing key, which lives outside the cache: an entry that does not verify (planted, altered,
or from another user's cache) is never used, and is recomputed. The questions searched (search, serve, shadow:
`CachedEmbedder`) are never written to disk: a question's key is a record of what was asked, and embedding one
question costs milliseconds. Only the labelled queries of an evaluation or a verification, the operator's own file,
are cached with its documents. `purge` empties a cache; `forget_texts` removes given texts' entries (an erase).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import sqlite3
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from toolkit.errors import InputError
from toolkit.private_files import Signer, private_directory, refuse_unless_private, touch_private

log = logging.getLogger(__name__)

CACHE_FILE = "embeddings.sqlite"
# The directory every command that embeds with a registered local model reads and fills when set (unset: no cache),
# and the default of `toolkit eval --cache-dir`.
CACHE_VARIABLE = "TOOLKIT_EMBEDDING_CACHE"
# Texts embedded per request to the model: each block is written to disk as soon as it is embedded,
# so an interrupted sweep keeps what it paid for.
BLOCK = 256


def default_cache_dir() -> Path:
    """``$TOOLKIT_EMBEDDING_CACHE`` when set, else ``$XDG_CACHE_HOME/toolkit`` or ``~/.cache/toolkit``."""
    configured = os.environ.get(CACHE_VARIABLE, "").strip()
    if configured:
        return Path(configured).expanduser()
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
    # What else picks the vectors: the hashing model's seed (another vector space at the same size), a hosted model's
    # server (an OpenAI-compatible server may serve another model under the same name).
    seed = getattr(embedder, "seed", None)
    if seed:
        parts.append(f"seed={seed}")
    if getattr(embedder, "remote", False):
        parts.append(f"base_url={getattr(embedder, 'base_url', None) or ''}")
    return "|".join(parts)


def _plain_digest(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()


def _refusal_hint() -> str:
    return (
        f"point --cache-dir or {CACHE_VARIABLE} at a directory of your own, or pass --no-cache "
        f"(unset {CACHE_VARIABLE})."
    )


def _open(path: Path) -> sqlite3.Connection:
    """The cache's SQLite file, created 0600 in a private directory (0700); an existing one is refused unless it
    is this user's own and no one else may write it."""
    private_directory(path.parent, "embedding cache directory", _refusal_hint())
    for name in (path.name, path.name + "-wal", path.name + "-shm"):
        if name == path.name or (path.parent / name).exists():
            touch_private(path.parent / name)  # SQLite gives its -wal and -shm files the database file's mode
            refuse_unless_private(path.parent / name, "embedding cache file", _refusal_hint())
    db = sqlite3.connect(path, timeout=60, check_same_thread=False)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA secure_delete=ON")  # what is forgotten or purged is overwritten, not left in free pages
    columns = {row[1] for row in db.execute("PRAGMA table_info(embeddings)")}
    if columns and "mac" not in columns:
        # An earlier release's table: plain SHA-256 keys and unsigned vectors, nothing that could be verified.
        db.execute("DROP TABLE embeddings")
    db.execute(
        "CREATE TABLE IF NOT EXISTS embeddings (model TEXT NOT NULL, kind TEXT NOT NULL, text_hash BLOB NOT NULL,"
        " vector BLOB NOT NULL, mac BLOB NOT NULL, PRIMARY KEY (model, kind, text_hash))"
    )
    db.commit()
    return db


class EmbeddingCache:
    """Embeds documents and queries through ``embedder`` once per distinct (model, kind, text).

    ``directory`` (optional) persists vectors in ``directory/embeddings.sqlite``. ``remember`` keeps every vector
    seen in memory too (an evaluation run's, which it scores several times); without it only the disk holds them
    (a backfill of millions of chunks). ``embedded_texts`` counts the texts actually sent to a model, ``hits`` those
    answered from memory or disk.
    """

    def __init__(self, directory: str | os.PathLike | None = None, *, remember: bool = True):
        self.memory: dict[tuple[str, str, bytes], np.ndarray] = {}
        self.remember = remember
        self.embedded_texts = 0
        self.hits = 0
        self.path: Path | None = None
        self._db: sqlite3.Connection | None = None
        self._lock = threading.Lock()
        # In memory only, a text's key is its SHA-256; on disk it is keyed (see the module's docstring).
        self._digest = _plain_digest
        self._sign: Signer | None = None
        if directory is not None:
            self.path = Path(directory).expanduser() / CACHE_FILE
            try:
                # One connection for the threads of this process (under the lock); other processes wait on SQLite's.
                self._db = _open(self.path)
                self._sign = Signer()
                self._digest = lambda text: self._sign("text", text)
            except (OSError, sqlite3.Error) as error:
                raise InputError(
                    f"Cannot use the embedding cache {str(self.path)!r} ({error}); point --cache-dir or "
                    f"{CACHE_VARIABLE} at a writable directory, or pass --no-cache (unset {CACHE_VARIABLE})."
                ) from None

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None

    def __enter__(self) -> EmbeddingCache:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def missing(self, embedder, texts: Sequence[str], kind: str = "document") -> int:
        """How many distinct texts of ``texts`` are in neither the memory nor the disk cache (the ones found on
        disk are loaded into memory on the way when the cache remembers)."""
        model = model_key(embedder)
        absent = {(model, kind, self._digest(text)): text for text in texts}
        for key in [key for key in absent if key in self.memory]:
            del absent[key]
        if absent:
            self._load(model, kind, absent, {})
        return len(absent)

    def embed_documents(
        self,
        embedder,
        texts: Sequence[str],
        progress: Callable[[int], None] | None = None,
        *,
        token_counts: Sequence[int] | None = None,
    ) -> np.ndarray:
        """Vectors for ``texts`` (document prefix), shape (len(texts), d); each distinct text embedded once.
        ``token_counts`` (one per text, as ``Embedder.embed_documents`` takes them) go to the model with the texts
        it embeds."""
        return self._embed(embedder, "document", list(texts), progress, token_counts)

    def embed_queries(self, embedder, texts: Sequence[str]) -> np.ndarray:
        """Vectors for search queries (query prefix), shape (len(texts), d)."""
        return self._embed(embedder, "query", list(texts), None, None)

    def _embed(self, embedder, kind: str, texts: list[str], progress, token_counts) -> np.ndarray:
        model = model_key(embedder)
        keys = [(model, kind, self._digest(text)) for text in texts]
        counts = [None] * len(texts) if token_counts is None else list(token_counts)
        if len(counts) != len(texts):
            raise InputError(f"{len(counts)} token counts were given for {len(texts)} texts; give one per text.")
        found: dict[tuple, np.ndarray] = {}
        missing: dict[tuple, tuple[str, int | None]] = {}
        for key, text, count in zip(keys, texts, counts, strict=True):
            if key in found or key in missing:
                continue
            vector = self.memory.get(key)
            if vector is None:
                missing[key] = (text, count)
            else:
                found[key] = vector
        if missing:
            self._load(model, kind, missing, found)
        self.hits += len(texts) - len(missing)
        pending = list(missing.items())
        for start in range(0, len(pending), BLOCK):
            block = pending[start : start + BLOCK]
            block_texts = [text for _, (text, _) in block]
            if kind == "query":
                vectors = np.stack([np.asarray(embedder.embed_query(text), dtype=np.float32) for text in block_texts])
            elif token_counts is None:
                vectors = np.asarray(embedder.embed_documents(block_texts), dtype=np.float32)
            else:
                block_counts = [count for _, (_, count) in block]
                vectors = np.asarray(embedder.embed_documents(block_texts, token_counts=block_counts), np.float32)
            self.embedded_texts += len(block)
            for (key, _), vector in zip(block, vectors, strict=True):
                found[key] = vector
                if self.remember:
                    self.memory[key] = vector
            self._store(block, vectors)
            if progress is not None:
                progress(len(block))
        if not texts:
            return np.zeros((0, getattr(embedder, "dimensions", None) or 0), dtype=np.float32)
        return np.stack([found[key] for key in keys])

    def _load(self, model: str, kind: str, missing: dict, found: dict) -> None:
        """Move the vectors the disk cache holds from ``missing`` into ``found`` (and memory, when remembering)."""
        hashes = [key[2] for key in missing]
        for start in range(0, len(hashes), 500):
            part = hashes[start : start + 500]
            with self._lock:
                if self._db is None:
                    return
                rows = self._db.execute(
                    "SELECT text_hash, vector, mac FROM embeddings WHERE model = ? AND kind = ? AND text_hash IN "
                    f"({', '.join('?' * len(part))})",
                    (model, kind, *part),
                ).fetchall()
            rejected = 0
            for text_hash, blob, seal in rows:
                if not hmac.compare_digest(seal, self._sign("vector", model, kind, text_hash, blob)):
                    rejected += 1  # not written by this user's toolkit: recomputed (and overwritten) like a miss
                    continue
                key = (model, kind, text_hash)
                vector = np.frombuffer(blob, dtype=np.float32).copy()
                found[key] = vector
                if self.remember:
                    self.memory[key] = vector
                missing.pop(key, None)
            if rejected:
                log.warning(
                    "%d vectors in the embedding cache %s failed verification (written by something other than "
                    "this user's toolkit); they are recomputed.",
                    rejected,
                    self.path,
                )

    def _store(self, block: list, vectors: np.ndarray) -> None:
        with self._lock:
            if self._db is None:
                return
            with self._db:
                rows = []
                for (key, _), vector in zip(block, vectors, strict=True):
                    blob = vector.tobytes()  # float32: _embed made every vector so
                    rows.append((*key, blob, self._sign("vector", *key, blob)))
                self._db.executemany(
                    "INSERT OR REPLACE INTO embeddings (model, kind, text_hash, vector, mac) VALUES (?, ?, ?, ?, ?)",
                    rows,
                )

    def forget(self, texts: Sequence[str]) -> int:
        """Deletes every model's entries of ``texts`` (as they were given to the model); the number deleted."""
        keys = list({self._digest(text) for text in texts})
        deleted = 0
        with self._lock:
            if self._db is None:
                return 0
            with self._db:
                for start in range(0, len(keys), 500):
                    part = keys[start : start + 500]
                    deleted += self._db.execute(
                        f"DELETE FROM embeddings WHERE text_hash IN ({', '.join('?' * len(part))})", part
                    ).rowcount
            self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # no copy of the deleted pages left in the WAL
        return deleted

    def purge(self) -> int:
        """Deletes every entry (the file stays, empty); the number deleted."""
        with self._lock:
            if self._db is None:
                return 0
            with self._db:
                deleted = self._db.execute("DELETE FROM embeddings").rowcount
            self._db.execute("VACUUM")
            self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return deleted


class CachedEmbedder:
    """An embedder whose document and query vectors go through an `EmbeddingCache`; everything else (limits, token
    counts, attributes) is the model's own."""

    def __init__(self, embedder, cache: EmbeddingCache):
        self._embedder = embedder
        self._cache = cache

    def __getattr__(self, name):
        return getattr(self._embedder, name)

    def __repr__(self) -> str:
        return f"<cached {self._embedder!r}>"

    def embed_documents(self, texts, *, token_counts=None):
        return self._cache.embed_documents(self._embedder, texts, token_counts=token_counts)

    def embed_query(self, text: str) -> np.ndarray:
        # Never through the disk cache: a question's key would be a record of what was asked (and the cache holds
        # no questions, so none planted there can steer a search).
        return self._embedder.embed_query(text)

    def embed_labelled_queries(self, texts: Sequence[str]) -> np.ndarray:
        """The queries of a labelled set (``toolkit verify``'s file, the operator's own, as ``toolkit eval``'s):
        through the cache, as eval's are. Never a searched question."""
        return self._cache.embed_queries(self._embedder, texts)


_SHARED: dict[str, EmbeddingCache] = {}
_SHARED_LOCK = threading.Lock()


def cached_when_configured(embedder):
    """``embedder`` itself, or, when ``TOOLKIT_EMBEDDING_CACHE`` names a directory and the model is one worth caching
    (``Embedder.disk_cached``: a local model, not the hashing one, not a hosted one), the embedder through this
    process's cache of that directory (disk only)."""
    directory = os.environ.get(CACHE_VARIABLE, "").strip()
    if not directory or not getattr(embedder, "disk_cached", False):
        return embedder
    return CachedEmbedder(embedder, _shared(str(Path(directory).expanduser())))


def _shared(directory: str) -> EmbeddingCache:
    """This process's one cache of ``directory`` (disk only)."""
    with _SHARED_LOCK:
        cache = _SHARED.get(directory)
        if cache is None:
            cache = _SHARED[directory] = EmbeddingCache(directory, remember=False)
    return cache


def _existing(directory: str | os.PathLike | None) -> EmbeddingCache | None:
    """This process's cache of ``directory`` (default: `default_cache_dir`), or None when it holds no cache file."""
    chosen = str(Path(directory).expanduser() if directory is not None else default_cache_dir())
    if not (Path(chosen) / CACHE_FILE).exists():
        return None
    return _shared(chosen)


def cache_exists(directory: str | os.PathLike | None = None) -> bool:
    """Whether ``directory`` (default: `default_cache_dir`) holds a cache file (nothing is opened or created)."""
    chosen = Path(directory).expanduser() if directory is not None else default_cache_dir()
    return (chosen / CACHE_FILE).exists()


def purge(directory: str | os.PathLike | None = None) -> tuple[Path, int]:
    """Empties the embedding cache of ``directory`` (default: ``$TOOLKIT_EMBEDDING_CACHE``, else the user's
    cache directory, as `toolkit eval` uses it): its path and the number of vectors deleted."""
    chosen = Path(directory).expanduser() if directory is not None else default_cache_dir()
    cache = _existing(chosen)
    return chosen / CACHE_FILE, (cache.purge() if cache is not None else 0)


def forget_texts(texts: Sequence[str], directory: str | os.PathLike | None = None) -> int:
    """Deletes the cached vectors of ``texts`` (every model's) from the cache of ``directory`` (default as `purge`);
    the number deleted. The texts are what backfill gave the model: for a stored chunk,
    ``toolkit.chunking.document.compose_embed_text(heading_path, context, text)`` of its row (an erase calls this
    with the chunks it deletes)."""
    cache = _existing(directory)
    return cache.forget(texts) if cache is not None else 0
