"""Ranking chunks offline exactly as the SQL search functions serve them: exact vector ranks, BM25 full-text
ranks over PostgreSQL's own lexemes, reciprocal rank fusion, and the assembly of hits into passages.

`toolkit eval` ranks through this module; `sql/idempotent/005-search.sql`, `011-lexical.sql` and `012-search-hybrid.sql`
are the serving side, and tests/test_retrieval_sql.py proves both give the same ranking on the sample set. The lexemes
come from the database (`to_tsvector` with the version's text search configuration), so the stemmer and stop words are
PostgreSQL's, not a Python imitation of them.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from toolkit.errors import InputError
from toolkit.store.lexical import DEFAULT_TEXT_SEARCH_CONFIG
from toolkit.validation import key_value

RETRIEVAL_MODES = ("vector", "hybrid", "text")


@dataclass(frozen=True)
class Retrieval:
    """How chunks are ranked: ``mode`` vector, text (BM25 alone) or hybrid (both fused by RRF), and whether hits
    are assembled into passages (``assemble``). BM25's ``k1`` and ``b``, ``rrf_k``, ``candidates``,
    ``hits_per_passage`` and ``passage_chunks`` left as None take SQL's defaults (``toolkit.retrieval_settings()``),
    so the offline ranking is the served one (``toolkit.search_passages``: hybrid, assembled)."""

    mode: str = "hybrid"
    assemble: bool = True
    k1: float | None = None
    b: float | None = None
    rrf_k: int | None = None
    candidates: int | None = None
    hits_per_passage: int | None = None
    passage_chunks: float | None = None
    postings_limit: int | None = None
    text_search_config: str = DEFAULT_TEXT_SEARCH_CONFIG
    # The label as given, kept when SQL's defaults are filled in (``resolved``).
    given: str = field(default="", compare=False, repr=False)

    def __post_init__(self):
        if self.mode not in RETRIEVAL_MODES:
            raise InputError(f"Unknown retrieval mode {self.mode!r}; use one of {', '.join(RETRIEVAL_MODES)}.")
        for name in ("k1", "b"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int | float) or not math.isfinite(value) or value < 0):
                raise InputError(f"BM25's {name} must be a finite number ≥ 0, not {value!r}.")
        if self.b is not None and self.b > 1:
            raise InputError(f"BM25's b must be between 0 and 1, not {self.b!r}.")
        if self.passage_chunks is not None and (
            not isinstance(self.passage_chunks, int | float)
            or not math.isfinite(self.passage_chunks)
            or self.passage_chunks <= 0
        ):
            raise InputError(f"passage_chunks must be a number > 0, not {self.passage_chunks!r}.")
        for name, low in (("rrf_k", 0), ("candidates", 1), ("hits_per_passage", 1), ("postings_limit", 1)):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < low):
                raise InputError(f"{name} must be a whole number ≥ {low}, not {value!r}.")

    @property
    def lexical(self) -> bool:
        return self.mode != "vector"

    @property
    def label(self) -> str:
        """The mode with every setting given explicitly, e.g. ``hybrid:rrf_k=60``."""
        if self.given:
            return self.given
        parts = [self.mode]
        for name in SETTINGS:
            if getattr(self, name) is not None:
                parts.append(f"{name}={getattr(self, name)}")
        if self.text_search_config != DEFAULT_TEXT_SEARCH_CONFIG:
            parts.append(f"config={self.text_search_config}")
        if not self.assemble:
            parts.append("assemble=off")
        return ":".join(parts)

    @property
    def needs_settings(self) -> bool:
        """Whether it ranks by full text or assembles passages: both read SQL's settings."""
        return self.lexical or self.assemble

    def resolved(self, settings: dict) -> Retrieval:
        """This retrieval with SQL's defaults (``retrieval_settings``) filled in."""
        values = {name: settings[name] if getattr(self, name) is None else getattr(self, name) for name in SETTINGS}
        return dataclasses.replace(self, given=self.label, **values)


# The settings a retrieval takes from SQL (toolkit.retrieval_settings(), whose columns they are).
SETTINGS = ("k1", "b", "rrf_k", "candidates", "hits_per_passage", "passage_chunks", "postings_limit")


def parse_retrieval(text: str | Retrieval | None) -> Retrieval:
    """``vector``, ``text`` or ``hybrid`` (the default), with options after colons, e.g.
    ``hybrid:k1=1.2:b=0.75:rrf_k=60:candidates=50:config=simple:assemble=off``."""
    if isinstance(text, Retrieval):
        return text
    if text is None or not str(text).strip():
        return Retrieval()
    mode, *options = str(text).strip().split(":")
    values: dict = {}
    kinds = {
        "k1": float,
        "b": float,
        "rrf_k": int,
        "candidates": int,
        "hits_per_passage": int,
        "passage_chunks": float,
        "postings_limit": int,
        "config": str,
        "assemble": str,
    }
    for option in options:
        parsed = key_value(option, kinds)
        if parsed is None:
            raise InputError(
                f"The retrieval {text!r} has an option {option!r} it does not take; options are key=value with key "
                f"one of {', '.join(kinds)} (e.g. hybrid:rrf_k=60:assemble=off)."
            )
        key, value = parsed
        if key == "assemble":
            if value not in ("on", "off"):
                raise InputError(f"The retrieval {text!r} has assemble={value}; use assemble=on or assemble=off.")
            values["assemble"] = value == "on"
            continue
        try:
            parsed = kinds[key](value)
        except ValueError:
            raise InputError(
                f"The retrieval {text!r} has {key}={value}, which is not a {kinds[key].__name__}."
            ) from None
        if key == "config" and not parsed:
            raise InputError(f"The retrieval {text!r} has an empty config=; name a text search configuration.")
        values["text_search_config" if key == "config" else key] = parsed
    return Retrieval(mode.strip().lower(), **values)


def split_retrievals(text: str | Sequence[str] | None) -> list[Retrieval]:
    """Several retrievals, comma-separated (``vector,hybrid``); the default is hybrid with assembly."""
    if text is None:
        return [Retrieval()]
    texts = [text] if isinstance(text, str) else list(text)
    found = [parse_retrieval(piece) for t in texts for piece in t.split(",") if piece.strip()]
    if not found:
        return [Retrieval()]
    labels = [r.label for r in found]
    duplicate = next((label for label in labels if labels.count(label) > 1), None)
    if duplicate:
        raise InputError(f"The retrieval {duplicate!r} is listed twice; list each one once.")
    return found


# -- ranking -------------------------------------------------------------------------------------------------


def cosine_distances(query_vectors: np.ndarray, chunk_vectors: np.ndarray) -> np.ndarray:
    """1 - cosine similarity in float64, as pgvector's ``<=>`` computes it (shape (queries, chunks))."""
    q = np.asarray(query_vectors, dtype=np.float64)
    c = np.asarray(chunk_vectors, dtype=np.float64)
    qn = np.linalg.norm(q, axis=1, keepdims=True)
    cn = np.linalg.norm(c, axis=1, keepdims=True)
    return 1.0 - (q @ c.T) / np.where(qn * cn.T == 0, 1, qn * cn.T)


def order_by(scores: np.ndarray, chunk_ids: Sequence[str], *, descending: bool) -> list[int]:
    """Indices by score (ascending distance or descending score), ties by chunk id: SQL's ``ORDER BY ...,
    chunk_id``."""
    ids = np.asarray(chunk_ids)
    keys = -scores if descending else scores
    return list(np.lexsort((ids, keys)))


class BM25:
    """BM25 over the chunks' lexeme counts: idf = ln(1 + (N - df + 0.5) / (df + 0.5)), term weight
    tf (k1 + 1) / (tf + k1 (1 - b + b dl / avgdl)), dl the chunk's token count. The arithmetic, summed over
    the question's lexemes in byte order, is that of ``hybrid_search_chunks`` (012-search-hybrid.sql), and so is the
    choice of the chunks it scores (``candidates``) when ``postings_limit`` is given."""

    def __init__(
        self,
        documents: Sequence[dict[str, int]],
        lengths: Sequence[int],
        k1: float,
        b: float,
        postings_limit: int | None = None,
    ):
        self.k1, self.b = float(k1), float(b)
        self.postings_limit = postings_limit
        self.n = len(documents)
        # A chunk's length is its token_count (what SQL has in a plain column; its lexemes would need the
        # tsvector of every chunk read for every question). The sum is exact in integers, as SQL sums it.
        self.lengths = [float(n) for n in lengths]
        self.avgdl = float(sum(int(n) for n in lengths)) / self.n if self.n else 0.0
        self.postings: dict[str, list[tuple[int, int]]] = {}
        for index, doc in enumerate(documents):
            for lexeme, count in doc.items():
                self.postings.setdefault(lexeme, []).append((index, count))

    def idf(self, lexeme: str) -> float:
        df = len(self.postings.get(lexeme, ()))
        return math.log(1.0 + (self.n - df + 0.5) / (df + 0.5))

    def candidates(self, lexemes: Sequence[str], chunk_ids: Sequence[str]) -> set[int] | None:
        """The chunks full text scores, as ``hybrid_search_chunks`` finds them in the postings (None: every chunk
        holding a lexeme, when no limit is set). The question's lexemes rarest first (df, then byte order) while
        their postings together stay within ``postings_limit``: every chunk holding one of them; when even the
        rarest has more postings than that, its first ``postings_limit`` chunks by chunk id."""
        if self.postings_limit is None:
            return None
        known = sorted((len(self.postings[t]), t) for t in set(lexemes) if self.postings.get(t))
        chosen: list[str] = []
        read = 0
        for df, lexeme in known:
            if read + df > self.postings_limit:
                break
            chosen.append(lexeme)
            read += df
        if chosen:
            return {index for lexeme in chosen for index, _ in self.postings[lexeme]}
        if known:
            holders = sorted((index for index, _ in self.postings[known[0][1]]), key=lambda i: chunk_ids[i])
            return set(holders[: self.postings_limit])
        return set()

    def scores(self, lexemes: Sequence[str], only: set[int] | None = None) -> dict[int, float]:
        """Score of every chunk holding at least one of the lexemes (others score nothing and are not ranked), or of
        the chunks in ``only``: each summed over all the lexemes."""
        scores: dict[int, float] = {}
        k1, b, avgdl = self.k1, self.b, self.avgdl or 1.0
        for lexeme in sorted(set(lexemes)):
            idf = self.idf(lexeme)
            for index, tf in self.postings.get(lexeme, ()):
                if only is not None and index not in only:
                    continue
                norm = k1 * (1.0 - b + b * self.lengths[index] / avgdl)
                scores[index] = scores.get(index, 0.0) + idf * (tf * (k1 + 1.0)) / (tf + norm)
        return scores


def text_ranking(bm25: BM25, lexemes: Sequence[str], chunk_ids: Sequence[str], depth: int) -> list[int]:
    """The top ``depth`` chunks by BM25 among its candidates (``BM25.candidates``), ties by chunk id."""
    scores = bm25.scores(lexemes, bm25.candidates(lexemes, chunk_ids))
    ranked = sorted(scores, key=lambda i: (-scores[i], chunk_ids[i]))
    return ranked[:depth]


def fuse(vector: Sequence[int], text: Sequence[int], chunk_ids: Sequence[str], k: int, rrf_k: int) -> list[int]:
    """Reciprocal rank fusion of two rankings (chunk indices, best first), as ``hybrid_search_chunks`` fuses
    them: score 1/(rrf_k + rank) summed over the lists a chunk is in, ties by its better rank, then chunk id."""
    scores: dict[int, float] = {}
    best: dict[int, int] = {}
    for ranking in (vector, text):
        for rank, index in enumerate(ranking, start=1):
            scores[index] = scores.get(index, 0.0) + 1.0 / (rrf_k + rank)
            best[index] = min(best.get(index, rank), rank)
    return sorted(scores, key=lambda i: (-scores[i], best[i], chunk_ids[i]))[:k]


# -- assembly ------------------------------------------------------------------------------------------------


@dataclass
class Passage:
    """What the application receives: a span of one document made of one or more hits, ranked by its best."""

    doc_id: str
    start: int
    end: int
    tokens: int
    best: int  # rank (0-based) of its best hit
    members: list  # the hits it is made of, in rank order


def touches(text: str | None, a: tuple[int, int], b: tuple[int, int]) -> bool:
    """Whether two spans of a document overlap or only ASCII whitespace lies between them (``toolkit._spans_touch``);
    spans of a document whose text is unknown touch only when they overlap."""
    (_, e1), (s2, _) = sorted((a, b))
    if s2 <= e1:
        return True
    return text is not None and not text[e1:s2].strip(_WHITESPACE)


# What SQL's _spans_touch counts as whitespace: space, tab, line feed, carriage return, form feed, vertical tab.
_WHITESPACE = " \t\n\r\f\v"


def passage_tokens(span_chars: int, member_tokens: int, member_chars: int) -> int:
    """A merged passage's tokens: its length at its members' tokens per character, rounded up
    (``toolkit._passage_tokens``); one chunk: its token count."""
    if member_chars <= 0:
        return int(member_tokens)
    return -(-span_chars * member_tokens // member_chars)


def passage_budget(k: int, chunk_tokens: Sequence[int], passage_chunks: float) -> int:
    """The token budget of k passages: k x passage_chunks x the mean chunk tokens, rounded up, as
    ``toolkit.search_passages`` computes it over the tenant's chunks."""
    if not chunk_tokens:
        return 0
    return math.ceil(k * passage_chunks * (sum(int(n) for n in chunk_tokens) / len(chunk_tokens)))


@dataclass
class _Open:
    doc_id: str
    start: int
    end: int
    tokens: int
    member_tokens: int
    member_chars: int
    best: int
    members: list


def assemble(hits: Sequence, k: int, budget: int, documents) -> list[Passage]:
    """Hits (chunks, best first) into at most ``k`` passages totalling at most ``budget`` tokens, as
    ``toolkit.search_passages`` assembles them.

    A hit that overlaps or touches passages of its document (only whitespace between them) joins them, so no text
    is handed over twice; a hit that would take the total past ``budget`` is skipped and the next one tried; once
    ``k`` passages are open, later hits only extend them. ``documents`` maps doc id to text (a missing one touches
    only by overlap). A merged passage's tokens are ``passage_tokens`` of its members."""
    passages: list[_Open] = []
    total = 0
    for rank, hit in enumerate(hits):
        text = documents.get(hit.doc_id)
        joined = [
            p for p in passages if p.doc_id == hit.doc_id and touches(text, (p.start, p.end), (hit.start, hit.end))
        ]
        if joined:
            start = min([hit.start, *(p.start for p in joined)])
            end = max([hit.end, *(p.end for p in joined)])
            member_tokens = hit.token_count + sum(p.member_tokens for p in joined)
            member_chars = (hit.end - hit.start) + sum(p.member_chars for p in joined)
            tokens = passage_tokens(end - start, member_tokens, member_chars)
            new_total = total - sum(p.tokens for p in joined) + tokens
            if new_total > budget:
                continue
            keep = [p for p in passages if all(p is not j for j in joined)]
            members = [m for p in joined for m in p.members] + [hit]
            best = min(p.best for p in joined)
            merged = _Open(hit.doc_id, start, end, tokens, member_tokens, member_chars, best, members)
            passages = sorted([*keep, merged], key=lambda p: p.best)
            total = new_total
            continue
        if len(passages) >= k or total + hit.token_count > budget:
            continue
        passages.append(
            _Open(hit.doc_id, hit.start, hit.end, hit.token_count, hit.token_count, hit.end - hit.start, rank, [hit])
        )
        total += hit.token_count
    return [Passage(p.doc_id, p.start, p.end, p.tokens, p.best, p.members) for p in passages]
