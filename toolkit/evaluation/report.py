"""What an evaluation reports: each configuration's figures (``ConfigResult``), the whole run (``EvalReport``), the
units a retrieval hands over (``Unit``), and the assumptions the figures rest on. Used by the offline run
(``offline``), the stored-version run (``stored``), the scorer (``scoring``) and the frontier plot (``frontier``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

DEFAULT_INPUT_PRICE = 2.0  # USD per million LLM input tokens, the assumption of the 004 cost table
# Small-to-big: children fetched per context wanted, as toolkit.search_context does (hits sharing a parent
# collapse into one context).
HITS_PER_CONTEXT = 4


@dataclass
class Unit:
    """What a retrieval returns: a chunk, or for small-to-big a context of merged parents."""

    doc_id: str
    start: int
    end: int
    tokens: int


@dataclass
class ConfigResult:
    """One chunker configuration's figures (means over queries unless said otherwise)."""

    spec: str
    chunker_version: str
    chunks: int  # units embedded and searched (the children, for small-to-big)
    parents: int | None  # small-to-big parents (what is handed back), else None
    mean_chunk_tokens: float
    mean_chunk_chars: float
    answers: int  # gold spans over all queries
    cut_answers: int  # gold spans no single retrievable unit holds whole
    sentences: int
    cut_sentences: int  # corpus sentences no single retrievable unit holds whole
    recall: float  # recall@k
    mrr: float
    ndcg: float
    span_recall: float
    span_precision: float
    span_iou: float
    precision_omega: float | None
    retrieved_tokens: float  # per query
    retrieved_chars: float  # per query
    input_cost_per_query: float  # USD, retrieved tokens only
    recall_at: list[float] = field(default_factory=list)  # recall@1 ... recall@k
    hits_at: list[int] = field(default_factory=list)  # queries answered whole at rank <= 1 ... k
    embedded_texts: int = 0  # texts this configuration sent to the model (not found in the cache)
    seconds: float = 0.0
    pareto: bool = False  # on the recall / retrieved-tokens frontier
    # Per query, in the query file's order: the rank of the first chunk holding a whole answer, or None.
    # Kept out of to_dict() (JSON output) to keep it short; scripts break recall down by query with it.
    ranks: list[int | None] = field(default_factory=list, repr=False)
    retrieval: str = "vector"  # how chunks were ranked (toolkit.evaluation.retrieval: vector, text, hybrid[:options])
    passages: float = 0.0  # mean passages handed over per query (≤ k)

    @property
    def name(self) -> str:
        """The configuration and its retrieval, e.g. ``recursive:128:64 [hybrid]``."""
        return f"{self.spec} [{self.retrieval}]"

    def to_dict(self) -> dict:
        values = asdict(self)
        del values["ranks"]
        return values


@dataclass
class EvalReport:
    """All configurations' results and what they were measured with."""

    model: str | None
    scorer: str
    k: int
    queries: int
    documents: int
    input_price: float
    configs: list[ConfigResult]
    embedded_texts: int = 0
    cache_hits: int = 0
    cache_path: str | None = None
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "model": self.model,
            "scorer": self.scorer,
            "k": self.k,
            "queries": self.queries,
            "documents": self.documents,
            "input_price": self.input_price,
            "embedded_texts": self.embedded_texts,
            "cache_hits": self.cache_hits,
            "cache_path": self.cache_path,
            "configs": [c.to_dict() for c in self.configs],
            "notes": self.notes,
        }
