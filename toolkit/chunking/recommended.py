"""The chunker configuration the toolkit recommends for an embedding model's input limit, and the retrieval it is
measured with: the frontier of the sweep in docs/evaluation.md (bench/quality.py), not a convention.

`toolkit backfill` and `toolkit eval` use it when no chunker spec is given; a CI gate can ask for it too.
"""

from __future__ import annotations

# (largest input limit in model tokens, spec): the first row whose limit is at least the model's applies. Sizes
# are cl100k tokens; a chunk plus its overlap stays within the limit counted with the model's own tokenizer
# (MiniLM's 256 word pieces hold 128 cl100k tokens with room for a heading path or a title).
RECOMMENDED_SPECS = (
    (256, "recursive:128:64"),
    (None, "recursive:200:100"),
)
# Hybrid full text (BM25) and vector ranks fused by RRF, hits assembled into at most k passages within
# k x size tokens: the mode every recommended figure was measured with.
RECOMMENDED_RETRIEVAL = "hybrid"


def recommended_spec(max_input_tokens: int | None = None) -> str:
    """The chunker spec recommended for a model that takes at most ``max_input_tokens`` tokens (None: no limit
    known, e.g. the hashing model or a large API model)."""
    for limit, spec in RECOMMENDED_SPECS:
        if limit is None or (max_input_tokens is not None and max_input_tokens <= limit):
            return spec
    return RECOMMENDED_SPECS[-1][1]
